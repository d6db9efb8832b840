"""The one reconciler contract, and the loop that drives it from a work queue.

A reconciler is ``async def reconcile(key) -> Result``. It reads cluster state, makes at most a few API calls
and returns; it never loops or sleeps. ``Result(requeue_after=s)`` asks to be called again; an exception is
logged and the key retried with per-key backoff. This mirrors controller-runtime's Reconciler. A write refused by
the leader fence (:class:`~karpy.runtime.fence.NotLeader`) is not an error: the key is not retried.

Every log line of a reconcile carries ``controller=<name>``, ``key=<key>`` and, when the key names an object
(``key_name``, e.g. ``nodeclaim`` or ``nodepool``), that field too (structlog contextvars, bound per reconcile).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import attrs
import structlog

from karpy.runtime.fence import NotLeader
from karpy.runtime.workqueue import WorkQueue

log = structlog.get_logger("karpy.controller")


@attrs.frozen
class Result:
    """``requeue_after``: seconds until the key is reconciled again (None: only on the next change)."""

    requeue_after: float | None = None


class Reconciler(Protocol):
    """A keyed reconciler (one module per reconciler under :mod:`karpy.controllers`)."""

    name: str

    async def reconcile(self, key: str) -> Result:
        """Bring ``key`` one step closer to its desired state."""
        ...


class Controller:
    """Runs ``workers`` concurrent reconcile loops over one queue."""

    def __init__(
        self,
        reconciler: Reconciler,
        *,
        workers: int = 4,
        queue: WorkQueue | None = None,
        key_name: str | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.name = reconciler.name
        self.queue = queue if queue is not None else WorkQueue()  # an empty queue is falsy (__len__)
        self.workers = workers
        self.key_name = key_name

    def enqueue(self, key: str) -> None:
        """Ask for ``key`` to be reconciled."""
        self.queue.add(key)

    async def run(self) -> None:
        """Run the workers until cancelled."""
        await asyncio.gather(*(self._worker() for _ in range(self.workers)))

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            with structlog.contextvars.bound_contextvars(**self._context(key)):
                await self._reconcile(key)

    def _context(self, key: str) -> dict[str, str]:
        context = {"controller": self.name, "key": key}
        if self.key_name:
            context[self.key_name] = key
        return context

    async def _reconcile(self, key: str) -> None:
        try:
            result = await self.reconciler.reconcile(key)
        except asyncio.CancelledError:
            self.queue.done(key)
            raise
        except NotLeader as err:
            # Not a failure to retry with backoff: this process lost (or never had) the lease and is exiting, as
            # controller-runtime stops every controller when leadership is lost (pkg/manager/internal.go). The
            # key is neither rate-limited nor counted; the leader reconciles it from its own informers.
            log.info("reconcile stopped: not the leader", refused=err.action)
            self.queue.done(key)
            return
        except Exception as err:
            delay = self.queue.add_rate_limited(key)
            log.warning("reconcile failed", error=repr(err), retry_in=round(delay, 2))
            # A change seen while failing (often the reconciler's own status write) must not bypass the
            # backoff: the delayed retry reads the latest state anyway.
            self.queue.done(key, requeue_if_dirty=False)
            return
        self.queue.forget(key)
        self.queue.done(key)
        if result.requeue_after is not None:
            self.queue.add_after(key, result.requeue_after)
