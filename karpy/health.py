"""``/healthz`` (the process answers) and ``/readyz`` (cluster state synced) on ``HEALTH_PROBE_PORT`` (aiohttp)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


async def start_probe_server(port: int, ready: Callable[[], bool], host: str = "0.0.0.0") -> web.AppRunner:
    """Serve the probes; returns the runner (``await runner.cleanup()`` to stop)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if ready():
            return web.Response(text="ok")
        return web.Response(status=503, text="cluster state not synced")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
