"""Work queue semantics (client-go contract) and the batch window."""

from __future__ import annotations

import asyncio

from karpy.runtime.batcher import Batcher
from karpy.runtime.controller import Controller, Result
from karpy.runtime.workqueue import WorkQueue


async def test_dedupe_and_requeue_while_processing() -> None:
    """A queued key is not duplicated; a key added while processing runs again afterwards."""
    q = WorkQueue()
    q.add("a")
    q.add("a")
    assert len(q) == 1
    key = await q.get()
    q.add("a")  # arrives while "a" is processing
    assert len(q) == 0
    q.done(key)
    assert len(q) == 1


async def test_backoff_grows_and_forget_resets() -> None:
    """Per-key exponential backoff, reset by forget."""
    q = WorkQueue(base_delay=0.01, max_delay=0.04)
    delays = [q.add_rate_limited("k") for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    q.forget("k")
    assert q.add_rate_limited("k") == 0.01


async def test_controller_retries_failures_then_succeeds() -> None:
    """An exception is retried with backoff; requeue_after schedules another run."""
    calls: list[str] = []

    class Flaky:
        name = "flaky"

        async def reconcile(self, key: str) -> Result:
            calls.append(key)
            if len(calls) < 3:
                raise RuntimeError("boom")
            return Result()

    ctrl = Controller(Flaky(), workers=1, queue=WorkQueue(base_delay=0.01))
    task = asyncio.create_task(ctrl.run())
    ctrl.enqueue("x")
    for _ in range(100):
        if len(calls) >= 3:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    assert calls == ["x", "x", "x"]


async def test_batcher_closes_after_idle_gap() -> None:
    """The window ends idle seconds after the last trigger, not at the first."""
    b = Batcher(idle=0.05, maximum=1.0)
    loop = asyncio.get_running_loop()

    async def trickle() -> None:
        for _ in range(4):
            b.trigger()
            await asyncio.sleep(0.02)

    start = loop.time()
    t = asyncio.create_task(trickle())
    await b.wait()
    elapsed = loop.time() - start
    await t
    assert 0.06 + 0.05 - 0.01 <= elapsed < 0.5


async def test_batcher_caps_at_maximum() -> None:
    """Constant triggers cannot hold the window open past the maximum."""
    b = Batcher(idle=0.05, maximum=0.15)
    loop = asyncio.get_running_loop()
    stop = False

    async def storm() -> None:
        while not stop:
            b.trigger()
            await asyncio.sleep(0.01)

    t = asyncio.create_task(storm())
    start = loop.time()
    await b.wait()
    elapsed = loop.time() - start
    stop = True
    await t
    assert 0.14 <= elapsed < 0.3
