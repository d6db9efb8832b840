"""Karpenter's events: each constructor of :mod:`karpy.controllers.events` against Karpenter v1.15's reason, type,
message and involved object (core ``pkg/controllers/**/events.go``, ``pkg/utils/pod/events.go``; AWS
``pkg/controllers/interruption/events/events.go``, ``pkg/controllers/nodeclass/events.go``), the recorder's
de-duplication and rate limits (core ``pkg/events/recorder.go``), and the controllers publishing them on the
fake cluster: a budget-blocked NodePool, a do-not-disrupt pod, a drain that cannot finish, a spot interruption."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.aws.messages import parse
from karpy.cloudprovider.fake import FakeInterruptionQueue
from karpy.cloudprovider.types import QueuedMessage
from karpy.controllers import events as ev
from karpy.controllers.interruption import Interruption
from karpy.controllers.terminator import Terminator
from karpy.kube.events import NORMAL, WARNING, Event, EventRecorder, TokenBucket
from karpy.kube.fake import FakeKube
from karpy.scheduling.model import Pod
from karpy.state.cluster import ClusterState
from karpy.state.views import node_info, pod_info
from tests.unit.disruption_builders import T0, loaded_state, node, nodeclaim, nodeclass, nodepool, pod, ts
from tests.unit.test_disruption_orchestrator import Harness
from tests.unit.test_terminator_tgp import apiserver, gone_cloud

POOL = nodepool("np")
CLAIM_JSON = nodeclaim("a", POOL)
CLAIM = NodeClaim.from_json(CLAIM_JSON)
NODE_JSON = node(CLAIM_JSON)
NODE_JSON["metadata"]["uid"] = "uid-node-a"
NODE = node_info(NODE_JSON)
POD: Pod = pod_info(pod("web", "node-a")).pod
NP = NodePool.from_json(POOL)

NC_REF = ("NodeClaim", "a", "uid-a")
NODE_REF = ("Node", "node-a", "uid-node-a")
POD_REF = ("Pod", "web", "uid-web")
NP_REF = ("NodePool", "np", "uid-np")


@pytest.fixture(autouse=True)
def fresh_rate_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Karpenter's shared token buckets are process-wide: other tests in this process must not drain them."""
    monkeypatch.setattr(ev, "POD_NOMINATION_RATE_LIMITER", TokenBucket(5.0, 10))
    monkeypatch.setattr(ev, "INSUFFICIENT_CAPACITY_POD_RATE_LIMITER", TokenBucket(5.0, 10))


def shape(event: Event) -> tuple[tuple[str, str, str], str, str, str]:
    """(involved kind/name/uid), type, reason, message."""
    meta = event.involved["metadata"]
    return (event.involved["kind"], meta["name"], meta["uid"]), event.type, event.reason, event.message


