"""The runtime on a fake clock: work queue semantics (client-go contract), the batch window, the singleton
loop's backoff and jitter, supervised restarts, and the log context bound per reconcile."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from karpy.runtime.backoff import Backoff
from karpy.runtime.batcher import Batcher
from karpy.runtime.clock import FakeClock, settle
from karpy.runtime.controller import Controller, Result
from karpy.runtime.singleton import SingletonController
from karpy.runtime.supervisor import supervise
from karpy.runtime.workqueue import WorkQueue


async def stop(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it to end (the task-leak check fails a test that leaves it pending)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


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
    q = WorkQueue(base_delay=0.01, max_delay=0.04, clock=FakeClock())
    delays = [q.add_rate_limited("k") for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    q.forget("k")
    assert q.add_rate_limited("k") == 0.01


async def test_delayed_add_waits_for_the_clock() -> None:
    """``add_after`` queues the key when the clock reaches the delay, not before."""
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    q.add_after("k", 5.0)
    await clock.advance(4.9)
    assert len(q) == 0
    await clock.advance(0.1)
    assert len(q) == 1


async def test_a_waiting_key_is_delayed_once_at_its_earliest_time() -> None:
    """As client-go's delaying queue: re-adding a waiting key keeps one entry with the earlier ready time."""
    clock = FakeClock()
    q = WorkQueue(clock=clock)
    for _ in range(1000):
        q.add_after("k", 5.0)
    assert q.waiting == 1
    q.add_after("k", 9.0)  # later: ignored
    q.add_after("k", 2.0)  # earlier: moves the ready time
    q.add_after("other", 3.0)
    assert q.waiting == 2
    await clock.advance(1.9)
    assert len(q) == 0
    await clock.advance(0.1)
    assert len(q) == 1 and await q.get() == "k"
    q.done("k")
    await clock.advance(1.0)
    assert len(q) == 1 and await q.get() == "other"
    q.done("other")
    await clock.advance(10.0)
    assert len(q) == 0 and q.waiting == 0, "k was waited for once: neither 5 s nor 9 s adds it again"


async def test_controller_retries_failures_with_backoff_then_succeeds() -> None:
    """An exception is retried after the key's backoff (1 s, then 2 s on the fake clock); a success ends it."""
    calls: list[float] = []
    clock = FakeClock()

    class Flaky:
        name = "flaky"

        async def reconcile(self, key: str) -> Result:
            calls.append(clock.now())
            if len(calls) < 3:
                raise RuntimeError("boom")
            return Result()

    ctrl = Controller(Flaky(), workers=1, queue=WorkQueue(base_delay=1.0, clock=clock))
    task = asyncio.create_task(ctrl.run())
    ctrl.enqueue("x")
    await settle()
    assert len(calls) == 1
    await clock.advance(0.9)
    assert len(calls) == 1, "retried before its backoff"
    await clock.advance(0.1)
    assert len(calls) == 2
    await clock.advance(2.0)
    assert [t - calls[0] for t in calls] == [0.0, 1.0, 3.0]
    await clock.advance(60.0)
    assert len(calls) == 3, "a success is not retried"
    await stop(task)


async def test_controller_binds_the_key_to_every_log_line() -> None:
    """Each line logged during a reconcile names the controller, the key and (``key_name``) the object."""
    seen = asyncio.Event()

    class Logs:
        name = "nodeclaim.lifecycle"

        async def reconcile(self, key: str) -> Result:
            structlog.get_logger("t").info("launching")
            seen.set()
            return Result()

    ctrl = Controller(Logs(), workers=1, key_name="nodeclaim")
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        task = asyncio.create_task(ctrl.run())
        ctrl.enqueue("default-abc12")
        await asyncio.wait_for(seen.wait(), 5)
        structlog.get_logger("t").info("outside")
        await stop(task)
    inside, outside = logs
    assert inside["event"] == "launching"
    assert (inside["controller"], inside["key"], inside["nodeclaim"]) == (
        "nodeclaim.lifecycle",
        "default-abc12",
        "default-abc12",
    )
    assert "controller" not in outside and "nodeclaim" not in outside


async def test_batcher_closes_after_idle_gap() -> None:
    """The window ends idle seconds after the last trigger, not at the first."""
    clock = FakeClock()
    b = Batcher(idle=1.0, maximum=10.0, clock=clock)
    b.trigger()
    waiting = asyncio.create_task(b.wait())
    start = clock.now()
    for _ in range(3):
        await clock.advance(0.5)
        assert not waiting.done()
        b.trigger()
    await clock.advance(0.9)
    assert not waiting.done(), "closed before idle seconds passed since the last trigger"
    await clock.advance(0.1)
    assert waiting.done()
    assert clock.now() - start == pytest.approx(2.5)


