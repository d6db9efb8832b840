"""Long-running tasks (informers, keyed controllers, singleton loops) that restart after a crash instead of
taking the process down, with the runtime's one backoff (:class:`~karpy.runtime.backoff.Backoff`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

from karpy.runtime.backoff import Backoff
from karpy.runtime.clock import Clock, LoopClock
from karpy.runtime.fence import NotLeader

log = structlog.get_logger("karpy.supervisor")


async def supervise(
    name: str,
    factory: Callable[[], Awaitable[None]],
    *,
    max_backoff: float = 30.0,
    backoff: Backoff | None = None,
    clock: Clock | None = None,
) -> None:
    """Run ``factory()`` forever; log and restart it when it returns or raises (0.5 s doubling to
    ``max_backoff`` seconds, jittered; ``backoff``/``clock`` injectable for tests)."""
    backoff = backoff or Backoff(0.5, max_backoff)
    clock = clock or LoopClock()
    while True:
        try:
            await factory()
            log.warning("task returned, restarting", task=name)
            delay = backoff.next()
        except asyncio.CancelledError:
            raise
        except NotLeader as err:  # a refused write is not a crash: no traceback; the process is exiting
            delay = backoff.next()
            log.info("task stopped: not the leader", task=name, refused=err.action, retry_in=round(delay, 2))
        except Exception:
            delay = backoff.next()
            log.exception("task crashed, restarting", task=name, retry_in=round(delay, 2))
        await clock.sleep(delay)
