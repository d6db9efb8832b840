"""The write fence at the apiserver chokepoint: ``KubeClient.request`` refuses every write (POST, PUT, PATCH,
DELETE, subresources included) unless the leader fence holds, and sends nothing; reads and watches always pass,
so a standby keeps its cache warm. The check runs after the client-side rate limiter's wait, so a write queued
behind the limiter while leading is refused when its turn comes after the lease was lost.

A refused write (NotLeader) is not a failure: a launch refused by the fence does not mark the NodeClaim
launch-failed, back off its pods or delete it, and the controller loops neither rate-limit the key nor step
their backoff."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from prometheus_client import Counter

from karpy.cloudprovider.fake import FakeInterruptionQueue
from karpy.kube.client import KubeClient
from karpy.kube.fake import FakeKube
from karpy.kube.ratelimit import TokenBucket
from karpy.kube.resources import LEASES, NODECLAIMS, NODES, PODS
from karpy.metrics import DISRUPTION_QUEUE_FAILURES, INTERRUPTION_QUEUE_ERRORS, NODECLAIMS_LAUNCH_FAILED
from karpy.runtime.clock import FakeClock, settle
from karpy.runtime.controller import Controller, Result
from karpy.runtime.fence import Fence, NotLeader
from karpy.runtime.singleton import SingletonController
from karpy.state.cluster import KINDS
from tests.unit.disruption_builders import T0
from tests.unit.test_disruption_orchestrator import Harness, two_nodes
from tests.unit.test_interruption_gc import controller as interruption_controller
from tests.unit.test_launch_backoff import deleted, lifecycle_setup

POD = {"kind": "Pod", "metadata": {"name": "p", "namespace": "default"}, "spec": {}}
NODE = {"kind": "Node", "metadata": {"name": "n1"}}


def fenced(fence: Fence, *, rate_limiter: TokenBucket | None = None) -> FakeKube:
    kube = FakeKube([POD, NODE], rate_limiter=rate_limiter)
    kube.fence = fence
    return kube


def writes(kube: KubeClient) -> list[tuple[str, Any]]:
    """Every write verb of the client, as (expected method, coroutine factory)."""
    claim = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c1"}}
    binding = {"target": {"kind": "Node", "name": "n1"}}
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "default"}}
    return [
        ("POST", lambda: kube.create(NODECLAIMS, claim)),
        ("PATCH", lambda: kube.merge_patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}})),
        ("PATCH", lambda: kube.merge_patch(NODECLAIMS, "c1", {"status": {}}, subresource="status")),
        ("PATCH", lambda: kube.json_patch(NODES, "n1", [{"op": "add", "path": "/metadata/labels", "value": {}}])),
        ("PUT", lambda: kube.replace(NODES, "n1", NODE)),
        ("DELETE", lambda: kube.delete(NODES, "n1")),
        ("POST", lambda: kube.create_subresource(PODS, "p", "binding", binding, "default")),
        ("POST", lambda: kube.create_subresource(PODS, "p", "eviction", eviction, "default")),
        ("POST", lambda: kube.request("post", "/api/v1/namespaces/default/pods", body=POD)),
    ]


async def test_a_closed_fence_refuses_every_write_and_sends_nothing() -> None:
    """A standby's fence (never granted): each write raises NotLeader naming the verb and path; the transport
    saw no request at all."""
    kube = fenced(Fence("standby-1"))
    for method, call in writes(kube):
        with pytest.raises(NotLeader) as err:
            await call()
        assert err.value.action.startswith(f"{method} /"), err.value.action
        assert err.value.identity == "standby-1"
    assert kube.requests == []
    assert "labels" not in (await kube.get(NODES, "n1"))["metadata"]


async def test_reads_and_watches_pass_a_closed_fence() -> None:
    """GET, LIST and WATCH are never fenced: a standby lists and watches like a leader."""
    kube = fenced(Fence("standby-1"))
    assert (await kube.get(NODES, "n1"))["metadata"]["name"] == "n1"
    items, _ = await kube.list(PODS, "default")
    assert [i["metadata"]["name"] for i in items] == ["p"]
    kube.compact()  # a watch from resourceVersion 0 is answered at once (410 Gone) and ends
    lines = [line async for line in kube.stream_lines("/api/v1/pods", {"watch": "true"}, read_timeout=60)]
    assert [json.loads(line)["object"]["code"] for line in lines] == [410]
    assert [r.method for r in kube.requests] == ["GET", "GET", "GET"]


async def test_a_granted_fence_lets_writes_through_until_its_deadline() -> None:
    """Granted until t=1010 on an injected monotonic clock: writes pass before, and the first write at or after
    the deadline is refused without being sent."""
    clock = FakeClock(1000.0)
    fence = Fence("leader-1", clock)
    fence.grant(1010.0)
    kube = fenced(fence)
    await kube.merge_patch(NODES, "n1", {"metadata": {"labels": {"a": "b"}}})
    await clock.advance(9.999)
    await kube.delete(PODS, "p", "default")
    await clock.advance(0.001)
    with pytest.raises(NotLeader):
        await kube.merge_patch(NODES, "n1", {"metadata": {"labels": {"a": "c"}}})
    assert [r.method for r in kube.requests] == ["PATCH", "DELETE"]
    assert (await kube.get(NODES, "n1"))["metadata"]["labels"] == {"a": "b"}


async def test_a_write_queued_behind_the_rate_limiter_is_refused_once_the_fence_is_revoked() -> None:
    """The bucket is empty: the third write waits one second for its token while leading. The lease is lost
    meanwhile (revoke); when the token comes the write is refused, not sent. A read queued the same way passes."""
    clock = FakeClock(1000.0)
    fence = Fence("leader-1", clock)
    fence.grant(2000.0)
    kube = fenced(fence, rate_limiter=TokenBucket(1.0, 2, now=clock.now, sleep=clock.sleep))
    first = [
        asyncio.create_task(kube.merge_patch(NODES, "n1", {"metadata": {"labels": {f"l{i}": "x"}}})) for i in (0, 1)
    ]
    queued = asyncio.create_task(kube.merge_patch(NODES, "n1", {"metadata": {"labels": {"late": "x"}}}))
    read = asyncio.create_task(kube.get(NODES, "n1"))
    await settle()
    assert [t.done() for t in first] == [True, True] and not queued.done()
    fence.revoke()
    await clock.advance(2.0)
    with pytest.raises(NotLeader):
        await queued
    assert (await read)["metadata"]["name"] == "n1"
    assert [r.method for r in kube.requests] == ["PATCH", "PATCH", "GET"]
    assert kube.store[("/api/v1/nodes", "", "n1")]["metadata"]["labels"] == {"l0": "x", "l1": "x"}


class _StubApi:
    """kubernetes-asyncio's ApiClient as far as KubeClient uses it: records every call_api."""

    def __init__(self) -> None:
        self.user_agent = ""
        self.calls: list[tuple[str, str]] = []

    async def call_api(self, path: str, method: str, **_: Any) -> Any:
        self.calls.append((method, path))
        return _Response()

    async def close(self) -> None:
        pass