# Karpenter v1.15's events as its Go sources build them: (karpy event(s), [(object, type, reason, message), ...]).
TABLE: list[tuple[str, Event | list[Event], list[tuple[tuple[str, str, str], str, str, str]]]] = [
    # core pkg/controllers/disruption/events/events.go
    (
        "Launching",
        ev.launching(CLAIM, "underutilized"),
        [(NC_REF, NORMAL, "DisruptionLaunching", "Launching NodeClaim: Underutilized")],
    ),
    (
        "WaitingOnReadiness",
        ev.waiting_on_readiness(CLAIM),
        [(NC_REF, NORMAL, "DisruptionWaitingReadiness", "Waiting on readiness to continue disruption")],
    ),
    (
        "Terminating",
        ev.terminating(NODE, CLAIM, "Drifted"),
        [
            (NODE_REF, NORMAL, "DisruptionTerminating", "Disrupting Node: Drifted"),
            (NC_REF, NORMAL, "DisruptionTerminating", "Disrupting NodeClaim: Drifted"),
        ],
    ),
    (
        "Unconsolidatable",
        ev.unconsolidatable(NODE, CLAIM, "Can't replace with a cheaper node"),
        [
            (NODE_REF, NORMAL, "Unconsolidatable", "Can't replace with a cheaper node"),
            (NC_REF, NORMAL, "Unconsolidatable", "Can't replace with a cheaper node"),
        ],
    ),
    (
        "Blocked",
        ev.blocked(NODE, CLAIM, 'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/web)'),
        [
            (
                NODE_REF,
                NORMAL,
                "DisruptionBlocked",
                'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/web)',
            ),
            (NC_REF, NORMAL, "DisruptionBlocked", 'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/web)'),
        ],
    ),
    (
        "NodePoolBlockedForDisruptionReason",
        ev.nodepool_blocked_for_disruption_reason(NP, "Drifted"),
        [
            (
                NP_REF,
                NORMAL,
                "DisruptionBlocked",
                "No allowed disruptions for disruption reason Drifted due to blocking budget",
            )
        ],
    ),
    (
        "ConsolidationRejected",
        ev.consolidation_rejected(
            NODE, CLAIM, "Underutilized: delete: nodepools=[np]: [node-a] (savings: $0.10)", "churn", 0.1
        ),
        [
            (
                NODE_REF,
                NORMAL,
                "ConsolidationRejected",
                "Consolidation rejected: Underutilized: delete: nodepools=[np]: [node-a] (savings: $0.10), "
                "reason: churn (savings: $0.10)",
            ),
            (
                NC_REF,
                NORMAL,
                "ConsolidationRejected",
                "Consolidation rejected: Underutilized: delete: nodepools=[np]: [node-a] (savings: $0.10), "
                "reason: churn (savings: $0.10)",
            ),
        ],
    ),
    # core pkg/controllers/provisioning/scheduling/events.go
    (
        "NominatePodEvent",
        ev.nominate_pod(POD, claim_name="np-x"),
        [(POD_REF, NORMAL, "Nominated", "Pod should schedule on: nodeclaim/np-x")],
    ),
    (
        "NominatePodEvent (existing node)",
        ev.nominate_pod(POD, NODE, "a"),
        [(POD_REF, NORMAL, "Nominated", "Pod should schedule on: nodeclaim/a, node/node-a")],
    ),
    (
        "PodFailedToScheduleEvent",
        ev.pod_failed_to_schedule(POD, "no instance type satisfied resources"),
        [(POD_REF, WARNING, "FailedScheduling", "Failed to schedule pod, no instance type satisfied resources")],
    ),
    (
        "NoCompatibleInstanceTypes",
        ev.no_compatible_instance_types(NP),
        [
            (
                NP_REF,
                WARNING,
                "NoCompatibleInstanceTypes",
                "NodePool requirements filtered out all compatible available instance types",
            )
        ],
    ),
    (
        "NoCompatibleInstanceTypes (minValues)",
        ev.no_compatible_instance_types(NP, min_values=True),
        [
            (
                NP_REF,
                WARNING,
                "NoCompatibleInstanceTypes",
                "NodePool requirements filtered out all compatible available instance types due to minValues "
                "incompatibility",
            )
        ],
    ),
    # core pkg/controllers/node/termination/terminator/events/events.go
    ("EvictPod", ev.evict_pod(POD, "Empty"), [(POD_REF, NORMAL, "Evicted", "Evicted pod: Empty")]),
    (
        "DisruptPodDelete",
        ev.disrupt_pod_delete(POD, 20, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp(), 30),
        [
            (
                POD_REF,
                NORMAL,
                "Disrupted",
                "Deleting the pod to accommodate the terminationTime 2026-01-02 03:04:05 +0000 UTC of the node. "
                "The pod was granted 20 seconds of grace-period of its 30 terminationGracePeriodSeconds. This "
                "bypasses the PDB of the pod and the do-not-disrupt annotation.",
            )
        ],
    ),
    (
        "NodeFailedToDrain",
        ev.node_failed_to_drain(NODE, "2 pods are waiting to be evicted"),
        [(NODE_REF, WARNING, "FailedDraining", "Failed to drain node, 2 pods are waiting to be evicted")],
    ),
    (
        "NodeTerminationGracePeriodExpiring",
        ev.node_termination_grace_period_expiring(NODE, "2026-01-02T03:04:05Z"),
        [(NODE_REF, WARNING, "TerminationGracePeriodExpiring", "All pods will be deleted by 2026-01-02T03:04:05Z")],
    ),
    (
        "NodeClaimTerminationGracePeriodExpiring",
        ev.nodeclaim_termination_grace_period_expiring(CLAIM, "2026-01-02T03:04:05Z"),
        [(NC_REF, WARNING, "TerminationGracePeriodExpiring", "All pods will be deleted by 2026-01-02T03:04:05Z")],
    ),
    # core pkg/controllers/nodeclaim/lifecycle/events.go
    (
        "InsufficientCapacityErrorEvent",
        ev.insufficient_capacity_error(CLAIM, "all requested instance types were unavailable during launch"),
        [
            (
                NC_REF,
                WARNING,
                "InsufficientCapacityError",
                "NodeClaim a event: all requested instance types were unavailable during launch",
            )
        ],
    ),
    (
        "InsufficientCapacityErrorPodEvent",
        ev.insufficient_capacity_error_pod(POD, "a", "all requested instance types were unavailable during launch"),
        [
            (
                POD_REF,
                WARNING,
                "InsufficientCapacityError",
                "NodeClaim a nominated for this pod failed to launch: all requested instance types were "
                "unavailable during launch",
            )
        ],
    ),
    # AWS pkg/controllers/interruption/events/events.go
    (
        "SpotInterrupted",
        ev.spot_interrupted(NODE, CLAIM),
        [
            (NC_REF, WARNING, "SpotInterrupted", "Spot interruption warning was triggered"),
            (NODE_REF, WARNING, "SpotInterrupted", "Spot interruption warning was triggered"),
        ],
    ),
    (
        "RebalanceRecommendation",
        ev.rebalance_recommendation(NODE, CLAIM),
        [
            (NC_REF, NORMAL, "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"),
            (NODE_REF, NORMAL, "SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered"),
        ],
    ),
    (
        "Stopping",
        ev.stopping(NODE, CLAIM),
        [
            (NC_REF, WARNING, "InstanceStopping", "Instance is stopping"),
            (NODE_REF, WARNING, "InstanceStopping", "Instance is stopping"),
        ],
    ),
    (
        "Terminating (interruption)",
        ev.instance_terminating(NODE, CLAIM),
        [
            (NC_REF, WARNING, "InstanceTerminating", "Instance is terminating"),
            (NODE_REF, WARNING, "InstanceTerminating", "Instance is terminating"),
        ],
    ),
    (
        "Unhealthy",
        ev.unhealthy(NODE, CLAIM),
        [
            (NC_REF, WARNING, "InstanceUnhealthy", "An unhealthy warning was triggered for the instance"),
            (NODE_REF, WARNING, "InstanceUnhealthy", "An unhealthy warning was triggered for the instance"),
        ],
    ),
    (
        "TerminatingOnInterruption",
        ev.terminating_on_interruption(NODE, CLAIM),
        [
            (NC_REF, WARNING, "TerminatingOnInterruption", "Interruption triggered termination for the NodeClaim"),
            (NODE_REF, WARNING, "TerminatingOnInterruption", "Interruption triggered termination for the Node"),
        ],
    ),
]


