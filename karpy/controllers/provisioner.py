"""The provisioner: batches unschedulable pods, runs the scheduling simulation, creates NodeClaims.

Karpenter core ``pkg/controllers/provisioning/provisioner.go`` (with ``batcher.go`` for the window,
``controller.go`` for the triggers and ``scheduling/scheduler.go`` for the NodePool order): pods that
kube-scheduler marked ``PodScheduled=False/Unschedulable`` open a batch window
(``BATCH_IDLE_DURATION``/``BATCH_MAX_DURATION``); once the window closes and cluster state is synced, the
simulation places them on existing and in-flight capacity first, then on new NodeClaims from Ready NodePools in
weight order.
The simulation gets the ``PREFERENCE_POLICY`` setting, namespace labels (for ``namespaceSelector``) and,
per pending pod with PVCs, the node requirements of its volumes (:meth:`Provisioner.scheduling_pods`).

Never a second launch for the same pods: every NodeClaim records the pods planned onto it (annotations
``karpy.sh/plan`` and ``karpy.sh/planned-pods``, written by the plan owner :class:`~karpy.state.plans.Plans`),
the apiserver's answer is recorded in the plan owner at once (before the watch delivers it), and
:meth:`Provisioner.pending_pods` skips planned pods. After a restart the annotations rebuild the same index from
the LIST. The NodeClaims of one decision share a batch id: the registration hold of each waits only for its
batch.

After a failed launch its pods back off before a new NodeClaim is planned for them, and pods that only instance
types without a compatible AMI would fit are told so (:mod:`karpy.controllers.launch_backoff`).

With the ``CapacityBuffer`` gate, every pass also plans the virtual pods of the ready CapacityBuffers
(:attr:`Provisioner.virtual_pods`, :mod:`karpy.scheduling.buffers`; Karpenter ``provisioner.go`` appends them to
``GetPendingPods``): a NodeClaim may be created for them alone, but they are never recorded in a plan (so never
bound), never given an event and never counted in the pod metrics; the nodes hosting them are kept in
:attr:`Provisioner.buffer_hosts` for emptiness, and the pass is handed to :attr:`Provisioner.on_pass` (the buffers'
``Provisioning`` condition).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import structlog

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.hashing import nodeclass_hash, nodepool_hash
from karpy.apis.meta import JSON
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.apis.quantity import format_resource_list
from karpy.apis.resources import add
from karpy.apis.taints import taints_json
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InstanceType
from karpy.controllers import events as ev
from karpy.controllers.launch_backoff import LaunchBackoff, explain_incompatible
from karpy.controllers.static_capacity import is_static
from karpy.controllers.terminator import drainable
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.resources import NODECLAIMS
from karpy.runtime.batcher import Batcher
from karpy.runtime.clock import Clock, LoopClock, Timer
from karpy.runtime.controller import Result
from karpy.scheduling import buffers as cb
from karpy.scheduling import model
from karpy.scheduling.daemons import LiveMemo, with_live_pods
from karpy.scheduling.nodeoverlay import OverlayStore, overlay_annotations
from karpy.scheduling.scheduler import solve
from karpy.scheduling.translate import (
    EPHEMERAL_TAINT_KEYS,
    requirement_to_json,
    scheduling_nodepool,
)
from karpy.scheduling.volumes import volume_topology
from karpy.state.cluster import ClusterState, provider_id
from karpy.state.plans import Plans
from karpy.state.views import NodeInfo, PodInfo

log = structlog.get_logger("karpy.provisioner")

RECHECK_SECONDS = 10.0


def nodeclaim_usage(nodeclaims: Sequence[NodeClaim]) -> dict[str, int]:
    """Summed capacity of live NodeClaims (``status.capacity``, canonical units; an invalid one adds nothing)
    and their count under ``nodes``."""
    total: dict[str, int] = {"nodes": 0}
    for nc in nodeclaims:
        if nc.deleting:
            continue
        total["nodes"] += 1
        total = add(total, nc.capacity)
    return total


class Provisioner:
    """Unkeyed reconciler (:class:`~karpy.runtime.singleton.Singleton`): ``reconcile`` passes run by a
    :class:`~karpy.runtime.singleton.SingletonController`; ``trigger`` on relevant changes."""

    name = "provisioner"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        events: EventRecorder,
        *,
        batch_idle: float = 1.0,
        batch_max: float = 10.0,
        preference_policy: str = "Respect",
        min_values_policy: str = "Strict",
        plans: Plans,
        launch_backoff: LaunchBackoff | None = None,
        clock: Clock | None = None,
        ca_bundle: str | None = None,
        overlays: OverlayStore | None = None,
    ) -> None:
        self.client = client
        self.ca_bundle = ca_bundle  # what the EC2NodeClass hash stamped on new NodeClaims includes
        # NodeOverlays (gate NodeOverlay; None: off): applied to every NodePool's instance types in _nodepools.
        self.overlays = overlays
        self.plans = plans
        self.preference_policy = preference_policy
        self.min_values_policy = min_values_policy
        self.state = state
        self.cloud = cloud
        self.events = events
        self._clock = clock or LoopClock()
        self.batcher = Batcher(batch_idle, batch_max, self._clock)
        self._last_pass = -RECHECK_SECONDS  # monotonic time of the last window or recheck
        # Node name → time the last decision planned pods onto it: such nodes are "nominated" and not
        # disruption candidates for a while (Karpenter nomination window).
        self.nominated: dict[str, float] = {}
        self._vacating: set[str] = set()
        self._decided: set[str] = set()  # pod UIDs whose first scheduling decision was observed (metrics)
        self.latencies = metrics.POD_LATENCIES  # the operator subscribes it to cluster state
        # Told of each unbound pod's scheduling decision (pod key, schedulable) for the scrape-time pod gauges
        # (karpy.metrics_state); None when cluster-state observability is off.
        self.on_decision: Callable[[str, bool], None] | None = None
        self._batches = itertools.count(1)
        # The DaemonSets as the last pass saw them: unchanged DaemonSets and live pods give the same objects back,
        # which the solve's per-DaemonSet-set caches are keyed by.
        self._daemonset_memo: LiveMemo = {}
        self._started = int(state.clock())
        # Per-pod back-off after failed launches; the NodeClaim lifecycle records failures into the same one.
        self.launch_backoff = launch_backoff or LaunchBackoff()
        self._retry: Timer | None = None
        self._retry_at = 0.0
        # Wakes the loop that runs :meth:`reconcile` (set by the operator's wiring; a no-op otherwise).
        self.wake: Callable[[], None] = lambda: None
        # CapacityBuffer gate (set by the operator when on): the virtual pods to plan in every pass, what each pass
        # did with them, and the existing nodes (engine names) hosting virtual pods after the last pass.
        self.virtual_pods: Callable[[], list[model.Pod]] = list
        self.on_pass: Callable[[model.SchedulingResult, Sequence[model.Pod]], None] | None = None
        self.buffer_hosts: dict[str, int] = {}

    def trigger(self) -> None:
        """A pod may need capacity: open or extend the batch window, and wake the provisioning loop."""
        self.batcher.trigger()
        self.wake()

    async def reconcile(self) -> Result:
        """One provisioning pass (Karpenter core ``provisioning/provisioner.go`` ``Reconcile``): when triggered,
        wait for the batch window to close and for cluster state to sync, then provision; come back in 10 s,
        when provisionable pods still pending re-open a window (Karpenter's provisioning pod controller
        re-triggers each such pod every 10 s, ``provisioning/controller.go``).

        Raises:
            ApiError, CloudProviderError: the pass failed; the next one (after the loop's backoff) provisions again.
        """
        if not self.batcher.triggered:
            # Woken by a trigger that the last window already took: the recheck stays on its 10 s cadence.
            due = self._last_pass + RECHECK_SECONDS - self._clock.now()
            if due > 0:
                return Result(requeue_after=due)
            self._last_pass = self._clock.now()
            if not (self.state.synced and self.pending_pods()):
                return Result(requeue_after=RECHECK_SECONDS)
            self.batcher.trigger()
        await self.batcher.wait()
        self._last_pass = self._clock.now()
        await self.state.wait_synced()
        try:
            await self.provision_once()
        except (ApiError, CloudProviderError):
            self.batcher.trigger()  # the retry is a batch of its own, whatever triggers arrive meanwhile
            raise
        return Result(requeue_after=RECHECK_SECONDS)

    def pending_pods(self) -> list[PodInfo]:
        """Provisionable pods (Karpenter ``IsProvisionable``) not planned onto a live NodeClaim."""
        return self.plans.pending()

    async def provision_once(self) -> list[JSON]:
        """One scheduling decision over every pending pod; returns the NodeClaims created."""
        pending = self.pending_pods() + self.displaced_pods()
        virtual = self.virtual_pods()
        if not pending and not virtual:
            self._buffers_planned(model.SchedulingResult((), {}, {}), virtual)
            return []
        nodepools, pool_views = await self._nodepools()
        existing = self._existing_capacity()
        pods, volume_errors = self.scheduling_pods(pending)
        metrics.SCHEDULER_IGNORED_PODS.set(len(volume_errors))
        metrics.pending_pods_by_zone(metrics.PROVISIONER, [p for p in pods if not p.node_name])
        with metrics.scheduling(metrics.PROVISIONER, len(pods)) as run:
            result = solve(
                pods + virtual,
                nodepools,
                existing,
                self.daemonsets(),
                preference_policy=self.preference_policy,
                namespace_labels=self.state.namespace_labels(),
                min_values_policy=self.min_values_policy,
            )
            if virtual:  # virtual pods are planned, never bound, never told, never counted
                self._buffers_planned(result, virtual)
                virtual_keys = {p.key for p in virtual}  # once, not per error
                result = attrs.evolve(
                    result,
                    existing={k: real for k, v in result.existing.items() if (real := tuple(cb.real(v)))},
                    errors={k: v for k, v in result.errors.items() if k not in virtual_keys},
                )
            run.left = len(result.errors)
        now = self.state.clock()
        self._observe_decisions([p.pod for p in pending], now, {**volume_errors, **result.errors})
        self.nominated.update({name: now for name, pods in result.existing.items() if pods})
        await self._plan_onto_existing(result.existing)
        self._nominate_existing(result.existing)
        self.launch_backoff.prune(self.state.pods)
        plans, retry_in = self.launch_backoff.hold(result.new_nodeclaims)
        if retry_in > 0:
            self._trigger_in(retry_in)
        batch = f"{self._started}-{next(self._batches)}"
        created = await asyncio.gather(*(self._create(nc, pool_views[nc.nodepool], batch) for nc in plans))
        errors = {**volume_errors, **result.errors}
        errors.update(await self._explain_incompatible(pods, nodepools, pool_views, result.errors))
        metrics.UNSCHEDULABLE_PODS.labels(controller=metrics.PROVISIONER).set(len(result.errors))
        self._report_errors(pending, errors)
        made = [c for c in created if c is not None]
        log.info(
            "provisioned",
            pods=len(pending),
            buffer_pods=len(virtual),
            nodeclaims=len(made),
            planned_existing=sum(len(v) for v in result.existing.values()),
            unschedulable=len(errors),
        )
        return made

    def _buffers_planned(self, result: model.SchedulingResult, virtual: Sequence[model.Pod]) -> None:
        """Remember the nodes hosting virtual pods (Karpenter ``UpdateBufferPodCounts``) and hand the pass over."""
        self.buffer_hosts = cb.buffer_hosts(result)
        if self.on_pass is not None:
            self.on_pass(result, virtual)

    def _observe_decisions(self, pods: Sequence[model.Pod], now: float, unplaced: Mapping[str, str]) -> None:
        """``karpenter_pods_scheduling_decision_duration_seconds``: once per pod, from when karpy first saw it
        (its creation, or karpy's start for an older pod) to its first scheduling decision (Karpenter core
        ``state/cluster.go`` ``MarkPodSchedulingDecisions``); forgotten once the pod is gone. Pods placed (not in
        ``unplaced``) are schedulable from ``now`` for the ``karpenter_pods_provisioning_*`` latencies, recorded only
        while ``on_decision`` is set (cluster-state observability on: the latencies' pod listener runs). Bound pods
        (displaced from a deleting node) are skipped, as Karpenter skips scheduled pods."""
        for pod in pods:
            if pod.node_name:
                continue  # a bound pod of a deleting node: Karpenter skips scheduled pods here
            if self.on_decision is not None:  # None with cluster-state observability off: record nothing
                if pod.key not in unplaced:
                    self.latencies.schedulable(pod.key, now)
                self.on_decision(pod.key, pod.key not in unplaced)
            if pod.uid not in self._decided:
                self._decided.add(pod.uid)
                seen = max(pod.created, self.state.started_at)
                metrics.PODS_SCHEDULING_DECISION_DURATION.observe(max(0.0, now - seen))
        if len(self._decided) > 2 * max(len(self.state.pods), 1000):
            self._decided &= {info.pod.uid for info in self.state.pods.values()}

    def _trigger_in(self, seconds: float) -> None:
        """Open a batch once the first held NodeClaim's pods are out of back-off (one timer, the earliest)."""
        now = self._clock.now()
        when = now + seconds
        if self._retry is not None and now < self._retry_at <= when:
            return
        if self._retry is not None:
            self._retry.cancel()
        self._retry_at = when
        self._retry = self._clock.call_at(when, self._retry_due)

    def _retry_due(self) -> None:
        self._retry = None
        self.trigger()

    async def _explain_incompatible(
        self,
        pods: Sequence[model.Pod],
        nodepools: Sequence[model.NodePool],
        pool_views: Mapping[str, NodePool],
        errors: Mapping[str, str],
    ) -> dict[str, str]:
        """The ``errors`` of pods that only instance types without a compatible AMI would fit, with the AMI
        requirements named first (see :func:`karpy.controllers.launch_backoff.explain_incompatible`)."""
        if not errors:
            return {}
        return await explain_incompatible(
            self.cloud,
            self.state.nodeclasses,
            [(pool, pool_views[pool.name].template.node_class_ref.name) for pool in nodepools],
            pods,
            errors,
            list(self.state.daemonsets.values()),
            preference_policy=self.preference_policy,
            namespace_labels=self.state.namespace_labels(),
        )

    def scheduling_pods(self, infos: Sequence[PodInfo]) -> tuple[list[model.Pod], dict[str, str]]:
        """The scheduling pods of ``infos``, with ``volume_terms`` from their volumes' topology, and the pods
        left out because their volumes cannot be satisfied yet (pod key → reason).

        Karpenter ``VolumeTopology.Inject``: a bound PVC adds its PV's node affinity, an unbound
        WaitForFirstConsumer PVC its StorageClass's allowedTopologies; a missing PVC, PV or StorageClass, or an
        unbound Immediate PVC, makes the pod wait (Karpenter ignores such pods until the volume exists). Pods
        without PVC-backed volumes are passed through untouched, at the cost of one attribute check.
        """
        pods: list[model.Pod] = []
        errors: dict[str, str] = {}
        for info in infos:
            pod, error = with_volume_terms(self.state, info)
            if error is not None:
                errors[info.key] = error
            else:
                pods.append(pod)
        return pods, errors

    def displaced_pods(self) -> list[PodInfo]:
        """Pods still bound to the Node of a NodeClaim being deleted, that need capacity elsewhere now.

        Interruption, expiration, garbage collection or a user deleted the NodeClaim: its pods will be evicted,
        so replacement capacity is requested at once instead of after the drain (aws#4689, aws#5667). Counted
        only while no live NodeClaim lists them as planned (one replacement, never a loop of launches); pods
        that a drain would not evict (DaemonSet, mirror, terminal, tolerating ``karpenter.sh/disrupted``) and
        pods already terminating (their controller makes a new pod, which goes pending on its own) are skipped,
        and so are ``do-not-disrupt`` pods of a NodeClaim without ``terminationGracePeriod`` (nothing will ever
        evict them, core#1928) and pods without a controller (once evicted nothing recreates them): capacity
        for either would sit unused.
        """
        planned = {
            key
            for name, nc in self.state.nodeclaim_views.items()
            if not nc.deleting
            for key in self.plans.listed(name).values()
        }
        out: list[PodInfo] = []
        for claim in self.state.nodeclaim_views.values():
            if not claim.deleting:
                continue
            node = self.state.node_for_nodeclaim(claim)
            if node is None:
                continue
            forced = bool(claim.termination_grace_period)
            for info in self.state.pods_on(node.name):
                if (info.do_not_disrupt and not forced) or not info.pod.owner:
                    continue
                if info.key not in planned and not info.deleting and drainable(info):
                    out.append(info)
        return out

    def daemonsets(self) -> list[model.DaemonSet]:
        """The DaemonSets as every simulation sees them: each by its newest live pod when one exists (requests
        after LimitRange defaults and webhooks), else by its template (Karpenter ``getDaemonSetPods``)."""
        live = (info.pod for info in self.state.pods.values() if info.daemonset)
        return with_live_pods(self.state.daemonsets.values(), live, self._daemonset_memo)

    async def simulation_inputs(self) -> tuple[list[model.NodePool], dict[str, NodePool], list[model.ExistingNode]]:
        """What a disruption simulation starts from: Ready NodePools (with instance types), their views by
        name, and every live node and in-flight NodeClaim with what is bound or planned on it."""
        pools, objs = await self._nodepools()
        return pools, objs, self._existing_capacity()

    async def _nodepools(self) -> tuple[list[model.NodePool], dict[str, NodePool]]:
        """The Ready, dynamic NodePools that are not being deleted and whose EC2NodeClass exists, in the scheduling
        model (with their instance types and current usage), and their views by name."""
        pools: list[model.NodePool] = []
        views: dict[str, NodePool] = {}
        types_by_class: dict[str, list[InstanceType]] = {}
        # A copy: the loop awaits the cloud provider, and a watch event may add or delete a NodePool meanwhile.
        for name, nodepool in list(self.state.nodepool_views.items()):
            # A static NodePool (spec.replicas) keeps its own node count: never planned for pods, nor a
            # consolidation replacement (Karpenter provisioner.go NewScheduler skips IsStatic, whatever the gate).
            if nodepool.deleting or not nodepool.is_true(wk.COND_READY) or is_static(nodepool):
                continue
            class_name = nodepool.template.node_class_ref.name
            nodeclass = self.state.nodeclass_view(class_name)
            if nodeclass is None:
                continue
            if class_name not in types_by_class:
                try:
                    types_by_class[class_name] = await self.cloud.get_instance_types(nodeclass.raw)
                except CloudProviderError as err:
                    log.warning("no instance types", ec2nodeclass=class_name, error=str(err))
                    types_by_class[class_name] = []
            types = types_by_class[class_name]
            if self.overlays is not None:
                # The one application point of NodeOverlays for provisioning and disruption alike (Karpenter's
                # overlay cloud-provider decorator); a NodePool not evaluated yet is skipped, as Karpenter does.
                overlaid = self.overlays.apply(name, types)
                if overlaid is None:
                    log.debug("skipping nodepool, awaiting nodeoverlay evaluation", nodepool=name)
                    continue
                types = overlaid
            usage = nodeclaim_usage(self.state.nodeclaim_views_of(name))
            pools.append(scheduling_nodepool(dict(nodepool.raw), usage, types))
            views[name] = nodepool
        return pools, views

    def _existing_capacity(self) -> list[model.ExistingNode]:
        """Registered nodes and in-flight NodeClaims, with what is bound or planned on each (Karpenter core
        ``pkg/controllers/state/cluster.go`` and ``scheduling/existingnode.go``: in-flight NodeClaims count with their
        own capacity, labels and taints until they register)."""
        out: list[model.ExistingNode] = []
        planned_by_claim: dict[str, list[str]] = {}
        self._vacating = self._vacating_nodes()
        for name, nc in self.state.nodeclaim_views.items():
            if nc.deleting:
                continue
            keys = [info.key for info in self.plans.pods_of(name)]
            # A replacement launched for a node being vacated holds that node's pods even while they are still
            # bound there: count them, or the replacement looks empty and is promised to other pods too.
            for pod_key in self.plans.listed(name).values():
                info = self.state.pods.get(pod_key)
                if info is not None and info.node_name in self._vacating and not info.deleting:
                    keys.append(pod_key)
            if keys:
                planned_by_claim[name] = keys
        seen_claims: set[str] = set()
        for node in self.state.nodes.values():
            if node.deleting:
                continue
            owner = self.state.nodeclaim_view_for_node(node)
            if owner is not None:
                if owner.deleting:
                    continue
                seen_claims.add(owner.name)
            out.append(self._existing_node(node, owner, planned_by_claim))
        for name, inflight in self.state.nodeclaim_views.items():
            if name in seen_claims or inflight.deleting:
                continue
            out.append(self._inflight_claim(inflight, planned_by_claim.get(name, [])))
        return out

    def _existing_node(
        self, node: NodeInfo, claim: NodeClaim | None, planned: Mapping[str, list[str]]
    ) -> model.ExistingNode:
        pods = list(self.state.pods_on(node.name))
        node_taints = node.taints
        claim_name = ""
        if claim is not None:
            claim_name = claim.name
            pods += self._planned_infos(planned.get(claim_name, []))
            if not claim.is_true(wk.COND_INITIALIZED):
                startup = {t.key for t in claim.startup_taints}
                node_taints = tuple(t for t in node.taints if t.key not in EPHEMERAL_TAINT_KEYS | startup)
        # Karpenter ``StateNode.Initialized``: the Node's label for a managed node, always for an unmanaged one.
        initialized = claim is None or node.labels.get(wk.LABEL_INITIALIZED) == "true"
        return node_capacity(node, pods, node_taints, claim_name, initialized=initialized)

    def _inflight_claim(self, claim: NodeClaim, planned: list[str]) -> model.ExistingNode:
        labels = dict(claim.meta.labels)
        for req in claim.requirements:
            if req.operator == "In" and len(req.values) == 1:
                labels.setdefault(req.key, req.values[0])
        pods = self._planned_infos(planned)
        return model.ExistingNode(
            name=f"nodeclaim/{claim.name}",
            nodeclaim=claim.name,
            nodepool=labels.get(wk.LABEL_NODEPOOL, ""),
            labels=labels,
            taints=claim.taints,
            allocatable=claim.allocatable,
            requested=add(*(p.pod.requests for p in pods)),
            host_ports=tuple(hp for p in pods for hp in p.pod.host_ports),
            pods=len(pods),
            bound_pods=tuple(p.pod for p in pods),
            initialized=False,
        )

    def _planned_infos(self, keys: list[str]) -> list[PodInfo]:
        return [
            p
            for k in keys
            if (p := self.state.pods.get(k)) is not None and (not p.node_name or p.node_name in self._vacating)
        ]

    def _vacating_nodes(self) -> set[str]:
        """Nodes of NodeClaims being deleted: their pods are on their way elsewhere."""
        out = set()
        for claim in self.state.nodeclaim_views.values():
            node = self.state.node_for_nodeclaim(claim) if claim.deleting else None
            if node is not None:
                out.add(node.name)
        return out

    def _nominate_existing(self, existing: Mapping[str, tuple[model.Pod, ...]]) -> None:
        """``Nominated`` on each pod placed on an existing Node or in-flight NodeClaim (Karpenter
        ``scheduling/scheduler.go`` ``Results.Record``: ``Pod should schedule on: nodeclaim/X, node/Y``)."""
        for key, pods in existing.items():
            node = None
            claim_name = key.removeprefix("nodeclaim/")
            if not key.startswith("nodeclaim/"):
                node = self.state.nodes.get(key)
                if node is None:
                    continue
                claim = self.state.nodeclaim_view_for_node(node)
                claim_name = claim.name if claim else ""
            for pod in pods:
                self.events.record(ev.nominate_pod(pod, node, claim_name))

    async def _plan_onto_existing(self, existing: Mapping[str, tuple[model.Pod, ...]]) -> None:
        """Record pods placed on karpy's in-flight or uninitialized capacity on that NodeClaim."""
        by_claim: dict[str, list[model.Pod]] = {}
        for node_name, pods in existing.items():
            claim_name = node_name.removeprefix("nodeclaim/") if node_name.startswith("nodeclaim/") else ""
            if not claim_name:
                node = self.state.nodes.get(node_name)
                claim = self.state.nodeclaim_view_for_node(node) if node else None
                claim_name = claim.name if claim else ""
            if claim_name:
                by_claim.setdefault(claim_name, []).extend(pods)
        for claim_name, placed in by_claim.items():
            claim = self.state.nodeclaim_view(claim_name)
            if claim is None or claim.deleting:
                continue
            # Rewritten pruned (pods bound or gone since are dropped), so the annotation never grows stale.
            annotations = self.plans.annotations(claim_name, self.plans.batch_id(claim_name), placed)
            patch = {"metadata": {"annotations": annotations}}
            try:
                updated = await self.client.merge_patch(NODECLAIMS, claim_name, patch)
            except ApiError as err:
                if err.not_found:
                    continue
                raise
            self.state.apply("NodeClaim", "MODIFIED", updated)
            self.plans.record(updated)

    async def _create(self, plan: model.NewNodeClaim, nodepool: NodePool, batch: str) -> JSON | None:
        nodeclass = self.state.nodeclass_view(nodepool.template.node_class_ref.name)
        nodeclass_raw = nodeclass.raw if nodeclass is not None else None
        body = nodeclaim_from_plan(plan, nodepool.raw, nodeclass_raw, batch=batch, ca_bundle=self.ca_bundle)
        try:
            created = await self.client.create(NODECLAIMS, body)
        except ApiError as err:
            log.warning("nodeclaim not created", nodepool=plan.nodepool, error=str(err))
            for pod in cb.real(plan.pods):  # a virtual pod does not exist: nothing to tell
                self.events.record(ev.pod_failed_to_schedule(pod, f"creating nodeclaim, {err.message}"))
            return None
        self.state.apply("NodeClaim", "ADDED", created)
        self.plans.record(created)
        metrics.nodeclaim_created(created, metrics.PROVISIONED)
        name = created["metadata"]["name"]
        log.info(
            "created nodeclaim",
            nodeclaim=name,
            nodepool=plan.nodepool,
            pods=len(plan.pods),
            instance_types=len(plan.instance_types),
            cheapest=plan.cheapest_price,
            requests=format_resource_list(dict(plan.requests)),
        )
        for pod in cb.real(plan.pods):
            self.events.record(ev.nominate_pod(pod, claim_name=name))
        return created

    def _report_errors(self, pending: Sequence[PodInfo], errors: Mapping[str, str]) -> None:
        by_key = {p.key: p for p in pending}
        for key, message in errors.items():
            info = by_key.get(key)
            if info is not None:
                self.events.record(ev.pod_failed_to_schedule(info.pod, message))
        if errors:
            log.info("pods unschedulable", count=len(errors), example=next(iter(errors.values())))


def plan_annotations(pods: Sequence[model.Pod], batch: str = "") -> dict[str, str]:
    """``karpy.sh/plan`` and ``karpy.sh/planned-pods`` for a new NodeClaim planned for ``pods`` (CapacityBuffer
    virtual pods left out: they are never bound)."""
    pods = cb.real(pods)
    plan: JSON = {"batch": batch} if batch else {}
    plan["pods"] = dict(sorted((p.uid, p.key) for p in pods))
    return {
        wk.ANNOTATION_PLAN: json.dumps(plan),
        wk.ANNOTATION_PLANNED_PODS: json.dumps(sorted({p.key for p in pods})),
    }


def with_volume_terms(
    state: ClusterState, info: PodInfo, *, keep_hostname: bool = False
) -> tuple[model.Pod, str | None]:
    """The pod's scheduling view with ``volume_terms`` from its volumes' topology (Karpenter
    ``VolumeTopology.Inject``), and why its volumes cannot be satisfied yet (None when they can).

    A bound PVC adds its PV's node affinity, an unbound WaitForFirstConsumer PVC its StorageClass's
    allowedTopologies; a missing PVC, PV or StorageClass, or an unbound Immediate PVC, is an error. A pod without
    PVC-backed volumes is returned as it is, at the cost of one attribute check. ``keep_hostname`` keeps the
    hostname of local volumes (binding onto an existing node; a new node never has the old node's name).
    """
    volumes = state.pod_volumes.get(info.key) if info.pod.volume_claims else None
    if volumes is None:
        return info.pod, None
    topology = volume_topology(
        volumes, state.pvcs, state.persistent_volumes, state.storage_classes, keep_hostname=keep_hostname
    )
    if topology.error is not None:
        return info.pod, f"waiting for volumes: {topology.error}"
    if topology.terms:
        return attrs.evolve(info.pod, volume_terms=topology.terms), None
    return info.pod, None


def node_capacity(
    node: NodeInfo,
    pods: Sequence[PodInfo],
    node_taints: tuple[model.Taint, ...],
    nodeclaim: str = "",
    *,
    initialized: bool = True,
) -> model.ExistingNode:
    """A Node as the scheduling engine sees it, holding ``pods`` (bound, or planned onto it as well)."""
    return model.ExistingNode(
        name=node.name,
        nodeclaim=nodeclaim,
        nodepool=node.labels.get(wk.LABEL_NODEPOOL, ""),
        labels=node.labels,
        taints=node_taints,
        allocatable=node.allocatable,
        requested=add(*(p.pod.requests for p in pods)),
        host_ports=tuple(hp for p in pods for hp in p.pod.host_ports),
        pods=len(pods),
        bound_pods=tuple(p.pod for p in pods),
        initialized=initialized,
    )


def nodeclaim_from_plan(
    plan: model.NewNodeClaim,
    nodepool: Mapping[str, Any],
    nodeclass: Mapping[str, Any] | None = None,
    *,
    batch: str = "",
    ca_bundle: str | None = None,
) -> JSON:
    """The NodeClaim JSON Karpenter would create for a plan (core ``provisioning/scheduling/nodeclaim.go``
    ``ToNodeClaim`` and ``provisioner.go`` ``Create``): generateName, labels, annotations,
    NodePool ownerReference, termination finalizer, requirements, requests, nodeClassRef.

    The plan's pods are recorded as karpy's plan annotations (:mod:`karpy.state.plans`), with ``batch`` (the
    provisioning decision's id; without it the NodeClaim is a batch of its own).

    With ``nodeclass`` (the EC2NodeClass it launches from) the NodeClaim also carries the EC2NodeClass hash
    (``karpenter.k8s.aws/ec2nodeclass-hash`` + version), as Karpenter's AWS provider stamps it at launch, so
    a later change of the EC2NodeClass is detected as ``NodeClassDrift``; ``ca_bundle`` is the cluster CA
    bundle that hash includes (AWS ``cloudprovider.go`` ``Create`` stamps ``nodeClass.Hash(caBundle)``)."""
    meta = nodepool.get("metadata") or {}
    template = (nodepool.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    tspec = template.get("spec") or {}
    ref = tspec.get("nodeClassRef") or {}
    labels = {
        **plan.labels,
        wk.LABEL_NODEPOOL: plan.nodepool,
        wk.LABEL_EC2NODECLASS: str(ref.get("name", "")),
    }
    pods = cb.real(plan.pods)
    decision: JSON = {
        "nodepool": plan.nodepool,
        "pods": len(pods),
        "podKeys": [p.key for p in pods[:20]],
        "instanceTypes": [it.name for it in plan.instance_types[:10]],
        "instanceTypeCount": len(plan.instance_types),
        "cheapestPrice": plan.cheapest_price,
    }
    if len(pods) < len(plan.pods):  # CapacityBuffer headroom (virtual pods) this NodeClaim was also sized for
        decision["bufferPods"] = len(plan.pods) - len(pods)
    annotations = {
        **(tmeta.get("annotations") or {}),
        wk.ANNOTATION_NODEPOOL_HASH: nodepool_hash(nodepool),
        wk.ANNOTATION_NODEPOOL_HASH_VERSION: wk.NODEPOOL_HASH_VERSION,
        **plan_annotations(plan.pods, batch),
        wk.ANNOTATION_DECISION: json.dumps(decision),
        **plan.annotations,
        **overlay_annotations(plan.instance_types),
    }
    if nodeclass is not None:
        annotations[wk.ANNOTATION_NODECLASS_HASH] = nodeclass_hash(nodeclass, ca_bundle)
        annotations[wk.ANNOTATION_NODECLASS_HASH_VERSION] = wk.NODECLASS_HASH_VERSION
    spec: JSON = {
        "requirements": [requirement_to_json(r) for r in plan.requirements],
        "resources": {"requests": format_resource_list(dict(plan.requests))},
        "nodeClassRef": {
            "group": ref.get("group", wk.AWS_GROUP),
            "kind": ref.get("kind", "EC2NodeClass"),
            "name": ref.get("name", ""),
        },
    }
    if plan.taints:
        spec["taints"] = taints_json(plan.taints)
    if plan.startup_taints:
        spec["startupTaints"] = taints_json(plan.startup_taints)
    for field in ("expireAfter", "terminationGracePeriod"):
        if tspec.get(field) is not None:
            spec[field] = tspec[field]
    return {
        "apiVersion": f"{wk.GROUP}/{wk.VERSION}",
        "kind": "NodeClaim",
        "metadata": {
            "generateName": f"{plan.nodepool}-",
            "labels": labels,
            "annotations": annotations,
            "finalizers": [wk.FINALIZER_TERMINATION],
            "ownerReferences": [
                {
                    "apiVersion": f"{wk.GROUP}/{wk.VERSION}",
                    "kind": "NodePool",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


__all__ = [
    "Provisioner",
    "node_capacity",
    "nodeclaim_from_plan",
    "provider_id",
    "with_volume_terms",
]
