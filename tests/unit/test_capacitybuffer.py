"""CapacityBuffer (gate ``CapacityBuffer``): status resolution (replicas, percentage of a workload, limits, missing
references), virtual pods, the provisioner planning headroom without binding, telling or counting the virtual pods,
the buffer controller's status writes, emptiness keeping buffer nodes, and the gate (Karpenter core
``pkg/controllers/capacitybuffer``, ``pkg/state/virtualpods``, ``pkg/controllers/provisioning/buffers.go``)."""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import pytest

from karpy import metrics
from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.controllers.capacitybuffer import CapacityBufferController, buffers_referencing, status_patch
from karpy.controllers.provisioner import Provisioner
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import CAPACITYBUFFERS, NODECLAIMS
from karpy.operator import Operator
from karpy.scheduling import buffers as cb
from karpy.settings import from_environment
from karpy.state.buffers import BUFFER_KINDS, virtual_pods
from karpy.state.cluster import KINDS, ClusterState
from tests.unit.disruption_builders import T0, following_plans
from tests.unit.test_provisioner_scheduling_inputs import CATALOGUE, nodeclass, nodepool

JSON = dict[str, Any]


# --- builders ------------------------------------------------------------------------------------------------


def template(cpu: str = "1", memory: str = "1Gi", **labels: str) -> JSON:
    return {
        "metadata": {"labels": labels or {"app": "web"}},
        "spec": {
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]
        },
    }


def pod_template(name: str = "pt", generation: int | None = None, **kw: Any) -> JSON:
    meta: JSON = {"name": name, "namespace": "default", "resourceVersion": "5"}
    if generation is not None:
        meta["generation"] = generation
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": meta, "template": template(**kw)}


def deployment(name: str = "web", replicas: int | None = 10, **kw: Any) -> JSON:
    spec: JSON = {"template": template(**kw), "selector": {"matchLabels": {"app": "web"}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default", "generation": 1, "resourceVersion": "6"},
        "spec": spec,
    }


def buffer(name: str = "headroom", status: JSON | None = None, **spec: Any) -> JSON:
    return {
        "apiVersion": cb.API_VERSION,
        "kind": "CapacityBuffer",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "generation": 2,
            "resourceVersion": "7",
        },
        "spec": {"provisioningStrategy": cb.ACTIVE_CAPACITY, **spec},
        "status": status or {},
    }


def ready(obj: JSON, replicas: int) -> JSON:
    out = copy.deepcopy(obj)
    out["status"] = cb.resolved_status(out, cb.Resolution(template=template()))
    out["status"]["replicas"] = replicas
    return out


def resolved(obj: JSON, *objs: JSON) -> JSON:
    templates = {f"default/{o['metadata']['name']}": o for o in objs if o["kind"] == "PodTemplate"}
    workloads: dict[str, dict[str, JSON]] = {}
    for o in objs:
        if o["kind"] != "PodTemplate":
            workloads.setdefault(o["kind"], {})[f"default/{o['metadata']['name']}"] = o
    return cb.resolved_status(obj, cb.resolve(obj, templates, workloads))


def condition(status: JSON, type_: str) -> tuple[str, str]:
    c = next(c for c in status["conditions"] if c["type"] == type_)
    return c["status"], c["reason"]


# --- status resolution -----------------------------------------------------------------------------------------

PT = {"podTemplateRef": {"name": "pt"}}
DEPLOY = {"scalableRef": {"kind": "Deployment", "name": "web"}}


