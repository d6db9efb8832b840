"""karpy.metrics_state: Karpenter's node, pod, NodePool and instance-type gauges rendered from cluster state at scrape
time (core ``pkg/controllers/metrics/{node,pod,nodepool}/controller.go``, ``pkg/state/cost/cost.go``, AWS
``pkg/controllers/metrics/controller.go``): label names and values, units, leak-freedom, leader gating."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpy.apis import labels as wk
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.metrics_state import (
    COST_TRACKER_ERRORS,
    NODE_LABELS,
    NODE_RESOURCE_LABELS,
    NODE_WELL_KNOWN,
    POD_LABELS,
    StateMetrics,
)
from karpy.state.cluster import ClusterState

NOW = 1_700_000_000.0
CREATED = "2023-11-14T22:00:00Z"  # NOW - 13 min 20 s
CREATED_TS = 1_699_999_200.0
PID = "aws:///us-west-2a/i-0123"

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(metrics: StateMetrics) -> Samples:
    out: Samples = {}
    for family in metrics.collect():
        out.setdefault(family.name, [])
        for sample in family.samples:
            out[family.name].append((dict(sample.labels), sample.value))
    return out


def node(name: str = "n1", *, pid: str = PID, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "creationTimestamp": CREATED,
        "labels": {
            wk.LABEL_NODEPOOL: "default",
            wk.LABEL_ZONE: "us-west-2a",
            wk.LABEL_INSTANCE_TYPE: "m5.large",
            wk.LABEL_CAPACITY_TYPE: "spot",
            wk.LABEL_ARCH: "amd64",
            wk.LABEL_ZONE_ID: "usw2-az1",
            wk.LABEL_INSTANCE_CPU: "2",
            wk.LABEL_EC2NODECLASS: "default",
        },
    }
    if deleting:
        meta["deletionTimestamp"] = CREATED
        meta["finalizers"] = ["karpenter.sh/termination"]
    return {
        "metadata": meta,
        "spec": {"providerID": pid},
        "status": {
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
            "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
        },
    }


def pod(
    name: str,
    *,
    node_name: str = "",
    phase: str = "Running",
    cpu: str = "100m",
    limit_cpu: str = "",
    daemon: bool = False,
    ready: bool = True,
    unschedulable: bool = False,
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": "64Mi"}}
    if limit_cpu:
        resources["limits"] = {"cpu": limit_cpu}
    owner = (
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "controller": True, "uid": "ds"}
        if daemon
        else {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "controller": True, "uid": "rs"}
    )
    conditions = []
    if node_name:
        conditions.append({"type": "PodScheduled", "status": "True"})
    elif unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable"})
    if ready:
        conditions.append({"type": "Ready", "status": "True"})
    return {
        "metadata": {
            "name": name,
            "namespace": "d",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": CREATED,
            "ownerReferences": [owner],
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "c", "resources": resources}]},
        "status": {"phase": phase, "conditions": conditions},
    }


def nodeclaim(name: str, *, pool: str = "default", itype: str = "m5.large", zone: str = "us-west-2a") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": CREATED,
            "labels": {
                wk.LABEL_NODEPOOL: pool,
                wk.LABEL_INSTANCE_TYPE: itype,
                wk.LABEL_ZONE: zone,
                wk.LABEL_CAPACITY_TYPE: "spot",
            },
        },
        "spec": {"nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "default"}},
        "status": {"providerID": PID if name == "nc1" else f"aws:///{zone}/i-{name}"},
    }


def nodepool(name: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "generation": 1},
        "spec": {
            "limits": {"cpu": "100", "memory": "400Gi"},
            "template": {
                "spec": {
                    "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [],
                }
            },
        },
        "status": {"resources": {"cpu": "4", "memory": "16Gi", "nodes": "2"}},
    }


def nodeclass() -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "default", "uid": "uid-nc", "resourceVersion": "1"},
        "spec": {},
    }


def instance_type(name: str, price: float, *, available: bool = True) -> InstanceType:
    return InstanceType(
        name=name,
        labels={wk.LABEL_INSTANCE_CPU: "2", wk.LABEL_INSTANCE_MEMORY: "8192"},
        capacity={"cpu": 2000, "memory": 7 * 2**30},
        overhead={},
        offerings=(
            Offering("us-west-2a", "spot", price, available),
            Offering("us-west-2b", "on-demand", price * 3, True),
        ),
    )


class FakeCloud:
    """Only ``get_instance_types``; ``fail`` raises for every call."""

    def __init__(self, types: list[InstanceType], *, fail: bool = False) -> None:
        self.types = types
        self.fail = fail
        self.calls = 0

    async def get_instance_types(self, nodeclass: Mapping[str, Any]) -> list[InstanceType]:
        self.calls += 1
        if self.fail:
            raise RuntimeError("no subnets")
        return self.types


def build(**kwargs: Any) -> tuple[ClusterState, StateMetrics]:
    state = ClusterState(clock=lambda: NOW)
    metrics = StateMetrics(state, clock=lambda: NOW, **kwargs)
    metrics.follow()
    return state, metrics


def series(samples: Samples, family: str, /, **match: str) -> list[tuple[dict[str, str], float]]:
    return [(labels, v) for labels, v in samples.get(family, []) if all(labels.get(k) == x for k, x in match.items())]


def value(samples: Samples, family: str, /, **match: str) -> float:
    found = series(samples, family, **match)
    assert len(found) == 1, (family, match, found)
    return found[0][1]


def test_node_label_set_is_karpenters_well_known_labels() -> None:
    """One label per Karpenter v1.15 well-known label (core + AWS), suffix snake_cased, plus node_name, phase,
    managed; the EC2NodeClass label is not well known in Karpenter."""
    names = set(NODE_WELL_KNOWN.values())
    assert {"nodepool", "zone", "region", "instance_type", "arch", "os", "capacity_type", "windows_build"} <= names
    assert {
        "zone_id",
        "instance_cpu_sustained_clock_speed_mhz",
        "instance_encryption_in_transit_supported",
        "capacity_reservation_id",
        "instance_capability_flex",
        "placement_group_partition",
        "instance_gpu_memory",
    } <= names
    assert "ec2nodeclass" not in names
    assert len(names) == 8 + 28  # core + the AWS provider's (windows-build inserted by both)
    assert NODE_LABELS[-3:] == ("node_name", "phase", "managed") and NODE_RESOURCE_LABELS[-1] == "resource_type"


def test_node_gauges_labels_units_and_pod_sums() -> None:
    """Allocatable in cores/bytes, requests and limits summed over the node's pods (DaemonSet pods included in the
    totals, alone in the daemon series), overhead = capacity − allocatable, lifetime from creation."""
    state, metrics = build()
    state.apply("NodeClaim", "ADDED", nodeclaim("nc1"))
    state.apply("Node", "ADDED", node())
    state.apply("Pod", "ADDED", pod("web", node_name="n1", cpu="250m", limit_cpu="500m"))
    state.apply("Pod", "ADDED", pod("agent", node_name="n1", cpu="50m", limit_cpu="100m", daemon=True))
    state.apply("Pod", "ADDED", pod("done", node_name="n1", phase="Succeeded", cpu="4"))
    samples = scrape(metrics)

    (labels, cpu) = series(samples, "karpenter_nodes_allocatable", resource_type="cpu")[0]
    assert set(labels) == set(NODE_RESOURCE_LABELS)
    assert labels["node_name"] == "n1" and labels["managed"] == "true" and labels["phase"] == ""
    assert labels["nodepool"] == "default" and labels["zone"] == "us-west-2a" and labels["zone_id"] == "usw2-az1"
    assert labels["instance_type"] == "m5.large" and labels["capacity_type"] == "spot" and labels["instance_cpu"] == "2"
    assert labels["region"] == "" and labels["instance_gpu_name"] == ""
    assert cpu == 1.93
    assert value(samples, "karpenter_nodes_allocatable", resource_type="memory") == 7 * 2**30
    assert value(samples, "karpenter_nodes_total_pod_requests", resource_type="cpu") == 0.3
    assert value(samples, "karpenter_nodes_total_pod_requests", resource_type="pods") == 2
    assert value(samples, "karpenter_nodes_total_pod_limits", resource_type="cpu") == 0.6
    assert value(samples, "karpenter_nodes_total_daemon_requests", resource_type="cpu") == 0.05
    assert value(samples, "karpenter_nodes_total_daemon_limits", resource_type="cpu") == 0.1
    assert value(samples, "karpenter_nodes_system_overhead", resource_type="cpu") == 0.07
    assert value(samples, "karpenter_nodes_system_overhead", resource_type="memory") == 2**30
    (lt_labels, lifetime) = samples["karpenter_nodes_current_lifetime_seconds"][0]
    assert set(lt_labels) == set(NODE_LABELS) and lifetime == NOW - CREATED_TS
    assert value(samples, "karpenter_cluster_utilization_percent", resource_type="cpu") == 100 * 300 / 1930


def test_unmanaged_node_and_deleted_node_leave_no_series() -> None:
    """A Node no NodeClaim launched is managed="false"; once deleted it has no series at all."""
    state, metrics = build()
    state.apply("Node", "ADDED", node("n1"))
    state.apply("Node", "ADDED", node("n2", pid="aws:///us-west-2a/i-other"))
    samples = scrape(metrics)
    assert value(samples, "karpenter_nodes_allocatable", node_name="n2", resource_type="cpu") == 1.93
    assert series(samples, "karpenter_nodes_allocatable", node_name="n2", managed="false")
    state.apply("Node", "DELETED", node("n2", pid="aws:///us-west-2a/i-other"))
    samples = scrape(metrics)
    for name, found in samples.items():
        assert not [labels for labels, _ in found if labels.get("node_name") == "n2"], name
    assert series(samples, "karpenter_nodes_allocatable", node_name="n1")


def test_pod_state_labels_and_deleted_pod_series_gone() -> None:
    """karpenter_pods_state: one series per pod with Karpenter's labels (owner self link, node facts from the
    Node's labels); a deleted pod's series are gone."""
    state, metrics = build()
    state.apply("Node", "ADDED", node())
    state.apply("Pod", "ADDED", pod("web", node_name="n1"))
    state.apply("Pod", "ADDED", pod("pending", phase="Pending", ready=False, unschedulable=True))
    samples = scrape(metrics)
    assert all(set(labels) == set(POD_LABELS) for labels, _ in samples["karpenter_pods_state"])
    web = series(samples, "karpenter_pods_state", name="web")[0]
    assert web == (
        {
            "name": "web",
            "namespace": "d",
            "owner": "/apis/apps/v1/namespaces/d/replicasets/web-1",
            "node": "n1",
            "scheduled": "true",
            "nodepool": "default",
            "zone": "us-west-2a",
            "arch": "amd64",
            "capacity_type": "spot",
            "instance_type": "m5.large",
            "phase": "Running",
            "ready": "true",
            "managed": "true",
        },
        1.0,
    )
    pending = series(samples, "karpenter_pods_state", name="pending")[0][0]
    assert pending["scheduled"] == "false" and pending["node"] == "" and pending["managed"] == "false"
    assert pending["phase"] == "Pending" and pending["ready"] == "false"
    state.apply("Pod", "DELETED", pod("pending", phase="Pending", ready=False, unschedulable=True))
    samples = scrape(metrics)
    for name, found in samples.items():
        assert not [labels for labels, _ in found if labels.get("name") == "pending"], name


def test_pod_time_gauges_follow_ack_decision_and_binding() -> None:
    """unstarted/unbound from creation; the scheduling-undecided gauge from when karpy first saw the pod
    provisionable until a decision; the provisioning_* gauges from the decision (schedulable) on."""
    clock = [NOW]
    state = ClusterState(clock=lambda: clock[0])
    metrics = StateMetrics(state, clock=lambda: clock[0])
    metrics.follow()
    state.apply("Pod", "ADDED", pod("p", phase="Pending", ready=False, unschedulable=True))
    clock[0] = NOW + 30
    samples = scrape(metrics)
    assert value(samples, "karpenter_pods_unstarted_time_seconds", name="p", namespace="d") == NOW + 30 - CREATED_TS
    assert series(samples, "karpenter_pods_unbound_time_seconds", name="p", dynamic_resources="false")
    assert value(samples, "karpenter_pods_provisioning_scheduling_undecided_time_seconds", name="p") == 30
    assert not samples["karpenter_pods_provisioning_unbound_time_seconds"]

    metrics.times.decided("d/p", schedulable=True)
    clock[0] = NOW + 45
    samples = scrape(metrics)
    assert not samples["karpenter_pods_provisioning_scheduling_undecided_time_seconds"]
    assert value(samples, "karpenter_pods_provisioning_unbound_time_seconds", name="p") == 15
    assert value(samples, "karpenter_pods_provisioning_unstarted_time_seconds", name="p") == 15

    state.apply("Node", "ADDED", node())
    bound = pod("p", node_name="n1", ready=True)
    bound["metadata"]["resourceVersion"] = "2"
    state.apply("Pod", "MODIFIED", bound)
    samples = scrape(metrics)
    for name in (
        "karpenter_pods_unstarted_time_seconds",
        "karpenter_pods_unbound_time_seconds",
        "karpenter_pods_provisioning_unbound_time_seconds",
        "karpenter_pods_provisioning_unstarted_time_seconds",
    ):
        assert not samples[name], name
    state.apply("Pod", "DELETED", bound)
    assert "d/p" not in metrics.times.success and "d/p" not in metrics.times.ack


async def test_nodepool_usage_limit_cost_and_instance_types() -> None:
    """usage from status.resources and limit from spec.limits (cpu in cores); cost = Σ offering price of the
    pool's NodeClaims; the instance-type gauges from the resolved offerings."""
    cloud = FakeCloud([instance_type("m5.large", 0.04, available=False), instance_type("c5.large", 0.03)])
    state, metrics = build(cloud=cloud)
    state.apply("EC2NodeClass", "ADDED", nodeclass())
    state.apply("NodePool", "ADDED", nodepool())
    state.apply("NodeClaim", "ADDED", nodeclaim("nc1"))
    state.apply("NodeClaim", "ADDED", nodeclaim("nc2", itype="c5.large"))
    state.apply("NodeClaim", "ADDED", nodeclaim("nc3", itype="c5.large", zone="us-west-2b"))  # spot not offered there
    await metrics.refresh()
    samples = scrape(metrics)
    assert value(samples, "karpenter_nodepools_usage", nodepool="default", resource_type="cpu") == 4
    assert value(samples, "karpenter_nodepools_usage", nodepool="default", resource_type="memory") == 16 * 2**30
    assert value(samples, "karpenter_nodepools_usage", nodepool="default", resource_type="nodes") == 2
    assert value(samples, "karpenter_nodepools_limit", nodepool="default", resource_type="cpu") == 100
    assert all(set(labels) == {"resource_type", "nodepool"} for labels, _ in samples["karpenter_nodepools_usage"])
    assert value(samples, "karpenter_nodepools_cost_total", nodepool="default") == 0.04 + 0.03
    avail = "karpenter_cloudprovider_instance_type_offering_available"
    assert value(samples, avail, instance_type="m5.large", capacity_type="spot", zone="us-west-2a") == 0
    assert value(samples, avail, instance_type="c5.large", capacity_type="spot", zone="us-west-2a") == 1
    price = "karpenter_cloudprovider_instance_type_offering_price_estimate"
    assert value(samples, price, instance_type="c5.large", capacity_type="on-demand", zone="us-west-2b") == 0.09
    assert value(samples, "karpenter_cloudprovider_instance_type_cpu_cores", instance_type="m5.large") == 2
    assert value(samples, "karpenter_cloudprovider_instance_type_memory_bytes", instance_type="m5.large") == 8 * 2**30

    state.apply("NodeClaim", "DELETED", nodeclaim("nc1"))
    samples = scrape(metrics)
    assert value(samples, "karpenter_nodepools_cost_total", nodepool="default") == 0.03


async def test_cost_tracker_errors_count_each_nodeclaim_once() -> None:
    """A NodeClaim whose NodePool's instance types cannot be resolved is one cost-tracking error, not one per
    refresh."""
    state, metrics = build(cloud=FakeCloud([], fail=True))
    state.apply("EC2NodeClass", "ADDED", nodeclass())
    state.apply("NodePool", "ADDED", nodepool("broken"))
    before = COST_TRACKER_ERRORS.labels(nodepool="broken")._value.get()
    state.apply("NodeClaim", "ADDED", nodeclaim("nc1", pool="broken"))
    await metrics.refresh()
    await metrics.refresh()
    assert COST_TRACKER_ERRORS.labels(nodepool="broken")._value.get() == before + 1
    assert value(scrape(metrics), "karpenter_nodepools_cost_total", nodepool="broken") == 0


def test_renders_nothing_while_not_leading() -> None:
    """A standby serves none of these families (Karpenter runs these controllers on the leader only)."""
    leading = [False]
    state, metrics = build(leading=lambda: leading[0])
    state.apply("Node", "ADDED", node())
    assert scrape(metrics) == {}
    leading[0] = True
    assert scrape(metrics)["karpenter_nodes_allocatable"]
