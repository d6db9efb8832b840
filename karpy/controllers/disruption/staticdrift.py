"""Static drift: drifted NodeClaims of a static NodePool replaced one for one (Karpenter core
``pkg/controllers/disruption/staticdrift.go``, run between emptiness and drift whatever the ``StaticCapacity`` gate).

A static NodePool keeps ``spec.replicas`` nodes, so a drifted one is not rescheduled by simulation as drift does:
each candidate gets one replacement from the NodePool's template
(:func:`~karpy.controllers.static_capacity.template_plan`), launched and initialized before the candidate is
deleted. Per NodePool (pure; the caller reads state):

* nothing while the NodePool is above ``replicas`` (its scale-down goes first);
* at most the ``Drifted`` budget of candidates, and only as many as ``limits.nodes`` leaves room for a replacement
  each (:func:`~karpy.controllers.static_capacity.drift_headroom`); at the limit every candidate is blocked
  (``DisruptionBlocked``: ``static NodePool is at its node limit and cannot stage a replacement``, Karpenter's words;
  its terminate-first path needs the gate ``TerminateFirstDrift``, which karpy rejects).

Karpenter returns one command per candidate; karpy returns one command for the first NodePool with room (its
candidates in drift order: empty ones first, then oldest drift), whose replacements launch together — the next
NodePool's command follows on the next pass.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from karpy.apis import labels as wk
from karpy.controllers.disruption.drift import drift_order
from karpy.controllers.disruption.helpers import transition
from karpy.controllers.disruption.types import DRIFTED, Candidate, Command
from karpy.controllers.static_capacity import is_static, template_plan

METHOD: Final = "static-drift"
AT_LIMIT: Final = "static NodePool is at its node limit and cannot stage a replacement"


def static_candidates(candidates: Sequence[Candidate]) -> dict[str, list[Candidate]]:
    """Drifted candidates of static NodePools (Karpenter ``StaticDrift.ShouldDisrupt``), by NodePool, each list
    in drift order (empty first, then oldest ``Drifted`` transition, then name); NodePools ordered by their
    first candidate."""
    drifted = [c for c in candidates if is_static(c.nodepool) and c.claim.is_true(wk.COND_DRIFTED)]
    by_name = {c.name: c for c in drifted}
    order = drift_order([(transition(c.claim, wk.COND_DRIFTED), len(c.pods), c.name) for c in drifted])
    pools: dict[str, list[Candidate]] = {}
    for name in order:
        c = by_name[name]
        pools.setdefault(c.pool, []).append(c)
    return pools


def static_drift_command(
    pools: Mapping[str, list[Candidate]],
    budget: Callable[[str], int],
    headroom: Callable[[str, int], int],
) -> tuple[Command | None, list[Candidate]]:
    """The static drift command (None when there is none) and the candidates blocked at ``limits.nodes``.

    ``budget(pool)`` is the NodePool's ``Drifted`` budget left now; ``headroom(pool, n)`` how many of ``n``
    candidates may be replaced (0 at the limit, or while the NodePool is above ``replicas``; see
    :func:`~karpy.controllers.static_capacity.drift_headroom`), returning -1 when the NodePool is above
    ``replicas`` (skipped without a word)."""
    blocked: list[Candidate] = []
    for pool, candidates in pools.items():
        allowed = budget(pool)
        if allowed <= 0:
            continue
        wanted = min(allowed, len(candidates))
        room = headroom(pool, wanted)
        if room < 0:
            continue
        if room == 0:
            blocked.extend(candidates[:wanted])
            continue
        chosen = tuple(candidates[:room])
        plan = template_plan(chosen[0].nodepool)
        return Command(METHOD, DRIFTED, chosen, tuple(plan for _ in chosen), validate=False), blocked
    return None, blocked


__all__ = ["AT_LIMIT", "METHOD", "static_candidates", "static_drift_command"]
