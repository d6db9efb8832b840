"""karpy.controllers.status_conditions: operatorpkg's status controller (``status/controller.go``,
``status/metrics.go``) as Karpenter v1.15 configures it — transitions counted once, Karpenter's event messages,
Finalized events, termination metrics, gauges leak-free, leader gating."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.controllers.status_conditions import SPECS, StatusConditions, transition_message
from karpy.state.cluster import ClusterState

NOW = 1_700_000_000.0
CREATED = "2023-11-14T22:00:00Z"
CREATED_TS = 1_699_999_200.0
LAUNCHED = "2023-11-14T22:00:30Z"  # CREATED + 30 s
REGISTERED = "2023-11-14T22:01:00Z"  # CREATED + 60 s
NC_LABELS = {"karpenter_k8s_aws_ec2nodeclass": "default", "karpenter_sh_nodepool": "pool-a"}


class Recorder:
    """Stands in for karpy.kube.events.EventRecorder: records (involved object, type, reason, message)."""

    def __init__(self) -> None:
        self.events: list[tuple[Mapping[str, Any], str, str, str]] = []

    def publish(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append((obj, event_type, reason, message))

    def reasons(self) -> list[tuple[str, str, str]]:
        return [(obj["metadata"]["name"], reason, message) for obj, _, reason, message in self.events]


def nodeclaim(rv: int, conditions: list[dict[str, Any]], *, finalizers: bool = True, deleting: str = "") -> dict:
    meta: dict[str, Any] = {
        "name": "nc-1",
        "uid": "uid-nc-1",
        "resourceVersion": str(rv),
        "creationTimestamp": CREATED,
        "labels": {wk.LABEL_NODEPOOL: "pool-a", wk.LABEL_EC2NODECLASS: "default"},
        "finalizers": [wk.FINALIZER_TERMINATION] if finalizers else [],
    }
    if deleting:
        meta["deletionTimestamp"] = deleting
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": meta,
        "status": {"conditions": conditions},
    }


def cond(type_: str, status: str, reason: str, at: str, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def node(rv: int, ready: str, *, initialized: bool = False) -> dict[str, Any]:
    labels = {wk.LABEL_NODEPOOL: "pool-a", wk.LABEL_EC2NODECLASS: "default"}
    if initialized:
        labels[wk.LABEL_INITIALIZED] = "true"
    return {
        "metadata": {
            "name": "n-1",
            "uid": "uid-n-1",
            "resourceVersion": str(rv),
            "creationTimestamp": CREATED,
            "labels": labels,
            "finalizers": [wk.FINALIZER_TERMINATION],
        },
        "spec": {"providerID": "aws:///us-west-2a/i-1"},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": ready,
                    "reason": "KubeletReady" if ready == "True" else "KubeletNotReady",
                    "message": "kubelet is posting ready status" if ready == "True" else "",
                    "lastTransitionTime": REGISTERED if ready == "True" else CREATED,
                    "lastHeartbeatTime": REGISTERED,
                }
            ]
        },
    }


def sample(name: str, labels: Mapping[str, str]) -> float:
    return REGISTRY.get_sample_value(name, dict(labels)) or 0.0


@pytest.fixture
async def harness() -> AsyncIterator[tuple[ClusterState, StatusConditions, Recorder, list[bool]]]:
    """Cluster state feeding a StatusConditions whose writer task runs; ``leading[0]`` flips leadership."""
    leading = [True]
    recorder = Recorder()
    state = ClusterState(clock=lambda: NOW)
    controller = StatusConditions(recorder, leading=lambda: leading[0], clock=lambda: NOW)  # type: ignore[arg-type]
    state.subscribe(controller.observe)
    task = asyncio.create_task(controller.run())
    await asyncio.sleep(0)
    try:
        yield state, controller, recorder, leading
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def drained(controller: StatusConditions) -> None:
    """Let the writer task publish everything queued so far."""
    for _ in range(5):
        await asyncio.sleep(0)
    assert controller._queue is not None and controller._queue.qsize() == 0


def gauges(controller: StatusConditions) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in controller.collect():
        out.setdefault(family.name, []).extend((dict(s.labels), s.value) for s in family.samples)
    return out


def test_message_format_is_operatorpkgs() -> None:
    from karpy.apis.conditions import Condition

    assert (
        transition_message("Launched", "Unknown", Condition("Launched", "True", "Launched"))
        == "Status condition transitioned, Type: Launched, Status: Unknown -> True, Reason: Launched"
    )
    assert (
        transition_message("Ready", "False", Condition("Ready", "True", "KubeletReady", "kubelet is posting"))
        == "Status condition transitioned, Type: Ready, Status: False -> True, Reason: KubeletReady, "
        "Message: kubelet is posting"
    )


def test_metric_label_sets_are_karpenters() -> None:
    """Extra labels: NodeClaim ec2nodeclass + nodepool, Node those + initialized; deprecated families for all but
    Node."""
    assert SPECS["NodeClaim"].metric_labels == ("karpenter_k8s_aws_ec2nodeclass", "karpenter_sh_nodepool")
    assert SPECS["Node"].metric_labels == (
        "karpenter_k8s_aws_ec2nodeclass",
        "karpenter_sh_nodepool",
        "karpenter_sh_initialized",
    )
    assert SPECS["NodePool"].metric_labels == () and SPECS["EC2NodeClass"].metric_labels == ()
    assert [k for k, s in SPECS.items() if not s.deprecated] == ["Node"]


async def test_nodeclaim_transitions_counted_once_with_events(harness: Any) -> None:
    """Launched=True then Registered=True: each is one transition Unknown -> True, one event with Karpenter's
    message, one transition_seconds observation (since creation); the watch echo of the same write counts nothing."""
    state, controller, recorder, _ = harness
    base = {"type": "Launched", "status": "True", "reason": "Launched", **NC_LABELS}
    before = sample("operator_nodeclaim_status_condition_transitions_total", base)
    deprecated = {"type": "Launched", "status": "True", "reason": "Launched", "group": wk.GROUP, "kind": "NodeClaim"}
    before_deprecated = sample("operator_status_condition_transitions_total", deprecated)
    seconds = {"type": "Launched", "status": "Unknown", "to_status": "True", **NC_LABELS}
    before_sum = sample("operator_nodeclaim_status_condition_transition_seconds_sum", seconds)
    before_le = sample("operator_nodeclaim_status_condition_transition_seconds_bucket", {**seconds, "le": "32.0"})

    state.apply("NodeClaim", "ADDED", nodeclaim(1, []))
    await drained(controller)
    assert recorder.events == []
    launched = nodeclaim(2, [cond("Launched", "True", "Launched", LAUNCHED)])
    state.apply("NodeClaim", "MODIFIED", launched)
    state.apply("NodeClaim", "MODIFIED", launched)  # the watch echo of karpy's own write
    await drained(controller)
    assert recorder.reasons() == [
        ("nc-1", "Launched", "Status condition transitioned, Type: Launched, Status: Unknown -> True, Reason: Launched")
    ]
    obj, event_type, _, _ = recorder.events[0]
    assert event_type == "Normal" and obj["kind"] == "NodeClaim" and obj["apiVersion"] == "karpenter.sh/v1"
    assert sample("operator_nodeclaim_status_condition_transitions_total", base) == before + 1
    assert sample("operator_status_condition_transitions_total", deprecated) == before_deprecated + 1
    assert sample("operator_nodeclaim_status_condition_transition_seconds_sum", seconds) == before_sum + 30
    assert sample("operator_nodeclaim_status_condition_transition_seconds_bucket", {**seconds, "le": "32.0"}) == (
        before_le + 1
    )

    state.apply(
        "NodeClaim",
        "MODIFIED",
        nodeclaim(
            3, [cond("Launched", "True", "Launched", LAUNCHED), cond("Registered", "True", "Registered", REGISTERED)]
        ),
    )
    await drained(controller)
    assert [reason for _, reason, _ in recorder.reasons()] == ["Launched", "Registered"]
    assert recorder.reasons()[1][2] == (
        "Status condition transitioned, Type: Registered, Status: Unknown -> True, Reason: Registered"
    )


async def test_count_gauges_render_current_conditions_and_vanish_on_delete(harness: Any) -> None:
    """count = 1 per condition (the known ones not written yet read Unknown/AwaitingReconciliation),
    current_status_seconds since lastTransitionTime; a deleted NodeClaim has no series."""
    state, controller, _, _ = harness
    state.apply("NodeClaim", "ADDED", nodeclaim(1, [cond("Launched", "True", "Launched", LAUNCHED)]))
    found = gauges(controller)
    counts = {
        (labels["type"], labels["status"], labels["reason"])
        for labels, _ in found["operator_nodeclaim_status_condition_count"]
    }
    assert counts == {
        ("Launched", "True", "Launched"),
        ("Registered", "Unknown", "AwaitingReconciliation"),
        ("Initialized", "Unknown", "AwaitingReconciliation"),
        ("Ready", "Unknown", "AwaitingReconciliation"),
    }
    labels, value = next(
        (labels, value)
        for labels, value in found["operator_nodeclaim_status_condition_current_status_seconds"]
        if labels["type"] == "Launched"
    )
    assert labels == {
        "namespace": "",
        "name": "nc-1",
        "type": "Launched",
        "status": "True",
        "reason": "Launched",
        **NC_LABELS,
    }
    assert value == NOW - (CREATED_TS + 30)
    deprecated = found["operator_status_condition_count"]
    assert {"group": wk.GROUP, "kind": "NodeClaim"}.items() <= deprecated[0][0].items()
    assert "karpenter_sh_nodepool" not in deprecated[0][0]
    state.apply("NodeClaim", "DELETED", nodeclaim(2, [], finalizers=False))
    assert all(not samples for samples in gauges(controller).values())


async def test_finalized_events_and_termination_metrics(harness: Any) -> None:
    """While terminating: termination_current_time_seconds; the finalizer removed (the object then gone):
    ``Finalized karpenter.sh/termination`` and one termination_duration_seconds observation."""
    state, controller, recorder, _ = harness
    deleting_since = "2023-11-14T22:13:00Z"  # NOW - 20 s
    before = sample("operator_nodeclaim_termination_duration_seconds_count", NC_LABELS)
    before_deprecated = sample("operator_termination_duration_seconds_count", {"group": wk.GROUP, "kind": "NodeClaim"})
    state.apply("NodeClaim", "ADDED", nodeclaim(1, []))
    state.apply("NodeClaim", "MODIFIED", nodeclaim(2, [], deleting=deleting_since))
    terminating = gauges(controller)["operator_nodeclaim_termination_current_time_seconds"]
    assert terminating == [({"namespace": "", "name": "nc-1", **NC_LABELS}, 20.0)]
    # The answer of the write removing the finalizer: cluster state applies it as the deletion.
    state.apply("NodeClaim", "MODIFIED", nodeclaim(3, [], finalizers=False, deleting=deleting_since))
    await drained(controller)
    assert recorder.reasons() == [("nc-1", "Finalized", "Finalized karpenter.sh/termination")]
    assert sample("operator_nodeclaim_termination_duration_seconds_count", NC_LABELS) == before + 1
    assert sample("operator_nodeclaim_termination_duration_seconds_sum", NC_LABELS) >= 20
    assert (
        sample("operator_termination_duration_seconds_count", {"group": wk.GROUP, "kind": "NodeClaim"})
        == before_deprecated + 1
    )
    assert not gauges(controller)["operator_nodeclaim_termination_current_time_seconds"]


async def test_node_conditions_from_the_kubelet(harness: Any) -> None:
    """A Node's Ready False -> True: the Ready event with the kubelet's reason and message, counted with the
    Node's extra labels (initialized included); no deprecated series for Nodes."""
    state, controller, recorder, _ = harness
    labels = {"type": "Ready", "status": "True", "reason": "KubeletReady", **NC_LABELS, "karpenter_sh_initialized": ""}
    before = sample("operator_node_status_condition_transitions_total", labels)
    state.apply("Node", "ADDED", node(1, "False"))
    state.apply("Node", "MODIFIED", node(2, "True"))
    await drained(controller)
    assert recorder.reasons() == [
        (
            "n-1",
            "Ready",
            "Status condition transitioned, Type: Ready, Status: False -> True, Reason: KubeletReady, "
            "Message: kubelet is posting ready status",
        )
    ]
    assert recorder.events[0][0]["kind"] == "Node" and recorder.events[0][0]["apiVersion"] == "v1"
    assert sample("operator_node_status_condition_transitions_total", labels) == before + 1
    state.apply("Node", "MODIFIED", node(3, "True", initialized=True))
    found = gauges(controller)
    (node_labels, _) = found["operator_node_status_condition_count"][0]
    assert node_labels["karpenter_sh_initialized"] == "true" and node_labels["name"] == "n-1"
    assert not [labels for labels, _ in found["operator_status_condition_count"] if labels["kind"] == "Node"]


