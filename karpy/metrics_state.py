"""Karpenter's cluster-state metrics, rendered from :class:`~karpy.state.cluster.ClusterState` at scrape time.

Karpenter runs one small metrics controller per family (core ``pkg/controllers/metrics/{node,pod,nodepool}/
controller.go``, the AWS provider's ``pkg/controllers/metrics/controller.go`` and ``pkg/providers/instancetype``)
and deletes a series when its object goes away (``metrics.Store``). karpy renders the same families from the
shared cluster state on every scrape instead (a prometheus-client custom collector), so a deleted Node or Pod has
no series by construction:

* ``karpenter_nodes_{allocatable,total_pod_requests,total_pod_limits,total_daemon_requests,total_daemon_limits,
  system_overhead}`` (label set :data:`NODE_LABELS` + ``resource_type``) and
  ``karpenter_nodes_current_lifetime_seconds`` (:data:`NODE_LABELS`), one series per Node; cpu in cores, every
  other resource in its base unit (bytes, count);
* ``karpenter_cluster_utilization_percent{resource_type}``: Σ pod requests / Σ allocatable over all Nodes, in %;
* ``karpenter_pods_state`` (:data:`POD_LABELS`) = 1 per Pod, and the per-pod "time" gauges
  ``karpenter_pods_{unstarted,unbound,provisioning_unstarted,provisioning_unbound,provisioning_scheduling_undecided}
  _time_seconds`` (seconds since creation, or since karpy first found the pod schedulable / first saw it);
* ``karpenter_nodepools_{usage,limit}{resource_type,nodepool}`` (``status.resources``, ``spec.limits``) and
  ``karpenter_nodepools_cost_total{nodepool}`` (USD/hour: Σ offering price of the NodePool's NodeClaims, Karpenter
  ``pkg/state/cost/cost.go``), with the counter ``karpenter_nodepools_cost_tracker_errors_total{nodepool}``;
* ``karpenter_cloudprovider_instance_type_{offering_available,offering_price_estimate}{instance_type,capacity_type,
  zone}`` and ``karpenter_cloudprovider_instance_type_{cpu_cores,memory_bytes}{instance_type}`` from the
  instance types the cloud provider resolves for each NodePool's EC2NodeClass (refreshed every minute by
  :meth:`StateMetrics.run`, as Karpenter's ``cloudprovider.metrics`` singleton).

Karpenter runs these controllers on the leader only; karpy renders them only while ``leading()`` holds, so a
dashboard summing over the replicas does not count a node twice. ``DISABLE_CLUSTER_STATE_OBSERVABILITY`` turns
them off (the operator then does not register the collector).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import attrs
import structlog
from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily

from karpy.apis import labels as wk
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.apis.resources import add
from karpy.cloudprovider.types import CloudProvider, InstanceType
from karpy.metrics import RegisteredCollector
from karpy.scheduling.nodeoverlay import OverlayStore
from karpy.state.cluster import ClusterState
from karpy.state.views import NodeInfo, PodInfo

log = structlog.get_logger("karpy.metrics_state")

# Karpenter v1.15's WellKnownLabels: core ``pkg/apis/v1/labels.go`` plus what the AWS provider inserts
# (``karpenter-provider-aws pkg/apis/v1/labels.go`` init), without the EC2NodeClass label (a karpy NodeClaim label
# Karpenter's list lacks). The node metrics carry one label per key.
NODE_WELL_KNOWN_LABELS: Final = (wk.WELL_KNOWN_LABELS | wk.NOT_YET_WELL_KNOWN_LABELS) - {wk.LABEL_EC2NODECLASS}


def metric_label(key: str) -> str:
    """A well-known label key as a node-metric label name: the part after ``/``, lower-cased, ``-`` → ``_``
    (``node.kubernetes.io/instance-type`` → ``instance_type``; Karpenter ``getWellKnownLabels``)."""
    return key.split("/", 1)[1].lower().replace("-", "_")


# Well-known label key → metric label name (keys with exactly one "/", as Karpenter keeps).
NODE_WELL_KNOWN: Final[dict[str, str]] = {
    key: metric_label(key) for key in sorted(NODE_WELL_KNOWN_LABELS) if key.count("/") == 1
}
NODE_LABELS: Final[tuple[str, ...]] = (*sorted(set(NODE_WELL_KNOWN.values())), "node_name", "phase", "managed")
NODE_RESOURCE_LABELS: Final[tuple[str, ...]] = (*NODE_LABELS, "resource_type")
POD_LABELS: Final[tuple[str, ...]] = (
    "name",
    "namespace",
    "owner",
    "node",
    "scheduled",
    "nodepool",
    "zone",
    "arch",
    "capacity_type",
    "instance_type",
    "phase",
    "ready",
    "managed",
)
# Karpenter's cost tracker counts only NodeClaims carrying all of these (``cost.NecessaryLabels``).
COST_LABELS: Final = (wk.LABEL_INSTANCE_TYPE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE, wk.LABEL_NODEPOOL)
INSTANCE_TYPE_REFRESH: Final = 60.0  # seconds; Karpenter's cloudprovider.metrics requeues after a minute

COST_TRACKER_ERRORS = Counter(
    "karpenter_nodepools_cost_tracker_errors_total",
    "Number of errors encountered during cost tracking operations. Labeled by nodepool.",
    ["nodepool"],
)


def resource_type(name: str) -> str:
    """A resource name as the ``resource_type`` label: lower-cased, ``-`` → ``_`` (Karpenter)."""
    return name.lower().replace("-", "_")


def resource_value(name: str, canonical: int) -> float:
    """A canonical quantity as Karpenter reports it: cpu in cores (millicores / 1000), the rest as is."""
    return canonical / 1000 if name == "cpu" else float(canonical)


def _bool(value: bool) -> str:
    return "true" if value else "false"


class PodSchedulingTimes:
    """When karpy first saw a pod provisionable (Karpenter ``PodAckTime``), decided for it
    (``PodSchedulingDecisionTime``) and found it schedulable (``PodSchedulingSuccessTime``), in the clock's seconds.

    Fed by :meth:`observe` (a cluster-state listener: a provisionable pod is acknowledged; a pod that is bound,
    nominated or gone is forgotten) and by :meth:`decided` (the provisioner's decision for a pod; the plan owner's
    changes call it for the pods planned onto a NodeClaim)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.ack: dict[str, float] = {}
        self.decision: dict[str, float] = {}
        self.success: dict[str, float] = {}

    def observe(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """Cluster-state listener (``(kind, event, key, old, new)``)."""
        if kind != "Pod":
            return
        if new is None:
            self.forget(key)
        elif isinstance(new, PodInfo) and new.provisionable:
            self.ack.setdefault(key, self.clock())

    def decided(self, key: str, *, schedulable: bool) -> None:
        """The provisioner decided for pod ``key``: it can schedule (``schedulable``) or it cannot."""
        now = self.clock()
        self.decision.setdefault(key, now)
        if schedulable:
            self.success.setdefault(key, now)

    def forget(self, key: str) -> None:
        """Drop pod ``key`` (deleted)."""
        self.ack.pop(key, None)
        self.decision.pop(key, None)
        self.success.pop(key, None)


@attrs.frozen(slots=True)
class OfferingDimensions:
    """One offering as the instance-type metrics label it."""

    instance_type: str
    capacity_type: str
    zone: str


@attrs.define(slots=True)
class InstanceTypeSnapshot:
    """What the last refresh resolved. ``prices[nodepool][(type, zone, capacity type)]`` is USD/hour;
    ``failed`` are NodePools whose instance types could not be resolved."""

    available: dict[OfferingDimensions, bool] = attrs.field(factory=dict)
    price: dict[OfferingDimensions, float] = attrs.field(factory=dict)
    cpu_cores: dict[str, float] = attrs.field(factory=dict)
    memory_bytes: dict[str, float] = attrs.field(factory=dict)
    prices: dict[str, dict[tuple[str, str, str], float]] = attrs.field(factory=dict)
    failed: set[str] = attrs.field(factory=set)

    def add(self, nodepool: str, instance_types: Iterable[InstanceType], reserved_capacity: bool = False) -> None:
        """Record ``nodepool``'s instance types (Karpenter: availability ORed over NodePools, last price wins).
        With the ``ReservedCapacity`` gate, every (type, zone) also has a ``reserved`` series, unavailable at price 0
        when no reservation offers it (AWS ``controllers/metrics/controller.go``)."""
        pool_prices = self.prices.setdefault(nodepool, {})
        for it in instance_types:
            for offering in it.offerings:
                dims = OfferingDimensions(it.name, offering.capacity_type, offering.zone)
                self.available[dims] = self.available.get(dims, False) or offering.available
                self.price[dims] = offering.price
                pool_prices[(it.name, offering.zone, offering.capacity_type)] = offering.price
            if reserved_capacity:
                for zone in {o.zone for o in it.offerings}:
                    dims = OfferingDimensions(it.name, "reserved", zone)
                    if dims not in self.available:
                        self.available[dims] = False
                        self.price[dims] = 0.0
            self.cpu_cores[it.name] = _cpu_cores(it)
            self.memory_bytes[it.name] = _memory_bytes(it)

    def sort(self) -> None:
        """Order the offering and instance-type maps by their labels, once per refresh, so every scrape renders
        them in order without sorting."""
        self.available = dict(sorted(self.available.items(), key=lambda kv: attrs.astuple(kv[0])))
        self.price = dict(sorted(self.price.items(), key=lambda kv: attrs.astuple(kv[0])))
        self.cpu_cores = dict(sorted(self.cpu_cores.items()))
        self.memory_bytes = dict(sorted(self.memory_bytes.items()))


def _cpu_cores(it: InstanceType) -> float:
    """vCPUs (``DefaultVCpus``): the ``instance-cpu`` label, else capacity cpu."""
    label = it.labels.get(wk.LABEL_INSTANCE_CPU, "")
    return float(label) if label.isdigit() else it.capacity.get("cpu", 0) / 1000


def _memory_bytes(it: InstanceType) -> float:
    """Memory before the VM overhead (``SizeInMiB`` × 2²⁰): the ``instance-memory`` label (MiB), else capacity."""
    label = it.labels.get(wk.LABEL_INSTANCE_MEMORY, "")
    return float(int(label) * 1024 * 1024) if label.isdigit() else float(it.capacity.get("memory", 0))


class StateMetrics(RegisteredCollector):
    """The collector (see the module docstring). ``clock`` returns wall-clock seconds since the epoch (creation
    times are compared with it); ``leading`` tells whether this process leads (nothing is rendered otherwise);
    ``cloud`` (None: no instance-type metrics and zero cost) resolves instance types for :meth:`refresh`.

    :meth:`register`/:meth:`unregister` add it to prometheus-client's default registry; :meth:`follow` subscribes
    the pod scheduling times to cluster state."""

    def __init__(
        self,
        state: ClusterState,
        *,
        cloud: CloudProvider | None = None,
        leading: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        times: PodSchedulingTimes | None = None,
        overlays: OverlayStore | None = None,
        reserved_capacity: bool = False,
    ) -> None:
        self.state = state
        self.cloud = cloud
        # NodeOverlays (gate NodeOverlay): prices and cost include them, as Karpenter's decorated GetInstanceTypes.
        self.overlays = overlays
        self.reserved_capacity = reserved_capacity  # the ReservedCapacity gate (reserved offering series)
        self.leading = leading
        self.clock = clock
        self.times = times if times is not None else PodSchedulingTimes(clock)
        self.snapshot = InstanceTypeSnapshot()
        self._cost_errors_counted: set[str] = set()

    # Wiring ---------------------------------------------------------------------------------------------

    def follow(self) -> None:
        """Subscribe the pod scheduling times to cluster state."""
        self.state.subscribe(self.times.observe)

    async def run(self) -> None:
        """Register, then refresh the instance-type snapshot every minute while leading, until cancelled."""
        self.register()
        try:
            while True:
                if self.leading():
                    await self.refresh()
                await asyncio.sleep(INSTANCE_TYPE_REFRESH)
        finally:
            self.unregister()

    async def refresh(self) -> None:
        """Resolve the instance types of every NodePool's EC2NodeClass into a new snapshot, then count cost-tracking
        errors: a NodeClaim (carrying every label of :data:`COST_LABELS`) whose NodePool is missing or whose
        instance types could not be resolved counts once (Karpenter ``ClusterCost.UpdateNodeClaim``)."""
        if self.cloud is None:
            return
        snapshot = InstanceTypeSnapshot()
        for name, pool in list(self.state.nodepool_views.items()):
            ref = pool.template.node_class_ref
            nodeclass = self.state.nodeclasses.get(ref.name)
            if not ref.ec2nodeclass or nodeclass is None:
                snapshot.failed.add(name)
                continue
            try:
                types = await self.cloud.get_instance_types(nodeclass)
                if self.overlays is not None:
                    overlaid = self.overlays.apply(name, types)
                    if overlaid is None:  # not evaluated yet: Karpenter's GetInstanceTypes fails for it too
                        snapshot.failed.add(name)
                        continue
                    types = overlaid
                snapshot.add(name, types, self.reserved_capacity)
            except Exception as err:  # one broken NodePool must not hide the others' series
                log.debug("instance types not resolved for metrics", nodepool=name, error=str(err))
                snapshot.failed.add(name)
        snapshot.sort()
        self.snapshot = snapshot
        self._count_cost_errors()

    def _count_cost_errors(self) -> None:
        live = set(self.state.nodeclaims)
        self._cost_errors_counted &= live
        for name, claim in self.state.nodeclaim_views.items():
            labels = claim.meta.labels
            if name in self._cost_errors_counted or not all(labels.get(k) for k in COST_LABELS):
                continue
            pool = labels[wk.LABEL_NODEPOOL]
            if pool not in self.state.nodepools or pool in self.snapshot.failed:
                COST_TRACKER_ERRORS.labels(nodepool=pool).inc()
                self._cost_errors_counted.add(name)

    # Collector ------------------------------------------------------------------------------------------

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """Every family of the module docstring, or nothing while not leading."""
        if not self.leading():
            return
        now = self.clock()
        yield from self._node_families(now)
        yield from self._pod_families(now)
        yield from self._nodepool_families()
        yield from self._instance_type_families()

    # Nodes ----------------------------------------------------------------------------------------------

    def node_labels(self, node: NodeInfo) -> dict[str, str]:
        """The node-metric labels of ``node`` (:data:`NODE_LABELS`): "" for a well-known label it lacks."""
        labels = {name: "" for name in NODE_WELL_KNOWN.values()}
        for key, name in NODE_WELL_KNOWN.items():
            value = node.labels.get(key)
            if value is not None:
                labels[name] = value
        labels["node_name"] = node.name
        labels["phase"] = node.phase
        labels["managed"] = _bool(self.state.nodeclaim_for_node(node) is not None)
        return labels

    def _node_families(self, now: float) -> Iterator[GaugeMetricFamily]:
        families = {
            name: GaugeMetricFamily(f"karpenter_nodes_{name}", text, labels=NODE_RESOURCE_LABELS)
            for name, text in (
                ("allocatable", "Node allocatable are the resources allocatable by nodes."),
                ("total_pod_requests", "Resources requested by pods bound to nodes, DaemonSet pods included."),
                ("total_pod_limits", "Resource limits of pods bound to nodes, DaemonSet pods included."),
                ("total_daemon_requests", "Resources requested by DaemonSet pods bound to nodes."),
                ("total_daemon_limits", "Resource limits of DaemonSet pods bound to nodes."),
                ("system_overhead", "Resources reserved for system overhead: node capacity minus allocatable."),
            )
        }
        lifetime = GaugeMetricFamily(
            "karpenter_nodes_current_lifetime_seconds", "Node age in seconds", labels=NODE_LABELS
        )
        allocatable_total: dict[str, int] = {}
        requested_total: dict[str, int] = {}
        for node in list(self.state.nodes.values()):
            base = self.node_labels(node)
            values = [base[name] for name in NODE_LABELS]
            pods = list(self.state.pods_on(node.name))
            daemons = [p for p in pods if p.daemonset]
            requests = add(*(p.pod.requests for p in pods))
            per_metric = {
                "allocatable": node.allocatable,
                "total_pod_requests": requests,
                "total_pod_limits": add(*(p.limits for p in pods)),
                "total_daemon_requests": add(*(p.pod.requests for p in daemons)),
                "total_daemon_limits": add(*(p.limits for p in daemons)),
                "system_overhead": {k: v - node.allocatable.get(k, 0) for k, v in node.capacity.items()},
            }
            for metric, resources in per_metric.items():
                for name, quantity in sorted(resources.items()):
                    families[metric].add_metric([*values, resource_type(name)], resource_value(name, quantity))
            lifetime.add_metric(values, max(0.0, now - node.created) if node.created else 0.0)
            for name, quantity in node.allocatable.items():
                allocatable_total[name] = allocatable_total.get(name, 0) + quantity
            for name, quantity in requests.items():
                requested_total[name] = requested_total.get(name, 0) + quantity
        yield from families.values()
        yield lifetime
        utilization = GaugeMetricFamily(
            "karpenter_cluster_utilization_percent",
            "Utilization of allocatable resources by pod requests",
            labels=("resource_type",),
        )
        for name, allocatable in sorted(allocatable_total.items()):
            if allocatable == 0:
                continue
            utilization.add_metric([resource_type(name)], 100 * requested_total.get(name, 0) / allocatable)
        yield utilization

    # Pods -----------------------------------------------------------------------------------------------

    def pod_labels(self, pod: PodInfo) -> dict[str, str]:
        """The ``karpenter_pods_state`` labels of ``pod`` (:data:`POD_LABELS`); node facts from its Node."""
        node = self.state.nodes.get(pod.node_name) if pod.node_name else None
        node_labels: Mapping[str, str] = node.labels if node is not None else {}
        return {
            "name": pod.pod.name,
            "namespace": pod.pod.namespace,
            "owner": pod.owner_link,
            "node": pod.node_name,
            "scheduled": _bool(bool(pod.node_name)),
            "nodepool": node_labels.get(wk.LABEL_NODEPOOL, ""),
            "zone": node_labels.get(wk.LABEL_ZONE, ""),
            "arch": node_labels.get(wk.LABEL_ARCH, ""),
            "capacity_type": node_labels.get(wk.LABEL_CAPACITY_TYPE, ""),
            "instance_type": node_labels.get(wk.LABEL_INSTANCE_TYPE, ""),
            "phase": pod.phase,
            "ready": _bool(pod.ready),
            "managed": _bool(bool(node_labels.get(wk.LABEL_NODEPOOL))),
        }

    def _pod_families(self, now: float) -> Iterator[GaugeMetricFamily]:
        name_ns = ("name", "namespace")
        name_ns_dra = ("name", "namespace", "dynamic_resources")
        state = GaugeMetricFamily(
            "karpenter_pods_state",
            "Pod state: one series per pod, labelled with its node's NodePool, zone, architecture, capacity type, "
            "instance type, and the pod's phase and readiness.",
            labels=POD_LABELS,
        )
        unstarted = GaugeMetricFamily(
            "karpenter_pods_unstarted_time_seconds",
            "The time from pod creation until the pod is running.",
            labels=name_ns,
        )
        unbound = GaugeMetricFamily(
            "karpenter_pods_unbound_time_seconds",
            "The time from pod creation until the pod is bound.",
            labels=name_ns_dra,
        )
        prov_unstarted = GaugeMetricFamily(
            "karpenter_pods_provisioning_unstarted_time_seconds",
            "The time from when karpy first found the pod schedulable until the pod is running.",
            labels=name_ns,
        )
        prov_unbound = GaugeMetricFamily(
            "karpenter_pods_provisioning_unbound_time_seconds",
            "The time from when karpy first found the pod schedulable until it binds.",
            labels=name_ns_dra,
        )
        undecided = GaugeMetricFamily(
            "karpenter_pods_provisioning_scheduling_undecided_time_seconds",
            "The time since karpy first saw a pod without making a scheduling decision for it.",
            labels=name_ns,
        )
        times = self.times
        for key, pod in list(self.state.pods.items()):
            labels = self.pod_labels(pod)
            state.add_metric([labels[n] for n in POD_LABELS], 1.0)
            ident = [pod.pod.name, pod.pod.namespace]
            dra = _bool(pod.dynamic_resources)
            age = max(0.0, now - pod.pod.created) if pod.pod.created else 0.0
            schedulable = times.success.get(key)
            # Started = Ready (Karpenter: a pod leaves the unstarted gauges when Ready or finished).
            if not pod.ready and not pod.terminal:
                unstarted.add_metric(ident, age)
                if schedulable is not None:
                    prov_unstarted.add_metric(ident, max(0.0, now - schedulable))
            if pod.phase == "Pending" and not pod.scheduled:
                unbound.add_metric([*ident, dra], age)
                if schedulable is not None:
                    prov_unbound.add_metric([*ident, dra], max(0.0, now - schedulable))
            acked = times.ack.get(key)
            if (
                acked is not None
                and key not in times.decision
                and not pod.scheduled
                and not pod.node_name
                and not pod.terminal
            ):
                undecided.add_metric(ident, max(0.0, now - acked))
        yield from (state, unstarted, unbound, prov_unstarted, prov_unbound, undecided)

    # NodePools ------------------------------------------------------------------------------------------

    def nodepool_costs(self) -> dict[str, float]:
        """NodePool name → USD/hour of its NodeClaims carrying every :data:`COST_LABELS` label, each at its
        offering's price (0 when the offering is unknown, as Karpenter's cost tracker undercounts then); one pass
        over the NodeClaims. NodePools without such NodeClaims are absent (cost 0)."""
        prices = self.snapshot.prices
        totals: dict[str, float] = {}
        for claim in list(self.state.nodeclaim_views.values()):
            labels = claim.meta.labels
            if not all(labels.get(k) for k in COST_LABELS):
                continue
            pool = labels[wk.LABEL_NODEPOOL]
            key = (labels[wk.LABEL_INSTANCE_TYPE], labels[wk.LABEL_ZONE], labels[wk.LABEL_CAPACITY_TYPE])
            totals[pool] = totals.get(pool, 0.0) + prices.get(pool, {}).get(key, 0.0)
        return totals

    def _nodepool_families(self) -> Iterator[GaugeMetricFamily]:
        labels = ("resource_type", "nodepool")
        usage = GaugeMetricFamily(
            "karpenter_nodepools_usage",
            "The amount of resources that have been provisioned for a nodepool. Labeled by nodepool name and "
            "resource type.",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "karpenter_nodepools_limit",
            "Limits specified on the nodepool that restrict the quantity of resources provisioned. Labeled by "
            "nodepool name and resource type.",
            labels=labels,
        )
        cost = GaugeMetricFamily(
            "karpenter_nodepools_cost_total",
            "Total cost of the nodepool from karpy's perspective, USD per hour (offering prices; not billing).",
            labels=("nodepool",),
        )
        costs = self.nodepool_costs()
        for name, pool in sorted(self.state.nodepool_views.items()):
            if not pool.template.node_class_ref.ec2nodeclass:
                continue  # Karpenter IsManaged: only NodePools of this cloud provider's NodeClass
            cost.add_metric([name], costs.get(name, 0.0))
            for family, resources in ((usage, pool.resources), (limit, pool.limits)):
                for resource, quantity in sorted(_canonical(resources).items()):
                    family.add_metric([resource_type(resource), name], resource_value(resource, quantity))
        yield from (usage, limit, cost)

    # Instance types -------------------------------------------------------------------------------------

    def _instance_type_families(self) -> Iterator[GaugeMetricFamily]:
        dims = ("instance_type", "capacity_type", "zone")
        snapshot = self.snapshot
        available = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_offering_available",
            "Instance type offering availability, based on instance type, capacity type, and zone",
            labels=dims,
        )
        price = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_offering_price_estimate",
            "Instance type offering estimated hourly price used when making informed decisions on node cost "
            "calculation, based on instance type, capacity type, and zone.",
            labels=dims,
        )
        for d, ok in snapshot.available.items():  # sorted by refresh
            available.add_metric([d.instance_type, d.capacity_type, d.zone], 1.0 if ok else 0.0)
        for d, usd in snapshot.price.items():
            price.add_metric([d.instance_type, d.capacity_type, d.zone], usd)
        cpu = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_cpu_cores",
            "VCPUs cores for a given instance type.",
            labels=("instance_type",),
        )
        memory = GaugeMetricFamily(
            "karpenter_cloudprovider_instance_type_memory_bytes",
            "Memory, in bytes, for a given instance type.",
            labels=("instance_type",),
        )
        for name, cores in snapshot.cpu_cores.items():
            cpu.add_metric([name], cores)
        for name, size in snapshot.memory_bytes.items():
            memory.add_metric([name], size)
        yield from (available, price, cpu, memory)


def _canonical(resources: Mapping[str, str]) -> dict[str, int]:
    """A ResourceList of quantity strings in canonical units (an unparsable one reads as empty)."""
    try:
        return parse_resource_list(dict(resources))
    except QuantityError:
        return {}


__all__ = [
    "COST_TRACKER_ERRORS",
    "NODE_LABELS",
    "NODE_RESOURCE_LABELS",
    "NODE_WELL_KNOWN",
    "POD_LABELS",
    "InstanceTypeSnapshot",
    "PodSchedulingTimes",
    "StateMetrics",
    "metric_label",
    "resource_type",
    "resource_value",
]
