"""Karpenter v1.15's termination metrics from karpy's terminator and NodeClaim lifecycle, against the in-memory
apiserver: evictions by response code, pods drained by the NodeClaim's disruption reason, nodes drained once,
NodeClaim/instance/Node termination durations, Nodes created at registration, and the liveness and launch
failures counted as ``karpenter_nodeclaims_disrupted_total`` with Karpenter's reasons."""

from __future__ import annotations

from karpy import __version__
from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import InsufficientCapacityError
from karpy.controllers.terminator import Terminator
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.state.cluster import ClusterState
from tests.unit.disruption_builders import (
    T0,
    cloud_instance,
    loaded_state,
    node,
    nodeclaim,
    nodeclass,
    nodepool,
    pdb,
    ts,
)
from tests.unit.disruption_builders import pod as make_pod
from tests.unit.metrics_helpers import Delta, sample, series
from tests.unit.test_launch_backoff import lifecycle_setup
from tests.unit.test_lifecycle_hold import NOW, lifecycle
from tests.unit.test_terminator_tgp import apiserver, gone_cloud


def _condition(type_: str, reason: str, at: float) -> dict[str, str]:
    return {"type": type_, "status": "True", "reason": reason, "lastTransitionTime": ts(at)}


async def test_evictions_are_counted_by_code_and_drained_pods_by_the_disruption_reason() -> None:
    pool = nodepool("t-evict")
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    claim["status"]["conditions"].append(_condition(wk.COND_DISRUPTION_REASON, "Drifted", T0))
    objs = [
        nodeclass(),
        pool,
        claim,
        node(claim),
        make_pod("plain", "node-a"),
        make_pod("guarded", "node-a", owner="g"),
    ]
    state = loaded_state(objs)
    kube = apiserver([*objs, pdb("g", {"app": "g"}, allowed=0)], state, lambda: T0)
    cloud = FakeCloudProvider()
    cloud.add_instance(cloud_instance(claim))
    term = Terminator(kube, state, cloud, EventRecorder(kube), clock=lambda: T0)
    with Delta(
        ("karpenter_pods_eviction_requests_total", {"code": "200"}),
        ("karpenter_pods_eviction_requests_total", {"code": "429"}),
        ("karpenter_pods_drained_total", {"reason": "Drifted"}),
        ("karpenter_pods_drained_total", {"reason": "Forceful Termination"}),
        ("karpenter_nodes_drained_total", {"nodepool": "t-evict"}),
    ) as delta:
        assert (await term.reconcile("a")).requeue_after is not None
    assert delta() == [1, 1, 1, 0, 0], "the PDB refused one eviction (429): the node is not drained yet"


async def test_a_finished_termination_observes_its_durations_and_counts_the_node_drained_once() -> None:
    pool = nodepool("t-done")
    claim = nodeclaim("a", pool, created=T0 - 7200)
    claim["metadata"]["deletionTimestamp"] = ts(T0 - 100)
    claim["status"]["conditions"].append(_condition(wk.COND_INSTANCE_TERMINATING, "InstanceTerminating", T0 - 30))
    objs = [nodeclass(), pool, claim, node(claim)]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    term = Terminator(kube, state, gone_cloud(), EventRecorder(kube), clock=lambda: T0)
    by_pool = {"nodepool": "t-done"}
    with Delta(
        ("karpenter_nodes_drained_total", by_pool),
        ("karpenter_nodeclaims_instance_termination_duration_seconds_count", by_pool),
        ("karpenter_nodeclaims_instance_termination_duration_seconds_sum", by_pool),
        ("karpenter_nodeclaims_termination_duration_seconds_sum", by_pool),
        ("karpenter_nodeclaims_terminated_total", {**by_pool, "capacity_type": "on-demand", "zone": "us-east-1a"}),
        ("karpenter_nodes_terminated_total", {**by_pool, "zone": "us-east-1a"}),
        ("karpenter_nodes_termination_duration_seconds_sum", by_pool),
        ("karpenter_nodes_lifetime_duration_seconds_sum", by_pool),
    ) as delta:
        for _ in range(4):
            await term.reconcile("a")
        assert kube.object(NODECLAIMS, "a") is None
    assert delta() == [1, 1, 30, 100, 1, 1, 100, 7200]


async def test_launch_and_liveness_deletions_count_disrupted_with_karpenters_reasons() -> None:
    lifecycle, _, _, _ = lifecycle_setup(InsufficientCapacityError("no capacity"))
    ice = {
        "reason": "insufficient_capacity",
        "nodepool": "np",
        "capacity_type": "",
        "consolidation_policy": "",
        "termination_mode": "graceful",
    }
    timeout = dict(ice, reason="launch_timeout")
    with Delta(("karpenter_nodeclaims_disrupted_total", ice), ("karpenter_nodeclaims_disrupted_total", timeout)) as d:
        await lifecycle.reconcile("np-1")
        late, _, _, _ = lifecycle_setup(None)
        late.clock = lambda: T0 * 2  # long past the launch TTL
        await late.reconcile("np-1")
    assert d() == [1, 1]


def test_build_info_is_one_with_karpenters_labels() -> None:
    [(labels, value)] = series("karpenter_build_info")
    assert value == 1
    assert set(labels) == {"version", "goversion", "goarch", "commit"}
    assert labels["version"] == __version__ and labels["goarch"] in ("amd64", "arm64")
    assert sample("karpenter_build_info", **labels) == 1


async def test_a_registration_counts_a_node_created_in_its_nodepool_and_zone() -> None:
    claim = {
        "metadata": {
            "name": "reg",
            "resourceVersion": "1",
            "labels": {wk.LABEL_NODEPOOL: "t-reg", wk.LABEL_ZONE: "us-east-1b"},
        },
        "status": {
            "providerID": "aws:///us-east-1b/i-reg",
            "conditions": [{"type": wk.COND_LAUNCHED, "status": "True", "lastTransitionTime": ts(NOW - 60)}],
        },
    }
    registering = {
        "metadata": {"name": "n-reg", "resourceVersion": "1", "creationTimestamp": ts(NOW - 3600)},
        "spec": {"providerID": "aws:///us-east-1b/i-reg"},
    }
    state = ClusterState()
    state.apply("NodeClaim", "ADDED", claim)
    state.apply("Node", "ADDED", registering)
    kube = FakeKube()
    kube.seed(claim, resource=NODECLAIMS)
    kube.seed(registering, resource=NODES)
    with Delta(
        ("karpenter_nodes_created_total", {"nodepool": "t-reg", "zone": "us-east-1b"}),
    ) as delta:
        await lifecycle(state, kube=kube).reconcile("reg")
        assert (state.nodeclaims["reg"]["status"].get("conditions") or [])[-1]["type"] == wk.COND_REGISTERED
    assert delta() == [1]