@pytest.mark.parametrize(
    ("spec", "backing", "expected"),
    [
        ({**PT, "replicas": 7}, pod_template(), 7),
        ({**PT, "replicas": 10, "limits": {"cpu": "3"}}, pod_template(), 3),  # the limit binds
        ({**PT, "replicas": 3, "limits": {"cpu": "10"}}, pod_template(), 3),  # the limit does not
        ({**PT, "limits": {"cpu": "5"}}, pod_template(), 5),  # limits alone
        ({**PT, "limits": {"cpu": "8", "memory": "3Gi"}}, pod_template(), 3),  # the smallest resource wins
        ({**PT, "replicas": 2, "limits": {"nvidia.com/gpu": "4"}}, pod_template(), 2),  # no shared resource
        ({**DEPLOY, "percentage": 20}, deployment(replicas=10), 2),
        ({**DEPLOY, "replicas": 5, "percentage": 20}, deployment(replicas=10), 5),  # max(5, 2)
        ({**DEPLOY, "replicas": 5, "percentage": 80}, deployment(replicas=10), 8),  # max(5, 8)
        ({**DEPLOY, "replicas": 5, "percentage": 80, "limits": {"cpu": "4"}}, deployment(replicas=10), 4),
        ({**DEPLOY, "percentage": 10}, deployment(replicas=1), 1),  # ceil, at least 1
        ({**DEPLOY, "percentage": 50}, deployment(replicas=None), 1),  # nil replicas count as 1
        ({**DEPLOY, "percentage": 50}, deployment(replicas=0), 0),  # nothing running: no percentage
    ],
)
def test_replicas_from_replicas_percentage_and_limits(spec: JSON, backing: JSON, expected: int) -> None:
    status = resolved(buffer(**spec), backing)
    assert status["replicas"] == expected
    assert condition(status, cb.COND_READY_FOR_PROVISIONING) == ("True", cb.REASON_RESOLVED)
    assert status["provisioningStrategy"] == cb.ACTIVE_CAPACITY


def test_pod_template_ref_is_recorded_in_status_and_cleared_for_a_scalable_ref() -> None:
    status = resolved(buffer(**PT, replicas=1), pod_template(generation=3))
    assert status["podTemplateRef"] == {"name": "pt"} and status["podTemplateGeneration"] == 3
    switched = buffer(status=status, **DEPLOY, replicas=1)
    new = resolved(switched, deployment())
    assert "podTemplateRef" not in new and "podTemplateGeneration" not in new
    assert status_patch(status, new)["podTemplateRef"] is None, "a merge patch removes the field"


@pytest.mark.parametrize(
    ("spec", "reason", "message"),
    [
        (PT | {"replicas": 1}, cb.REASON_POD_TEMPLATE_NOT_FOUND, 'podtemplates "pt" not found'),
        (DEPLOY, cb.REASON_SCALABLE_REF_NOT_FOUND, 'deployments.apps "web" not found'),
        ({"scalableRef": {"kind": "Job", "name": "x"}}, cb.REASON_RESOLUTION_FAILED, 'unsupported kind "Job"'),
        (
            {"scalableRef": {"apiGroup": "batch", "kind": "Job", "name": "x"}},
            cb.REASON_RESOLUTION_FAILED,
            'unsupported scalableRef API group "batch"',
        ),
        ({"replicas": 1}, cb.REASON_RESOLUTION_FAILED, "Neither podTemplateRef nor scalableRef is set"),
    ],
)
def test_unresolvable_buffers_are_not_ready_and_keep_their_other_status(spec: JSON, reason: str, message: str) -> None:
    status = resolved(buffer(status={"replicas": 4}, **spec))
    assert condition(status, cb.COND_READY_FOR_PROVISIONING) == ("False", reason)
    assert next(c for c in status["conditions"])["message"] == message
    assert status["replicas"] == 4, "Karpenter leaves the rest of the status as it was"
    assert not cb.ready_for_provisioning({**buffer(**spec), "status": status})


def test_limit_arithmetic() -> None:
    assert cb.limit_replicas({"cpu": 3500}, {"cpu": 1000, "pods": 1}) == 3
    assert cb.limit_replicas({"pods": 5}, {"cpu": 1000, "pods": 1}) is None, "pods is no request (RequestsForSpec)"
    assert cb.limit_replicas({"cpu": 1000}, {"cpu": 0}) is None
    assert (
        cb.percentage_replicas(3, 50) == 2 and cb.percentage_replicas(1, 1) == 1 and cb.percentage_replicas(0, 50) == 0
    )


# --- virtual pods ----------------------------------------------------------------------------------------------


