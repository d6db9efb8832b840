"""Voluntary disruption (Karpenter core ``pkg/controllers/disruption``): emptiness, drift, expiration and
consolidation, with budgets and karpy's own safety controls. Only ever deletes NodeClaims; the terminator
drains and terminates.

Modules: :mod:`.types` (candidates, commands), :mod:`.candidates` (eligibility, PDBs, budgets),
:mod:`.emptiness`, :mod:`.drift` (drift and expiration rules), :mod:`.consolidation` (simulation, single- and
multi-node, over the pure core :mod:`karpy.consolidation` with its Balanced scoring), :mod:`.controls`
(beyond-Karpenter knobs); :mod:`.controller` (the singleton pass, Karpenter's
``controller.go``), :mod:`.methods` (the methods in order over one context), :mod:`.validation`
(``validation.go``), :mod:`.queue` (the orchestration queue, ``queue.go``) and :mod:`.helpers` (``helpers.go``).
The NodeClaim conditions and expiration are keyed reconcilers beside: :mod:`karpy.controllers.nodeclaim_disruption`
and :mod:`karpy.controllers.nodeclaim_expiration`.
"""