async def test_standby_counts_and_publishes_nothing_but_stays_warm(harness: Any) -> None:
    """Not leading: no transition counted, no event, no gauge; the memory is kept, so the new leader does not
    count what it already saw."""
    state, controller, recorder, leading = harness
    leading[0] = False
    base = {"type": "Launched", "status": "True", "reason": "Launched", **NC_LABELS}
    before = sample("operator_nodeclaim_status_condition_transitions_total", base)
    state.apply("NodeClaim", "ADDED", nodeclaim(1, []))
    state.apply("NodeClaim", "MODIFIED", nodeclaim(2, [cond("Launched", "True", "Launched", LAUNCHED)]))
    await drained(controller)
    assert recorder.events == [] and gauges(controller) == {}
    assert sample("operator_nodeclaim_status_condition_transitions_total", base) == before
    leading[0] = True
    state.apply("NodeClaim", "MODIFIED", nodeclaim(3, [cond("Launched", "True", "Launched", LAUNCHED)]))
    await drained(controller)
    assert recorder.events == []
    assert sample("operator_nodeclaim_status_condition_transitions_total", base) == before
    assert gauges(controller)["operator_nodeclaim_status_condition_count"]


def _operator(**env: str) -> Any:
    from karpy.cloudprovider.fake import FakeCloudProvider
    from karpy.kube.fake import FakeKube
    from karpy.operator import Operator
    from karpy.settings import from_environment

    settings = from_environment({"CLUSTER_NAME": "c", "DISABLE_LEADER_ELECTION": "true", **env})
    op = Operator(settings, FakeKube(), FakeCloudProvider(), nodeclasses=None)  # type: ignore[arg-type]
    op.wire()
    return op


