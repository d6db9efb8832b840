"""Karpenter v1.15's interruption, garbage-collection, cluster-state and scheduler metrics, and the label-value
mappings karpy's call sites share (reasons, consolidation types and policies, termination modes, effective zones)."""

from __future__ import annotations

import pytest

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.fake import FakeCloudProvider, FakeInterruptionQueue
from karpy.controllers.garbagecollection import GarbageCollection
from karpy.kube.fake import FakeKube
from karpy.scheduling import model
from karpy.state.cluster import ClusterState
from tests.unit.metrics_helpers import Delta, sample, series
from tests.unit.test_interruption_gc import CLUSTER, NOW, claim, controller, instance, queued, spot


def _labels(name: str) -> list[dict[str, str]]:
    return [labels for labels, _ in series(name)]


async def test_an_interruption_counts_received_by_type_deleted_without_labels_and_the_disrupted_nodeclaim() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, _, _ = controller(kube, queue, claim("a", "i-aaa"))
    gone = {
        "reason": "spot_interrupted",
        "nodepool": "pool",
        "capacity_type": "spot",
        "consolidation_policy": "",
        "termination_mode": "graceful",
    }
    with Delta(
        ("karpenter_interruption_received_messages_total", {"message_type": "spot_interrupted"}),
        ("karpenter_interruption_deleted_messages_total", {}),
        ("karpenter_nodeclaims_disrupted_total", gone),
        ("karpenter_interruption_message_queue_duration_seconds_count", {}),
    ) as delta:
        assert await ctl.handle(queued(spot("i-aaa"))) is True
    assert delta() == [1, 1, 1, 1]
    assert _labels("karpenter_interruption_deleted_messages_total") == [{}], "no labels, as Karpenter's"
    buckets = {d["le"] for d in _labels("karpenter_interruption_message_queue_duration_seconds_bucket")}
    assert {"0.005", "600.0", "+Inf"} <= buckets, "Karpenter's DurationBuckets"


async def test_garbage_collection_counts_the_orphan_as_garbage_collected() -> None:
    orphan = claim("orphan", "i-orphan")
    state = ClusterState()
    state.apply("NodeClaim", "ADDED", orphan)
    cloud = metrics_cloud()
    gc = GarbageCollection(FakeKube([orphan]), state, cloud, cluster_name=CLUSTER, now=lambda: NOW)
    gone = {
        "reason": "garbage_collected",
        "nodepool": "pool",
        "capacity_type": "spot",
        "consolidation_policy": "",
        "termination_mode": "graceful",
    }
    with Delta(("karpenter_nodeclaims_disrupted_total", gone)) as delta:
        collected = await gc.collect_once()
        assert collected["nodeclaims"] == ["orphan"]
    assert delta() == [1]


def metrics_cloud() -> FakeCloudProvider:
    cloud = FakeCloudProvider(cluster_name=CLUSTER)
    cloud.add_instance(instance("i-other", nodepool=False))
    return cloud


def test_cluster_state_unsynced_time_counts_from_the_first_unsynced_observation_and_resets_when_synced() -> None:
    observer = metrics.ClusterStateObserver()
    observer.observe(True, 3, 100.0)
    assert sample("karpenter_cluster_state_synced") == 1 and sample("karpenter_cluster_state_node_count") == 3
    assert sample("karpenter_cluster_state_unsynced_time_seconds") == 0
    observer.observe(False, 4, 110.0)
    observer.observe(False, 4, 125.0)
    assert sample("karpenter_cluster_state_synced") == 0
    assert sample("karpenter_cluster_state_unsynced_time_seconds") == 15
    observer.observe(True, 4, 130.0)
    assert sample("karpenter_cluster_state_unsynced_time_seconds") == 0


def test_a_scheduling_run_keeps_one_queue_depth_series_per_controller_and_no_unfinished_work_after_it() -> None:
    with Delta(("karpenter_scheduler_scheduling_duration_seconds_count", {"controller": "test-ctl"})) as delta:
        with metrics.scheduling("test-ctl", 5) as first:
            running = [
                d for d in _labels("karpenter_scheduler_unfinished_work_seconds") if d["controller"] == "test-ctl"
            ]
            assert running == [{"controller": "test-ctl", "scheduling_id": first.id}]
            assert sample("karpenter_scheduler_queue_depth", controller="test-ctl", scheduling_id=first.id) == 5
            first.left = 2
        with metrics.scheduling("test-ctl", 3) as second:
            second.left = 0
    assert delta() == [2]
    depths = [d for d in _labels("karpenter_scheduler_queue_depth") if d["controller"] == "test-ctl"]
    assert depths == [{"controller": "test-ctl", "scheduling_id": second.id}]
    assert sample("karpenter_scheduler_queue_depth", controller="test-ctl", scheduling_id=second.id) == 0
    assert not [d for d in _labels("karpenter_scheduler_unfinished_work_seconds") if d["controller"] == "test-ctl"]


def _req(*zones: str) -> model.Requirement:
    return model.Requirement(wk.LABEL_ZONE, "In", zones)


@pytest.mark.parametrize(
    ("selector", "terms", "volumes", "want"),
    [
        ({}, (), (), "flexible"),
        ({wk.LABEL_ZONE: "a"}, (), (), "a"),
        ({}, ((_req("a", "b"),),), (), "flexible"),
        ({}, ((_req("a", "b"),),), ((_req("b"),),), "b"),
        ({wk.LABEL_ZONE: "a"}, (), ((_req("b"),),), "none"),
        ({}, ((_req("a"),), (model.Requirement("x", "Exists"),)), (), "flexible"),
    ],
)
def test_effective_zone(selector: dict[str, str], terms: tuple, volumes: tuple, want: str) -> None:  # type: ignore[type-arg]
    pod = model.Pod(
        uid="u", namespace="d", name="p", node_selector=selector, required_terms=terms, volume_terms=volumes
    )
    assert metrics.effective_zone(pod) == want