@pytest.mark.parametrize(("name", "built", "expected"), TABLE, ids=[row[0] for row in TABLE])
def test_constructor_matches_karpenter(name: str, built: Event | list[Event], expected: list[Any]) -> None:
    events = built if isinstance(built, list) else [built]
    assert [shape(e) for e in events] == expected, name


def test_involved_objects_carry_kind_api_version_and_uid_for_kubectl_describe() -> None:
    """``kubectl describe`` selects events by involvedObject name, namespace, kind and uid."""
    refs = {e.involved["kind"]: e.involved for e in [*ev.spot_interrupted(NODE, CLAIM), ev.evict_pod(POD, "x")]}
    assert refs["NodeClaim"]["apiVersion"] == "karpenter.sh/v1" and "namespace" not in refs["NodeClaim"]["metadata"]
    assert refs["Node"]["apiVersion"] == "v1" and refs["Node"]["metadata"]["uid"] == "uid-node-a"
    assert refs["Pod"]["metadata"] == {"name": "web", "uid": "uid-web", "namespace": "default"}
    assert ev.nodepool_ref(POOL)["metadata"]["uid"] == "uid-np"


def test_dedupe_keys_and_timeouts_follow_karpenter() -> None:
    assert ev.blocked(NODE, CLAIM, "x")[0].dedupe_key() == "disruptionblocked-uid-node-a"
    assert ev.terminating(NODE, CLAIM, "Empty")[1].dedupe_key() == "disruptionterminating-uid-a-Empty"
    assert ev.evict_pod(POD, "x").dedupe_key() == "evicted-web", "Karpenter dedupes evictions on the pod's name"
    assert ev.unconsolidatable(NODE, CLAIM, "x")[0].dedupe_timeout == 15 * 60
    assert ev.nodepool_blocked_for_disruption_reason(NP, "Empty").dedupe_timeout == 60
    assert ev.pod_failed_to_schedule(POD, "x").dedupe_timeout == 5 * 60
    assert ev.nominate_pod(POD, claim_name="a").rate_limiter is ev.POD_NOMINATION_RATE_LIMITER
    assert ev.insufficient_capacity_error_pod(POD, "a", "x").rate_limiter is ev.INSUFFICIENT_CAPACITY_POD_RATE_LIMITER


