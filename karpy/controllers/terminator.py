"""The terminator: the one path that drains a node and terminates its instance (Karpenter core
``pkg/controllers/nodeclaim/lifecycle/controller.go`` ``finalize``, ``pkg/controllers/node/termination/
controller.go`` and ``terminator/terminator.go``).

Runs for a NodeClaim with a deletionTimestamp and the ``karpenter.sh/termination`` finalizer:

1. taint the Node ``karpenter.sh/disrupted:NoSchedule`` and label it excluded from load balancers;
2. evict its pods through the Eviction API (PDBs respected: a 429 is retried with backoff; 404/409 are
   done), skipping DaemonSet, mirror, terminal pods and pods that tolerate the disrupted taint, and wait
   until they are gone;
3. terminate the instance, every 5 s until the cloud says it is gone (``NodeClaimNotFoundError``);
4. release the Node's finalizer and delete the Node, then release the NodeClaim's finalizer.

**terminationGracePeriod** (Karpenter core ``node/termination/terminator/eviction.go``, ``needsForceDelete`` and
``forceDelete``): when the NodeClaim has ``spec.terminationGracePeriod``, deletion
stamps ``karpenter.sh/nodeclaim-termination-timestamp`` = deletionTimestamp + grace period. Each pod is then
deleted outright — bypassing PDBs and ``karpenter.sh/do-not-disrupt`` — at ``deadline − the pod's
terminationGracePeriodSeconds``, with its grace clamped to the time left (at least 1 s), so the drain ends by
the deadline (core#1776, core#2802). Without a deadline, ``do-not-disrupt`` pods are never evicted: the drain
waits for them (Karpenter's drain, ``terminator/terminator.go``, leaves them to the deadline).

Pods stuck terminating (Karpenter ``IsStuckTerminating``: more than a minute past their ``deletionTimestamp``,
which the apiserver sets to deletion time + grace period — e.g. on a dead kubelet) no longer hold the drain;
a TGP force-delete is sent once per pod, not on every drain poll. ``karpenter_nodeclaims_terminated_total``
counts a NodeClaim once: when the patch releasing its finalizer succeeds (a stale re-run answered 404 or 409
counts nothing).

A NodeClaim deleted before its launch was recorded may still own an instance (the launch raced the delete):
the instance is found by its ``karpenter.sh/nodeclaim`` tag and terminated too, so nothing leaks.
A Node deleted by a user is :class:`NodeTermination`'s (keyed by Node name): it deletes the Node's NodeClaim, or
releases the finalizer of a Node without one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import structlog

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json, set_condition
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.taints import taints_json
from karpy.apis.times import parse_time
from karpy.cloudprovider.types import CloudProvider, NodeClaimNotFoundError
from karpy.controllers import events as ev
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.resources import NODECLAIMS, NODES, PODS
from karpy.runtime.controller import Result
from karpy.scheduling.model import Taint
from karpy.scheduling.taints import tolerates
from karpy.settings import parse_duration
from karpy.state.cluster import ClusterState
from karpy.state.views import NodeInfo, PodInfo

log = structlog.get_logger("karpy.terminator")
DISRUPTED = Taint(key=wk.TAINT_DISRUPTED_KEY, effect="NoSchedule")
DRAIN_POLL = 1.0
TERMINATE_POLL = 5.0
DEFAULT_POD_GRACE = 30  # Kubernetes default terminationGracePeriodSeconds
STUCK_TERMINATING_AFTER = 60.0  # Karpenter IsStuckTerminating: seconds past the pod's deletionTimestamp


def termination_deadline(claim: NodeClaim) -> float | None:
    """The TGP deadline (seconds since the epoch) from ``karpenter.sh/nodeclaim-termination-timestamp``; None
    when absent or not an RFC 3339 time."""
    raw = claim.meta.annotations.get(wk.ANNOTATION_TERMINATION_TIMESTAMP)
    if not raw:
        return None
    try:
        return parse_time(raw)
    except ValueError:
        return None


def deadline_for(claim: NodeClaim) -> str | None:
    """RFC 3339 deadline = deletionTimestamp + ``spec.terminationGracePeriod`` (None without either, or with an
    invalid grace period)."""
    tgp = claim.termination_grace_period
    started = claim.meta.deletion_timestamp
    if not tgp or not started:
        return None
    try:
        at = started + parse_duration(tgp)
    except ValueError:
        return None
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def force_delete_grace(deadline: float, pod_grace: int, now: float) -> int | None:
    """Karpenter ``needsForceDelete``: None while the pod may still be evicted normally; else the grace
    period (seconds, ≥ 1) to delete it with, so its containers stop by ``deadline``."""
    if now < deadline - pod_grace:
        return None
    return max(1, min(pod_grace, int(deadline - now)))


def stuck_terminating(info: PodInfo, now: float) -> bool:
    """Karpenter ``IsStuckTerminating``: the pod is deleting and ``now`` is more than a minute past its
    ``deletionTimestamp`` (deletion time + grace period, when its containers must have been killed). Only a
    kubelet that is gone leaves it there; waiting for it would hold the drain forever."""
    return info.deleting and info.deletion_timestamp > 0 and now - info.deletion_timestamp > STUCK_TERMINATING_AFTER


def eviction_reason(claim: NodeClaim) -> str:
    """What the ``Evicted`` events name (Karpenter ``terminator/eviction.go`` ``evictionReason``): the
    NodeClaim's ``DisruptionReason`` condition reason when it is True (Empty, Underutilized, Drifted, ...), else
    ``Forceful Termination``."""
    cond = claim.condition(wk.COND_DISRUPTION_REASON)
    if cond is not None and cond.true and cond.reason:
        return cond.reason
    return metrics.FORCEFUL_TERMINATION


def drainable(info: PodInfo) -> bool:
    """Pods the drain must evict (Karpenter core ``node/termination/terminator/terminator.go``): not terminal, not
    DaemonSet, not mirror, not tolerating the disrupted taint."""
    return not (info.terminal or info.daemonset or info.mirror or tolerates(info.pod.tolerations, DISRUPTED))


class Terminator:
    """NodeClaim termination, keyed by NodeClaim name (see the module docstring; Node deletions are
    :class:`NodeTermination`'s)."""

    name = "terminator"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        events: EventRecorder,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.events = events
        self.clock = clock
        self._evicting: set[str] = set()
        self._pod_grace: dict[str, int] = {}
        # Pod UIDs already deleted at the TGP deadline: the delete is sent once, whatever the cache still shows.
        self._forced: set[str] = set()
        # NodeClaim UIDs whose node's drain finished (``karpenter_nodes_drained_total`` counts each once).
        self._drained: set[str] = set()

    async def reconcile(self, key: str) -> Result:
        """Advance termination of NodeClaim ``key``."""
        claim = self.state.nodeclaim_view(key)
        if claim is None or not claim.deleting:
            return Result()
        if wk.FINALIZER_TERMINATION not in claim.meta.finalizers:
            return Result()
        claim = await self._stamp_deadline(claim)
        node = self.state.node_for_nodeclaim(claim)
        if node is not None and not await self._instance_gone_under_unready_node(claim, node):
            await self._cordon(node)
            stamped = claim.meta.annotations.get(wk.ANNOTATION_TERMINATION_TIMESTAMP)
            if stamped:
                self.events.record(ev.node_termination_grace_period_expiring(node, stamped))
            remaining = await self._drain(node, termination_deadline(claim), eviction_reason(claim))
            if remaining:
                # Karpenter node/termination/controller.go awaitDrain: a NodeDrainError is a FailedDraining event.
                self.events.record(ev.node_failed_to_drain(node, f"{remaining} pods are waiting to be evicted"))
                return Result(requeue_after=DRAIN_POLL)
            self._drained_once(claim)
        if not await self._terminate_instance(claim):
            return Result(requeue_after=TERMINATE_POLL)
        if node is not None and await self._remove_node(node, claim.meta.deletion_timestamp):
            return Result(requeue_after=DRAIN_POLL)
        await self._release(claim)
        return Result()

    def _drained_once(self, claim: NodeClaim) -> None:
        """``karpenter_nodes_drained_total`` once per NodeClaim, when its node's drain first finds nothing left
        (Karpenter counts the ``Drained`` condition turning True, core ``node/termination/controller.go``)."""
        uid = claim.meta.uid or claim.name
        if uid in self._drained:
            return
        if len(self._drained) > 10000:
            self._drained.clear()
        self._drained.add(uid)
        metrics.NODES_DRAINED.labels(nodepool=claim.nodepool).inc()

    async def _instance_gone_under_unready_node(self, claim: NodeClaim, node: NodeInfo) -> bool:
        """The Node is NotReady and its instance no longer exists: nothing can confirm an eviction there, so the
        drain is skipped (Karpenter does the same); kube-controller-manager's pod GC removes the pods once the
        Node is deleted, and their controllers recreate them elsewhere."""
        if node.ready:
            return False
        pid = claim.provider_id
        if not pid:
            return False
        try:
            await self.cloud.get(pid)
        except NodeClaimNotFoundError:
            log.info("instance gone under a NotReady node, skipping drain", node=node.name, provider_id=pid)
            return True
        return False

    async def _cordon(self, node: NodeInfo) -> None:
        if (
            any(t.key == wk.TAINT_DISRUPTED_KEY for t in node.taints)
            and node.labels.get(wk.LABEL_EXCLUDE_FROM_LB) == "karpenter"
        ):
            return
        kept = [t for t in node.taints if t.key != wk.TAINT_DISRUPTED_KEY]
        patch = {
            "metadata": {
                "labels": {wk.LABEL_EXCLUDE_FROM_LB: "karpenter"},
                "resourceVersion": node.resource_version,
            },
            "spec": {"taints": taints_json([*kept, DISRUPTED])},
        }
        updated = await self.client.merge_patch(NODES, node.name, patch)
        self.state.apply("Node", "MODIFIED", updated)
        log.info("tainted node", node=node.name)

    async def _stamp_deadline(self, claim: NodeClaim) -> NodeClaim:
        """Set ``karpenter.sh/nodeclaim-termination-timestamp`` once, when the NodeClaim has a TGP."""
        if termination_deadline(claim) is not None:
            return claim
        at = deadline_for(claim)
        if at is None:
            return claim
        patch = {"metadata": {"annotations": {wk.ANNOTATION_TERMINATION_TIMESTAMP: at}}}
        try:
            updated = await self.client.merge_patch(NODECLAIMS, claim.name, patch)
        except ApiError as err:
            if err.not_found:
                return claim
            raise
        self.state.apply("NodeClaim", "MODIFIED", updated)
        log.info("termination deadline set", nodeclaim=claim.name, deadline=at)
        stamped = NodeClaim.from_json(updated)
        self.events.record(ev.nodeclaim_termination_grace_period_expiring(stamped, at))
        return stamped

    async def _drain(
        self, node: NodeInfo, deadline: float | None = None, reason: str = metrics.FORCEFUL_TERMINATION
    ) -> int:
        """Evict what must go (force-delete at the TGP deadline); returns how many drainable pods remain.
        ``reason`` ends each pod's ``Evicted`` event and labels ``karpenter_pods_drained_total`` (see
        :func:`eviction_reason`).

        Pods stuck terminating are not waited for (Karpenter ``IsDrainable``)."""
        now = self.clock()
        remaining = [p for p in self.state.pods_on(node.name) if drainable(p) and not stuck_terminating(p, now)]
        for info in remaining:
            if deadline is not None:
                pod_grace = await self._grace_of(info)
                grace = force_delete_grace(deadline, pod_grace, now)
                if grace is not None:
                    if not self._stops_by(info, deadline):
                        await self._force_delete(info, grace, deadline, pod_grace, reason)
                    continue
            if info.deleting:
                continue  # already evicted, waiting for its containers to stop
            if info.do_not_disrupt:
                continue  # do-not-disrupt: never evicted; only the TGP deadline removes it
            await self._evict(info, node, reason)
        return len(remaining)

    async def _grace_of(self, info: PodInfo) -> int:
        """The pod's ``terminationGracePeriodSeconds`` (read once from the apiserver; 30 s by default)."""
        cached = self._pod_grace.get(info.pod.uid)
        if cached is not None:
            return cached
        try:
            obj = await self.client.get(PODS, info.pod.name, info.pod.namespace)
        except ApiError as err:
            if not err.not_found:
                raise
            return DEFAULT_POD_GRACE
        value = (obj.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = DEFAULT_POD_GRACE if value is None else int(value)
        if len(self._pod_grace) > 10000:
            self._pod_grace.clear()
        self._pod_grace[info.pod.uid] = grace
        return grace

    def _stops_by(self, info: PodInfo, deadline: float) -> bool:
        """The pod was already force-deleted by this terminator, or is terminating with its containers due to
        stop by ``deadline`` (its ``deletionTimestamp`` is no later): another delete would change nothing."""
        if info.pod.uid in self._forced:
            return True
        return info.deleting and 0 < info.deletion_timestamp <= deadline

    async def _force_delete(self, info: PodInfo, grace: int, deadline: float, pod_grace: int, reason: str) -> None:
        """Delete the pod (no Eviction API: PDBs and do-not-disrupt bypassed) — the deadline has come. Sent once
        per pod (a terminating pod with a longer grace is deleted again, which shortens it: Kubernetes allows).
        ``grace`` is the delete's grace period, ``pod_grace`` the pod's own ``terminationGracePeriodSeconds``
        (both seconds); ``reason`` labels ``karpenter_pods_drained_total``."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace}
        try:
            await self.client.delete(PODS, info.pod.name, info.pod.namespace, body=body)
        except ApiError as err:
            if err.not_found:
                return
            raise
        if len(self._forced) > 10000:
            self._forced.clear()
        self._forced.add(info.pod.uid)
        metrics.PODS_DRAINED.labels(reason=reason).inc()
        self.events.record(ev.disrupt_pod_delete(info.pod, grace, deadline, pod_grace))
        log.info("deleted pod at the termination deadline", pod=info.key, grace_seconds=grace, node=info.node_name)

    async def _evict(self, info: PodInfo, node: NodeInfo, reason: str) -> None:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": info.pod.name, "namespace": info.pod.namespace},
        }
        try:
            await self.client.create_subresource(PODS, info.pod.name, "eviction", body, info.pod.namespace)
        except ApiError as err:
            metrics.PODS_EVICTION_REQUESTS.labels(code=str(err.status)).inc()
            if err.not_found or err.conflict:
                return
            if err.too_many_requests:
                log.info("eviction blocked by a PodDisruptionBudget, retrying", pod=info.key)
                # Karpenter terminator/eviction.go: a 429 is a FailedDraining event on the pod's Node.
                self.events.record(ev.node_failed_to_drain(node, f"evicting pod violates a PDB (Pod={info.key})"))
                return
            raise
        metrics.PODS_EVICTION_REQUESTS.labels(code="200").inc()
        metrics.PODS_DRAINED.labels(reason=reason).inc()
        self.events.record(ev.evict_pod(info.pod, reason))
        log.info("evicted pod", pod=info.key, node=info.node_name)

    async def _terminate_instance(self, claim: NodeClaim) -> bool:
        """True once the instance is gone."""
        pid = claim.provider_id
        if not pid:
            return await self._terminate_unrecorded(claim)
        try:
            await self.cloud.delete(pid)
        except NodeClaimNotFoundError:
            terminating = claim.condition(wk.COND_INSTANCE_TERMINATING)
            if terminating is not None and terminating.true and terminating.last_transition_time > 0:
                since = self.clock() - terminating.last_transition_time
                metrics.NODECLAIMS_INSTANCE_TERMINATION_DURATION.labels(nodepool=claim.nodepool).observe(
                    max(0.0, since)
                )
            return True
        if not claim.is_true(wk.COND_INSTANCE_TERMINATING):
            conditions = set_condition(
                conditions_json(claim.raw),
                wk.COND_INSTANCE_TERMINATING,
                "True",
                "InstanceTerminating",
                "",
            )
            try:
                updated = await self.client.merge_patch(
                    NODECLAIMS,
                    claim.name,
                    {"status": {"conditions": conditions}},
                    subresource="status",
                )
                self.state.apply("NodeClaim", "MODIFIED", updated)
            except ApiError as err:
                if not err.not_found:
                    raise
            log.info("terminating instance", nodeclaim=claim.name, provider_id=pid)
        return False

    async def _terminate_unrecorded(self, claim: NodeClaim) -> bool:
        name = claim.name
        owned = [i for i in await self.cloud.list() if i.tags.get(wk.TAG_NODECLAIM) == name]
        for instance in owned:
            try:
                await self.cloud.delete(instance.provider_id)
            except NodeClaimNotFoundError:
                continue
            log.info(
                "terminating instance launched for a deleted nodeclaim",
                nodeclaim=name,
                provider_id=instance.provider_id,
            )
            return False
        return True

    async def _remove_node(self, node: NodeInfo, deleted: float = 0.0) -> bool:
        """Release the Node's finalizer and delete it; True while it still exists. ``deleted``: when the deletion
        was requested (the NodeClaim's deletionTimestamp, seconds since the epoch) for the Node metrics."""
        return await remove_node(self.client, self.state, node, deleted=deleted, now=self.clock)

    async def _release(self, claim: NodeClaim) -> None:
        name = claim.name
        finalizers = [f for f in claim.meta.finalizers if f != wk.FINALIZER_TERMINATION]
        patch = {
            "metadata": {
                "finalizers": finalizers or None,
                "resourceVersion": claim.meta.resource_version or None,
            }
        }
        try:
            await self.client.merge_patch(NODECLAIMS, name, patch)
        except ApiError as err:
            if err.not_found:
                # Already released (this reconcile ran on state the watch had not caught up with): the one
                # successful release counted it; counting again would make terminated exceed created.
                return
            raise
        metrics.nodeclaim_terminated(claim, self.clock())
        log.info("terminated nodeclaim", nodeclaim=name)


async def remove_node(
    client: KubeClient,
    state: ClusterState,
    node: NodeInfo,
    *,
    deleted: float = 0.0,
    now: Callable[[], float] = time.time,
) -> bool:
    """Release ``node``'s ``karpenter.sh/termination`` finalizer and delete it; True while it still exists (in
    ``state``). Releasing the finalizer counts the Node terminated (``karpenter_nodes_terminated_total``, its
    lifetime and, when ``deleted`` — the deletion request time, seconds since the epoch — is known, its
    termination duration at ``now()``).

    Raises:
        ApiError: the apiserver refused (other than NotFound).
    """
    current = state.nodes.get(node.name)
    if current is None:
        return False
    if wk.FINALIZER_TERMINATION in current.finalizers:
        finalizers = [f for f in current.finalizers if f != wk.FINALIZER_TERMINATION]
        try:
            updated = await client.merge_patch(
                NODES,
                node.name,
                {
                    "metadata": {
                        "finalizers": finalizers or None,
                        "resourceVersion": current.resource_version,
                    }
                },
            )
            state.apply("Node", "MODIFIED", updated)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        metrics.node_terminated(current.labels, current.created, deleted, now())
    if not current.deleting:
        try:
            await client.delete(NODES, node.name)
        except ApiError as err:
            if not err.not_found:
                raise
    return node.name in state.nodes


class NodeTermination:
    """The Node finalizer, keyed by Node name (Karpenter core ``pkg/controllers/node/termination/controller.go``):
    a Node deleted by a user, holding karpy's ``karpenter.sh/termination`` finalizer, makes its NodeClaim be
    deleted (the :class:`Terminator` then drains and terminates it and releases the Node); a Node without a
    NodeClaim has the finalizer released and is deleted."""

    name = "node.termination"

    def __init__(self, client: KubeClient, state: ClusterState) -> None:
        self.client = client
        self.state = state

    async def reconcile(self, key: str) -> Result:
        """Handle the deletion of Node ``key`` (nothing unless it is deleting and holds the finalizer)."""
        node = self.state.nodes.get(key)
        if node is None or not node.deleting or wk.FINALIZER_TERMINATION not in node.finalizers:
            return Result()
        claim = self.state.nodeclaim_view_for_node(node)
        if claim is None:
            await remove_node(self.client, self.state, node)
            return Result()
        if not claim.deleting:
            log.info("node deleted, deleting its nodeclaim", node=key, nodeclaim=claim.name)
            try:
                await self.client.delete(NODECLAIMS, claim.name)
            except ApiError as err:
                if not err.not_found:
                    raise
        return Result()
