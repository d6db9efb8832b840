"""The write fence at the apiserver chokepoint: ``KubeClient.request`` refuses every write (POST, PUT, PATCH,
DELETE, subresources included) unless the leader fence holds, and sends nothing; reads and watches always pass,
so a standby keeps its cache warm. The check runs after the client-side rate limiter's wait, so a write queued
behind the limiter while leading is refused when its turn comes after the lease was lost."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from karpy.kube.client import KubeClient
from karpy.kube.fake import FakeKube
from karpy.kube.ratelimit import TokenBucket
from karpy.kube.resources import LEASES, NODECLAIMS, NODES, PODS
from karpy.runtime.clock import FakeClock, settle
from karpy.runtime.fence import Fence, NotLeader

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
