"""NodeClaim expiration: delete a NodeClaim once ``creationTimestamp + spec.expireAfter`` has passed, one keyed
reconciler per NodeClaim (Karpenter core ``pkg/controllers/nodeclaim/expiration/controller.go``).

Forceful, as in Karpenter v1: no disruption budget and no pre-spun replacement — the provisioner requests
capacity for the pods at once. The deletion carries the decision record (annotation
``karpy.sh/disruption-decision``, event ``DisruptionTerminating``, metric reason ``expired``). karpy's
controls (see :mod:`karpy.controllers.disruption.controls`) hold it back: a paused NodePool or cluster
(``DISRUPTION_PAUSED``, the pause Namespace) expires nothing, and a NodePool annotated
``karpy.sh/expiration: Budgeted`` has its expired NodeClaims marked Drifted instead (by
:mod:`karpy.controllers.nodeclaim_disruption`) and replaced within the ``Drifted`` budget. A NodeClaim a
disruption command is working on is left to that command.

The result requeues the key when it expires, or after the disruption ``poll`` while a pause or a command holds
it back; the operator enqueues it on every change of the NodeClaim or its NodePool.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from karpy import metrics
from karpy.controllers.disruption import controls
from karpy.controllers.disruption import drift as dr
from karpy.controllers.disruption.helpers import Clock, cluster_paused, delete_claim
from karpy.kube.client import KubeClient
from karpy.kube.events import EventRecorder
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState


class NodeClaimExpiration:
    """Keyed reconciler deleting expired NodeClaims (see the module docstring).

    ``in_flight``: NodeClaim names disruption commands are working on (the queue's live set).
    """

    name = "nodeclaim.expiration"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        events: EventRecorder,
        settings: controls.DisruptionSettings | None = None,
        *,
        in_flight: Collection[str] = frozenset(),
        clock: Clock = time.time,
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.settings = settings or controls.DisruptionSettings()
        self.in_flight = in_flight
        self.clock = clock

    async def reconcile(self, key: str) -> Result:
        """Delete NodeClaim ``key`` if it expired; else requeue for when it will."""
        claim = self.state.nodeclaim_view(key)
        if claim is None or claim.deleting:
            return Result()
        at = dr.expires_at(claim)
        if at is None:
            return Result()
        now = self.clock()
        if now < at:
            return Result(requeue_after=at - now)
        pool_name = claim.nodepool
        pool = self.state.nodepool_view(pool_name)
        if pool is None or controls.expiration_budgeted(pool):
            return Result()
        paused = controls.paused(pool.meta.annotations)
        if key in self.in_flight or paused or await cluster_paused(self.client, self.settings):
            return Result(requeue_after=self.settings.poll)
        record = {"method": "expiration", "reason": dr.EXPIRED, "decision": "delete"}
        if await delete_claim(self.client, self.state, self.events, claim, record, "Expired"):
            metrics.nodeclaim_disrupted(claim, metrics.EXPIRED)
        return Result()