def test_disable_cluster_state_observability_is_honoured() -> None:
    """Wired by default: NodeClaim deltas reach the status-condition controller and provisionable pods the pod
    scheduling times; DISABLE_CLUSTER_STATE_OBSERVABILITY=true leaves both unsubscribed, as Karpenter leaves out
    the metrics and status controllers."""
    pending = {
        "metadata": {"name": "p", "namespace": "d", "uid": "p", "resourceVersion": "1"},
        "spec": {"containers": []},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    on = _operator()
    on.state.apply("NodeClaim", "ADDED", nodeclaim(1, []))
    on.state.apply("Pod", "ADDED", pending)
    assert on.observability and ("NodeClaim", "nc-1") in on.status_conditions.observed
    assert "d/p" in on.state_metrics.times.ack
    off = _operator(DISABLE_CLUSTER_STATE_OBSERVABILITY="true")
    off.state.apply("NodeClaim", "ADDED", nodeclaim(1, []))
    off.state.apply("Pod", "ADDED", pending)
    assert not off.observability and not off.status_conditions.observed and not off.state_metrics.times.ack


def test_operator_renders_state_metrics_only_while_elected() -> None:
    """Leader election's ``elected`` event (as Operator.run receives it) gates the collectors: a standby renders
    none of these families, the leader does."""
    op = _operator()
    op.state.apply("NodeClaim", "ADDED", nodeclaim(1, []))
    assert op.leading() and list(op.state_metrics.collect()) and list(op.status_conditions.collect())
    op._elected = asyncio.Event()
    assert not op.leading()
    assert list(op.state_metrics.collect()) == [] and list(op.status_conditions.collect()) == []
    op._elected.set()
    assert op.leading() and list(op.status_conditions.collect())
