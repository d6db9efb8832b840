"""NodeOverlay in the controllers: the status controller (conditions, events, the store), the provisioner's one
application point (cheapest choice, extended resources, unevaluated NodePools, annotations), the launch request,
and the gate (Karpenter core ``controllers/nodeoverlay/controller.go``, ``cloudprovider/overlay``)."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.controllers.nodeclaim_lifecycle import NodeClaimLifecycle
from karpy.controllers.nodeoverlay_status import NodeOverlayEvaluationError, NodeOverlayStatus
from karpy.controllers.provisioner import Provisioner
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODEOVERLAYS
from karpy.metrics_state import StateMetrics
from karpy.operator import Operator
from karpy.scheduling.nodeoverlay import OverlayStore
from karpy.settings import from_environment
from karpy.state.cluster import KINDS, ClusterState
from tests.unit.disruption_builders import following_plans

JSON = dict[str, Any]
GIB = 2**30
_rv = itertools.count(1)
READY = [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]


def itype(name: str, family: str, price: float) -> InstanceType:
    return InstanceType(
        name=name,
        labels={
            wk.LABEL_INSTANCE_TYPE: name,
            wk.LABEL_ARCH: "amd64",
            wk.LABEL_OS: "linux",
            wk.LABEL_INSTANCE_FAMILY: family,
        },
        capacity={"cpu": 2000, "memory": 8 * GIB, "pods": 110},
        overhead={},
        offerings=(Offering("us-east-1a", "on-demand", price, zone_id="use1-az1"),),
    )


CATALOGUE = [itype("c5.large", "c5", 0.085), itype("m5.large", "m5", 0.096)]


def nodeclass(name: str = "nc") -> JSON:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(next(_rv))},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
        "status": {"conditions": READY},
    }


def nodepool(name: str = "np", nodeclass_name: str = "nc") -> JSON:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(next(_rv))},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": nodeclass_name},
                }
            }
        },
        "status": {"conditions": READY},
    }


def overlay(name: str, weight: int | None = None, **spec: Any) -> JSON:
    body: JSON = {"requirements": [], **spec}
    if weight is not None:
        body["weight"] = weight
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, "resourceVersion": str(next(_rv))},
        "spec": body,
    }


def family(*values: str) -> list[JSON]:
    return [{"key": wk.LABEL_INSTANCE_FAMILY, "operator": "In", "values": list(values)}]


def pod(name: str, requests: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": str(next(_rv))},
        "spec": {"containers": [{"name": "c", "resources": {"requests": requests or {"cpu": "500m"}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def cluster(*objs: JSON) -> tuple[ClusterState, FakeKube]:
    """A FakeKube holding ``objs`` and a listed cluster state of the same objects (with NodeOverlays)."""
    kube = FakeKube()
    kube.seed(*objs)
    state = ClusterState()
    state.kinds = (*KINDS, "NodeOverlay")
    for kind in state.kinds:
        state.replace(kind, [o for o in objs if o["kind"] == kind])
    return state, kube


async def evaluated(state: ClusterState, kube: FakeKube, store: OverlayStore) -> NodeOverlayStatus:
    reconciler = NodeOverlayStatus(kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), store)
    await reconciler.reconcile()
    await reconciler.events.flush()
    return reconciler


def stored_condition(kube: FakeKube, name: str, type_: str) -> tuple[str, str, str]:
    obj = kube.object(NODEOVERLAYS, name)
    assert obj is not None
    c = condition(obj, type_)
    assert c is not None, obj.get("status")
    return c["status"], c["reason"], c["message"]


# --- status controller ---------------------------------------------------------------------------------------


async def test_valid_overlay_is_ready_and_stored() -> None:
    state, kube = cluster(nodeclass(), nodepool(), overlay("cheap-m5", price="0.01", requirements=family("m5")))
    store = OverlayStore()
    updated: list[bool] = []
    reconciler = NodeOverlayStatus(
        kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), store, on_updated=lambda: updated.append(True)
    )
    result = await reconciler.reconcile()
    assert result.requeue_after == 6 * 3600
    assert stored_condition(kube, "cheap-m5", "ValidationSucceeded") == ("True", "ValidationSucceeded", "")
    assert stored_condition(kube, "cheap-m5", "Ready") == ("True", "Ready", "")
    assert state.nodeoverlay_views["cheap-m5"].is_true("Ready"), "the answer is applied to cluster state"
    types = store.apply("np", CATALOGUE)
    assert types is not None and [o.price for t in types for o in t.offerings] == [0.085, 0.01]
    assert updated == [True]
    # Nothing changed: no second write, no second notification.
    patches = len(kube.requests_to("PATCH", NODEOVERLAYS))
    await reconciler.reconcile()
    assert len(kube.requests_to("PATCH", NODEOVERLAYS)) == patches and updated == [True]


async def test_equal_weight_conflict_sets_conditions_and_a_warning_event() -> None:
    state, kube = cluster(
        nodeclass(),
        nodepool(),
        overlay("alpha", weight=10, price="0.01", requirements=family("m5")),
        overlay("bravo", weight=10, priceAdjustment="+0.5"),
    )
    store = OverlayStore()
    await evaluated(state, kube, store)
    assert stored_condition(kube, "bravo", "ValidationSucceeded")[0] == "True"
    assert stored_condition(kube, "alpha", "ValidationSucceeded") == (
        "False",
        "Conflict",
        "conflict with another overlay",
    )
    assert stored_condition(kube, "alpha", "Ready") == ("False", "UnhealthyDependents", "ValidationSucceeded=False")
    [event] = kube.events("Conflict")
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "alpha"
    types = store.apply("np", CATALOGUE)
    assert types is not None and [round(o.price, 3) for t in types for o in t.offerings] == [0.585, 0.596]


async def test_invalid_overlay_gets_runtime_validation() -> None:
    state, kube = cluster(nodeclass(), nodepool(), overlay("bad", capacity={"memory": "1Gi"}))
    await evaluated(state, kube, OverlayStore())
    status, reason, message = stored_condition(kube, "bad", "ValidationSucceeded")
    assert (status, reason) == ("False", "RuntimeValidation") and "memory" in message
    assert [e["involvedObject"]["name"] for e in kube.events("RuntimeValidation")] == ["bad"]


async def test_a_nodepool_without_its_nodeclass_is_not_evaluated_and_the_pass_fails() -> None:
    state, kube = cluster(nodeclass(), nodepool(), nodepool("orphan", "missing"), overlay("o", price="0.01"))
    store = OverlayStore()
    reconciler = NodeOverlayStatus(kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), store)
    with pytest.raises(NodeOverlayEvaluationError, match="orphan"):
        await reconciler.reconcile()
    assert store.apply("np", CATALOGUE) is not None
    assert store.apply("orphan", CATALOGUE) is None


async def test_a_changed_overlay_is_evaluated_again_before_storing() -> None:
    state, kube = cluster(nodeclass(), nodepool(), overlay("o", price="0.01"))
    kube.seed({**overlay("o", price="0.02"), "metadata": {**overlay("o")["metadata"], "resourceVersion": "999"}})
    store = OverlayStore()
    reconciler = NodeOverlayStatus(kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), store)
    result = await reconciler.reconcile()
    assert result.requeue_after == 0.5 and store.apply("np", CATALOGUE) is None


# --- provisioner and launch ----------------------------------------------------------------------------------


def provisioner(state: ClusterState, kube: FakeKube, store: OverlayStore | None) -> Provisioner:
    return Provisioner(
        kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), plans=following_plans(state), overlays=store
    )


def instance_types(claim: JSON) -> list[str]:
    return next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE)


async def test_overlaid_price_drives_the_cheapest_choice() -> None:
    objs = (nodeclass(), nodepool(), overlay("cheap-m5", price="0.01", requirements=family("m5")), pod("p"))
    state, kube = cluster(*objs)
    [plain] = await provisioner(state, kube, None).provision_once()
    assert (
        instance_types(plain)[0] == "c5.large"
        and "karpenter.sh/price-overlay-applied" not in plain["metadata"]["annotations"]
    )

    state, kube = cluster(*objs)
    store = OverlayStore()
    prov = provisioner(state, kube, store)
    assert await prov.provision_once() == [], "the NodePool is not evaluated yet: skipped"
    await evaluated(state, kube, store)
    [claim] = await prov.provision_once()
    assert instance_types(claim)[0] == "m5.large"
    assert claim["metadata"]["annotations"]["karpenter.sh/price-overlay-applied"] == "true"
    pools, _, _ = await prov.simulation_inputs()
    [m5] = [t for t in pools[0].instance_types if t.name == "m5.large"]
    assert m5.offerings[0].price == 0.01, "disruption prices through the same application point"


async def test_capacity_overlay_makes_an_extended_resource_pod_schedulable() -> None:
    objs = (
        nodeclass(),
        nodepool(),
        overlay("devices", capacity={"example.com/device": "2"}, requirements=family("m5")),
        pod("needs-device", {"cpu": "500m", "example.com/device": "1"}),
    )
    state, kube = cluster(*objs)
    assert await provisioner(state, kube, None).provision_once() == []
    state, kube = cluster(*objs)
    store = OverlayStore()
    await evaluated(state, kube, store)
    [claim] = await provisioner(state, kube, store).provision_once()
    assert instance_types(claim) == ["m5.large"]
    assert claim["metadata"]["annotations"]["karpenter.sh/capacity-overlay-applied"] == "true"
    assert claim["spec"]["resources"]["requests"]["example.com/device"] == "1"


async def test_launch_request_carries_overlaid_types_and_waits_for_the_evaluation() -> None:
    objs = (nodeclass(), nodepool(), overlay("cheap-m5", price="0.01", requirements=family("m5")), pod("p"))
    state, kube = cluster(*objs)
    store = OverlayStore()
    await evaluated(state, kube, store)
    [claim] = await provisioner(state, kube, store).provision_once()
    state.apply("NodeClaim", "ADDED", claim)
    cloud = FakeCloudProvider(CATALOGUE)
    lifecycle = NodeClaimLifecycle(
        kube, state, cloud, EventRecorder(kube), plans=following_plans(state), overlays=store
    )
    view = state.nodeclaim_view(claim["metadata"]["name"])
    nodeclass_view = state.nodeclass_view("nc")
    assert view is not None and nodeclass_view is not None
    request = await lifecycle._launch_request(view, nodeclass_view)
    [m5] = [t for t in request.instance_types if t.name == "m5.large"]
    assert m5.offerings[0].price == 0.01 and m5.offerings[0].price_overlaid

    store.evaluation = type(store.evaluation)()  # e.g. a restart: nothing evaluated yet
    result = await lifecycle.reconcile(claim["metadata"]["name"])
    assert result.requeue_after == 1.0 and cloud.create_calls == []


# --- the gate --------------------------------------------------------------------------------------------------


class _Resolver:
    async def resolve_nodeclass(self, nodeclass: Any) -> Any:
        raise AssertionError("not called")


def operator(**env: str) -> Operator:
    settings = from_environment({"CLUSTER_NAME": "c", "DISABLE_LEADER_ELECTION": "true", **env})
    return Operator(settings, FakeKube(), FakeCloudProvider(), nodeclasses=_Resolver())


def test_gate_off_ignores_nodeoverlays() -> None:
    """Karpenter's default: no overlay controller, no store, NodeOverlays not watched nor waited for."""
    op = operator()
    assert op.overlays is None and op.nodeoverlay_loop is None and op.provisioner.overlays is None
    assert "NodeOverlay" not in op.state.kinds
    assert all(i.resource.kind != "NodeOverlay" for i in op.informers)
    assert "nodeoverlay.status" not in dict(op.leader_tasks())


