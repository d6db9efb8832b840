"""Interruption: act on the cloud's interruption events before the instance goes away (Karpenter AWS
``pkg/controllers/interruption/controller.go`` for the poller, ``utils.go`` (``actionForMessage``) for the actions,
``metrics.go`` and ``events/events.go`` for what it reports; the EventBridge shapes are parsed in
:mod:`karpy.aws.messages` after ``parser.go`` and ``messages/*``).

An unkeyed reconciler run by the runtime's singleton loop, started only when ``INTERRUPTION_QUEUE`` is set: each
pass is one receive and its handling, and the next pass follows at once. It long-polls the
:class:`~karpy.cloudprovider.types.InterruptionQueue` (SQS: up to 10 messages, 20 s wait) and handles a batch's
messages concurrently. For each instance id in a message it finds the NodeClaim whose ``status.providerID``
ends in that id (cluster state) and acts:

* spot interruption warning → mark the offering (instance type, zone, spot) unavailable for 3 minutes so
  the replacement goes elsewhere, events ``SpotInterrupted``, then *CordonAndDrain*;
* AWS Health scheduled change (EC2) → event ``InstanceUnhealthy``, CordonAndDrain;
* instance stopping/stopped → ``InstanceStopping``; shutting-down/terminated → ``InstanceTerminating``;
  both CordonAndDrain;
* rebalance recommendation → event ``SpotRebalanceRecommendation`` only, unless
  ``INTERRUPTION_REBALANCE_REPLACEMENT=true`` (karpy's setting, default false), which also CordonAndDrains:
  a pre-emptive replacement before the spot interruption arrives.

CordonAndDrain deletes the NodeClaim (unless already deleting), with event ``TerminatingOnInterruption``, a
log line and ``karpenter_nodeclaims_disrupted_total{reason=<kind>}``; the terminator then taints, drains
and terminates. Right after deleting, the provisioner is triggered: it treats pods on nodes whose
NodeClaim is deleting as needing capacity, so the replacement is requested when the message arrives, not
after the drain. An event about an instance karpy does not manage is skipped.

A message is deleted once handled, and also when it is invalid or a no-op (logged); an error while handling
leaves it in the queue, to be delivered again after its visibility timeout. Metrics:
``karpenter_interruption_received_messages_total``, ``…_deleted_messages_total`` (by ``message_type``),
``…_message_queue_duration_seconds`` (now − the event's ``time``).

A queue that cannot be read (deleted, unreachable) fails the pass, which the loop retries with backoff (1 s
doubling to 30 s), and is surfaced: ``queue_error`` (the
operator's ``/readyz`` answers 503 with it), ``karpy_interruption_queue_healthy`` 0 and
``karpy_interruption_queue_receive_errors_total``, until a read succeeds again. At start the operator checks the
queue exists (GetQueueUrl) and refuses to start otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Final

import structlog

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.types import (
    CloudProvider,
    CloudProviderError,
    InterruptionKind,
    InterruptionMessage,
    InterruptionQueue,
    QueuedMessage,
)
from karpy.controllers import events as ev
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import Event, EventRecorder
from karpy.kube.resources import NODECLAIMS
from karpy.metrics import (
    INTERRUPTION_DELETED,
    INTERRUPTION_QUEUE_DURATION,
    INTERRUPTION_QUEUE_ERRORS,
    INTERRUPTION_QUEUE_HEALTHY,
    INTERRUPTION_RECEIVED,
    nodeclaim_disrupted,
)
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState
from karpy.state.views import NodeInfo

log = structlog.get_logger("karpy.interruption")
RECEIVE_BACKOFF: Final = (1.0, 30.0)  # the loop's first and longest wait after the queue could not be read
REASON_MAX: Final = 300  # characters of an ignored message's reason in the log (a body can be 256 KB)

# kind → the events published on the NodeClaim and its Node (Karpenter AWS interruption/utils.go notifyForMessage).
EVENTS: Final[Mapping[str, Callable[[NodeInfo | None, NodeClaim], list[Event]]]] = {
    InterruptionKind.SPOT_INTERRUPTED: ev.spot_interrupted,
    InterruptionKind.REBALANCE_RECOMMENDATION: ev.rebalance_recommendation,
    InterruptionKind.SCHEDULED_CHANGE: ev.unhealthy,
    InterruptionKind.INSTANCE_STOPPED: ev.stopping,
    InterruptionKind.INSTANCE_TERMINATED: ev.instance_terminating,
    InterruptionKind.CAPACITY_RESERVATION_INTERRUPTED: ev.capacity_reservation_instance_interrupted,
}
DRAIN_KINDS: Final = frozenset(
    {
        InterruptionKind.SPOT_INTERRUPTED,
        InterruptionKind.SCHEDULED_CHANGE,
        InterruptionKind.INSTANCE_STOPPED,
        InterruptionKind.INSTANCE_TERMINATED,
        InterruptionKind.CAPACITY_RESERVATION_INTERRUPTED,
    }
)


def instance_id_of(provider_id_value: str) -> str:
    """The last path segment of a providerID (``aws:///<zone>/<i-…>`` → ``i-…``); "" when empty."""
    return provider_id_value.rstrip("/").rsplit("/", 1)[-1] if provider_id_value else ""


def should_drain(kind: str, rebalance_replacement: bool) -> bool:
    """Whether a message of ``kind`` deletes the NodeClaim (Karpenter ``actionForMessage``: CordonAndDrain for
    spot interruption, scheduled change and stop/terminate; a rebalance recommendation only with karpy's
    ``INTERRUPTION_REBALANCE_REPLACEMENT``)."""
    return kind in DRAIN_KINDS or (kind == InterruptionKind.REBALANCE_RECOMMENDATION and rebalance_replacement)


class Interruption:
    """Unkeyed reconciler (:class:`~karpy.runtime.singleton.Singleton`) over an :class:`InterruptionQueue`; see
    the module docstring.

    Args:
        on_disrupted: called after a NodeClaim was deleted (the operator passes the provisioner's trigger).
        rebalance_replacement: ``INTERRUPTION_REBALANCE_REPLACEMENT``.
        now: wall clock (aware UTC) for the queue-latency metric.
    """

    name = "interruption"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        events: EventRecorder,
        queue: InterruptionQueue,
        *,
        on_disrupted: Callable[[], None] = lambda: None,
        rebalance_replacement: bool = False,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.events = events
        self.queue = queue
        self.on_disrupted = on_disrupted
        self.rebalance_replacement = rebalance_replacement
        self.now = now
        # Why the last read of the queue failed; "" while it is readable (readiness reports it).
        self.queue_error = ""

    async def reconcile(self) -> Result:
        """One receive (a long poll) and the handling of its messages, once every kind is listed (NodeClaims
        must be known); the next receive at once.

        Raises:
            CloudProviderError: the queue could not be read (``queue_error`` set, gauge 0, error counted); the
                loop retries with backoff (1 s doubling to 30 s) until a read succeeds.
        """
        await self.state.wait_listed()
        try:
            batch = await self.queue.receive()
        except CloudProviderError as err:
            if not self.queue_error:
                log.warning("interruption queue unreadable", error=str(err)[:300])
            self.queue_error = str(err)[:300]
            INTERRUPTION_QUEUE_HEALTHY.set(0)
            INTERRUPTION_QUEUE_ERRORS.inc()
            raise
        if self.queue_error:
            log.info("interruption queue readable again")
            self.queue_error = ""
        INTERRUPTION_QUEUE_HEALTHY.set(1)
        await self.handle_batch(batch)
        return Result(requeue_after=0)

    async def handle_batch(self, batch: list[QueuedMessage]) -> list[bool]:
        """Handle messages concurrently (Karpenter: up to 10 in parallel); per message, whether it was deleted."""
        return list(await asyncio.gather(*(self.handle(m) for m in batch)))

    async def handle(self, queued: QueuedMessage) -> bool:
        """Handle one message and delete it when done; False when it stays in the queue (handling failed or the
        delete did). Never raises (a failure is logged)."""
        msg = queued.message
        INTERRUPTION_RECEIVED.labels(message_type=msg.kind).inc()
        if msg.time is not None:
            INTERRUPTION_QUEUE_DURATION.observe(max(0.0, (self.now() - msg.time).total_seconds()))
        if msg.kind in (InterruptionKind.INVALID, InterruptionKind.NO_OP):
            level = log.warning if msg.kind == InterruptionKind.INVALID else log.info
            reason = msg.reason if len(msg.reason) <= REASON_MAX else msg.reason[:REASON_MAX] + "…"
            level("interruption message ignored", kind=msg.kind, reason=reason, message_id=queued.message_id)
        else:
            try:
                await self.act(msg)
            except Exception as err:  # any failure: leave the message for redelivery
                log.warning(
                    "interruption message not handled, left for redelivery",
                    kind=msg.kind,
                    instance_ids=list(msg.instance_ids),
                    message_id=queued.message_id,
                    error=f"{type(err).__name__}: {err}"[:300],
                )
                return False
        try:
            await self.queue.delete(queued.receipt_handle)
        except CloudProviderError as err:
            log.warning("interruption message not deleted", message_id=queued.message_id, error=str(err)[:300])
            return False
        INTERRUPTION_DELETED.inc()
        return True

    async def act(self, msg: InterruptionMessage) -> list[str]:
        """Apply ``msg`` to every NodeClaim it names; returns the NodeClaims deleted.

        Raises:
            ApiError: the apiserver refused a deletion (other than NotFound).
        """
        by_instance = self._nodeclaims_by_instance()
        deleted: list[str] = []
        try:
            for instance_id in msg.instance_ids:
                claim = by_instance.get(instance_id)
                if claim is None:
                    log.info(
                        "interruption for an instance karpy does not manage", kind=msg.kind, instance_id=instance_id
                    )
                    continue
                if await self._act_on(msg, instance_id, claim):
                    deleted.append(claim.name)
        finally:
            if deleted:  # even when a later instance of the same message failed: these need capacity now
                self.on_disrupted()
        return deleted

    def _nodeclaims_by_instance(self) -> dict[str, NodeClaim]:
        out: dict[str, NodeClaim] = {}
        for claim in self.state.nodeclaim_views.values():
            instance_id = instance_id_of(claim.provider_id)
            if instance_id:
                out[instance_id] = claim
        return out

    async def _act_on(self, msg: InterruptionMessage, instance_id: str, claim: NodeClaim) -> bool:
        name = claim.name
        labels = claim.meta.labels
        node = self.state.node_for_nodeclaim(claim)
        self.events.record(*EVENTS[msg.kind](node, claim))
        if msg.kind == InterruptionKind.SPOT_INTERRUPTED:
            instance_type, zone = labels.get(wk.LABEL_INSTANCE_TYPE), labels.get(wk.LABEL_ZONE)
            if instance_type and zone:
                self.cloud.mark_unavailable(instance_type, zone, wk.CAPACITY_TYPE_SPOT)
        if msg.kind == InterruptionKind.CAPACITY_RESERVATION_INTERRUPTED:
            # Karpenter markUnavailableOfferings: the reclaimed reservation's offering, scoped to that reservation.
            instance_type, zone = labels.get(wk.LABEL_INSTANCE_TYPE), labels.get(wk.LABEL_ZONE)
            reservation = labels.get(wk.LABEL_CAPACITY_RESERVATION_ID)
            if instance_type and zone and reservation:
                self.cloud.mark_unavailable(instance_type, zone, wk.CAPACITY_TYPE_RESERVED, reservation)
        if not should_drain(msg.kind, self.rebalance_replacement):
            log.info("interruption event recorded", kind=msg.kind, nodeclaim=name, instance_id=instance_id)
            return False
        if claim.deleting:
            return False
        try:
            await self.client.delete(NODECLAIMS, name)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        pool = labels.get(wk.LABEL_NODEPOOL, "")
        nodeclaim_disrupted(claim, msg.kind)
        self.events.record(*ev.terminating_on_interruption(node, claim))
        log.info(
            "deleting nodeclaim on interruption",
            kind=msg.kind,
            nodeclaim=name,
            nodepool=pool,
            instance_id=instance_id,
            node=node.name if node else None,
            event_time=msg.time.isoformat() if msg.time else None,
        )
        return True
