"""``/healthz`` (the process answers) and ``/readyz`` (cluster state synced and, with ``INTERRUPTION_QUEUE``,
the queue readable) on ``HEALTH_PROBE_PORT`` (aiohttp)."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web


async def start_probe_server(port: int, not_ready: Callable[[], str], host: str = "0.0.0.0") -> web.AppRunner:
    """Serve the probes; ``not_ready()`` returns "" when ready, else why not (the 503 body).

    Returns the runner (``await runner.cleanup()`` to stop).

    Raises:
        OSError: the port cannot be bound (already in use, not permitted).
    """

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        why = not_ready()
        if not why:
            return web.Response(text="ok")
        return web.Response(status=503, text=why)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
