"""The work queue wakes one waiting worker per key queued (the NodeClaim lifecycle runs 1000+ workers: waking all
of them per add made every add O(workers)), and a woken worker cancelled before it takes the key passes the
wake-up on, so no key is stranded."""

from __future__ import annotations

import asyncio

from karpy.runtime.workqueue import WorkQueue


async def test_an_add_wakes_one_waiting_worker() -> None:
    queue = WorkQueue()
    woken: list[int] = []

    async def worker(n: int) -> None:
        key = await queue.get()
        woken.append(n)
        queue.done(key)

    workers = [asyncio.create_task(worker(n)) for n in range(100)]
    try:
        await asyncio.sleep(0)
        before = list(queue._waiters)  # held: their ids cannot be reused by new futures
        assert len(before) == 100
        queue.add("a")
        for _ in range(3):
            await asyncio.sleep(0)
        assert len(woken) == 1
        # The 99 others still wait on their first future: none was woken to find the queue empty and wait anew.
        assert {id(w) for w in queue._waiters} <= {id(w) for w in before} and len(queue._waiters) == 99
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


async def test_a_woken_worker_cancelled_before_taking_the_key_passes_it_on() -> None:
    queue = WorkQueue()
    got: list[str] = []

    async def worker() -> None:
        got.append(await queue.get())

    first = asyncio.create_task(worker())
    second = asyncio.create_task(worker())
    await asyncio.sleep(0)
    queue.add("a")  # wakes the first waiter...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.wait_for(second, timeout=5)
    assert got == ["a"]
    assert first.cancelled()
