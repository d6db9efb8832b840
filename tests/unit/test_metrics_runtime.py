"""The process-level families, piece by piece: workqueue accounting, client-go request labels, the cloud-provider
decorator's error labels and the AWS launch-failure reasons."""

from __future__ import annotations

import pytest
import structlog

from karpy.aws.instances import count_launch_failures, launch_failure_reason
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.metrics import MeteredCloudProvider, error_type
from karpy.cloudprovider.types import CloudProviderError, InsufficientCapacityError, NodeClaimNotFoundError
from karpy.kube.client import request_labels
from karpy.runtime.clock import FakeClock
from karpy.runtime.controller import Controller, Result
from karpy.runtime.workqueue import WorkQueue
from tests.unit.metrics_helpers import Delta, sample, since


async def test_workqueue_counts_adds_depth_waits_and_retries() -> None:
    """client-go's accounting: an add counts once until taken, a key re-added while processed counts again and
    is queued on done; depth returns to zero; a delayed add is a retry."""
    ticks = iter(float(t) for t in range(100))
    queue = WorkQueue(name="unit-queue", clock=FakeClock(), monotonic=lambda: next(ticks))
    labels = {"name": "unit-queue", "controller": "unit-queue"}
    adds = since(("workqueue_adds_total", labels))
    durations = since(
        ("workqueue_queue_duration_seconds_count", labels), ("workqueue_work_duration_seconds_count", labels)
    )
    retries = since(("workqueue_retries_total", labels))
    queue.add("a")
    queue.add("a")  # already queued: no add
    queue.add("b")
    assert adds() == [2]
    assert sample("workqueue_depth", **labels, priority="") == 2
    key = await queue.get()
    queue.add(key)  # added again while processed: counted, queued after done
    assert sample("workqueue_depth", **labels, priority="") == 2
    queue.done(key)
    assert durations() == [1, 1]
    for _ in range(2):
        queue.done(await queue.get())
    assert adds() == [3]
    assert sample("workqueue_depth", **labels, priority="") == 0
    queue.add_rate_limited("c")
    assert retries() == [1]
    assert sample("workqueue_unfinished_work_seconds", **labels) == 0
    assert sample("workqueue_longest_running_processor_seconds", **labels) == 0


async def test_a_dirty_key_dropped_after_a_failure_leaves_the_depth() -> None:
    queue = WorkQueue(name="unit-dropped", clock=FakeClock())
    labels = {"name": "unit-dropped", "controller": "unit-dropped", "priority": ""}
    queue.add("a")
    key = await queue.get()
    queue.add(key)
    queue.done(key, requeue_if_dirty=False)
    assert sample("workqueue_depth", **labels) == 0 and len(queue) == 0


class Flaky:
    name = "unit-flaky"

    def __init__(self) -> None:
        self.results: list[Result | Exception] = [RuntimeError("boom"), Result(requeue_after=5), Result(), Result(0)]

    async def reconcile(self, key: str) -> Result:
        outcome = self.results.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


async def test_reconcile_results_are_labelled_as_controller_runtime() -> None:
    results = ("error", "requeue_after", "success", "requeue")
    ctl = {"controller": "unit-flaky"}
    with Delta(
        *(("controller_runtime_reconcile_total", {**ctl, "result": result}) for result in results),
        ("controller_runtime_reconcile_errors_total", ctl),
        ("controller_runtime_reconcile_time_seconds_count", ctl),
    ) as delta:
        controller = Controller(Flaky(), workers=3, queue=WorkQueue(clock=FakeClock()))
        for _ in range(4):
            await controller._reconcile("k")
    assert delta() == [1, 1, 1, 1, 1, 4]
    assert controller.queue.name == "unit-flaky"