def test_gate_on_watches_evaluates_and_applies() -> None:
    op = operator(FEATURE_GATES="NodeOverlay=true")
    assert op.overlays is not None and op.provisioner.overlays is op.overlays
    assert op.lifecycle.reconciler.overlays is op.overlays  # type: ignore[attr-defined]
    assert "NodeOverlay" in op.state.kinds and any(i.resource.kind == "NodeOverlay" for i in op.informers)
    assert "nodeoverlay.status" in dict(op.leader_tasks())


async def test_gate_on_state_waits_for_the_nodeoverlay_list() -> None:
    state = ClusterState()
    state.kinds = (*KINDS, "NodeOverlay")
    for kind in KINDS:
        state.replace(kind, [])
    assert not state.listed
    state.replace("NodeOverlay", [overlay("o")])
    assert state.listed and "o" in state.nodeoverlay_views
    await asyncio.sleep(0)


# --- metrics -------------------------------------------------------------------------------------------------------


async def test_instance_type_metrics_and_cost_use_overlaid_prices() -> None:
    """Karpenter's instance-type and NodePool cost metrics read the decorated GetInstanceTypes."""
    cheap = overlay("cheap-m5", price="0.01", requirements=family("m5"))
    state, kube = cluster(nodeclass(), nodepool(), cheap)
    store = OverlayStore()
    await evaluated(state, kube, store)
    state.apply("NodePool", "ADDED", nodepool("new"))  # not evaluated yet
    metrics = StateMetrics(state, cloud=FakeCloudProvider(CATALOGUE), overlays=store)
    await metrics.refresh()
    prices = metrics.snapshot.prices
    assert prices["np"][("m5.large", "us-east-1a", "on-demand")] == 0.01
    assert prices["np"][("c5.large", "us-east-1a", "on-demand")] == 0.085
    assert "new" in metrics.snapshot.failed and "new" not in prices


