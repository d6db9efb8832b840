"""The loop contract for unkeyed reconcilers: provisioner, disruption, garbage collection, interruption.

Karpenter runs these as controller-runtime "singleton" reconcilers (``singleton.AsReconciler`` in
``sigs.k8s.io/karpenter/pkg/operator/singleton``): one ``Reconcile`` with no key, called again after the
``RequeueAfter`` it returns, or with rate-limited backoff after an error. karpy does the same, with one place
for the backoff and jitter instead of a hand-written sleep loop per controller:

* ``reconcile()`` does one pass and returns :class:`~karpy.runtime.controller.Result`;
  ``requeue_after=s`` runs it again ``s`` seconds later (0: at once, e.g. the next SQS long poll),
  ``None``: only when :meth:`SingletonController.trigger` is called.
* an exception is logged and the pass retried after an exponential backoff (``base_delay`` doubling to
  ``max_delay`` seconds, ±``jitter`` fraction), reset by the next success.
* a write refused by the leader fence (:class:`~karpy.runtime.fence.NotLeader`) is not an error: no backoff
  step; the loop waits for :meth:`SingletonController.trigger` (the process is exiting).
* :meth:`SingletonController.trigger` wakes a waiting loop at once (a change the reconciler cares about).
* every log line of a pass carries ``controller=<name>`` (structlog contextvars).

Waits run on a :class:`~karpy.runtime.clock.Clock` (the event loop's by default) and the jitter on a
``random.Random`` (seeded in tests), so the loop is testable without waiting.
"""

from __future__ import annotations

import asyncio
import random
from typing import Protocol

import structlog

from karpy.runtime.backoff import Backoff
from karpy.runtime.clock import Clock, LoopClock
from karpy.runtime.controller import Result
from karpy.runtime.fence import NotLeader

log = structlog.get_logger("karpy.controller")


class Singleton(Protocol):
    """An unkeyed reconciler run by :class:`SingletonController`."""

    name: str

    async def reconcile(self) -> Result:
        """One pass; return when (if ever, without a trigger) to run the next one."""
        ...


class SingletonController:
    """Runs one :class:`Singleton` forever (see the module docstring).

    Args:
        base_delay: seconds before the first retry after a failed pass (doubling per consecutive failure).
        max_delay: the longest retry delay, seconds.
        jitter: each delay (retry and ``requeue_after``) is scaled by a random factor in ``[1 - jitter, 1 + jitter]``.
        clock: time source for the waits; rng: jitter source.
    """

    def __init__(
        self,
        reconciler: Singleton,
        *,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        jitter: float = 0.1,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.reconciler = reconciler
        self.name = reconciler.name
        self.backoff = Backoff(base_delay, max_delay, jitter=jitter, rng=rng)
        self.passes = 0
        self._clock = clock or LoopClock()
        self._wake = asyncio.Event()

    def trigger(self) -> None:
        """Run the next pass now (or right after the running one)."""
        self._wake.set()

    async def run(self) -> None:
        """Run passes until cancelled."""
        while True:
            self._wake.clear()
            delay = await self.once()
            await self._wait(delay)

    async def once(self) -> float | None:
        """One pass; the seconds to wait before the next (None: until triggered)."""
        self.passes += 1
        with structlog.contextvars.bound_contextvars(controller=self.name):
            try:
                result = await self.reconciler.reconcile()
            except asyncio.CancelledError:
                raise
            except NotLeader as err:
                # The leader fence refused a write: not a failure (no backoff step, no warning). The process is
                # exiting (leadership lost); the next pass runs only when triggered.
                log.info("reconcile stopped: not the leader", refused=err.action)
                return None
            except Exception as err:
                delay = self.backoff.next()
                log.warning("reconcile failed", error=repr(err)[:500], retry_in=round(delay, 2))
                return delay
        self.backoff.reset()
        if result.requeue_after is None:
            return None
        return self.backoff.jittered(result.requeue_after)

    async def _wait(self, delay: float | None) -> None:
        if delay is not None and delay <= 0:
            await asyncio.sleep(0)  # let the rest of the loop run between back-to-back passes
            return
        await self._clock.wait_event(self._wake, delay)


__all__ = ["Singleton", "SingletonController"]
