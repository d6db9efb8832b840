"""Exponential backoff with jitter: the one place karpy computes retry delays (singleton loops, supervised tasks).

The keyed work queue keeps client-go's per-key rate limiter (:mod:`karpy.runtime.workqueue`), as
controller-runtime does.
"""

from __future__ import annotations

import random


class Backoff:
    """``base`` doubling to ``cap`` seconds per consecutive failure, each delay scaled by a random factor in
    ``[1 - jitter, 1 + jitter]`` (so replicas and controllers do not retry in lockstep); :meth:`reset` after a
    success. ``rng`` is the jitter source (seed it in tests)."""

    def __init__(self, base: float, cap: float, *, jitter: float = 0.1, rng: random.Random | None = None) -> None:
        self.base = base
        self.cap = cap
        self.jitter = jitter
        self.failures = 0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The delay (seconds) before the next attempt after one more failure."""
        delay = min(self.base * 2**self.failures, self.cap) if self.failures < 64 else self.cap
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