def test_helpers_print_as_go_does() -> None:
    assert ev.title("underutilized") == "Underutilized" and ev.title("Drifted") == "Drifted"
    assert ev.title("spot interrupted") == "Spot Interrupted"
    assert ev.sentence("pdb prevents pod evictions") == "Pdb prevents pod evictions"
    assert ev.truncate("x" * 2000) == "x" * 1021 + "..."
    assert (
        ev.go_time(datetime(2026, 1, 2, 3, 4, 5, 500000, tzinfo=UTC).timestamp()) == "2026-01-02 03:04:05.5 +0000 UTC"
    )


@pytest.mark.parametrize(
    ("karpy", "karpenter"),
    [
        ("would need 2 new nodes", "Can't remove without creating 2 candidates"),
        ("no replacement cheaper than $0.4000/h", "Can't replace with a cheaper node"),
        (
            "SpotToSpotConsolidation is disabled, a spot node is not replaced by a spot node",
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node",
        ),
        (
            "spot-to-spot needs 15 cheaper types, found 3",
            "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to "
            "consolidate, got 3",
        ),
        ("not all pods would schedule", "Not all pods would schedule"),
    ],
)
def test_unconsolidatable_messages_are_karpenters(karpy: str, karpenter: str) -> None:
    """core disruption/consolidation.go computeConsolidation's messages for karpy's single-node reasons."""
    assert ev.unconsolidatable_message(karpy) == karpenter


