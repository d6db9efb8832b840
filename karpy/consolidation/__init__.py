"""The pure consolidation core that the disruption controller and ``karpy simulate`` share (no I/O, no cluster
state): :mod:`.search` finds delete/replace moves over the scheduling engine (Karpenter core
``pkg/controllers/disruption/consolidation.go``, ``singlenodeconsolidation.go``, ``multinodeconsolidation.go``)
and :mod:`.balanced` scores them for ``consolidationPolicy: Balanced`` (Karpenter core
``pkg/controllers/disruption/balanced.go``). The controller adapts it in
:mod:`karpy.controllers.disruption.consolidation`; ``karpy simulate --consolidate`` in
:mod:`karpy.simulate.consolidate`.
"""