def test_pending_pods_by_zone_drops_zones_of_the_previous_pass() -> None:
    a = model.Pod(uid="1", namespace="d", name="a", node_selector={wk.LABEL_ZONE: "za"})
    b = model.Pod(uid="2", namespace="d", name="b")
    metrics.pending_pods_by_zone("zone-ctl", [a, a, b])
    assert sample("karpenter_scheduler_pending_pods_by_effective_zone_count", controller="zone-ctl", zone="za") == 2
    metrics.pending_pods_by_zone("zone-ctl", [b])
    zones = {
        d["zone"]
        for d in _labels("karpenter_scheduler_pending_pods_by_effective_zone_count")
        if d["controller"] == "zone-ctl"
    }
    assert zones == {"flexible"}


@pytest.mark.parametrize(
    ("tgp", "mode"), [("", "graceful"), ("0s", "forceful"), ("1h", "eventual"), ("-1s", "forceful")]
)
def test_termination_mode(tgp: str, mode: str) -> None:
    spec = {"terminationGracePeriod": tgp} if tgp else {}
    view = NodeClaim.from_json({"metadata": {"name": "x"}, "spec": spec})
    assert metrics.termination_mode(view) == mode


def test_label_value_mappings() -> None:
    assert [metrics.consolidation_type(m) for m in ("emptiness", "single-node", "multi-node", "drift")] == [
        "empty",
        "single",
        "multi",
        "",
    ]
    assert [metrics.consolidation_policy(p) for p in ("WhenEmptyOrUnderutilized", "WhenEmpty", "Balanced", "")] == [
        "when_empty_or_underutilized",
        "when_empty",
        "balanced",
        "",
    ]
    assert [metrics.disruption_reason(r) for r in ("Empty", "Underutilized", "Drifted")] == [
        "empty",
        "underutilized",
        "drifted",
    ]


def test_pod_latencies_observe_bound_and_started_pods_from_creation_and_from_schedulable() -> None:
    """A pod created at 1000 s, seen pending and unbound, found schedulable at 1010 s, bound at 1030 s, running at
    1040 s, ready at 1050 s: bound 30 s (provisioning 20 s) and startup 50 s (provisioning 40 s). A pod already running
    when first seen observes nothing, and the series label ``dynamic_resources`` is "false" without resource claims."""
    from karpy.state.cluster import ClusterState
    from tests.unit.disruption_builders import pod, ts

    now = [1000.0]
    latencies = metrics.PodLatencies(clock=lambda: now[0])
    state = ClusterState(clock=lambda: now[0])
    state.subscribe(latencies.on_change)
    pending = pod("lat")
    pending["metadata"]["creationTimestamp"] = ts(1000.0)
    running_already = pod("old", "node-x")
    with Delta(
        ("karpenter_pods_bound_duration_seconds_sum", {"dynamic_resources": "false"}),
        ("karpenter_pods_provisioning_bound_duration_seconds_sum", {"dynamic_resources": "false"}),
        ("karpenter_pods_startup_duration_seconds_sum", {}),
        ("karpenter_pods_provisioning_startup_duration_seconds_sum", {}),
        ("karpenter_pods_startup_duration_seconds_count", {}),
    ) as delta:
        state.apply("Pod", "ADDED", running_already)
        state.apply("Pod", "ADDED", pending)
        now[0] = 1010.0
        latencies.schedulable("default/lat", now[0])
        now[0] = 1030.0
        bound = {
            **pending,
            "spec": {**pending["spec"], "nodeName": "node-a"},
            "metadata": {**pending["metadata"], "resourceVersion": "900001"},
        }
        state.apply("Pod", "MODIFIED", bound)
        now[0] = 1040.0
        running = {
            **bound,
            "status": {"phase": "Running"},
            "metadata": {**bound["metadata"], "resourceVersion": "900002"},
        }
        state.apply("Pod", "MODIFIED", running)  # running but not ready: not started yet (Karpenter waits for Ready)
        now[0] = 1050.0
        started = {
            **running,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            "metadata": {**running["metadata"], "resourceVersion": "900005"},
        }
        state.apply("Pod", "MODIFIED", started)
        state.apply("Pod", "MODIFIED", {**started, "metadata": {**started["metadata"], "resourceVersion": "900003"}})
    assert delta() == [30.0, 20.0, 50.0, 40.0, 1.0]


def test_pod_latencies_observe_nothing_on_a_standby() -> None:
    from karpy.state.cluster import ClusterState
    from tests.unit.disruption_builders import pod

    latencies = metrics.PodLatencies(clock=lambda: 5.0, active=lambda: False)
    state = ClusterState(clock=lambda: 5.0)
    state.subscribe(latencies.on_change)
    pending = pod("standby-pod")
    with Delta(("karpenter_pods_startup_duration_seconds_count", {})) as delta:
        state.apply("Pod", "ADDED", pending)
        running = {
            **pending,
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
            "metadata": {**pending["metadata"], "resourceVersion": "900004"},
        }
        state.apply("Pod", "MODIFIED", running)
    assert delta() == [0.0]