# --- the recorder (core pkg/events/recorder.go) ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_recorder_dedupes_on_reason_and_values_for_the_event_timeout() -> None:
    kube, clock = FakeKube(), Clock()
    rec = EventRecorder(kube, clock=clock)
    rec.record(*ev.unconsolidatable(NODE, CLAIM, "first"))
    rec.record(*ev.unconsolidatable(NODE, CLAIM, "another message, same objects"))  # suppressed: key is the UID
    clock.now += 14 * 60
    rec.record(*ev.unconsolidatable(NODE, CLAIM, "still within 15 minutes"))
    clock.now += 61
    rec.record(*ev.unconsolidatable(NODE, CLAIM, "after 15 minutes"))
    rec.record(Event(ev.node_ref(NODE), NORMAL, "NoKey", "never deduped"))
    rec.record(Event(ev.node_ref(NODE), NORMAL, "NoKey", "never deduped"))
    await rec.flush()
    messages = [(e["involvedObject"]["kind"], e["message"]) for e in kube.events("Unconsolidatable")]
    assert messages == [
        ("Node", "first"),
        ("NodeClaim", "first"),
        ("Node", "after 15 minutes"),
        ("NodeClaim", "after 15 minutes"),
    ]
    assert len(kube.events("NoKey")) == 2, "an event without dedupe values is never de-duplicated"


async def test_recorder_rate_limits_with_a_shared_token_bucket() -> None:
    kube, clock = FakeKube(), Clock()
    rec = EventRecorder(kube, clock=clock)
    bucket = TokenBucket(5.0, 10, clock=clock)
    pods = [pod_info(pod(f"p{i}", "node-a")).pod for i in range(15)]

    def nominated(p: Pod) -> Event:
        return Event(ev.pod_ref(p), NORMAL, "Nominated", "m", (p.uid,), rate_limiter=bucket)

    rec.record(*(nominated(p) for p in pods))
    await rec.flush()
    assert len(kube.events("Nominated")) == 10, "the burst is 10"
    clock.now += 1.0  # 5 tokens a second
    rec.record(*(nominated(pod_info(pod(f"q{i}", "node-a")).pod) for i in range(8)))
    await rec.flush()
    assert len(kube.events("Nominated")) == 15


# --- controllers on the fake cluster ----------------------------------------------------------------------------


