"""karpy's HTTP endpoints, one aiohttp server on the event loop:

* ``/healthz`` (the process answers: controller-runtime's ``healthz.Ping``) and ``/readyz`` (every informer
  listed, which needs the NodePool and NodeClaim CRDs served, and, with ``INTERRUPTION_QUEUE``, the queue
  readable; 503 with the reason otherwise) on ``HEALTH_PROBE_PORT`` (Karpenter: 8081). Leadership is never part
  of readiness: a listed standby is Ready, as Karpenter's is (``pkg/operator/operator.go``);
* ``/metrics`` (Prometheus text format, prometheus-client's default registry) on ``METRICS_PORT``
  (Karpenter: 8080; 0: not served).

One application and runner serve both listening sockets (two sites); each path answers only on its own port,
as controller-runtime keeps its metrics and probe servers apart. The sockets are bound first
(:func:`listen`), so a port in use is reported, naming its setting, before anything else starts.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable, Collection

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

PROBE_PATHS = frozenset({"/healthz", "/readyz"})
METRICS_PATHS = frozenset({"/metrics"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def listen(port: int, host: str = "0.0.0.0") -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port).

    Raises:
        OSError: the port cannot be bound (already in use, not permitted).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as asyncio's create_server does
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def start_server(
    not_ready: Callable[[], str], *, probes: socket.socket, metrics: socket.socket | None = None
) -> web.AppRunner:
    """Serve the probes on ``probes`` and, when given, ``/metrics`` on ``metrics`` (listening sockets from
    :func:`listen`, owned by the server from now on). ``not_ready()`` returns "" when ready, else why not (the
    503 body). Returns the runner (``await runner.cleanup()`` stops it and closes the sockets)."""
    paths: dict[int, Collection[str]] = {probes.getsockname()[1]: PROBE_PATHS}
    if metrics is not None:
        paths[metrics.getsockname()[1]] = METRICS_PATHS

    @web.middleware
    async def own_port_only(request: web.Request, handler: Handler) -> web.StreamResponse:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if not sockname or request.path not in paths.get(sockname[1], ()):
            raise web.HTTPNotFound()
        return await handler(request)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        why = not_ready()
        if not why:
            return web.Response(text="ok")
        return web.Response(status=503, text=why)

    async def metrics_text(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(middlewares=[own_port_only])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_text)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        for sock in (probes, metrics):
            if sock is not None:
                await web.SockSite(runner, sock).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def start_probe_server(port: int, not_ready: Callable[[], str], host: str = "0.0.0.0") -> web.AppRunner:
    """The probes alone on ``host:port`` (see :func:`start_server`).

    Raises:
        OSError: the port cannot be bound.
    """
    return await start_server(not_ready, probes=listen(port, host))