class _Response:
    status = 200

    async def text(self) -> str:
        return "{}"

    def release(self) -> None:
        pass


async def test_the_real_transport_is_not_reached_by_a_fenced_write() -> None:
    """KubeClient itself (not the fake): a refused write never reaches ``ApiClient.call_api``; a read does; with no
    fence (the default, and the leader-election client) writes are sent as before."""
    api = _StubApi()
    kube = KubeClient(api, fence=Fence("standby-1"))  # type: ignore[arg-type]
    with pytest.raises(NotLeader):
        await kube.delete(LEASES, "x", "kube-system")
    await kube.get(LEASES, "x", "kube-system")
    assert api.calls == [("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x")]
    unfenced = KubeClient(api)  # type: ignore[arg-type]
    await unfenced.delete(LEASES, "x", "kube-system")
    assert api.calls[-1] == ("DELETE", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/x")


# --- NotLeader is not a failure ----------------------------------------------------------------------------------


def counted(counter: Counter, **labels: str) -> float:
    """The value of ``counter`` for ``labels`` (0 when never counted), whatever the metric is named."""
    return sum(
        s.value
        for metric in counter.collect()
        for s in metric.samples
        if s.name.endswith("_total") and s.labels == labels
    )


def launch_failed_total(reason: str) -> float:
    return counted(NODECLAIMS_LAUNCH_FAILED, nodepool="np", reason=reason)


async def test_a_launch_refused_by_the_fence_is_not_a_launch_failure() -> None:
    """The cloud provider's launch raised NotLeader (CreateFleet refused in before-send): the NodeClaim is not
    deleted, gets no LaunchFailed condition and no event, its pods do not back off, no launch failure is
    counted; the controller drops the key without a rate-limited retry. The same launch failing with a cloud
    error does all of that (the control case)."""
    lifecycle, kube, cloud, _ = lifecycle_setup(NotLeader("ec2 CreateFleet", "host_1"))
    controller = Controller(lifecycle, workers=1)
    before = launch_failed_total("LaunchFailed")
    await controller._reconcile("np-1")
    await settle()
    assert len(cloud.create_calls) == 1
    assert kube.requests == [], "no condition patch, no event, no delete"
    assert deleted(kube) == []
    assert lifecycle.backoff.failures("default/a") == lifecycle.backoff.failures("default/b") == 0
    assert launch_failed_total("LaunchFailed") == before
    assert controller.queue.waiting == 0 and len(controller.queue) == 0, "not retried with backoff"

    lifecycle, kube, cloud, _ = lifecycle_setup(RuntimeError("CreateFleet: InternalError"))
    controller = Controller(lifecycle, workers=1)
    await controller._reconcile("np-1")
    await settle()
    assert lifecycle.backoff.failures("default/a") == 1
    assert launch_failed_total("LaunchFailed") == before + 1
    assert [r.method for r in kube.requests if r.path.endswith("/np-1/status")] == ["PATCH"]
    assert controller.queue.waiting == 1, "a cloud error is retried with backoff"


class _Refused:
    name = "refused"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def reconcile(self) -> Result:
        raise self.error


async def test_a_singleton_refused_by_the_fence_does_not_back_off() -> None:
    """A pass whose write was refused waits for a trigger (None) with the backoff untouched; a real error steps
    the backoff and retries after it."""
    loop = SingletonController(_Refused(NotLeader("sqs ReceiveMessage")), jitter=0.0)
    assert await loop.once() is None
    assert loop.backoff.failures == 0
    failing = SingletonController(_Refused(RuntimeError("boom")), jitter=0.0)
    assert await failing.once() == 1.0
    assert failing.backoff.failures == 1


async def test_a_disruption_command_refused_by_the_fence_is_not_a_failed_command() -> None:
    """The fence closes before a command's first write (the taint): the command stops without undoing (every
    undo write would be refused too; the next leader clears leftovers), without backing off its candidate and
    without counting a failure; nothing was written."""
    h = Harness(two_nodes())
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    decided = h.disruption.decide(ctx)
    assert decided is not None
    labels = {"decision": decided.decision, "reason": decided.reason, "consolidation_type": decided.method}
    before = counted(DISRUPTION_QUEUE_FAILURES, **labels)
    h.kube.fence = Fence("host_1")
    assert await h.queue.execute(decided) is False
    assert h.writes() == []
    assert h.queue.backoff == {}
    assert counted(DISRUPTION_QUEUE_FAILURES, **labels) == before
    await h.close()


async def test_an_interruption_receive_refused_by_the_fence_is_not_a_queue_outage() -> None:
    """ReceiveMessage refused (a standby must not hide messages from the leader): the pass stops with
    NotLeader; the queue is not reported unreadable (readiness), its error counter and health gauge stay."""
    queue = FakeInterruptionQueue()
    queue.fail("receive", NotLeader("sqs ReceiveMessage"))
    kube = FakeKube()
    ctl, _, _ = interruption_controller(kube, queue)
    for kind in KINDS:
        ctl.state.replace(kind, [])
    errors = counted(INTERRUPTION_QUEUE_ERRORS)
    with pytest.raises(NotLeader):
        await ctl.reconcile()
    assert ctl.queue_error == ""
    assert counted(INTERRUPTION_QUEUE_ERRORS) == errors
    assert kube.requests == []
