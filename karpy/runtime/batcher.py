"""The provisioning batch window (Karpenter ``provisioning/batcher.go``).

Triggers (a pod became provisionable) open a window; it closes ``idle`` seconds after the last trigger or
``maximum`` seconds after the first, whichever is sooner (``BATCH_IDLE_DURATION`` 1 s,
``BATCH_MAX_DURATION`` 10 s). Batching lets a Deployment's 500 new pods be planned as one decision.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Batcher:
    """Call :meth:`trigger` on every relevant change; ``await wait()`` returns when a batch is complete."""

    def __init__(self, idle: float, maximum: float, clock: Callable[[], float] | None = None) -> None:
        self.idle = idle
        self.maximum = maximum
        self._event = asyncio.Event()
        self._clock = clock

    def trigger(self) -> None:
        """Something happened that the next batch should include."""
        self._event.set()

    def _now(self) -> float:
        return self._clock() if self._clock else asyncio.get_running_loop().time()

    async def wait(self) -> None:
        """Wait for a first trigger, then until the window closes."""
        await self._event.wait()
        self._event.clear()
        start = self._now()
        while True:
            remaining = self.maximum - (self._now() - start)
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._event.wait(), timeout=min(self.idle, remaining))
            except TimeoutError:
                return
            self._event.clear()