def test_reevaluation_follows_spec_changes_not_status_writes() -> None:
    """Karpenter's overlay controller filters on generation changes: NodePool status writes (usage, node counts)
    and the overlays' own condition writes do not re-evaluate; an EC2NodeClass change (its subnets) does."""
    op = operator(FEATURE_GATES="NodeOverlay=true")
    assert op.nodeoverlay_loop is not None
    triggered: list[str] = []
    op.nodeoverlay_loop.trigger = lambda: triggered.append("x")  # type: ignore[method-assign]
    pool = {**nodepool(), "metadata": {**nodepool()["metadata"], "generation": 1}}
    op._route("NodePool", "ADDED", "np", None, pool)
    status_write = {**pool, "status": {"resources": {"cpu": "2"}}}
    op._route("NodePool", "MODIFIED", "np", pool, status_write)
    assert len(triggered) == 1
    op._route("NodePool", "MODIFIED", "np", pool, {**pool, "metadata": {**pool["metadata"], "generation": 2}})
    ov = overlay("o")
    op._route("NodeOverlay", "MODIFIED", "o", ov, {**ov, "status": {"conditions": []}})
    assert len(triggered) == 2
    op._route("NodeOverlay", "DELETED", "o", ov, None)
    op._route("EC2NodeClass", "MODIFIED", "nc", nodeclass(), nodeclass())
    assert len(triggered) == 4
