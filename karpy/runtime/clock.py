"""A monotonic clock and timer source for the runtime (work queue, batcher, singleton loop, rate limiter).

The same seam as Kubernetes' ``k8s.io/utils/clock`` (``Clock`` with ``Now``/``AfterFunc``, and
``clock/testing.FakeClock`` whose ``Step`` fires the timers that came due): production code uses
:class:`LoopClock` (the event loop's monotonic time and ``call_at``); unit tests use :class:`FakeClock` and move
time forward explicitly, so nothing waits on the wall clock and nothing depends on the machine's speed.

Times are seconds on the clock's own monotonic scale (not the epoch).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

R = TypeVar("R")


class Timer(Protocol):
    """A scheduled callback (``asyncio.TimerHandle`` is one)."""

    def cancel(self) -> None:
        """Do not run the callback (no-op once it ran)."""
        ...

    def cancelled(self) -> bool:
        """:meth:`cancel` was called."""
        ...


class Clock(ABC):
    """Monotonic time (seconds) and timers; :meth:`sleep` and :meth:`wait_event` are built on them."""

    @abstractmethod
    def now(self) -> float:
        """The current monotonic time, seconds."""

    @abstractmethod
    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` (on the event loop) once :meth:`now` reaches ``when``."""

    def call_later(self, delay: float, callback: Callable[[], None]) -> Timer:
        """Run ``callback`` ``delay`` seconds from now."""
        return self.call_at(self.now() + delay, callback)

    async def sleep(self, delay: float) -> None:
        """Return ``delay`` seconds from now (at once when ``delay`` ≤ 0)."""
        if delay <= 0:
            await asyncio.sleep(0)
            return
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        timer = self.call_later(delay, lambda: _resolve(done, True))
        try:
            await done
        finally:
            timer.cancel()

    async def wait_event(self, event: asyncio.Event, timeout: float | None) -> bool:
        """Wait until ``event`` is set (True) or ``timeout`` seconds passed (False; None: no timeout)."""
        if event.is_set():
            return True
        if timeout is None:
            await event.wait()
            return True
        if timeout <= 0:
            return False
        outcome: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(event.wait())
        waiter.add_done_callback(lambda _: _resolve(outcome, True))
        timer = self.call_later(timeout, lambda: _resolve(outcome, False))
        try:
            return await outcome
        finally:
            timer.cancel()
            waiter.cancel()
            # Let the waiter finish its cancellation before returning: no task outlives this call.
            await asyncio.wait([waiter])


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


class LoopClock(Clock):
    """The running event loop's monotonic clock (``loop.time()``, ``loop.call_at``)."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_at(when, callback)


class _FakeTimer:
    def __init__(self) -> None:
        self._cancelled = False

    def cancel(self) -> None:
        self._cancelled = True

    def cancelled(self) -> bool:
        return self._cancelled


class FakeClock(Clock):
    """A clock that moves only when told (``k8s.io/utils/clock/testing.FakeClock``): :meth:`advance` fires the
    timers that come due, in time order, letting the event loop run between them; :meth:`run` lets time jump to
    the next timer whenever everything waits on one.

    ``start`` may be any scale: code that reads wall-clock time (``clock: Callable[[], float]`` of epoch
    seconds) takes the clock itself, which is callable (``clock()`` is :meth:`now`).
    """

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _FakeTimer, Callable[[], None]]] = []
        self._seq = itertools.count()

    def now(self) -> float:
        return self._now

    def __call__(self) -> float:
        """:meth:`now`, for code that takes a ``clock`` callable."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer()
        heapq.heappush(self._timers, (when, next(self._seq), timer, callback))
        return timer

    @property
    def pending(self) -> int:
        """Timers scheduled and not cancelled."""
        return sum(1 for _, _, timer, _ in self._timers if not timer.cancelled())

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, firing every timer due on the way (each at its own time) and
        letting woken coroutines run (and schedule new timers) before the next one."""
        target = self._now + seconds
        await settle()
        while self._timers and self._timers[0][0] <= target:
            when, _, timer, callback = heapq.heappop(self._timers)
            if timer.cancelled():
                continue
            self._now = max(self._now, when)
            callback()
            await settle()
        self._now = target
        await settle()

    async def settle(self) -> None:
        """Let every ready coroutine run (no time passes): :func:`settle`."""
        await settle()

    async def run(self, work: Awaitable[R], *, limit: float = 3600.0) -> R:
        """Await ``work``, letting time jump to the next timer whenever everything is blocked on one (as the wall
        clock would pass, without waiting for it). ``work`` returns without an extra turn of the loop: a task it
        started has not run a step yet.

        Raises:
            AssertionError: ``work`` blocks on something other than a timer of this clock, or needs more than
                ``limit`` seconds of this clock's time.
        """
        me = asyncio.current_task()
        assert me is not None, "run() needs a running task"
        start = self._now
        stuck: list[str] = []

        async def tick() -> None:
            while True:
                await settle()
                due = [when for when, _, timer, _ in self._timers if not timer.cancelled()]
                if not due or self._now - start > limit:
                    stuck.append("blocked on something other than the clock, or for too long")
                    me.cancel()
                    return
                await self.advance(max(min(due) - self._now, 0.0))

        ticker = asyncio.get_running_loop().create_task(tick())
        try:
            return await work
        except asyncio.CancelledError:
            if stuck:
                raise AssertionError(stuck[0]) from None
            raise
        finally:
            # Not awaited: waiting would give the tasks ``work`` started a turn of the loop.
            ticker.cancel()


async def settle(rounds: int = 20) -> None:
    """Let every ready coroutine run (a few event-loop turns, no time passes)."""
    for _ in range(rounds):
        await asyncio.sleep(0)
