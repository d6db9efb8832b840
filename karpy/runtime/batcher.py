"""The provisioning batch window (Karpenter core ``pkg/controllers/provisioning/batcher.go``).

Triggers (a pod became provisionable) open a window; it closes ``idle`` seconds after the last trigger or
``maximum`` seconds after the first, whichever is sooner (``BATCH_IDLE_DURATION`` 1 s,
``BATCH_MAX_DURATION`` 10 s). Batching lets a Deployment's 500 new pods be planned as one decision.
"""

from __future__ import annotations

import asyncio

from karpy.runtime.clock import Clock, LoopClock


class Batcher:
    """Call :meth:`trigger` on every relevant change; ``await wait()`` returns when a batch is complete.

    ``idle`` and ``maximum`` are seconds on ``clock`` (the event loop's by default; tests pass a fake one).
    """

    def __init__(self, idle: float, maximum: float, clock: Clock | None = None) -> None:
        self.idle = idle
        self.maximum = maximum
        self._event = asyncio.Event()
        self._clock = clock or LoopClock()

    def trigger(self) -> None:
        """Something happened that the next batch should include."""
        self._event.set()

    @property
    def triggered(self) -> bool:
        """A trigger arrived that no window has taken yet."""
        return self._event.is_set()

    async def wait(self) -> None:
        """Wait for a first trigger, then until the window closes."""
        await self._event.wait()
        self._event.clear()
        start = self._clock.now()
        while True:
            remaining = self.maximum - (self._clock.now() - start)
            if remaining <= 0:
                return
            if not await self._clock.wait_event(self._event, min(self.idle, remaining)):
                return
            self._event.clear()