async def test_batcher_caps_at_maximum() -> None:
    """Constant triggers cannot hold the window open past the maximum."""
    clock = FakeClock()
    b = Batcher(idle=1.0, maximum=3.0, clock=clock)
    b.trigger()
    waiting = asyncio.create_task(b.wait())
    for _ in range(5):  # a trigger every 0.5 s, each well inside the idle gap
        await clock.advance(0.5)
        assert not waiting.done()
        b.trigger()
    await clock.advance(0.49)
    assert not waiting.done()
    await clock.advance(0.01)
    assert waiting.done(), "still open at the maximum"


def test_backoff_doubles_to_its_cap_with_seeded_jitter() -> None:
    """1 s doubling to 8 s, each scaled by a factor in [0.9, 1.1] from the given rng; reset starts over."""
    backoff = Backoff(1.0, 8.0, jitter=0.1, rng=random.Random(7))
    expected_rng = random.Random(7)
    delays = [backoff.next() for _ in range(6)]
    assert delays == [base * expected_rng.uniform(0.9, 1.1) for base in (1, 2, 4, 8, 8, 8)]
    assert all(0.9 * b <= d <= 1.1 * b for d, b in zip(delays, (1, 2, 4, 8, 8, 8), strict=True))
    backoff.reset()
    assert 0.9 <= backoff.next() <= 1.1
    assert Backoff(1.0, 8.0, jitter=0).next() == 1.0


async def test_singleton_backs_off_on_failure_and_resets_on_success() -> None:
    """Failed passes wait base doubling to cap (jittered, seeded); a success returns requeue_after, jittered."""
    outcomes: list[Exception | Result] = [
        RuntimeError("a"),
        RuntimeError("b"),
        RuntimeError("c"),
        Result(requeue_after=10.0),
        RuntimeError("d"),
        Result(requeue_after=None),
        Result(requeue_after=0),
    ]

    class Scripted:
        name = "scripted"

        async def reconcile(self) -> Result:
            outcome = outcomes.pop(0)
            if isinstance(outcome, Exception):
                raise outcome
            return outcome

    loop = SingletonController(Scripted(), base_delay=1.0, max_delay=3.0, jitter=0.1, rng=random.Random(3))
    rng = random.Random(3)
    delays = [await loop.once() for _ in range(7)]
    expected = [1 * rng.uniform(0.9, 1.1), 2 * rng.uniform(0.9, 1.1), 3 * rng.uniform(0.9, 1.1)]
    expected.append(10 * rng.uniform(0.9, 1.1))
    expected.append(1 * rng.uniform(0.9, 1.1))  # the success reset the backoff
    expected += [None, 0.0]
    assert delays == expected


async def test_singleton_runs_on_requeue_and_on_trigger() -> None:
    """The loop runs the next pass after requeue_after on its clock, or at once when triggered."""
    clock = FakeClock()
    runs: list[float] = []

    class Ticker:
        name = "ticker"

        async def reconcile(self) -> Result:
            runs.append(clock.now() - 1000.0)
            return Result(requeue_after=10.0)

    loop = SingletonController(Ticker(), jitter=0, clock=clock)
    task = asyncio.create_task(loop.run())
    await settle()
    assert runs == [0.0]
    await clock.advance(9.9)
    assert runs == [0.0]
    await clock.advance(0.1)
    assert runs == [0.0, 10.0]
    await clock.advance(3.0)
    loop.trigger()
    await settle()
    assert runs == [0.0, 10.0, 13.0]
    await clock.advance(10.0)
    assert runs == [0.0, 10.0, 13.0, 23.0]
    await stop(task)


async def test_singleton_binds_the_controller_to_its_log_lines() -> None:
    """Every line of a pass names the controller, including the loop's own failure line."""

    class Fails:
        name = "garbagecollection"

        async def reconcile(self) -> Result:
            structlog.get_logger("t").info("listing instances")
            raise RuntimeError("describe failed")

    loop = SingletonController(Fails(), rng=random.Random(1))
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        await loop.once()
    assert [(line["event"], line["controller"]) for line in logs] == [
        ("listing instances", "garbagecollection"),
        ("reconcile failed", "garbagecollection"),
    ]
    assert "describe failed" in logs[1]["error"]


async def test_supervise_restarts_with_backoff() -> None:
    """A crashing task restarts after 0.5 s, then 1 s (the shared backoff, no jitter here)."""
    clock = FakeClock()
    starts: list[float] = []

    async def crash() -> None:
        starts.append(clock.now() - 1000.0)
        raise RuntimeError("crash")

    task = asyncio.create_task(supervise("t", crash, backoff=Backoff(0.5, 30.0, jitter=0), clock=clock))
    await settle()
    await clock.advance(0.5)
    await clock.advance(1.0)
    assert starts == [0.0, 0.5, 1.5]
    await stop(task)
    with pytest.raises(asyncio.CancelledError):
        await task
