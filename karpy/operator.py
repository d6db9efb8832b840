"""The composition root: builds clients, cluster state, the cloud provider and every reconciler, and runs them.

:class:`Operator` knows the cloud only through the cloud-provider protocols (``CloudProvider``, the EC2NodeClass
resolver, ``InterruptionQueue``, the launch-template janitor); the AWS pieces are built in one place,
:func:`aws_operator`, which ``karpy run`` and the integration harness both use. Nothing registers itself on
import or in a constructor: :meth:`Operator.wire` subscribes the plan owner and the routing to cluster state,
and the provisioner's triggers to its loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import structlog

from karpy import __version__
from karpy.apis import labels as wk
from karpy.apis.conditions import condition_true
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.eks import discover
from karpy.aws.session import AWSClients
from karpy.aws.sqs import SQSInterruptionQueue
from karpy.cloudprovider.metrics import MeteredCloudProvider
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InterruptionQueue
from karpy.controllers.binder import Binder
from karpy.controllers.capacity_block_expiration import CapacityBlockExpiration
from karpy.controllers.capacity_type_sync import CapacityTypeSync
from karpy.controllers.capacitybuffer import CapacityBufferController, buffers_referencing
from karpy.controllers.disruption.controller import Disruption
from karpy.controllers.disruption.controls import from_settings as disruption_settings
from karpy.controllers.garbagecollection import FAST_INTERVAL as GC_FAST_INTERVAL
from karpy.controllers.garbagecollection import INTERVAL as GC_INTERVAL
from karpy.controllers.garbagecollection import GarbageCollection, LaunchTemplateJanitor
from karpy.controllers.interruption import RECEIVE_BACKOFF, Interruption
from karpy.controllers.node_repair import NodeRepair, RepairPolicies
from karpy.controllers.nodeclaim_disruption import NodeClaimDisruption, affected_nodeclaims
from karpy.controllers.nodeclaim_expiration import NodeClaimExpiration
from karpy.controllers.nodeclaim_lifecycle import MAX_WORKERS as LIFECYCLE_MAX_WORKERS
from karpy.controllers.nodeclaim_lifecycle import MIN_WORKERS as LIFECYCLE_MIN_WORKERS
from karpy.controllers.nodeclaim_lifecycle import NodeClaimLifecycle
from karpy.controllers.nodeclaim_tagging import NodeClaimTagging
from karpy.controllers.nodeclass_status import NodeClassResolver, NodeClassStatusReconciler
from karpy.controllers.nodeoverlay_status import NodeOverlayStatus
from karpy.controllers.nodepool_status import NodePoolStatusReconciler
from karpy.controllers.provisioner import RECHECK_SECONDS, Provisioner
from karpy.controllers.static_capacity import GATE as STATIC_CAPACITY
from karpy.controllers.static_capacity import is_static
from karpy.controllers.static_deprovisioning import StaticDeprovisioning
from karpy.controllers.static_provisioning import StaticProvisioning
from karpy.controllers.status_conditions import StatusConditions
from karpy.controllers.terminator import NodeTermination, Terminator
from karpy.health import listen, start_server
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.watch import Informer
from karpy.metrics import INTERRUPTION_QUEUE_HEALTHY, ClusterStateObserver
from karpy.metrics_state import StateMetrics
from karpy.runtime.controller import Controller
from karpy.runtime.fence import Fence
from karpy.runtime.leader import MASTER_STATUS, LeaderElectionLost, LeaderElector, LeaseConfig, new_identity
from karpy.runtime.memory import HeapTrimmer
from karpy.runtime.singleton import SingletonController
from karpy.runtime.supervisor import supervise
from karpy.scheduling.nodeoverlay import OverlayStore
from karpy.settings import (
    EXIT_APISERVER_UNREACHABLE,
    EXIT_CREDENTIALS_REJECTED,
    EXIT_KUBECONFIG,
    Settings,
    StartupError,
    leader_election_namespace,
)
from karpy.state.buffers import BUFFER_KINDS, SCALABLE_KINDS, virtual_pods
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans
from karpy.state.views import NodeInfo, PodInfo

log = structlog.get_logger("karpy.operator")
WATCHED: tuple[r.Resource, ...] = (r.PODS, r.NODES, r.NODECLAIMS, r.NODEPOOLS, r.EC2NODECLASSES, r.DAEMONSETS)
# Scheduling inputs kept as slim views: namespaceSelector labels and volume topology (issue 3).
WATCHED += (r.NAMESPACES, r.PERSISTENTVOLUMES, r.PERSISTENTVOLUMECLAIMS, r.STORAGECLASSES)
VOLUME_KINDS = frozenset({"PersistentVolume", "PersistentVolumeClaim", "StorageClass"})
# With the CapacityBuffer gate: buffers and what they reference (karpy.state.buffers).
BUFFER_WATCHED: tuple[r.Resource, ...] = (r.CAPACITYBUFFERS, r.PODTEMPLATES)
BUFFER_WATCHED += (r.DEPLOYMENTS, r.STATEFULSETS, r.REPLICASETS)


class Operator:
    """Everything karpy runs, wired together, on the cloud-provider protocols only.

    Args:
        cloud: the :class:`~karpy.cloudprovider.types.CloudProvider` (instance types, launch, delete, list).
        nodeclasses: resolves EC2NodeClasses for their status (the AWS cloud provider; Karpenter's AWS
            operator wires its EC2NodeClass status controller the same way, outside the core).
        interruption_queue: the interruption queue (None: no interruption handling).
        launch_templates: deletes unused launch templates during garbage collection (None: no cleanup).
        ca_bundle: the cluster CA bundle the EC2NodeClass drift hash includes (:func:`hash_ca_bundle`; None:
            none, as Karpenter hashes without one).

    Build, then :meth:`wire` (the one place anything subscribes to cluster state or plans), then :meth:`run`
    (which wires first if that was not done).
    """

    def __init__(
        self,
        settings: Settings,
        client: KubeClient,
        cloud: CloudProvider,
        *,
        nodeclasses: NodeClassResolver,
        interruption_queue: InterruptionQueue | None = None,
        launch_templates: LaunchTemplateJanitor | None = None,
        ca_bundle: str | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.cloud = cloud
        self.buffers_enabled = bool(settings.feature_gates.get("CapacityBuffer", False))
        # NodeOverlays only with the NodeOverlay gate (Karpenter's default: off, overlays ignored and not watched).
        overlays_enabled = bool(settings.feature_gates.get("NodeOverlay", False))
        extra_kinds = (*(BUFFER_KINDS if self.buffers_enabled else ()), *(("NodeOverlay",) if overlays_enabled else ()))
        self.state = ClusterState(extra_kinds=extra_kinds)
        self.plans = Plans(self.state)
        self.events = EventRecorder(client)
        watched = (
            WATCHED + (BUFFER_WATCHED if self.buffers_enabled else ()) + ((r.NODEOVERLAYS,) if overlays_enabled else ())
        )
        self.informers = [Informer(client, res, self.state) for res in watched]
        self.overlays: OverlayStore | None = OverlayStore() if overlays_enabled else None
        self.provisioner = Provisioner(
            client,
            self.state,
            cloud,
            self.events,
            batch_idle=settings.batch_idle_duration,
            batch_max=settings.batch_max_duration,
            preference_policy=settings.preference_policy,
            min_values_policy=settings.min_values_policy,
            plans=self.plans,
            ca_bundle=ca_bundle,
            overlays=self.overlays,
        )
        # The provisioner's error retry starts at its old 1 s and grows to the 10 s recheck cadence.
        self.provisioning = SingletonController(self.provisioner, base_delay=1.0, max_delay=RECHECK_SECONDS)
        self.lifecycle = Controller(
            NodeClaimLifecycle(
                client,
                self.state,
                cloud,
                self.events,
                backoff=self.provisioner.launch_backoff,
                plans=self.plans,
                overlays=self.overlays,
            ),
            workers=settings.linear_workers(LIFECYCLE_MIN_WORKERS, LIFECYCLE_MAX_WORKERS),
            key_name="nodeclaim",
        )
        self.binder = Controller(
            Binder(client, self.state, self.plans, events=self.events),
            workers=settings.workers(4),
            key_name="nodeclaim",
        )
        self.terminator = Controller(
            Terminator(client, self.state, cloud, self.events), workers=settings.workers(8), key_name="nodeclaim"
        )
        self.node_termination = Controller(
            NodeTermination(client, self.state), workers=settings.workers(2), key_name="node"
        )
        # Karpenter registers the static controllers only with FEATURE_GATES StaticCapacity=true (default off).
        self.static_capacity = bool(settings.feature_gates.get(STATIC_CAPACITY, False))
        self.nodepool_status = Controller(
            NodePoolStatusReconciler(
                client, self.state, self.events, cloud=cloud, static_capacity=self.static_capacity
            ),
            workers=settings.workers(2),
            key_name="nodepool",
        )
        self.nodeclass_status = Controller(
            NodeClassStatusReconciler(
                client,
                self.state,
                nodeclasses,
                self.events,
                # Subnets and security groups are re-resolved together: the tighter refresh interval bounds both.
                refresh_interval=min(settings.subnet_refresh_interval, settings.security_group_refresh_interval),
                ca_bundle=ca_bundle,
            ),
            workers=settings.workers(2),
            key_name="ec2nodeclass",
        )
        # CapacityBuffer gate (Karpenter core controllers.go registers the controller only with it).
        self.capacity_buffer: CapacityBufferController | None = None
        self.capacity_buffers: Controller | None = None
        if self.buffers_enabled:
            self.capacity_buffer = CapacityBufferController(
                client, self.state, self.events, trigger=self.provisioner.trigger
            )
            self.capacity_buffers = Controller(
                self.capacity_buffer, workers=settings.workers(2), key_name="capacitybuffer"
            )
        knobs = attrs.evolve(disruption_settings(settings), ca_bundle=ca_bundle)
        self.disruption = Disruption(client, self.state, self.provisioner, self.events, knobs)
        # A failed pass is retried no later than the next poll, as before the loop became a singleton.
        self.disruption_loop = SingletonController(self.disruption, max_delay=self.disruption.settings.poll)
        self.nodeoverlay_loop: SingletonController | None = None
        if self.overlays is not None:
            self.nodeoverlay_loop = SingletonController(
                NodeOverlayStatus(
                    client, self.state, cloud, self.events, self.overlays, on_updated=self._overlays_evaluated
                ),
                max_delay=60.0,
            )
        self.nodeclaim_disruption = Controller(
            NodeClaimDisruption(client, self.state, cloud, self.disruption.settings),
            workers=settings.workers(2),
            key_name="nodeclaim",
        )
        self.nodeclaim_expiration = Controller(
            NodeClaimExpiration(
                client, self.state, self.events, self.disruption.settings, in_flight=self.disruption.queue.in_flight
            ),
            workers=settings.workers(2),
            key_name="nodeclaim",
        )
        # Node repair runs only with the NodeRepair gate (Karpenter's default: off); an invalid policy set stops here.
        self.node_repair: Controller | None = None
        if settings.feature_gates.get("NodeRepair", False):
            policies = RepairPolicies(cloud.repair_policies(), legacy=settings.legacy_node_repair)
            self.node_repair = Controller(
                NodeRepair(
                    client,
                    self.state,
                    self.events,
                    policies,
                    self.disruption.settings,
                    in_flight=self.disruption.queue.in_flight,
                ),
                workers=settings.workers(2),
                key_name="node",
            )
        self.static_provisioning: Controller | None = None
        self.static_deprovisioning: Controller | None = None
        if self.static_capacity:
            in_flight = self.disruption.queue.in_flight  # candidates of commands in flight: pending disruption
            self.static_provisioning = Controller(
                StaticProvisioning(
                    client,
                    self.state,
                    in_flight=in_flight,
                    reservations=self.disruption.methods.static_reservations,
                    ca_bundle=ca_bundle,
                ),
                workers=settings.workers(2),
                key_name="nodepool",
            )
            self.static_deprovisioning = Controller(
                StaticDeprovisioning(client, self.state, in_flight=in_flight),
                workers=settings.workers(2),
                key_name="nodepool",
            )
        # One worker, as Karpenter's tagging controller (CreateTags is rate limited to one call per second).
        self.nodeclaim_tagging = Controller(
            NodeClaimTagging(client, self.state, cloud, cluster_name=settings.cluster_name),
            workers=1,
            key_name="nodeclaim",
        )
        self.garbage_collection = GarbageCollection(
            client, self.state, cloud, cluster_name=settings.cluster_name, templates=launch_templates
        )
        self.garbage_collection_loop = SingletonController(
            self.garbage_collection, base_delay=GC_FAST_INTERVAL, max_delay=GC_INTERVAL
        )
        # Karpenter AWS capacityreservation/capacitytype: a NodeClaim whose reservation ended becomes on-demand.
        self.capacity_type_sync = SingletonController(CapacityTypeSync(client, self.state, cloud), max_delay=60.0)
        # Karpenter AWS capacityreservation/expiration: nodes of a capacity block in its last 40 minutes go first.
        self.capacity_block_expiration = SingletonController(
            CapacityBlockExpiration(client, self.state), max_delay=60.0
        )
        # Interruption handling runs only with a queue (INTERRUPTION_QUEUE, or one injected by tests).
        self.interruption: Interruption | None = None
        self.interruption_loop: SingletonController | None = None
        if interruption_queue is not None:
            self.interruption = Interruption(
                client,
                self.state,
                cloud,
                self.events,
                interruption_queue,
                on_disrupted=self.provisioner.trigger,
                rebalance_replacement=settings.interruption_rebalance_replacement,
            )
            self.interruption_loop = SingletonController(
                self.interruption, base_delay=RECEIVE_BACKOFF[0], max_delay=RECEIVE_BACKOFF[1]
            )
        # Karpenter's pod/node/NodePool metric controllers and operatorpkg's status controllers (conditions metrics
        # and transition events); DISABLE_CLUSTER_STATE_OBSERVABILITY leaves them out, as in Karpenter.
        self.observability = not settings.disable_cluster_state_observability
        self.heap_trimmer = HeapTrimmer.for_this_process()  # freed heap back to the OS (karpy.runtime.memory)
        self._elected: asyncio.Event | None = None  # leader election's "elected" (None: always leading)
        self.status_conditions = StatusConditions(self.events, leading=self.leading)
        self.state_metrics = StateMetrics(
            self.state,
            cloud=cloud,
            leading=self.leading,
            overlays=self.overlays,
            reserved_capacity=bool(settings.feature_gates.get("ReservedCapacity", True)),
        )
        self._wired = False

    def _overlays_evaluated(self) -> None:
        """A new NodeOverlay evaluation is stored: plan again with it, and let consolidation look again (Karpenter
        ``Cluster.MarkUnconsolidated``)."""
        self.provisioner.trigger()
        self.disruption.on_change("NodeOverlay", "EVALUATED", "", None, None)

    def leading(self) -> bool:
        """This process leads: always, unless leader election handed an ``elected`` event that is not set yet.
        Karpenter runs its metric and status controllers on the leader only, so the cluster-state gauges render
        and the status-condition counters move only then (a dashboard summing the replicas counts once)."""
        return self._elected is None or self._elected.is_set()

    def wire(self) -> None:
        """Subscribe everything once: Plans follows cluster state first (its index must be current when the
        routing below, and every reconciler, runs), then state and plan changes are routed to the reconcilers,
        and the provisioner's triggers wake its loop."""
        if self._wired:
            return
        self._wired = True
        self.plans.follow()
        self.state.subscribe(self._route)
        self.plans.subscribe(self._route_plan)
        self.provisioner.wake = self.provisioning.trigger
        if self.capacity_buffer is not None and self.capacity_buffers is not None:
            controller, buffers, state = self.capacity_buffer, self.capacity_buffers, self.state
            self.provisioner.virtual_pods = lambda: virtual_pods(
                state.capacity_buffers, state.pod_templates, state.workloads
            )
            self.provisioner.on_pass = controller.observe_pass
            controller.enqueue = buffers.enqueue
        if self.observability:  # Karpenter's pod metrics controller: off with DISABLE_CLUSTER_STATE_OBSERVABILITY
            self.provisioner.latencies.active = self.leading  # only the leader observes, as Karpenter's
            self.state.subscribe(self.provisioner.latencies.on_change)  # karpenter_pods_*_duration_seconds
            times = self.state_metrics.times
            self.provisioner.on_decision = lambda key, schedulable: times.decided(key, schedulable=schedulable)
            self.state.subscribe(self.status_conditions.observe)
            self.state_metrics.follow()
            self.plans.subscribe(self._plan_decided)

    def _plan_decided(self, nodeclaim: str) -> None:
        """The pods planned onto ``nodeclaim`` have a scheduling decision (for the pod scheduling-time gauges)."""
        for pod in self.plans.pods_of(nodeclaim):
            self.state_metrics.times.decided(pod.key, schedulable=True)

    def _route_plan(self, nodeclaim: str) -> None:
        """The pods planned onto ``nodeclaim`` or its registration changed: its binder may bind them, and the
        registration hold of every NodeClaim of its batch may end."""
        self.binder.enqueue(nodeclaim)
        for sibling in self.plans.batch_of(nodeclaim):
            self.lifecycle.enqueue(sibling)

    def _route(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """Map a state change to the reconcilers that care (the controller-runtime ``Watches`` role)."""
        self.disruption.on_change(kind, event, key, old, new)
        for name in affected_nodeclaims(self.state, kind, key, old, new):
            self.nodeclaim_disruption.enqueue(name)
            self.nodeclaim_expiration.enqueue(name)
        if kind == "Pod":
            self._route_pod(new)
        elif kind == "Node":
            self._route_node(key, new or old, old if new is not None else None)
        elif kind == "NodeClaim":
            self.lifecycle.enqueue(key)
            self.binder.enqueue(key)
            self.terminator.enqueue(key)
            self.nodeclaim_tagging.enqueue(key)
            obj = new or old
            pool = (obj["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL)
            if pool:
                self.nodepool_status.enqueue(pool)
                self._route_static(pool)
            if event == "DELETED":
                self.provisioner.trigger()  # pods planned onto it need a new home
            elif (
                new is not None
                and (old is None or not (old.get("metadata") or {}).get("deletionTimestamp"))
                and (new.get("metadata") or {}).get("deletionTimestamp")
            ):
                self.provisioner.trigger()  # its pods are about to be displaced: request capacity now
        elif kind == "NodePool":
            self.nodepool_status.enqueue(key)
            self._route_static(key)
            if _generation_changed(old, new):  # not on status writes (Karpenter: GenerationChangedPredicate)
                self._reevaluate_overlays()
            if _nodepool_changed_for_provisioning(old, new):
                self.provisioner.trigger()
        elif kind == "CapacityBuffer" and self.capacity_buffers is not None:
            self.capacity_buffers.enqueue(key)
        elif kind == "PodTemplate" or (kind in SCALABLE_KINDS and _generation_changed(old, new)):
            if self.capacity_buffers is not None:
                for buffer in buffers_referencing(self.state, kind, key):
                    self.capacity_buffers.enqueue(buffer)
        elif kind in VOLUME_KINDS and self.state.pod_volumes:
            self.provisioner.trigger()  # a pod waiting for its volumes may be schedulable now
        elif kind == "NodeOverlay":
            if _generation_changed(old, new):  # its own status writes do not re-evaluate
                self._reevaluate_overlays()
        elif kind == "EC2NodeClass":
            self.nodeclass_status.enqueue(key)
            self._reevaluate_overlays()
            for name, pool in self.state.nodepool_views.items():
                if pool.template.node_class_ref.name == key:
                    self.nodepool_status.enqueue(name)

    def _route_static(self, pool: str) -> None:
        """A static NodePool or one of its NodeClaims changed (``kubectl scale``, a NodeClaim created, lost or
        deleted): its node count may be off. Every change, not only Karpenter's predicates: both count from state."""
        if self.static_provisioning is None or self.static_deprovisioning is None:
            return
        if is_static(self.state.nodepool_view(pool)):
            self.static_provisioning.enqueue(pool)
            self.static_deprovisioning.enqueue(pool)

    def _reevaluate_overlays(self) -> None:
        """NodeOverlays, NodePools and EC2NodeClasses decide the overlay evaluation (Karpenter's controller watches
        all three). An EC2NodeClass's status counts too (its subnets decide its instance types' offerings)."""
        if self.nodeoverlay_loop is not None:
            self.nodeoverlay_loop.trigger()

    def _route_pod(self, info: PodInfo | None) -> None:
        if info is None:
            return
        if info.provisionable:
            self.provisioner.trigger()

    def _route_node(self, key: str, node: NodeInfo | None, old: NodeInfo | None = None) -> None:
        if node is None:
            return
        if self.node_repair is not None and (
            old is None or old.conditions != node.conditions or old.annotations != node.annotations
        ):
            self.node_repair.enqueue(key)  # only condition and annotation changes matter to repair
        claim = self.state.nodeclaim_view_for_node(node)
        if claim is not None:
            name = claim.name
            self.lifecycle.enqueue(name)
            self.binder.enqueue(name)
            self.terminator.enqueue(name)
        if node.deleting:
            self.node_termination.enqueue(key)

    def warm_tasks(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """What a standby runs too: the informers (which feed cluster state, and through it Plans and the
        routing into the work queues) and the observability gauges. None of them writes."""
        tasks: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            (f"informer/{i.resource.kind}", i.run) for i in self.informers
        ]
        tasks.append(("observability", self._observe))
        if self.heap_trimmer is not None:
            tasks.append(("memory.trim", self.heap_trimmer.run))
        if self.observability:
            tasks.append(("metrics.state", self.state_metrics.run))  # refreshes the instance-type gauges (reads)
        return tasks

    def leader_tasks(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        """Every writer (to the apiserver or the cloud), run only by the leader: controller-runtime starts
        leader-election runnables in ``OnStartedLeading`` (``pkg/manager/internal.go``)."""
        tasks: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("provisioner", self.provisioning.run),
            ("nodeclaim.lifecycle", self._after_sync(self.lifecycle.run)),
            ("binder", self._after_sync(self.binder.run)),
            ("terminator", self._after_sync(self.terminator.run)),
            ("node.termination", self._after_sync(self.node_termination.run)),
            ("nodepool.status", self._after_sync(self.nodepool_status.run)),
            ("ec2nodeclass.status", self._after_sync(self.nodeclass_status.run)),
            ("disruption", self.disruption_loop.run),
            ("disruption.queue", self.disruption.queue.run),
            ("nodeclaim.disruption", self._after_sync(self.nodeclaim_disruption.run)),
            ("nodeclaim.expiration", self._after_sync(self.nodeclaim_expiration.run)),
            ("nodeclaim.tagging", self._after_sync(self.nodeclaim_tagging.run)),
            ("garbagecollection", self.garbage_collection_loop.run),
            ("capacityreservation.capacitytype", self._after_sync(self.capacity_type_sync.run)),
            ("capacityreservation.expiration", self._after_sync(self.capacity_block_expiration.run)),
        ]
        if self.static_provisioning is not None and self.static_deprovisioning is not None:
            tasks.append(("static.provisioning", self._after_sync(self.static_provisioning.run)))
            tasks.append(("static.deprovisioning", self._after_sync(self.static_deprovisioning.run)))
        if self.interruption_loop is not None:
            tasks.append(("interruption", self.interruption_loop.run))
        if self.node_repair is not None:
            tasks.append(("node.health", self._after_sync(self.node_repair.run)))
        if self.capacity_buffers is not None:
            tasks.append(("capacitybuffer", self._after_sync(self.capacity_buffers.run)))
        if self.nodeoverlay_loop is not None:
            tasks.append(("nodeoverlay.status", self.nodeoverlay_loop.run))
        if self.observability:
            tasks.append(("status.conditions", self.status_conditions.run))  # publishes events: a writer
        return tasks

    async def run(self, elected: asyncio.Event | None = None) -> None:
        """Wire (if not done yet), then run until cancelled: the :meth:`warm_tasks` at once, and the
        :meth:`leader_tasks` once ``elected`` is set (None: at once, leader election disabled).

        A standby keeps its informers listed and watching, cluster state and Plans current, and its work queues
        filling (keys wait deduplicated; the provisioner's and the loops' triggers only set flags), so a new
        leader starts with everything listed and the backlog queued."""
        self.wire()
        self._elected = elected
        async with asyncio.TaskGroup() as group:
            for name, factory in self.warm_tasks():
                group.create_task(supervise(name, factory), name=name)
            if elected is not None and not elected.is_set():
                log.info("waiting to be elected leader; informers and work queues stay warm")
                await elected.wait()
            for name, factory in self.leader_tasks():
                group.create_task(supervise(name, factory), name=name)

    def _after_sync(self, run: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """``run`` once every informer has listed: a keyed reconciler acting on a half-listed cluster would
        delete NodeClaims whose EC2NodeClass is not listed yet, or drop plans of pods not listed yet. Keys
        enqueued meanwhile wait in the queue. Not ``synced``: that waits for launches, which these make."""

        async def gated() -> None:
            await self.state.wait_listed()
            await run()

        return gated

    async def _observe(self) -> None:
        logged = False
        observer = ClusterStateObserver()
        while True:
            observer.observe(self.state.synced, len(self.state.nodes), self.state.clock())
            if self.state.synced and not logged:
                logged = True
                log.info(
                    "cluster state synced",
                    nodes=len(self.state.nodes),
                    pods=len(self.state.pods),
                    nodeclaims=len(self.state.nodeclaims),
                    nodepools=len(self.state.nodepools),
                    planned=len(self.plans),
                )
            await asyncio.sleep(5)


def _generation_changed(old: Any, new: Any) -> bool:
    """Added, deleted, or its spec edited (``metadata.generation``; Karpenter's ``GenerationChangedPredicate``: on the
    workloads a CapacityBuffer's ``scalableRef`` names, on NodePools and NodeOverlays for the overlay evaluation —
    status-only updates change neither)."""
    if old is None or new is None:
        return True
    return bool((old.get("metadata") or {}).get("generation") != (new.get("metadata") or {}).get("generation"))


def _nodepool_changed_for_provisioning(old: Any, new: Any) -> bool:
    """A NodePool change that can change a provisioning decision: added, deleted, spec edited (generation) or
    readiness flipped. Status-only writes (usage, node count) do not re-open the batch window."""
    if old is None or new is None:
        return True
    if old["metadata"].get("generation") != new["metadata"].get("generation"):
        return True
    return bool(condition_true(old, wk.COND_READY) != condition_true(new, wk.COND_READY))


async def kubernetes_version(client: KubeClient) -> str:
    """``major.minor`` of the apiserver (drives the EKS AMI alias's SSM path)."""
    info = await client.request("GET", "/version")
    minor = "".join(ch for ch in str(info.get("minor", "")) if ch.isdigit())
    return f"{info.get('major', '1')}.{minor}"


async def run(settings: Settings) -> None:
    """Start karpy and run until SIGTERM/SIGINT, or until leadership is lost.

    Startup checks come first and fail with :class:`StartupError` (one line naming the variable, exit 2) instead
    of a traceback: the metrics and probe ports can be bound (one aiohttp server serves both, :mod:`karpy.health`),
    the kubeconfig loads and the apiserver answers, the leader election namespace is known
    (``LEADER_ELECTION_NAMESPACE``, else the pod's), ``INTERRUPTION_QUEUE`` names a queue that exists
    (GetQueueUrl), and the cluster endpoint and CA bundle for node user data are known
    (``CLUSTER_ENDPOINT``/``CLUSTER_CA_BUNDLE``/the kubeconfig, else EKS DescribeCluster: :mod:`karpy.aws.eks`).

    Then the operator is built (:func:`aws_operator`), wired (:meth:`Operator.wire`) and run: its informers at
    once, its writers once this process is elected leader (:mod:`karpy.runtime.leader`; at once with
    ``DISABLE_LEADER_ELECTION=true``). Every write, to the apiserver or to AWS, passes the leader's fence.
    ``/readyz`` means every informer listed (the CRDs are served) and the interruption queue readable, never
    leadership: a synced standby is Ready, as Karpenter's is. SIGTERM stops the writers, then releases the lease
    (``ReleaseOnCancel``) so a standby takes over at once.

    Raises:
        StartupError: one of the checks above failed.
        LeaderElectionLost: the lease was lost (the fence is already closed); the process must exit (code 1)
            without a graceful drain, as controller-runtime's manager does.
    """
    identity = new_identity()
    fence = Fence.always(identity) if settings.disable_leader_election else Fence(identity)
    try:
        metrics_socket = listen(settings.metrics_port) if settings.metrics_port else None
    except OSError as err:
        raise _cannot_listen("METRICS_PORT", settings.metrics_port, err) from None
    try:
        probe_socket = listen(settings.health_probe_port)
    except OSError as err:
        if metrics_socket is not None:
            metrics_socket.close()
        raise _cannot_listen("HEALTH_PROBE_PORT", settings.health_probe_port, err) from None
    operator: Operator | None = None

    def not_ready() -> str:
        """Why ``/readyz`` fails ("" when ready): an informer has not listed yet (which includes a NodePool or
        NodeClaim CRD not served), or the interruption queue is unreadable. Leadership is not part of it."""
        if operator is None or not operator.state.listed:
            return "informers not listed yet"
        if operator.interruption is not None and operator.interruption.queue_error:
            return f"interruption queue {settings.interruption_queue!r} unreadable: {operator.interruption.queue_error}"
        return ""

    probes = await start_server(not_ready, probes=probe_socket, metrics=metrics_socket)
    lost = False
    try:
        # The main client is fenced: every write it sends needs the lease (a standby's writers do not run anyway).
        client = await _connect(settings, user_agent=f"karpy/{__version__} ({identity})", fence=fence)
        elector: LeaderElector | None = None
        try:
            ca_bundle = hash_ca_bundle(settings, client)
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError):
                    loop.add_signal_handler(sig, stop.set)
            async with AWSClients.create(
                settings.aws_region, settings.aws_endpoint_url or None, fence=fence, identity=identity
            ) as clients:
                queue = await _interruption_queue(settings, clients.sqs)
                cluster = await discover(settings, clients.eks, ca_bundle)
                version = cluster.k8s_version or await kubernetes_version(client)
                if not settings.disable_leader_election:
                    elector = await _elector(settings, identity, fence)
                # Logged once every startup check passed: a failed check prints its one line and nothing else.
                log.info(
                    "starting karpy",
                    cluster=settings.cluster_name,
                    endpoint=cluster.endpoint,
                    endpoint_discovered=not settings.cluster_endpoint,
                    kubernetes=version,
                    region=settings.aws_region,
                    aws_endpoint=settings.aws_endpoint_url or None,
                    interruption_queue=settings.interruption_queue or None,
                    identity=identity,
                    leader_election=elector is not None,
                )
                for notice in settings.notices:
                    log.warning(notice)
                operator = aws_operator(
                    settings,
                    client,
                    clients,
                    cluster_endpoint=cluster.endpoint,
                    k8s_version=version,
                    interruption_queue=queue,
                    cluster_ca_bundle=cluster.ca_bundle,
                )
                operator.wire()
                lost = await _run_until_stopped(operator, elector, stop)
        finally:
            await client.close()
            if elector is not None:
                await elector.client.close()
    finally:
        await probes.cleanup()
    if lost:
        assert elector is not None
        raise LeaderElectionLost(identity, settings.leader_election_name)
    log.info("karpy stopped")


async def _elector(settings: Settings, identity: str, fence: Fence) -> LeaderElector:
    """The elector for ``LEADER_ELECTION_NAME`` in ``LEADER_ELECTION_NAMESPACE`` (else the pod's namespace) on its
    own client: its own rate limiter and connection pool, and a per-request timeout of max(renew deadline / 2, 1 s),
    as Karpenter's (``pkg/operator/operator.go``), so a scale-up's client throttling cannot starve the renewals.
    Its user agent is ``karpy/leader-election (<identity>)``. It grants and revokes ``fence``.

    Raises:
        StartupError: the namespace is unset outside a pod, or the apiserver did not answer.
    """
    namespace = leader_election_namespace(settings)
    client = await _connect(settings, user_agent=f"karpy/leader-election ({identity})")
    config = LeaseConfig(settings.leader_election_name, namespace, identity)
    elector = LeaderElector(client, config, fence=fence, events=EventRecorder(client))
    # Its own writes (the Lease, its Events) are fenced too, once elected: a leader stopped past its deadline
    # sends not even a renewal when it runs again, wherever it was stopped.
    client.fence = elector.lease_fence
    return elector


async def _run_until_stopped(operator: Operator, elector: LeaderElector | None, stop: asyncio.Event) -> bool:
    """Run ``operator`` (its writers once ``elector`` leads) until ``stop`` is set or leadership is lost.

    On a stop: the operator's tasks are cancelled (the writers first stop writing), then the lease is released.
    On a loss (the fence is already revoked): the tasks are cancelled, nothing is drained and the lease is not
    released. The campaign ending without having reported a loss (``elector.run()`` raised) is a loss too: no
    renewal runs any more, so the fence is revoked and the process exits rather than stay up without writing.
    Returns True when leadership was lost."""
    main = asyncio.create_task(operator.run(elector.elected if elector is not None else None), name="operator")
    campaign = asyncio.create_task(elector.run(), name="leader-election") if elector is not None else None
    waiters = [main, asyncio.create_task(stop.wait())]
    if elector is not None and campaign is not None:
        waiters += [campaign, asyncio.create_task(elector.lost.wait())]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        if elector is not None and campaign is not None and campaign.done() and not elector.lost.is_set():
            _campaign_ended(elector, campaign)
    finally:
        for waiter in waiters[1:]:
            if waiter is not campaign:
                waiter.cancel()
        main.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await main
    if elector is None or campaign is None:
        return False
    lost = elector.lost.is_set()
    campaign.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await campaign
    if not lost:
        await elector.release()
    return lost


def _campaign_ended(elector: LeaderElector, campaign: asyncio.Task[None]) -> None:
    """The campaign stopped without reporting a loss (it raised): revoke the fence first (synchronously, so no
    write passes any more), then report the loss, as a renew deadline passing would."""
    elector.fence.revoke()
    elector.lost.set()
    MASTER_STATUS.labels(elector.config.name).set(0)
    error = None if campaign.cancelled() else campaign.exception()
    log.error("leader election lost", identity=elector.identity, error=_one_line(error) if error else "campaign ended")


def aws_operator(
    settings: Settings,
    client: KubeClient,
    clients: AWSClients,
    *,
    cluster_endpoint: str,
    k8s_version: str,
    interruption_queue: InterruptionQueue | None,
    cluster_ca_bundle: str | None = None,
) -> Operator:
    """The :class:`Operator` on AWS, as ``karpy run`` builds it (the integration harness builds it here too):
    one :class:`AWSCloudProvider` over ``clients`` serves as the cloud provider, the EC2NodeClass resolver
    and the launch-template janitor. Not wired yet.

    ``cluster_endpoint`` and ``cluster_ca_bundle`` go into node user data (:func:`karpy.aws.eks.discover` finds
    them; ``cluster_ca_bundle`` None: Karpenter's ``GetCABundle``, :func:`hash_ca_bundle`). The EC2NodeClass
    hash always takes :func:`hash_ca_bundle`, as Karpenter's hash controller takes ``GetCABundle``'s."""
    hash_ca = hash_ca_bundle(settings, client)
    cloud = AWSCloudProvider(
        clients,
        cluster_name=settings.cluster_name,
        cluster_endpoint=cluster_endpoint,
        cluster_ca_bundle=hash_ca if cluster_ca_bundle is None else cluster_ca_bundle,
        region=settings.aws_region,
        k8s_version=k8s_version,
        vm_memory_overhead_percent=settings.vm_memory_overhead_percent,
        reserved_enis=settings.reserved_enis,
        isolated_vpc=settings.isolated_vpc,
        ami_refresh_interval=settings.ami_refresh_interval,
        legacy_repair_policies=settings.legacy_node_repair,
        reserved_capacity=bool(settings.feature_gates.get("ReservedCapacity", True)),
    )
    return Operator(
        settings,
        client,
        MeteredCloudProvider(cloud, provider="aws"),  # karpenter_cloudprovider_{duration_seconds,errors_total}
        nodeclasses=cloud,
        interruption_queue=interruption_queue,
        launch_templates=cloud,
        ca_bundle=hash_ca,
    )


def hash_ca_bundle(settings: Settings, client: KubeClient) -> str:
    """The cluster CA bundle the EC2NodeClass hash includes, as Karpenter's AWS ``operator.GetCABundle`` finds
    it: ``CLUSTER_CA_BUNDLE`` when set, else the base64 of the kubeconfig's CA data ("" when it has none).

    Raises:
        StartupError: the kubeconfig's CA file cannot be read.
    """
    if settings.cluster_ca_bundle:
        return settings.cluster_ca_bundle
    try:
        return client.ca_bundle()
    except OSError as err:
        raise StartupError(f"cluster CA bundle: cannot read the kubeconfig's CA data: {_one_line(err)}") from None


async def _interruption_queue(settings: Settings, sqs: Any) -> SQSInterruptionQueue | None:
    """The ``INTERRUPTION_QUEUE`` (None when unset), its URL resolved now: a queue that does not exist, or SQS
    refusing, stops karpy at start rather than leaving spot interruptions silently unhandled.

    Raises:
        StartupError: GetQueueUrl failed.
    """
    if not settings.interruption_queue:
        return None
    queue = SQSInterruptionQueue(sqs, settings.interruption_queue)
    try:
        await queue.url()
    except CloudProviderError as err:
        raise StartupError(f"INTERRUPTION_QUEUE={settings.interruption_queue}: {_one_line(err)}") from None
    INTERRUPTION_QUEUE_HEALTHY.set(1)
    return queue


async def _connect(settings: Settings, *, user_agent: str = "karpy", fence: Fence | None = None) -> KubeClient:
    """A client from the kubeconfig (or in-cluster config), rate limited by ``KUBE_CLIENT_QPS``/``KUBE_CLIENT_BURST``
    as client-go limits Karpenter's (each client its own token bucket), checked against the apiserver's
    ``/version``.

    ``user_agent`` carries the process identity (``karpy/<version> (<identity>)``), so the apiserver's audit log
    tells two replicas apart; the apiserver's default field manager is the part before the first "/", so it stays
    ``karpy`` and managedFields do not change between processes.

    Raises:
        StartupError: no usable kubeconfig, or the apiserver did not answer.
    """
    where = _kubeconfig_source()
    try:
        client = await KubeClient.from_environment(
            qps=settings.kube_client_qps, burst=settings.kube_client_burst, user_agent=user_agent, fence=fence
        )
    except Exception as err:
        raise StartupError(f"{where}: cannot load: {_one_line(err)}", exit_code=EXIT_KUBECONFIG) from None
    try:
        await client.request("GET", "/version", timeout=30.0)
    except Exception as err:
        await client.close()
        raise _unanswered(where, client.host, err) from None
    return client


def _unanswered(where: str, host: str, err: Exception) -> StartupError:
    """The apiserver's first request (``GET /version``) failed: a 401/403 is rejected credentials (exit 5),
    anything else (a connection, DNS, TLS or timeout error, another status) an unreachable apiserver (exit 4)."""
    refused = isinstance(err, ApiError) and err.status in (401, 403)
    return StartupError(
        f"{where}: apiserver {host} did not answer: {_one_line(err)}",
        exit_code=EXIT_CREDENTIALS_REJECTED if refused else EXIT_APISERVER_UNREACHABLE,
    )


def _kubeconfig_source() -> str:
    """How the kubeconfig is found, for messages (a small local check, before the loader's own warnings).

    Raises:
        StartupError: ``KUBECONFIG`` names no existing file, or it is unset outside a pod and there is no
            ``~/.kube/config``.
    """
    env = os.environ.get("KUBECONFIG", "")
    if env:
        paths = [path for path in env.split(os.pathsep) if path]
        if not any(os.path.isfile(path) for path in paths):
            raise StartupError(f"KUBECONFIG={env}: no such file", exit_code=EXIT_KUBECONFIG)
        return f"KUBECONFIG={env}"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "KUBECONFIG (unset; in-cluster config)"
    if not os.path.isfile(os.path.expanduser("~/.kube/config")):
        raise StartupError(
            "KUBECONFIG: not set, not in a pod, and ~/.kube/config does not exist", exit_code=EXIT_KUBECONFIG
        )
    return "KUBECONFIG (unset; ~/.kube/config)"


def _cannot_listen(variable: str, port: int, err: OSError) -> StartupError:
    reason = os.strerror(err.errno) if err.errno else _one_line(err)
    return StartupError(f"{variable}={port}: cannot listen: {reason}")


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text[:300]


__all__ = ["Operator", "aws_operator", "hash_ca_bundle", "run"]
