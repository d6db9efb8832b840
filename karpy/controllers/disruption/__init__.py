"""Voluntary disruption (Karpenter core ``pkg/controllers/disruption``): emptiness, drift, expiration and
consolidation, with budgets and karpy's own safety controls. Only ever deletes NodeClaims; the terminator
drains and terminates.

Modules: :mod:`.types` (candidates, commands), :mod:`.candidates` (eligibility, PDBs, budgets),
:mod:`.emptiness`, :mod:`.drift` (drift and expiration rules), :mod:`.consolidation` (simulation, single- and
multi-node), :mod:`.controls` (beyond-Karpenter knobs), :mod:`.orchestrator` (the loop and the command queue).
"""
