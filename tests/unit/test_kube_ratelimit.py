"""Client-side rate limiting as client-go does it: a token bucket (QPS refill, burst capacity) in front of every
request but watches; on a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from kubernetes_asyncio import client as k8s_client

from karpy.kube.client import KubeClient
from karpy.kube.ratelimit import TokenBucket, client_rate_limiter
from karpy.runtime.clock import FakeClock, settle


def test_burst_then_one_token_per_interval() -> None:
    """A full bucket serves ``burst`` requests at once; the next ones wait 1/qps more each, in arrival order."""
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, now=clock.now, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(5)] == [0.0, 0.0, 0.0, 0.5, 1.0]


async def test_refill_is_capped_at_burst() -> None:
    """Idle time refills at qps tokens per second, never beyond the burst."""
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, now=clock.now, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    await clock.advance(1.0)  # two tokens back
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.5]
    await clock.advance(60.0)
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


def test_client_go_defaults() -> None:
    """QPS 0 and burst 0 mean client-go's defaults (5, 10); a negative QPS disables the limiter."""
    limiter = client_rate_limiter(0, 0)
    assert limiter is not None and (limiter.qps, limiter.burst) == (5.0, 10)
    limiter = client_rate_limiter(200, 300)
    assert limiter is not None and (limiter.qps, limiter.burst) == (200, 300)
    assert client_rate_limiter(-1, 0) is None
    with pytest.raises(ValueError):
        TokenBucket(0, 1)


class FakeResponse:
    status = 200

    def __init__(self, lines: list[bytes]) -> None:
        self.content = self
        self._lines = lines

    async def text(self) -> str:
        return "{}"

    async def readline(self) -> bytes:
        return self._lines.pop(0) if self._lines else b""

    def release(self) -> None:
        return None


class FakeApi:
    """What KubeClient uses of kubernetes-asyncio's ApiClient; records each call's path."""

    user_agent = ""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def call_api(self, path: str, method: str, **_: Any) -> FakeResponse:
        self.calls.append(path)
        return FakeResponse([b'{"type": "BOOKMARK"}\n'])


async def test_requests_wait_for_tokens_and_watches_do_not() -> None:
    """With the bucket empty a GET waits for its token, while a watch starts at once."""
    clock = FakeClock()
    api = FakeApi()
    kube = KubeClient(
        cast(k8s_client.ApiClient, api), rate_limiter=TokenBucket(1.0, 2, now=clock.now, sleep=clock.sleep)
    )
    requests = [asyncio.create_task(kube.request("GET", f"/api/v1/nodes/n{i}")) for i in range(3)]
    await settle()
    assert [t.done() for t in requests] == [True, True, False]
    lines = [line async for line in kube.stream_lines("/api/v1/pods", {"watch": "true"}, read_timeout=60)]
    assert lines == [b'{"type": "BOOKMARK"}\n'] and api.calls[-1] == "/api/v1/pods"
    await clock.advance(0.99)
    assert not requests[2].done()
    await clock.advance(0.01)
    assert requests[2].done()
    assert api.calls == ["/api/v1/nodes/n0", "/api/v1/nodes/n1", "/api/v1/pods", "/api/v1/nodes/n2"]
