"""Static deprovisioning: a static NodePool above ``spec.replicas`` deletes its surplus NodeClaims.

Karpenter core ``pkg/controllers/static/deprovisioning/controller.go`` (registered only with ``StaticCapacity=true``).
Keyed by NodePool name; the operator enqueues it when a static NodePool changes (``kubectl scale`` down) and when
one of its NodeClaims is created; it comes back every minute. It does not wait for cluster state to sync: state
never holds more NodeClaims than the apiserver, so a half-listed state can only delete too few, never too many.

The surplus is active NodeClaims − ``replicas`` (:func:`~karpy.controllers.static_capacity.to_deprovision`: a
candidate of a disruption command in flight does not count, so a drift replacement is never taken for a surplus).
The victims, in Karpenter's order (:func:`scale_down_victims`):

1. NodeClaims not launched yet (no providerID), by name (the apiserver's list order);
2. launched NodeClaims whose node is empty — no pod, or only DaemonSet pods none of which has
   ``karpenter.sh/do-not-disrupt`` (a NodeClaim without a Node yet is empty) — by name (Karpenter takes them in
   its map order);
3. the others by disruption cost: those without a ``do-not-disrupt`` pod first, then the lowest Σ pod eviction
   cost × remaining lifetime fraction (Karpenter ``ReschedulingCost`` × ``LifetimeRemaining``), then by name.

They are deleted outright (the terminator drains them, PDBs respected): a scale-down bypasses the disruption
budgets, launches no replacement and sets no ``DisruptionReason``, as in Karpenter.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Sequence

import structlog

from karpy.apis.nodeclaim import NodeClaim
from karpy.controllers.disruption.candidates import disruption_cost
from karpy.controllers.static_capacity import node_counts, replicas, to_deprovision
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import NODECLAIMS
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState, deleting
from karpy.state.views import PodInfo

log = structlog.get_logger("karpy.static")

REQUEUE: float = 60.0  # Karpenter: RequeueAfter time.Minute


def empty_node(pods: Sequence[PodInfo]) -> bool:
    """Karpenter's empty node for a scale-down: no pod, or only DaemonSet pods, none with ``do-not-disrupt``."""
    return all(p.daemonset for p in pods) and not any(p.do_not_disrupt for p in pods)


def scale_down_victims(
    claims: Sequence[NodeClaim],
    pods_of: Callable[[NodeClaim], Sequence[PodInfo]],
    count: int,
    now: float,
    in_flight: Collection[str] = frozenset(),
) -> list[NodeClaim]:
    """The ``count`` NodeClaims of one static NodePool a scale-down deletes, in Karpenter's order (module
    docstring). ``pods_of`` gives every pod bound to a NodeClaim's Node (none without a Node); ``now`` is seconds
    since the epoch (remaining lifetime); NodeClaims being deleted or in ``in_flight`` (candidates of a disruption
    command, already leaving) are never chosen."""
    if count <= 0:
        return []
    live = sorted((c for c in claims if not c.deleting and c.name not in in_flight), key=lambda c: c.name)
    chosen = [c for c in live if not c.provider_id][:count]
    launched = [c for c in live if c.provider_id]
    pods = {c.name: tuple(pods_of(c)) for c in launched}
    empty = [c for c in launched if empty_node(pods[c.name])]
    chosen += empty[: count - len(chosen)]
    if len(chosen) < count:
        taken = {c.name for c in empty}
        rest = [c for c in launched if c.name not in taken]
        rest.sort(
            key=lambda c: (
                any(p.do_not_disrupt for p in pods[c.name]),
                disruption_cost(c, pods[c.name], now),
                c.name,
            )
        )
        chosen += rest[: count - len(chosen)]
    return chosen


class StaticDeprovisioning:
    """Keyed by NodePool name (see the module docstring).

    Args:
        in_flight: NodeClaim names that are candidates of a disruption command in flight (read live).
        clock: seconds since the epoch (``time.time``; tests pass a fake one).
    """

    name = "static.deprovisioning"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        *,
        in_flight: Collection[str] = frozenset(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.state = state
        self.in_flight = in_flight
        self.clock = clock

    async def reconcile(self, key: str) -> Result:
        """Delete the NodeClaims NodePool ``key`` has beyond ``spec.replicas`` (module docstring).

        Raises:
            ApiError: a delete was refused; the key is retried with backoff (the others were deleted).
        """
        nodepool = self.state.nodepool_view(key)
        want = replicas(nodepool) if nodepool is not None else None
        if nodepool is None or want is None or nodepool.deleting:
            return Result()
        claims = self.state.nodeclaim_views_of(key)
        count = to_deprovision(want, node_counts(claims, self.in_flight))
        if count <= 0:
            return Result(requeue_after=REQUEUE)
        victims = scale_down_victims(claims, self._pods_of, count, self.clock(), self.in_flight)
        log.info(
            "deprovisioning nodeclaims to satisfy replica count",
            nodepool=key,
            current=count + want,
            desired=want,
            deprovision_count=count,
            nodeclaims=[c.name for c in victims],
        )
        results = await asyncio.gather(*(self._delete(c) for c in victims), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return Result(requeue_after=REQUEUE)

    def _pods_of(self, claim: NodeClaim) -> list[PodInfo]:
        node = self.state.node_for_nodeclaim(claim)
        return list(self.state.pods_on(node.name)) if node is not None else []

    async def _delete(self, claim: NodeClaim) -> None:
        try:
            answer = await self.client.delete(NODECLAIMS, claim.name)
        except ApiError as err:
            if err.not_found:
                return
            raise
        if answer.get("kind") == "NodeClaim" and deleting(answer):
            self.state.apply("NodeClaim", "MODIFIED", answer)  # read-your-writes: it counts as deleting at once
        log.info("deleting nodeclaim", nodeclaim=claim.name, nodepool=claim.nodepool, reason="overprovisioned")


__all__ = ["StaticDeprovisioning", "empty_node", "scale_down_victims"]
