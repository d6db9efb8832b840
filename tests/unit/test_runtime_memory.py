"""karpy.runtime.memory: glibc's malloc_trim, called once a second on the loop's clock."""

from __future__ import annotations

import asyncio
import platform
import sys

import pytest

from karpy.runtime.clock import FakeClock
from karpy.runtime.memory import TRIM_INTERVAL, HeapTrimmer, malloc_trim


async def test_trims_every_interval_until_cancelled() -> None:
    clock = FakeClock()
    calls: list[float] = []
    trimmer = HeapTrimmer(lambda: calls.append(clock.now()) or 0, clock=clock)
    task = asyncio.create_task(trimmer.run())
    await clock.advance(3.5 * TRIM_INTERVAL)
    assert calls == [clock.now() - 2.5 * TRIM_INTERVAL + k * TRIM_INTERVAL for k in range(3)]
    assert trimmer.trims == 3
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await clock.advance(5 * TRIM_INTERVAL)
    assert trimmer.trims == 3


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only (musl, macOS have no malloc_trim)")
def test_glibc_malloc_trim_is_found_and_callable() -> None:
    trim = malloc_trim()
    assert trim is not None
    assert trim() in (0, 1)
    trimmer = HeapTrimmer.for_this_process()
    assert trimmer is not None and trimmer.interval == TRIM_INTERVAL


def test_no_trimmer_without_malloc_trim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    assert malloc_trim() is None and HeapTrimmer.for_this_process() is None
