"""Launch failures (issue 7, defect 3): per-pod exponential back-off, events on the pods, the provisioner holding
NodeClaims for pods backing off, and FailedScheduling naming the AMI when only types without one would fit."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY
from test_provisioner_scheduling_inputs import (
    CATALOGUE,
    itype,
    loaded,
    nodeclass,
    nodepool,
    pod,
    settle,
)

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import IncompatibleInstanceTypes, InstanceType, InsufficientCapacityError
from karpy.controllers.launch_backoff import BASE_DELAY, MAX_DELAY, LaunchBackoff
from karpy.controllers.nodeclaim_lifecycle import NodeClaimLifecycle
from karpy.controllers.provisioner import Provisioner
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS
from karpy.scheduling import model
from tests.unit.disruption_builders import following_plans

JSON = dict[str, Any]
GPU = wk.RESOURCE_NVIDIA_GPU
AMI_REASON = (
    'EC2NodeClass "nc" resolves AMIs only for (kubernetes.io/arch In [amd64], '
    "karpenter.k8s.aws/instance-gpu-count DoesNotExist)"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def gpu_type(name: str, gpus: int, price: float) -> InstanceType:
    base = itype(name, 4, price)
    return InstanceType(
        name=name,
        labels={**base.labels, wk.LABEL_INSTANCE_GPU_COUNT: str(gpus)},
        capacity={**base.capacity, GPU: gpus},
        overhead={},
        offerings=base.offerings,
    )


def fake_cloud() -> FakeCloudProvider:
    """A NodeClass whose AMIs boot the CPU catalogue only: the GPU type is left out, with the reason."""
    return FakeCloudProvider(
        CATALOGUE, incompatible=IncompatibleInstanceTypes((gpu_type("g.xlarge", 1, 0.5),), AMI_REASON)
    )


def gpu_pod(name: str) -> JSON:
    obj = pod(name)
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", GPU: "1"}, "limits": {GPU: "1"}}
    return obj


def warnings(kube: FakeKube, reason: str) -> dict[str, str]:
    return {e["involvedObject"]["name"]: e["message"] for e in kube.events(reason)}


def deleted(kube: FakeKube) -> list[str]:
    """The NodeClaims DELETEd, in order."""
    return [r.path.rsplit("/", 1)[-1] for r in kube.requests_to("DELETE", NODECLAIMS)]


def plan(*pod_names: str) -> model.NewNodeClaim:
    pods = tuple(model.Pod(name=n, namespace="default", uid=f"uid-{n}") for n in pod_names)
    return model.NewNodeClaim(nodepool="np", requirements=(), instance_types=(), pods=pods, requests={}, labels={})


# --- LaunchBackoff ----------------------------------------------------------------------------------------------


def test_backoff_doubles_per_consecutive_failure_up_to_the_cap() -> None:
    clock = Clock()
    backoff = LaunchBackoff(clock)
    delays = []
    for _ in range(9):
        delays.append(backoff.failed(["default/a"]))
        assert backoff.remaining("default/a") == delays[-1]
        clock.now += delays[-1]
        assert backoff.remaining("default/a") == 0, "the back-off ends after its delay"
    assert delays == [BASE_DELAY * 2**i for i in range(6)] + [MAX_DELAY] * 3
    assert backoff.failures("default/a") == 9
    assert backoff.remaining("default/b") == 0 and backoff.failures("default/b") == 0


def test_success_resets_and_a_long_quiet_period_forgets() -> None:
    clock = Clock()
    backoff = LaunchBackoff(clock)
    backoff.failed(["default/a", "default/b"])
    backoff.failed(["default/a", "default/b"])
    backoff.succeeded(["default/a"])
    assert backoff.failures("default/a") == 0 and backoff.failures("default/b") == 2
    assert backoff.failed(["default/a"]) == BASE_DELAY, "after a success the next failure starts over"
    clock.now += 2 * BASE_DELAY + MAX_DELAY + 1
    assert backoff.failures("default/b") == 0, "no failure for longer than the cap: forgotten"
    backoff.prune({"default/b"})
    assert backoff.failures("default/a") == 0, "pruned: the pod no longer exists"


def test_a_nodeclaim_counts_once() -> None:
    """A second failure of the same NodeClaim (its launch retried before its deletion was seen) adds nothing."""
    backoff = LaunchBackoff(Clock())
    assert backoff.failed(["default/a"], "np-1") == BASE_DELAY
    assert backoff.failed(["default/a"], "np-1") == BASE_DELAY
    assert backoff.failures("default/a") == 1
    assert backoff.failed(["default/a"], "np-2") == 2 * BASE_DELAY


def test_hold_keeps_back_plans_whose_pods_all_back_off() -> None:
    clock = Clock()
    backoff = LaunchBackoff(clock)
    backoff.failed(["default/a", "default/b"])
    clock.now += 2
    create, wait = backoff.hold([plan("a", "b"), plan("a", "c"), plan("d")])
    assert [[p.name for p in c.pods] for c in create] == [["a", "c"], ["d"]], "a plan with a fresh pod is created"
    assert wait == BASE_DELAY - 2
    assert backoff.hold([plan("d")]) == ([plan("d")], 0.0)


# --- provisioner ------------------------------------------------------------------------------------------------


def provisioner(objs: list[JSON], clock: Clock) -> tuple[Provisioner, FakeKube, FakeCloudProvider]:
    kube, cloud = FakeKube(), fake_cloud()
    state = loaded([nodeclass(), nodepool(), *objs])
    prov = Provisioner(
        kube, state, cloud, EventRecorder(kube), plans=following_plans(state), launch_backoff=LaunchBackoff(clock)
    )
    return prov, kube, cloud


async def test_pods_backing_off_get_no_new_nodeclaim_until_their_backoff_ends() -> None:
    clock = Clock()
    prov, kube, _ = provisioner([pod("a"), pod("b")], clock)
    prov.launch_backoff.failed(["default/a", "default/b"])
    assert await prov.provision_once() == []
    await settle()
    assert kube.names(NODECLAIMS) == [] and warnings(kube, "FailedScheduling") == {}, "held, not unschedulable"
    assert prov._retry is not None and not prov._retry.cancelled(), "a batch is opened when the back-off ends"
    prov._retry.cancel()
    clock.now += BASE_DELAY
    [claim] = await prov.provision_once()
    assert json.loads(claim["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS]) == ["default/a", "default/b"]


async def test_pods_only_types_without_an_ami_would_fit_are_told_the_ami_requirements() -> None:
    """The GPU pod fits only the left-out GPU type: FailedScheduling names the AMI requirements, no NodeClaim;
    a pod nothing fits keeps the scheduler's message, a CPU pod still gets its NodeClaim."""
    huge = pod("huge")
    huge["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "64"}}
    prov, kube, _ = provisioner([gpu_pod("gpu"), huge, pod("cpu")], Clock())
    created = await prov.provision_once()
    await settle()
    assert [json.loads(c["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS]) for c in created] == [["default/cpu"]]
    failed = warnings(kube, "FailedScheduling")
    assert set(failed) == {"gpu", "huge"}
    assert failed["gpu"].startswith(  # Karpenter's PodFailedToScheduleEvent text (scheduling/events.go)
        "Failed to schedule pod, "
        f'incompatible with nodepool "np": no instance type that fits has a compatible AMI: {AMI_REASON}; '
        "would fit: g.xlarge; "
    ), failed["gpu"]
    assert "no instance type has enough allocatable for nvidia.com/gpu=1" in failed["gpu"], "scheduler's reason kept"
    assert "AMI" not in failed["huge"]


# --- NodeClaim lifecycle ------------------------------------------------------------------------------------------


def lifecycle_setup(error: Exception | None) -> tuple[NodeClaimLifecycle, FakeKube, FakeCloudProvider, JSON]:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": "np-1",
            "uid": "uid-np-1",
            "resourceVersion": "1",
            "creationTimestamp": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "labels": {wk.LABEL_NODEPOOL: "np"},
            "annotations": {wk.ANNOTATION_PLANNED_PODS: json.dumps(["default/a", "default/b"])},
        },
        "spec": {"nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"}, "requirements": []},
    }
    state = loaded([nodeclass(), nodepool(), pod("a"), pod("b")])
    state.apply("NodeClaim", "ADDED", claim)
    kube, cloud = FakeKube([claim]), fake_cloud()
    if error is not None:
        cloud.fail("create", error)
    backoff = LaunchBackoff(Clock())
    plans = following_plans(state)
    lifecycle = NodeClaimLifecycle(kube, state, cloud, EventRecorder(kube), plans=plans, backoff=backoff)
    return lifecycle, kube, cloud, claim


async def test_a_failed_launch_backs_off_its_pods_and_tells_them_why() -> None:
    lifecycle, kube, _, _ = lifecycle_setup(InsufficientCapacityError("CreateFleet launched nothing (Unsupported)"))
    labels = {"nodepool": "np", "reason": "InsufficientCapacityError"}
    before = REGISTRY.get_sample_value("karpy_nodeclaims_launch_failed_total", labels) or 0.0
    await lifecycle.reconcile("np-1")
    assert REGISTRY.get_sample_value("karpy_nodeclaims_launch_failed_total", labels) == before + 1
    await settle()
    assert deleted(kube) == ["np-1"], "Karpenter deletes the NodeClaim; the next batch re-plans"
    assert lifecycle.backoff.failures("default/a") == lifecycle.backoff.failures("default/b") == 1
    told = warnings(kube, "InsufficientCapacityError")
    assert (
        told["a"]
        == told["b"]
        == (
            # Karpenter's InsufficientCapacityErrorPodEvent text (nodeclaim/lifecycle/events.go), then karpy's back-off
            "NodeClaim np-1 nominated for this pod failed to launch: CreateFleet launched nothing (Unsupported); "
            f"new capacity for this pod is retried in {BASE_DELAY:.0f}s"
        )
    )
    assert "np-1" in told, "the NodeClaim keeps its own event"


async def test_a_successful_launch_resets_the_backoff() -> None:
    lifecycle, _, cloud, _ = lifecycle_setup(None)
    lifecycle.backoff.failed(["default/a", "default/b"])
    await lifecycle.reconcile("np-1")
    assert len(cloud.create_calls) == 1
    assert lifecycle.backoff.failures("default/a") == lifecycle.backoff.failures("default/b") == 0


async def test_a_launch_request_keeps_planned_types_the_amis_no_longer_admit() -> None:
    """The AMIs changed after the plan: the request still carries the planned type, so the cloud provider can
    say the launch failed for want of an AMI instead of finding no offering."""
    lifecycle, _, cloud, claim = lifecycle_setup(None)
    claim["spec"]["requirements"] = [{"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["g.xlarge"]}]
    lifecycle.state.apply("NodeClaim", "MODIFIED", claim)  # cluster state builds its view when it stores the object
    await lifecycle.reconcile("np-1")
    assert [it.name for it in cloud.create_calls[0].instance_types] == ["g.xlarge"]