def _with_node_uid(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for o in objs:
        if o["kind"] == "Node":
            o["metadata"]["uid"] = f"uid-{o['metadata']['name']}"
    return objs


def _on(kube: FakeKube, reason: str, kind: str, name: str) -> list[tuple[str, str]]:
    return [
        (e["type"], e["message"])
        for e in kube.events(reason, name=name)
        if e["involvedObject"]["kind"] == kind and e["involvedObject"].get("uid")
    ]


async def test_budget_blocked_disruption_is_a_disruption_blocked_event_on_the_nodepool() -> None:
    """core disruption/helpers.go BuildDisruptionBudgetMapping: a NodePool with nodes whose budget allows 0."""
    pool = nodepool(budgets=[{"nodes": "0"}])
    a, b = nodeclaim("a", pool), nodeclaim("b", pool)
    h = Harness(_with_node_uid([nodeclass(), pool, a, b, node(a), node(b), pod("b-0", "node-b")]))
    assert await h.evaluate() is None and h.deleted() == []
    assert _on(h.kube, "DisruptionBlocked", "NodePool", "np") == [
        (NORMAL, f"No allowed disruptions for disruption reason {reason} due to blocking budget")
        for reason in ("Empty", "Underutilized")  # each method asks for its reason's budget
    ]
    await h.close()


async def test_do_not_disrupt_pod_blocks_with_karpenters_event_on_nodeclaim_and_node() -> None:
    pool = nodepool()
    a, b = nodeclaim("a", pool), nodeclaim("b", pool)
    guarded = pod("a-0", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    h = Harness(_with_node_uid([nodeclass(), pool, a, b, node(a), node(b), guarded, pod("b-0", "node-b")]))
    await h.evaluate()
    message = 'Pod has "karpenter.sh/do-not-disrupt" annotation (Pod=default/a-0)'
    assert _on(h.kube, "DisruptionBlocked", "NodeClaim", "a") == [(NORMAL, message)]
    assert _on(h.kube, "DisruptionBlocked", "Node", "node-a") == [(NORMAL, message)]
    node_event = h.kube.events("DisruptionBlocked", name="node-a")[0]
    assert node_event["involvedObject"]["uid"] == "uid-node-a" and node_event["metadata"]["namespace"] == "default"
    await h.evaluate()  # the next pass: de-duplicated on the objects' UIDs for 2 minutes
    assert len(h.kube.events("DisruptionBlocked", name="a")) == 1
    await h.close()


async def test_emptiness_terminating_event_on_node_and_nodeclaim() -> None:
    pool = nodepool()
    a, b = nodeclaim("a", pool), nodeclaim("b", pool)
    h = Harness(_with_node_uid([nodeclass(), pool, a, b, node(a), node(b), pod("b-0", "node-b")]))
    await h.evaluate()
    assert await h.finish() == [True]
    await h.events.flush()
    assert _on(h.kube, "DisruptionTerminating", "Node", "node-a") == [(NORMAL, "Disrupting Node: Empty")]
    [(kind, message)] = _on(h.kube, "DisruptionTerminating", "NodeClaim", "a")
    assert kind == NORMAL and message.startswith("Disrupting NodeClaim: Empty {")
    assert json.loads(message.removeprefix("Disrupting NodeClaim: Empty "))["podsMoved"] == 0, "karpy's record"
    await h.close()


async def test_when_empty_pool_with_pods_is_unconsolidatable() -> None:
    pool = nodepool(policy="WhenEmpty")
    a = nodeclaim("a", pool)
    h = Harness(_with_node_uid([nodeclass(), pool, a, node(a), pod("a-0", "node-a")]))
    await h.evaluate()
    message = 'NodePool "np" has consolidation policy WhenEmpty, but node is not empty'
    assert _on(h.kube, "Unconsolidatable", "Node", "node-a") == [(NORMAL, message)]
    assert _on(h.kube, "Unconsolidatable", "NodeClaim", "a") == [(NORMAL, message)]
    await h.close()


async def test_drain_failure_is_failed_draining_on_the_node_and_tgp_expiring_on_both() -> None:
    """core node/termination/controller.go: a drain that cannot finish is a FailedDraining Warning on the Node;
    with a terminationGracePeriod, TerminationGracePeriodExpiring on the NodeClaim (when stamped) and the Node."""
    pool = nodepool("np")
    claim = nodeclaim("a", pool, terminationGracePeriod="1h")
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    guarded = pod("dnd", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    objs = _with_node_uid([nodeclass(), pool, claim, node(claim), guarded])
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0 + 10)
    events = EventRecorder(kube)
    term = Terminator(kube, state, gone_cloud(), events, clock=lambda: T0 + 10)
    assert (await term.reconcile("a")).requeue_after is not None
    await events.flush()
    assert _on(kube, "FailedDraining", "Node", "node-a") == [
        (WARNING, "Failed to drain node, 1 pods are waiting to be evicted")
    ]
    deadline = datetime.fromtimestamp(T0 + 3600, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    expiring = (WARNING, f"All pods will be deleted by {deadline}")
    assert _on(kube, "TerminationGracePeriodExpiring", "NodeClaim", "a") == [expiring]
    assert _on(kube, "TerminationGracePeriodExpiring", "Node", "node-a") == [expiring]


async def test_evicted_pod_names_the_disruption_reason() -> None:
    """core terminator/eviction.go evictionReason: the DisruptionReason condition, else Forceful Termination."""
    pool = nodepool("np")
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    claim["status"]["conditions"].append(
        {"type": wk.COND_DISRUPTION_REASON, "status": "True", "reason": "Underutilized", "lastTransitionTime": ts(T0)}
    )
    objs = _with_node_uid([nodeclass(), pool, claim, node(claim), pod("web", "node-a")])
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    events = EventRecorder(kube)
    await Terminator(kube, state, gone_cloud(), events, clock=lambda: T0).reconcile("a")
    await events.flush()
    assert [(e["type"], e["message"]) for e in kube.events("Evicted", name="web")] == [
        (NORMAL, "Evicted pod: Underutilized")
    ]


def _spot(instance_id: str) -> QueuedMessage:
    body = {
        "version": "0",
        "id": "x",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "time": "2026-01-01T11:59:58Z",
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }
    return QueuedMessage(message_id="m-1", receipt_handle="rh-1", message=parse(json.dumps(body)))


async def test_spot_interruption_events_on_nodeclaim_and_node() -> None:
    pool = nodepool("np")
    claim = nodeclaim("a", pool)
    objs = _with_node_uid([nodeclass(), pool, claim, node(claim)])
    instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
    state: ClusterState = loaded_state(objs)
    kube = FakeKube(objs, sink=state)
    events = EventRecorder(kube)
    ctl = Interruption(kube, state, gone_cloud(), events, FakeInterruptionQueue(), now=lambda: datetime.now(UTC))
    assert await ctl.handle(_spot(instance_id)) is True
    await events.flush()
    assert _on(kube, "SpotInterrupted", "NodeClaim", "a") == [(WARNING, "Spot interruption warning was triggered")]
    assert _on(kube, "SpotInterrupted", "Node", "node-a") == [(WARNING, "Spot interruption warning was triggered")]
    assert _on(kube, "TerminatingOnInterruption", "NodeClaim", "a") == [
        (WARNING, "Interruption triggered termination for the NodeClaim")
    ]
    assert _on(kube, "TerminatingOnInterruption", "Node", "node-a") == [
        (WARNING, "Interruption triggered termination for the Node")
    ]


@pytest.mark.parametrize(
    ("karpy", "with_node", "karpenter"),
    [
        ("nodeclaim is being deleted", True, "Node is deleting or marked for deletion"),
        ("node is being deleted", True, "Node is deleting or marked for deletion"),
        ("nodeclaim is not initialized", True, "Node isn't initialized"),
        ("nodeclaim is not initialized", False, "Nodeclaim does not have an associated node"),
        ("nodeclaim has no node", False, "Nodeclaim does not have an associated node"),
        ("nominated for pending pods", True, "Node is nominated for a pending pod"),
        ("not managed by a known NodePool", True, "NodePool not found (NodePool=np)"),
        ("already being disrupted", True, None),
        ("its NodePool is static (spec.replicas), which karpy does not implement yet", True, None),
    ],
)
def test_node_blockers_use_karpenters_messages(karpy: str, with_node: bool, karpenter: str | None) -> None:
    """core state/statenode.go ValidateNodeDisruptable and disruption/types.go NewCandidate."""
    assert ev.node_blocked_message(karpy, CLAIM, NODE if with_node else None) == karpenter


async def test_a_nominated_node_is_blocked_with_karpenters_message() -> None:
    pool = nodepool()
    a, b = nodeclaim("a", pool), nodeclaim("b", pool)
    h = Harness(_with_node_uid([nodeclass(), pool, a, b, node(a), node(b), pod("b-0", "node-b")]))
    h.provisioner.nominated["node-a"] = T0
    await h.evaluate()
    assert _on(h.kube, "DisruptionBlocked", "Node", "node-a") == [(NORMAL, "Node is nominated for a pending pod")]
    assert _on(h.kube, "DisruptionBlocked", "NodeClaim", "a") == [(NORMAL, "Node is nominated for a pending pod")]
    await h.close()


async def test_a_pod_placed_on_an_existing_node_is_nominated_to_it() -> None:
    """core scheduling/scheduler.go Results.Record: NominatePodEvent(pod, existing.Node, existing.NodeClaim)."""
    pool = nodepool()
    a = nodeclaim("a", pool)
    h = Harness(_with_node_uid([nodeclass(), pool, a, node(a), pod("waiting")]))
    assert await h.provisioner.provision_once() == [], "the pod fits on node-a: no new NodeClaim"
    await h.events.flush()
    assert _on(h.kube, "Nominated", "Pod", "waiting") == [(NORMAL, "Pod should schedule on: nodeclaim/a, node/node-a")]
    await h.close()