@pytest.mark.parametrize(
    ("method", "path", "labels"),
    [
        ("GET", "/api/v1/namespaces/default/pods/p", ("GET", "", "v1", "pods", "")),
        ("GET", "/api/v1/pods", ("LIST", "", "v1", "pods", "")),
        ("GET", "/api/v1/namespaces/default/pods", ("LIST", "", "v1", "pods", "")),
        ("POST", "/api/v1/namespaces/default/pods/p/eviction", ("CREATE", "", "v1", "pods", "eviction")),
        ("PATCH", "/apis/karpenter.sh/v1/nodeclaims/c/status", ("PATCH", "karpenter.sh", "v1", "nodeclaims", "status")),
        (
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/k/leases/l",
            ("UPDATE", "coordination.k8s.io", "v1", "leases", ""),
        ),
        ("DELETE", "/api/v1/nodes/n", ("DELETE", "", "v1", "nodes", "")),
        ("GET", "/api/v1/namespaces/kube-system", ("GET", "", "v1", "namespaces", "")),
        ("GET", "/version", ("", "", "", "", "")),
    ],
)
def test_request_labels_follow_operatorpkg(method: str, path: str, labels: tuple[str, ...]) -> None:
    assert request_labels(method, path) == labels


def test_error_type_labels() -> None:
    assert error_type(InsufficientCapacityError()) == "InsufficientCapacityError"
    assert error_type(NodeClaimNotFoundError()) == "NodeClaimNotFoundError"
    assert error_type(CloudProviderError()) == "unknown"


async def test_metered_cloud_provider_labels_controller_and_error() -> None:
    labels = {"controller": "unit-gc", "method": "List", "provider": "unit"}
    with Delta(
        ("karpenter_cloudprovider_errors_total", {**labels, "error": "unknown", "nodepool": ""}),
        ("karpenter_cloudprovider_duration_seconds_count", labels),
        ("karpenter_cloudprovider_duration_seconds_count", {**labels, "controller": ""}),
    ) as delta:
        cloud = FakeCloudProvider()
        metered = MeteredCloudProvider(cloud, provider="unit")
        cloud.fail("list", CloudProviderError("throttled"))
        with structlog.contextvars.bound_contextvars(controller="unit-gc"), pytest.raises(CloudProviderError):
            await metered.list()
        await metered.list()
    assert delta() == [1, 1, 1]
    assert metered.instances is cloud.instances  # other attributes pass through


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        ("VcpuLimitExceeded", "You have requested more vCPU capacity", "VCPULimitExceeded"),
        ("UnauthorizedOperation", "You are not authorized", "Unauthorized"),
        ("AuthFailure.ServiceLinkedRoleCreationNotPermitted", "no role", "SpotSLRCreationFailed"),
        ("InvalidParameter", "sg and subnet belong to different networks", "SecurityGroupSubnetVPCMismatch"),
        ("InsufficientInstanceCapacity", "no capacity", "LaunchFailed"),
    ],
)
def test_launch_failure_reasons_follow_karpenter(code: str, message: str, reason: str) -> None:
    assert launch_failure_reason(code, message) == reason


def test_launch_failures_are_counted_per_offering() -> None:
    status = {"subnets": [{"id": "subnet-a", "zone": "unit-1a", "zoneID": "unit-az1"}]}
    errors = [
        {
            "ErrorCode": "InsufficientInstanceCapacity",
            "LaunchTemplateAndOverrides": {"Overrides": {"SubnetId": "subnet-a"}},
        },
        {
            "ErrorCode": "VcpuLimitExceeded",
            "LaunchTemplateAndOverrides": {"Overrides": {"AvailabilityZone": "unit-1a"}},
        },
    ]
    labels = {"zone": "unit-1a", "zone_id": "unit-az1", "capacity_type": "spot"}
    with Delta(
        ("karpenter_cloudprovider_instance_launch_failures_total", {**labels, "reason": "LaunchFailed"}),
        ("karpenter_cloudprovider_instance_launch_failures_total", {**labels, "reason": "VCPULimitExceeded"}),
    ) as delta:
        count_launch_failures(errors, status, "spot")
    assert delta() == [1, 1]
