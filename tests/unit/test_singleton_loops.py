"""The provisioner, garbage collection and interruption as singleton reconcilers on the runtime's loop, on a
fake clock: when each pass runs, what it returns, and how failures are retried."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from karpy.cloudprovider.types import CloudInstance, CloudProvider, CloudProviderError, InterruptionQueue
from karpy.controllers.garbagecollection import FAST_INTERVAL, FAST_PASSES, INTERVAL, GarbageCollection
from karpy.controllers.interruption import Interruption
from karpy.controllers.provisioner import RECHECK_SECONDS, Provisioner
from karpy.kube.client import KubeClient
from karpy.kube.events import EventRecorder
from karpy.runtime.clock import FakeClock, settle
from karpy.runtime.controller import Result
from karpy.runtime.singleton import SingletonController
from karpy.state.cluster import KINDS, ClusterState
from karpy.state.views import PodInfo
from tests.unit.disruption_builders import following_plans


async def stop(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait for it to end (the task-leak check fails a test that leaves it pending)."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


START = 1000.0


def listed_state() -> ClusterState:
    state = ClusterState()
    for kind in KINDS:
        state.replace(kind, [])
    return state


class ScriptedProvisioner(Provisioner):
    """The real loop logic (batch window, recheck, retry) around a provisioning pass that records its time."""

    def __init__(self, clock: FakeClock, state: ClusterState) -> None:
        none: Any = None
        super().__init__(
            cast(KubeClient, none),
            state,
            cast(CloudProvider, none),
            cast(EventRecorder, none),
            batch_idle=1.0,
            batch_max=10.0,
            plans=following_plans(state),
            clock=clock,
        )
        self.fake_clock = clock
        self.passes: list[float] = []
        self.pending: list[PodInfo] = []
        self.failures: list[Exception] = []

    def pending_pods(self) -> list[PodInfo]:
        return self.pending

    async def provision_once(self) -> list[dict[str, Any]]:
        self.passes.append(self.fake_clock.now() - START)
        if self.failures:
            raise self.failures.pop(0)
        return []


async def provisioning(clock: FakeClock) -> tuple[ScriptedProvisioner, asyncio.Task[None]]:
    prov = ScriptedProvisioner(clock, listed_state())
    loop = SingletonController(prov, base_delay=1.0, max_delay=RECHECK_SECONDS, jitter=0, clock=clock)
    prov.wake = loop.trigger
    task = asyncio.create_task(loop.run())
    await settle()
    return prov, task


async def test_a_trigger_wakes_the_provisioner_and_the_batch_window_closes_first() -> None:
    """Nothing happens without a trigger; a trigger at 3 s opens a window that closes 1 s (idle) later."""
    clock = FakeClock(START)
    prov, task = await provisioning(clock)
    await clock.advance(3.0)
    assert prov.passes == []
    prov.trigger()
    await clock.advance(0.99)
    assert prov.passes == [], "provisioned before the batch window closed"
    await clock.advance(0.01)
    assert prov.passes == [4.0]
    await clock.advance(60.0)
    assert prov.passes == [4.0], "nothing pending: no further pass"
    await stop(task)


async def test_pending_pods_are_rechecked_every_ten_seconds() -> None:
    """Pods still pending re-open a window on the 10 s recheck (requeue_after), not on every wake-up."""
    clock = FakeClock(START)
    prov, task = await provisioning(clock)
    prov.pending = [cast(PodInfo, object())]
    prov.trigger()
    await clock.advance(1.0)
    assert prov.passes == [1.0]
    prov.trigger()  # a change during the requeue wait: a window of its own, the recheck cadence unchanged
    await clock.advance(1.0)
    assert prov.passes == [1.0, 2.0]
    await clock.advance(10.0)  # recheck at 12 s opens a window closing at 13 s
    assert prov.passes == [1.0, 2.0]
    await clock.advance(1.0)
    assert prov.passes == [1.0, 2.0, 13.0]
    await stop(task)


async def test_a_failed_provisioning_pass_is_retried_after_the_loop_backoff() -> None:
    """An API or cloud error re-triggers the batch and the loop retries after its backoff (1 s, then 2 s)."""
    clock = FakeClock(START)
    prov, task = await provisioning(clock)
    prov.failures = [CloudProviderError("CreateFleet throttled"), CloudProviderError("again")]
    prov.trigger()
    await clock.advance(1.0)
    assert prov.passes == [1.0]
    await clock.advance(1.0 + 1.0)  # backoff 1 s, then the retry's own 1 s window
    assert prov.passes == [1.0, 3.0]
    await clock.advance(2.0 + 1.0)  # backoff 2 s, window 1 s: this one succeeds
    assert prov.passes == [1.0, 3.0, 6.0]
    await clock.advance(60.0)
    assert prov.passes == [1.0, 3.0, 6.0]
    await stop(task)


class ListingCloud:
    """A cloud whose instance listing fails while ``failing``."""

    def __init__(self) -> None:
        self.failing = False
        self.lists = 0

    async def list(self) -> list[CloudInstance]:
        self.lists += 1
        if self.failing:
            raise CloudProviderError("DescribeInstances: RequestLimitExceeded")
        return []


async def test_garbage_collection_cadence_and_failures() -> None:
    """Every 10 s for the first 20 passes, then every 30 s; a failed pass raises (the loop backs off) and
    still counts toward the start-up passes."""
    cloud = ListingCloud()
    none: Any = None
    gc = GarbageCollection(
        cast(KubeClient, none),
        listed_state(),
        cast(CloudProvider, cloud),
        cluster_name="c",
        now=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )
    results = [await gc.reconcile() for _ in range(FAST_PASSES - 2)]
    assert results == [Result(requeue_after=FAST_INTERVAL)] * (FAST_PASSES - 2)
    cloud.failing = True
    with pytest.raises(CloudProviderError):
        await gc.reconcile()
    cloud.failing = False
    assert gc.passes == FAST_PASSES - 1
    assert await gc.reconcile() == Result(requeue_after=INTERVAL)
    assert cloud.lists == FAST_PASSES


class OneMessageQueue:
    """Answers one empty batch per receive, counting the reads."""

    def __init__(self) -> None:
        self.reads = 0

    async def receive(self) -> list[Any]:
        self.reads += 1
        return []

    async def delete(self, receipt_handle: str) -> None:
        return None


async def test_interruption_receives_again_at_once() -> None:
    """Each pass is one receive (a long poll) and its handling; the next follows at once (requeue_after 0)."""
    queue = OneMessageQueue()
    none: Any = None
    ctl = Interruption(
        cast(KubeClient, none),
        listed_state(),
        cast(CloudProvider, none),
        cast(EventRecorder, none),
        cast(InterruptionQueue, queue),
    )
    assert await ctl.reconcile() == Result(requeue_after=0)
    assert queue.reads == 1 and ctl.queue_error == ""


async def test_triggers_taken_by_a_window_do_not_open_another() -> None:
    """A trigger that arrived during a window (and extended it) wakes the loop, but with pods still pending the
    next window opens on the 10 s recheck, not at once."""
    clock = FakeClock(START)
    prov, task = await provisioning(clock)
    prov.pending = [cast(PodInfo, object())]
    prov.trigger()
    await clock.advance(0.5)
    prov.trigger()
    await clock.advance(1.0)
    assert prov.passes == [1.5]
    await clock.advance(9.9)
    assert prov.passes == [1.5], "a second window right after the first"
    await clock.advance(0.1 + 1.0)
    assert prov.passes == [1.5, 12.5]
    await stop(task)
