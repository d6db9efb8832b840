"""The kube client re-checks the leader fence once a write holds its aiohttp connection: a write that passed
``KubeClient.request``'s check and then waited for a connection (the pool full, or a TLS handshake in progress)
while the lease was lost is refused and never reaches the server. Runs the real transport (kubernetes-asyncio over
aiohttp) against a local HTTP server."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from kubernetes_asyncio import client as k8s_client

from karpy.kube.client import KubeClient
from karpy.runtime.fence import Fence, NotLeader


class Server:
    """An HTTP server that records each request's method and path; ``/slow`` answers once ``release`` is set."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.slow_started = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.path))
        if request.path.endswith("/slow"):
            self.slow_started.set()
            await self.release.wait()
        return web.json_response({})


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    srv = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield srv, f"http://127.0.0.1:{port}"
    finally:
        srv.release.set()
        await runner.cleanup()


def client(host: str, fence: Fence) -> KubeClient:
    configuration = k8s_client.Configuration()
    configuration.host = host
    configuration.connection_pool_maxsize = 1  # one connection: the second request waits for it
    return KubeClient(k8s_client.ApiClient(configuration=configuration), fence=fence)


async def test_a_write_waiting_for_a_connection_is_refused_when_the_fence_closes(server: tuple[Server, str]) -> None:
    srv, host = server
    checks: list[float] = []  # one entry per fence check (reads are not checked)
    checked = asyncio.Event()

    def clock() -> float:
        checks.append(0.0)
        checked.set()
        return 0.0

    fence = Fence("leader-1", clock)
    fence.deadline = math.inf
    kube = client(host, fence)
    try:
        slow = asyncio.create_task(kube.request("GET", "/api/v1/slow"))  # holds the only connection
        await asyncio.wait_for(srv.slow_started.wait(), 5)
        write = asyncio.create_task(kube.request("POST", "/api/v1/namespaces/default/events", body={}))
        await asyncio.wait_for(checked.wait(), 5)  # the write passed request()'s check
        assert checks == [0.0], "only request() checked the fence: the write waits for the connection"
        assert not write.done()
        fence.revoke()  # the lease is lost meanwhile
        srv.release.set()
        await slow
        with pytest.raises(NotLeader) as err:
            await write
        assert err.value.action == "POST /api/v1/namespaces/default/events"
        assert srv.seen == [("GET", "/api/v1/slow")], "the fenced write reached the server"
        # Reads still pass on the same client.
        await kube.request("GET", "/api/v1/nodes")
        assert srv.seen[-1] == ("GET", "/api/v1/nodes")
    finally:
        await kube.close()


async def test_a_body_is_not_written_once_the_fence_closed_after_the_connection(server: tuple[Server, str]) -> None:
    """aiohttp writes a body from a task of its own: the fence closing between the connection and that task's
    write (the process paused there) stops the request before any byte, headers included, is sent."""
    srv, host = server
    checks: list[float] = [0.0, 0.0]  # request(), then the connection: open; the body write: closed
    calls: list[float] = []

    def clock() -> float:
        calls.append(checks.pop(0) if checks else 10.0)
        return calls[-1]

    fence = Fence("leader-1", clock)
    fence.deadline = 5.0
    kube = client(host, fence)
    try:
        with pytest.raises(Exception, match="not the leader") as err:
            await kube.request("POST", "/api/v1/namespaces/default/events", body={"a": 1})
        assert isinstance(err.value, NotLeader) or isinstance(err.value.__cause__, NotLeader)
        assert calls == [0.0, 0.0, 10.0], "request(), the connection and the body write each checked the fence"
        await kube.request("GET", "/api/v1/nodes")
        assert srv.seen == [("GET", "/api/v1/nodes")], "the fenced write reached the server"
    finally:
        await kube.close()


async def test_writes_pass_while_the_fence_holds_and_without_one(server: tuple[Server, str]) -> None:
    srv, host = server
    fence = Fence("leader-1")
    fence.deadline = math.inf
    for kube in (client(host, fence), client(host, None)):  # type: ignore[arg-type]
        try:
            await kube.request("PATCH", "/api/v1/nodes/n1", body={}, content_type="application/merge-patch+json")
            await kube.request("DELETE", "/api/v1/nodes/n1")
        finally:
            await kube.close()
    assert srv.seen == [("PATCH", "/api/v1/nodes/n1"), ("DELETE", "/api/v1/nodes/n1")] * 2
