"""Long-running tasks that restart after a crash instead of taking the process down (with backoff)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("karpy.supervisor")


async def supervise(name: str, factory: Callable[[], Awaitable[None]], *, max_backoff: float = 30.0) -> None:
    """Run ``factory()`` forever; log and restart it (0.5 s doubling to ``max_backoff``) when it raises."""
    backoff = 0.5
    while True:
        try:
            await factory()
            log.warning("task returned, restarting", task=name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task crashed, restarting", task=name, retry_in=backoff)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, max_backoff)
