"""Static provisioning: a static NodePool (``spec.replicas``) gets NodeClaims until it has ``replicas`` of them.

Karpenter core ``pkg/controllers/static/provisioning/controller.go`` (registered only with the feature gate
``StaticCapacity=true``; karpy's operator wires it the same way). Keyed by NodePool name; the operator enqueues it
when a static NodePool is added or changes (``kubectl scale`` patches ``spec.replicas`` through the scale
subresource) and when one of its NodeClaims changes or goes, so a lost node is replaced at once; it also comes
back every minute, as Karpenter's does.

A reconcile, for a Ready static NodePool that is not being deleted:

1. waits until cluster state has synced once (every kind listed, every NodeClaim launched — Karpenter
   ``Cluster.HasSynced``/``Synced``): NodeClaims created before a restart, launched or not, count, so a restart
   never launches twice;
2. counts its NodeClaims (:func:`~karpy.controllers.static_capacity.node_counts`: active, pending disruption,
   deleting) and creates ``replicas`` − active of them, none while active + pending disruption already reach
   ``replicas`` (a drift replacement is on its way for each pending one), capped by ``limits.nodes``
   (:func:`~karpy.controllers.static_capacity.to_provision`; at the limit it logs ``nodepool node limit reached``
   and comes back in 30 s);
3. each NodeClaim is the NodePool template's (:func:`~karpy.controllers.static_capacity.template_plan`): no pods,
   no instance-type list (the launch takes the cheapest offering the requirements allow), reason
   ``provisioned`` in ``karpenter_nodeclaims_created_total``, as Karpenter's.

karpy's addition: a NodePool whose NodeClaims keep failing to launch (no capacity for its requirements: the
lifecycle deletes them) would be refilled at once, in a loop, as Karpenter refills it. karpy spaces the creating
passes of a NodePool instead — 1 s after a pass that created, doubling to 60 s — until every NodeClaim of the
NodePool has launched and none is missing, which resets it (a lost node is then replaced at once).

Scale-down is :mod:`karpy.controllers.static_deprovisioning`; drifted nodes are replaced by the disruption
controller's static drift (:mod:`karpy.controllers.disruption.staticdrift`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import structlog

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.apis.nodepool import NodePool
from karpy.controllers.provisioner import nodeclaim_from_plan
from karpy.controllers.static_capacity import (
    Reservations,
    node_counts,
    node_limit,
    replicas,
    template_plan,
    to_provision,
)
from karpy.kube.client import KubeClient
from karpy.kube.resources import NODECLAIMS
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.static")

REQUEUE: float = 60.0  # Karpenter: RequeueAfter time.Minute
LIMIT_REQUEUE: float = 30.0  # Karpenter: RequeueAfter 30 s at limits.nodes
SYNC_REQUEUE: float = 1.0  # Karpenter: RequeueAfter time.Second until cluster state synced once
BACKOFF_INITIAL: float = 1.0  # karpy: seconds between creating passes while a NodePool's launches do not land
BACKOFF_MAX: float = 60.0


def static_decision(nodepool: str, replicas_wanted: int) -> str:
    """The ``karpy.sh/provisioning-decision`` of a static NodeClaim: why it was created (JSON)."""
    return json.dumps({"nodepool": nodepool, "static": True, "replicas": replicas_wanted, "pods": 0})


def static_nodeclaim(
    nodepool: NodePool, nodeclass: Mapping[str, Any] | None, replicas_wanted: int, ca_bundle: str | None = None
) -> JSON:
    """The NodeClaim JSON static provisioning (and static drift) creates for ``nodepool``: the provisioner's
    NodeClaim shape (:func:`~karpy.controllers.provisioner.nodeclaim_from_plan`) over the template plan, with the
    EC2NodeClass hash when ``nodeclass`` is known and a decision record naming the replica count."""
    body = nodeclaim_from_plan(template_plan(nodepool), nodepool.raw, nodeclass, ca_bundle=ca_bundle)
    body["metadata"]["annotations"][wk.ANNOTATION_DECISION] = static_decision(nodepool.name, replicas_wanted)
    return body


class StaticProvisioning:
    """Keyed by NodePool name (see the module docstring).

    Args:
        in_flight: NodeClaim names that are candidates of a disruption command in flight (the disruption queue's
            set, read live): they count as pending disruption.
        reservations: the ``limits.nodes`` slots shared with static drift.
        ca_bundle: the cluster CA bundle the EC2NodeClass hash stamped on new NodeClaims includes.
        clock: monotonic seconds, for the spacing of creating passes (tests pass a fake one).
    """

    name = "static.provisioning"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        *,
        in_flight: Collection[str] = frozenset(),
        reservations: Reservations | None = None,
        ca_bundle: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.state = state
        self.in_flight = in_flight
        self.reservations = reservations if reservations is not None else Reservations()
        self.ca_bundle = ca_bundle
        self.clock = clock
        self._synced_once = False
        self.backoff: dict[str, tuple[float, float]] = {}  # NodePool → (no creating pass before, next spacing)

    async def reconcile(self, key: str) -> Result:
        """Create the NodeClaims NodePool ``key`` lacks (module docstring).

        Raises:
            ApiError: a create was refused; the key is retried with backoff (the others were created).
        """
        nodepool = self.state.nodepool_view(key)
        want = replicas(nodepool) if nodepool is not None else None
        if nodepool is None or want is None or nodepool.deleting or not nodepool.is_true(wk.COND_READY):
            return Result()
        if not self._synced_once:
            if not self.state.synced:
                return Result(requeue_after=SYNC_REQUEUE)
            self._synced_once = True
        claims = self.state.nodeclaim_views_of(key)
        counts = node_counts(claims, self.in_flight)
        if counts.active + counts.pending_disruption >= want:
            if all(c.provider_id for c in claims if not c.deleting):
                self.backoff.pop(key, None)  # everything launched: the next refill goes at once
            return Result(requeue_after=REQUEUE)
        count = to_provision(want, counts, node_limit(nodepool), self.reservations.reserved(key, self.in_flight))
        if count <= 0:
            log.info("nodepool node limit reached", nodepool=key, limit=nodepool.limits.get("nodes"), desired=want)
            return Result(requeue_after=LIMIT_REQUEUE)
        now = self.clock()
        held = self.backoff.get(key)
        if held is not None and now < held[0]:
            return Result(requeue_after=held[0] - now)
        spacing = held[1] if held is not None else BACKOFF_INITIAL
        self.backoff[key] = (now + spacing, min(spacing * 2, BACKOFF_MAX))
        log.info(
            "provisioning nodeclaims to satisfy replica count",
            nodepool=key,
            current=counts.active,
            desired=want,
            provision_count=count,
        )
        self.reservations.hold(key, count)
        try:
            creates = (self._create(nodepool, want) for _ in range(count))
            results = await asyncio.gather(*creates, return_exceptions=True)
        finally:
            self.reservations.release(key, count)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return Result(requeue_after=REQUEUE)

    async def _create(self, nodepool: NodePool, want: int) -> str:
        nodeclass = self.state.nodeclass_view(nodepool.template.node_class_ref.name)
        body = static_nodeclaim(nodepool, nodeclass.raw if nodeclass is not None else None, want, self.ca_bundle)
        created = await self.client.create(NODECLAIMS, body)
        self.state.apply("NodeClaim", "ADDED", created)  # read-your-writes: it counts at once
        metrics.nodeclaim_created(created, metrics.PROVISIONED)
        name = str(created["metadata"]["name"])
        log.info("created nodeclaim", nodeclaim=name, nodepool=nodepool.name, static=True)
        return name


__all__ = ["StaticProvisioning", "static_decision", "static_nodeclaim"]
