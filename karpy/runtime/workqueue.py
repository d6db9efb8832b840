"""A keyed work queue with de-duplication, delayed adds and per-key exponential backoff.

The client-go workqueue contract: a key is processed by at most one worker at a time; adding a key that is
queued is a no-op; adding a key that is being processed re-queues it after the current run; failures back
off per key (``base`` doubling up to ``cap`` seconds) until a success forgets the key. Delayed adds run on a
:class:`~karpy.runtime.clock.Clock` (the event loop's by default; tests pass a fake one); a key already waiting
is not waited for twice: it keeps the earlier of its two ready times (client-go ``delaying_queue.go``
``insert``).

A named queue (``name=``, or :meth:`WorkQueue.name_metrics`; :class:`~karpy.runtime.controller.Controller` names
its queue after itself) serves client-go's workqueue families with ``name`` and ``controller`` both that name, as
controller-runtime's metrics provider does (``pkg/internal/metrics/workqueue.go``): ``workqueue_depth`` (keys
waiting, including a key added again while processed), ``workqueue_adds_total``, ``workqueue_queue_duration_seconds``
(added → taken), ``workqueue_work_duration_seconds`` (taken → done), ``workqueue_unfinished_work_seconds`` and
``workqueue_longest_running_processor_seconds`` (computed at scrape), ``workqueue_retries_total`` (adds with a
delay, client-go ``AddAfter``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable

from karpy.metrics_runtime import (
    WORKQUEUE_ADDS,
    WORKQUEUE_DEPTH,
    WORKQUEUE_LONGEST_RUNNING,
    WORKQUEUE_QUEUE_DURATION,
    WORKQUEUE_RETRIES,
    WORKQUEUE_UNFINISHED_WORK,
    WORKQUEUE_WORK_DURATION,
)
from karpy.runtime.clock import Clock, LoopClock, Timer


class _QueueMetrics:
    """The workqueue families of one named queue. ``monotonic`` (seconds) times the waits and the work."""

    def __init__(self, name: str, monotonic: Callable[[], float]) -> None:
        self.monotonic = monotonic
        self.depth = WORKQUEUE_DEPTH.labels(name, name, "")
        self.adds = WORKQUEUE_ADDS.labels(name, name)
        self.latency = WORKQUEUE_QUEUE_DURATION.labels(name, name)
        self.work = WORKQUEUE_WORK_DURATION.labels(name, name)
        self.retries = WORKQUEUE_RETRIES.labels(name, name)
        self.added: dict[str, float] = {}
        self.started: dict[str, float] = {}
        WORKQUEUE_UNFINISHED_WORK.labels(name, name).set_function(self.unfinished)
        WORKQUEUE_LONGEST_RUNNING.labels(name, name).set_function(self.longest)

    def add(self, key: str) -> None:
        self.adds.inc()
        self.depth.inc()
        self.added.setdefault(key, self.monotonic())

    def get(self, key: str) -> None:
        now = self.monotonic()
        self.depth.dec()
        added = self.added.pop(key, None)
        if added is not None:
            self.latency.observe(now - added)
        self.started[key] = now

    def drop(self, key: str) -> None:
        """A key counted in the depth is dropped without being taken (a dirty key not re-queued)."""
        self.depth.dec()
        self.added.pop(key, None)

    def done(self, key: str) -> None:
        started = self.started.pop(key, None)
        if started is not None:
            self.work.observe(self.monotonic() - started)

    def unfinished(self) -> float:
        now = self.monotonic()
        return sum(now - t for t in self.started.values())

    def longest(self) -> float:
        return self.monotonic() - min(self.started.values()) if self.started else 0.0


class WorkQueue:
    """See the module docstring. All methods must be called from the event loop thread."""

    def __init__(
        self,
        *,
        base_delay: float = 0.1,
        max_delay: float = 60.0,
        clock: Clock | None = None,
        name: str = "",
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._delayed: list[tuple[float, int, str]] = []  # (ready time, seq, key), one entry per waiting key
        self._waiting: dict[str, float] = {}  # key → its ready time in ``_delayed``
        self._seq = itertools.count()
        # Workers blocked in get(): woken synchronously by an add (no fire-and-forget notify task per add, which
        # could outlive a queue nobody drains and leak past a test's or the operator's end).
        # One waiter is woken per key queued (not all of them: the lifecycle runs 1000+ workers, and waking every
        # one per add made each add O(workers)).
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._timer: Timer | None = None
        self._clock = clock or LoopClock()
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._monotonic = monotonic
        self._metrics: _QueueMetrics | None = None
        self.name = ""
        if name:
            self.name_metrics(name)

    def name_metrics(self, name: str) -> None:
        """Serve the workqueue families for this queue as ``name`` (once; a named queue keeps its name)."""
        if self._metrics is None:
            self.name = name
            self._metrics = _QueueMetrics(name, self._monotonic)

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, key: str) -> None:
        """Queue ``key`` now (no-op when already queued; deferred when being processed)."""
        if key in self._processing:
            if key not in self._dirty and self._metrics is not None:
                self._metrics.add(key)
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        if self._metrics is not None:
            self._metrics.add(key)
        self._queued.add(key)
        self._queue.append(key)
        self._wake()

    def add_after(self, key: str, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds (now when ``delay`` ≤ 0). A key already waiting keeps the
        earlier ready time."""
        if delay <= 0:
            self.add(key)
            return
        if self._metrics is not None:
            self._metrics.retries.inc()
        ready = self._clock.now() + delay
        current = self._waiting.get(key)
        if current is not None and current <= ready:
            return
        self._waiting[key] = ready
        if current is None:
            heapq.heappush(self._delayed, (ready, next(self._seq), key))
        else:
            self._delayed = [(ready, seq, k) if k == key else (at, seq, k) for at, seq, k in self._delayed]
            heapq.heapify(self._delayed)
        self._arm_timer()

    @property
    def waiting(self) -> int:
        """Keys waiting for their delay (each once)."""
        return len(self._delayed)

    def add_rate_limited(self, key: str) -> float:
        """Queue ``key`` after its backoff; returns the delay used (seconds)."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        delay = float(min(self.base_delay * (2**n), self.max_delay))
        self.add_after(key, delay)
        return delay

    def forget(self, key: str) -> None:
        """Reset ``key``'s backoff after a success."""
        self._failures.pop(key, None)

    async def get(self) -> str:
        """Wait for the next key and mark it processing; call :meth:`done` afterwards."""
        while not self._queue:  # single-threaded: no await between this check and the pop below
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.cancelled():  # cancelled before an add woke it (a wake may have dropped it already)
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                else:  # woken, then cancelled before taking the key: pass the wake-up on, never strand a key
                    self._wake()
                raise
        key = self._queue.popleft()
        self._queued.discard(key)
        self._processing.add(key)
        if self._metrics is not None:
            self._metrics.get(key)
        return key

    def done(self, key: str, *, requeue_if_dirty: bool = True) -> None:
        """Finish processing ``key``; re-queue it if it was added meanwhile (unless ``requeue_if_dirty`` is
        False: after a failure the rate-limited retry already scheduled covers that change)."""
        self._processing.discard(key)
        if self._metrics is not None:
            self._metrics.done(key)
        if key in self._dirty:
            self._dirty.discard(key)
            if requeue_if_dirty:
                self._requeue_dirty(key)
            elif self._metrics is not None:
                self._metrics.drop(key)

    def _requeue_dirty(self, key: str) -> None:
        """Queue a key added while it was processed (already counted as added then, client-go ``Done``)."""
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._wake()

    def _wake(self) -> None:
        """Wake one waiting worker for a key just queued (it re-checks the queue: if another worker took the key
        first, it waits again); a woken worker cancelled before taking a key wakes the next one (:meth:`get`)."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._delayed:
            self._timer = self._clock.call_at(self._delayed[0][0], self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._clock.now()
        while self._delayed and self._delayed[0][0] <= now + 1e-3:
            _, _, key = heapq.heappop(self._delayed)
            del self._waiting[key]
            self.add(key)
        self._arm_timer()
