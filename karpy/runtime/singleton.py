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
* :meth:`SingletonController.trigger` wakes a waiting loop at once (a change the reconciler cares about).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Protocol

import structlog

from karpy.runtime.controller import Result

log = structlog.get_logger("karpy.controller")


class Singleton(Protocol):
    """An unkeyed reconciler run by :class:`SingletonController`."""

    name: str

    async def reconcile(self) -> Result:
        """One pass; return when (if ever, without a trigger) to run the next one."""
        ...


class Backoff:
    """Exponential backoff with jitter: ``base`` doubling to ``cap`` seconds, each delay scaled by a random
    factor in ``[1 - jitter, 1 + jitter]`` (so replicas and controllers do not retry in lockstep)."""

    def __init__(self, base: float, cap: float, *, jitter: float = 0.1, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The delay (seconds) before the next attempt after one more failure."""
        delay = min(self.base * 2**self.failures, self.cap)
        self.failures += 1
        return self.jittered(delay)

    def reset(self) -> None:
        """A success: the next failure starts from ``base`` again."""
        self.failures = 0

    def jittered(self, delay: float) -> float:
        """``delay`` scaled by the jitter factor (0 stays 0)."""
        if delay <= 0 or self.jitter <= 0:
            return max(delay, 0.0)
        return delay * self._rng.uniform(1 - self.jitter, 1 + self.jitter)


class SingletonController:
    """Runs one :class:`Singleton` forever (see the module docstring)."""

    def __init__(
        self,
        reconciler: Singleton,
        *,
        base_delay: float = 1.0,
        max_delay: float = 60.0,
        jitter: float = 0.1,
    ) -> None:
        self.reconciler = reconciler
        self.name = reconciler.name
        self.backoff = Backoff(base_delay, max_delay, jitter=jitter)
        self._wake = asyncio.Event()
        self._log = log.bind(controller=reconciler.name)

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
        try:
            result = await self.reconciler.reconcile()
        except asyncio.CancelledError:
            raise
        except Exception as err:
            delay = self.backoff.next()
            self._log.warning("reconcile failed", error=repr(err), retry_in=round(delay, 2))
            return delay
        self.backoff.reset()
        if result.requeue_after is None:
            return None
        return self.backoff.jittered(result.requeue_after)

    async def _wait(self, delay: float | None) -> None:
        if delay is not None and delay <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), timeout=delay)
