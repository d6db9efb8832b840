"""``karpy simulate``: what-if provisioning on manifests with the controller's engine, no cluster, no AWS.

Modules: :mod:`~karpy.simulate.manifests` (manifests → the objects a cluster would hold; the steps in
:mod:`~karpy.simulate.reading`, :mod:`~karpy.simulate.defaulting`, :mod:`~karpy.simulate.validation` and
:mod:`~karpy.simulate.workloads`), :mod:`~karpy.simulate.catalogue` (built-in EC2 data or a JSON catalogue
file), :mod:`~karpy.simulate.plan` (running the engine and the launch choice, text/JSON output),
:mod:`~karpy.simulate.consolidate` (``--consolidate``: the disruption controller's consolidation core,
:mod:`karpy.consolidation`, on the manifests' Nodes) and
:mod:`~karpy.simulate.gencatalogue` (regenerates the built-in data from moto). Manifests become scheduling
inputs through :mod:`karpy.scheduling.translate`, the translation the controllers use.
"""