def test_virtual_pods_are_built_from_the_template_for_ready_buffers_only() -> None:
    tmpl = template(app="web", tier="front")
    tmpl["spec"]["nodeName"] = "pinned"
    tmpl["spec"]["volumes"] = [
        {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
        {"name": "cfg", "configMap": {}},
    ]
    tmpl["spec"]["containers"][0]["volumeMounts"] = [{"name": "data"}, {"name": "cfg"}]
    obj = ready(buffer(**PT), 3)
    pods = cb.virtual_pods(obj, tmpl)
    assert [p.name for p in pods] == [f"capacity-buffer-headroom-{i}" for i in (1, 2, 3)]
    assert [p.uid for p in pods] == ["uid-headroom-1", "uid-headroom-2", "uid-headroom-3"]
    first = pods[0]
    assert first.labels == {"app": "web", "tier": "front"} and first.namespace == "default"
    assert first.priority == cb.VIRTUAL_POD_PRIORITY and not first.node_name and not first.volume_claims
    assert first.requests["cpu"] == 1000 and all(cb.is_virtual(p) for p in pods)
    not_ready = copy.deepcopy(obj)
    not_ready["status"]["conditions"][0]["status"] = "False"
    assert cb.virtual_pods(not_ready, tmpl) == ()
    assert cb.virtual_pods(ready(buffer(**PT), 0), tmpl) == ()


def test_state_keeps_slim_references_and_builds_virtual_pods() -> None:
    state = ClusterState(extra_kinds=BUFFER_KINDS)
    for kind in KINDS:
        state.replace(kind, [])
    assert not state.listed, "the gated kinds must be listed too"
    full = deployment()
    full["status"] = {"replicas": 10}
    full["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    state.replace("Deployment", [full])
    state.replace("PodTemplate", [pod_template()])
    state.replace("StatefulSet", [])
    state.replace("ReplicaSet", [])
    state.replace("CapacityBuffer", [ready(buffer(**PT), 2), ready(buffer("other", **DEPLOY), 1)])
    assert state.listed
    assert state.workloads["Deployment"]["default/web"] == {
        "metadata": {"name": "web", "namespace": "default", "generation": 1, "resourceVersion": "6"},
        "spec": {"template": template(), "replicas": 10},
    }
    pods = virtual_pods(state.capacity_buffers, state.pod_templates, state.workloads)
    assert sorted(p.name for p in pods) == [
        "capacity-buffer-headroom-1",
        "capacity-buffer-headroom-2",
        "capacity-buffer-other-1",
    ]
    assert buffers_referencing(state, "PodTemplate", "default/pt") == ["default/headroom"]
    assert buffers_referencing(state, "Deployment", "default/web") == ["default/other"]
    assert buffers_referencing(state, "Deployment", "other-ns/web") == []


# --- the provisioner -------------------------------------------------------------------------------------------


def loaded(*objs: JSON) -> ClusterState:
    state = ClusterState(extra_kinds=BUFFER_KINDS)
    by_kind: dict[str, list[JSON]] = {k: [] for k in (*KINDS, *BUFFER_KINDS)}
    for obj in objs:
        by_kind[obj["kind"]].append(obj)
    for kind, items in by_kind.items():
        state.replace(kind, items)
    return state


def buffered_provisioner(state: ClusterState, kube: FakeKube) -> tuple[Provisioner, list[dict[str, cb.BufferSummary]]]:
    prov = Provisioner(kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), plans=following_plans(state))
    prov.virtual_pods = lambda: virtual_pods(state.capacity_buffers, state.pod_templates, state.workloads)
    passes: list[dict[str, cb.BufferSummary]] = []
    prov.on_pass = lambda result, virtual: passes.append(cb.classify(result, virtual))
    return prov, passes


def launched(claim: JSON, name: str) -> JSON:
    """The NodeClaim as the lifecycle leaves it after launch: a name, providerID and allocatable."""
    out = copy.deepcopy(claim)
    out["metadata"]["name"] = name
    out["metadata"]["resourceVersion"] = "100"
    out["metadata"]["uid"] = f"uid-{name}"
    out["status"] = {
        "providerID": f"aws:///us-east-1a/i-{name}",
        "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
    }
    return out


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_ready_buffer_gets_a_nodeclaim_with_no_planned_pods_and_no_events() -> None:
    state = loaded(nodeclass(), nodepool(), pod_template(cpu="1", memory="1Gi"), ready(buffer(**PT), 2))
    kube = FakeKube()
    prov, passes = buffered_provisioner(state, kube)
    before = metrics.UNSCHEDULABLE_PODS.labels(controller=metrics.PROVISIONER)._value.get()
    [claim] = await prov.provision_once()
    await settle()
    annotations = claim["metadata"]["annotations"]
    assert json.loads(annotations[wk.ANNOTATION_PLAN])["pods"] == {}, "virtual pods are never planned (bound)"
    assert json.loads(annotations[wk.ANNOTATION_PLANNED_PODS]) == []
    decision = json.loads(annotations[wk.ANNOTATION_DECISION])
    assert decision["pods"] == 0 and decision["bufferPods"] == 2 and decision["podKeys"] == []
    assert claim["spec"]["resources"]["requests"]["cpu"] == "2", "sized for the headroom"
    assert kube.events() == [], "virtual pods get no events"
    assert metrics.UNSCHEDULABLE_PODS.labels(controller=metrics.PROVISIONER)._value.get() == before == 0
    assert passes == [{"uid-headroom": cb.BufferSummary(new=2)}]
    assert prov.buffer_hosts == {} and prov.nominated == {}

    # The NodeClaim launched: the next pass fits the headroom there and creates nothing.
    state.apply("NodeClaim", "ADDED", launched(claim, "np-abc"))
    assert await prov.provision_once() == []
    assert passes[-1] == {"uid-headroom": cb.BufferSummary(existing=2)}
    assert prov.buffer_hosts == {"nodeclaim/np-abc": 2}
    assert kube.requests_to("PATCH") == [], "no plan is written for virtual pods"


async def test_a_failed_headroom_nodeclaim_create_tells_no_virtual_pod() -> None:
    state = loaded(nodeclass(), nodepool(), pod_template(cpu="1", memory="1Gi"), ready(buffer(**PT), 2))
    kube = FakeKube()
    kube.fail("create", ApiError(500, "InternalError", "boom"), resource=NODECLAIMS)
    prov, _ = buffered_provisioner(state, kube)
    assert await prov.provision_once() == []
    await settle()
    assert kube.events() == [], "virtual pods get no FailedScheduling event (they do not exist)"


async def test_real_pods_take_the_headroom_first_and_the_buffer_needs_new_capacity() -> None:
    state = loaded(nodeclass(), nodepool(), pod_template(cpu="1", memory="1Gi"), ready(buffer(**PT), 2))
    kube = FakeKube()
    prov, passes = buffered_provisioner(state, kube)
    [claim] = await prov.provision_once()
    kube.seed(launched(claim, "np-abc"))
    state.apply("NodeClaim", "ADDED", launched(claim, "np-abc"))
    real = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "app", "namespace": "default", "uid": "uid-app", "resourceVersion": "200"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}}}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }
    state.apply("Pod", "ADDED", real)
    made = await prov.provision_once()
    assert json.loads(made[0]["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS]) == [], "a headroom NodeClaim"
    plan = json.loads(state.nodeclaims["np-abc"]["metadata"]["annotations"].get(wk.ANNOTATION_PLANNED_PODS, "[]"))
    assert plan == ["default/app"], "the real pod is planned onto the headroom"
    assert passes[-1] == {"uid-headroom": cb.BufferSummary(new=2)}


async def test_without_buffers_a_pass_clears_the_buffer_hosts() -> None:
    state = loaded(nodeclass(), nodepool())
    prov, passes = buffered_provisioner(state, FakeKube())
    prov.buffer_hosts = {"node-a": 1}
    assert await prov.provision_once() == []
    assert prov.buffer_hosts == {} and passes == [{}]


# --- the controller ----------------------------------------------------------------------------------------------


async def test_the_controller_writes_status_and_the_provisioning_condition() -> None:
    obj = buffer(**PT, replicas=2)
    state = loaded(pod_template(), obj)
    kube = FakeKube([obj], sink=state)
    triggered: list[int] = []
    controller = CapacityBufferController(kube, state, EventRecorder(kube), trigger=lambda: triggered.append(1))
    enqueued: list[str] = []
    controller.enqueue = enqueued.append

    result = await controller.reconcile("default/headroom")
    assert result.requeue_after == 30.0 and triggered == [1]
    stored = kube.object(CAPACITYBUFFERS, "headroom", "default")
    assert stored is not None
    status = stored["status"]
    assert status["replicas"] == 2 and status["podTemplateRef"] == {"name": "pt"}
    assert condition(status, cb.COND_READY_FOR_PROVISIONING) == ("True", "Resolved")
    assert all(c["type"] != cb.COND_PROVISIONING for c in status["conditions"]), "no pass yet"

    # A pass needing new capacity, then one fitting on existing capacity.
    virtual = cb.virtual_pods(state.capacity_buffers["default/headroom"], template())
    from karpy.scheduling.model import SchedulingResult

    controller.observe_pass(SchedulingResult((), {}, {p.key: "no room" for p in virtual}), virtual)
    assert enqueued == ["default/headroom"]
    await controller.reconcile("default/headroom")
    stored = kube.object(CAPACITYBUFFERS, "headroom", "default")
    assert stored is not None
    assert condition(stored["status"], cb.COND_PROVISIONING) == ("False", cb.REASON_REQUIRES_NEW)
    controller.observe_pass(SchedulingResult((), {"node-a": virtual}, {}), virtual)
    await controller.reconcile("default/headroom")
    stored = kube.object(CAPACITYBUFFERS, "headroom", "default")
    assert stored is not None
    assert condition(stored["status"], cb.COND_PROVISIONING) == ("True", cb.REASON_FITS_EXISTING)
    writes = len(kube.requests_to("PATCH"))
    await controller.reconcile("default/headroom")
    assert len(kube.requests_to("PATCH")) == writes, "an unchanged status is not written again"


async def test_an_unresolvable_buffer_gets_a_condition_and_a_warning() -> None:
    obj = buffer(**PT, replicas=2)
    state = loaded(obj)
    kube = FakeKube([obj], sink=state)
    controller = CapacityBufferController(kube, state, EventRecorder(kube))
    assert (await controller.reconcile("default/headroom")).requeue_after == 30.0
    await settle()
    stored = kube.object(CAPACITYBUFFERS, "headroom", "default")
    assert stored is not None
    assert condition(stored["status"], cb.COND_READY_FOR_PROVISIONING) == ("False", cb.REASON_POD_TEMPLATE_NOT_FOUND)
    [event] = kube.events(cb.REASON_POD_TEMPLATE_NOT_FOUND)
    assert event["type"] == "Warning" and event["involvedObject"]["kind"] == "CapacityBuffer"


async def test_a_deleted_buffer_wakes_the_provisioner() -> None:
    state = loaded()
    triggered: list[int] = []
    kube = FakeKube()
    controller = CapacityBufferController(kube, state, EventRecorder(kube), trigger=lambda: triggered.append(1))
    assert (await controller.reconcile("default/gone")).requeue_after is None
    assert triggered == [1]


# --- the gate ---------------------------------------------------------------------------------------------------


def test_the_gate_is_accepted_and_off_by_default() -> None:
    assert from_environment({"CLUSTER_NAME": "c"}).feature_gates["CapacityBuffer"] is False
    on = from_environment({"CLUSTER_NAME": "c", "FEATURE_GATES": "CapacityBuffer=true"})
    assert on.feature_gates["CapacityBuffer"] is True


def test_the_operator_watches_buffers_only_with_the_gate() -> None:
    cloud = FakeCloudProvider(CATALOGUE)
    off = Operator(from_environment({"CLUSTER_NAME": "c"}), FakeKube(), cloud, nodeclasses=cloud)  # type: ignore[arg-type]
    assert off.capacity_buffers is None
    assert "CapacityBuffer" not in {i.resource.kind for i in off.informers}
    assert off.provisioner.virtual_pods() == []
    on = Operator(
        from_environment({"CLUSTER_NAME": "c", "FEATURE_GATES": "CapacityBuffer=true"}),
        FakeKube(),
        cloud,
        nodeclasses=cloud,  # type: ignore[arg-type]
    )
    assert on.capacity_buffers is not None
    assert set(BUFFER_KINDS) <= {i.resource.kind for i in on.informers}
    assert set(BUFFER_KINDS) <= set(on.state.kinds)


# --- disruption ---------------------------------------------------------------------------------------------------


async def test_a_node_holding_headroom_is_neither_empty_nor_consolidated() -> None:
    from tests.unit.test_disruption_orchestrator import Harness, two_nodes

    h = Harness(two_nodes())  # node-a empty, node-b with one pod; both c.xlarge (4 cpu)
    headroom = cb.virtual_pods(ready(buffer(**PT), 1), template(cpu="3800m", memory="1Gi"))
    h.provisioner.virtual_pods = lambda: list(headroom)
    h.provisioner.buffer_hosts = {"node-a": 1}
    try:
        command = await h.evaluate()
        assert command is None, "the headroom fits only node-a: no emptiness, no cheaper replacement"
        assert h.deleted() == []
        messages = [e["message"] for e in h.kube.events("Unconsolidatable", name="node-a")]
        assert messages == ['Node "node-a" has buffer pods']
        # Without the buffer the same node is empty and goes.
        h.provisioner.virtual_pods = list
        h.provisioner.buffer_hosts = {}
        h.disruption.methods.state_version += 1
        command = await h.evaluate()
        assert command is not None and command.method == "emptiness"
    finally:
        await h.close()


def test_the_operator_routes_buffer_template_and_workload_changes() -> None:
    cloud = FakeCloudProvider(CATALOGUE)
    settings = from_environment({"CLUSTER_NAME": "c", "FEATURE_GATES": "CapacityBuffer=true"})
    op = Operator(settings, FakeKube(), cloud, nodeclasses=cloud)  # type: ignore[arg-type]
    op.wire()
    queue = op.capacity_buffers
    assert queue is not None
    queued = queue.queue._queued
    op.state.apply("CapacityBuffer", "ADDED", buffer("a", **PT, replicas=1))
    op.state.apply("CapacityBuffer", "ADDED", buffer("b", **DEPLOY, replicas=1))
    assert queued == {"default/a", "default/b"}
    queued.clear()
    queue.queue._queue.clear()
    op.state.apply("PodTemplate", "ADDED", pod_template())
    assert queued == {"default/a"}
    op.state.apply("Deployment", "ADDED", deployment())
    assert queued == {"default/a", "default/b"}
    queued.clear()
    queue.queue._queue.clear()
    status_only = deployment()
    status_only["metadata"]["resourceVersion"] = "60"
    op.state.apply("Deployment", "MODIFIED", status_only)
    assert queued == set(), "a status-only workload update changes no buffer"
    scaled = deployment(replicas=20)
    scaled["metadata"].update(resourceVersion="61", generation=2)
    op.state.apply("Deployment", "MODIFIED", scaled)
    assert queued == {"default/b"}
    assert op.provisioner.virtual_pods() == [], "no buffer is ready yet"


def test_headroom_planned_with_backing_off_pods_waits_with_them() -> None:
    from karpy.controllers.launch_backoff import LaunchBackoff
    from karpy.scheduling.model import NewNodeClaim
    from karpy.scheduling.translate import scheduling_pod

    real = scheduling_pod({"metadata": {"name": "app", "namespace": "default", "uid": "u"}, "spec": {}})
    virtual = cb.virtual_pods(ready(buffer(**PT), 1), template())
    backoff = LaunchBackoff(clock=lambda: 100.0)
    backoff.failed(["default/app"])

    def plan(*pods: Any) -> NewNodeClaim:
        return NewNodeClaim("np", (), (), tuple(pods), {}, {})

    created, wait = backoff.hold([plan(real, *virtual), plan(*virtual)])
    assert [len(p.pods) for p in created] == [1], "only the headroom-only plan goes now"
    assert wait == 5.0


async def test_a_node_that_takes_headroom_during_validation_leaves_the_emptiness_command() -> None:
    from tests.unit.test_disruption_orchestrator import Harness, two_nodes

    h = Harness(two_nodes())
    try:
        ctx = await h.disruption.context(T0)
        assert ctx is not None
        command = h.disruption.decide(ctx)
        assert command is not None and command.method == "emptiness"
        h.provisioner.buffer_hosts = {"node-a": 1}  # a provisioning pass placed headroom there meanwhile
        fresh = h.disruption.validation._revalidate_empty(ctx, command, None)
        assert fresh is None
    finally:
        await h.close()


async def test_a_status_conflict_retries_in_a_second_and_other_errors_raise() -> None:
    from karpy.kube.errors import ApiError

    obj = buffer(**PT, replicas=2)
    state = loaded(pod_template(), obj)
    kube = FakeKube([obj], sink=state)
    controller = CapacityBufferController(kube, state, EventRecorder(kube))
    kube.fail("patch", ApiError(409, "Conflict", "the object has been modified"), resource=CAPACITYBUFFERS)
    assert (await controller.reconcile("default/headroom")).requeue_after == 1.0
    kube.fail("patch", ApiError(500, "InternalError", "boom"), resource=CAPACITYBUFFERS)
    with pytest.raises(ApiError):
        await controller.reconcile("default/headroom")
    assert (await controller.reconcile("default/headroom")).requeue_after == 30.0
