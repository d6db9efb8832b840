"""Leader election on a Lease (karpy.runtime.leader) against the in-memory apiserver, on a fake clock: the lease is
created on 404, respected by a standby until ``observed + leaseDurationSeconds``, taken over with one more
transition, renewed, re-read after a conflict, lost at the renew deadline with the fence closed before ``lost`` is
set, never renewed after a jump of the clock (a process resumed after SIGSTOP), and released on shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube, Request
from karpy.kube.ratelimit import TokenBucket
from karpy.kube.resources import LEASES
from karpy.runtime.clock import FakeClock
from karpy.runtime.fence import Fence
from karpy.runtime.leader import (
    LeaderElector,
    LeaseConfig,
    LeaseRecord,
    new_identity,
)

NS, NAME = "karpy", "karpenter-leader-election"


class JumpClock(FakeClock):
    """A fake clock that can also jump, as the monotonic clock does for a process stopped and then continued:
    the timers that came due meanwhile fire late, all at the new time."""

    def jump(self, seconds: float) -> None:
        self._now += seconds


@pytest.fixture
def clock() -> JumpClock:
    return JumpClock()


@pytest.fixture
def kube(clock: JumpClock) -> FakeKube:
    # The apiserver's wall clock follows the fake clock (creationTimestamp only).
    return FakeKube(clock=lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=clock.now()))


def elector(kube: FakeKube, clock: JumpClock, identity: str) -> LeaderElector:
    config = LeaseConfig(NAME, NS, identity)
    return LeaderElector(
        kube,
        config,
        clock=clock,
        wall=lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=clock.now()),
        fence=Fence(identity, clock),
        events=EventRecorder(kube),
        rng=random.Random(7),
    )


@contextlib.asynccontextmanager
async def running(candidate: LeaderElector) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(candidate.run(), name=f"elector/{candidate.identity}")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def lease(kube: FakeKube) -> LeaseRecord:
    obj = kube.object(LEASES, NAME, NS)
    assert obj is not None
    return LeaseRecord.from_lease(obj)


def lease_writes(kube: FakeKube, since: int = 0) -> list[Request]:
    return [r for r in kube.requests[since:] if r.method in ("POST", "PUT") and "/leases" in r.path]


def slowpath() -> float:
    return REGISTRY.get_sample_value("leader_election_slowpath_total", {"name": NAME}) or 0.0


def master_status() -> float | None:
    return REGISTRY.get_sample_value("leader_election_master_status", {"name": NAME})


def test_config_validates_durations_as_client_go() -> None:
    """renew deadline > 1.2 × retry period and lease duration > renew deadline (client-go NewLeaderElector);
    controller-runtime's defaults (15 s / 10 s / 2 s) pass; the request timeout is max(renew deadline / 2, 1 s)."""
    config = LeaseConfig(NAME, NS, "me")
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)
    assert config.request_timeout == 5.0
    with pytest.raises(ValueError, match="renew deadline"):
        LeaseConfig(NAME, NS, "me", renew_deadline=2.4, retry_period=2.0)
    with pytest.raises(ValueError, match="lease duration"):
        LeaseConfig(NAME, NS, "me", lease_duration=10.0)
    with pytest.raises(ValueError):
        LeaseConfig(NAME, "", "me")
    identity = new_identity()
    host, _, suffix = identity.rpartition("_")
    assert host and len(suffix) == 36


async def test_acquire_creates_the_lease_and_announces_it(kube: FakeKube, clock: JumpClock) -> None:
    """No Lease (404): it is created with this holder, 15 s, acquire = renew time, no transition; the fence is
    granted until attempt start + renew deadline; an Event says '<id> became leader'; the gauge reads 1."""
    a = elector(kube, clock, "a")
    async with running(a):
        start = clock.now()
        await clock.run(a.elected.wait())
        await a.events.flush()
        record = lease(kube)
        assert (record.holder, record.lease_duration, record.transitions) == ("a", 15, 0)
        assert record.acquire_time == record.renew_time == "2026-01-01T00:16:40.000000Z"
        assert a.fence.deadline == start + 10.0 and a.fence.holds()
        [event] = kube.events("LeaderElection", name=NAME)
        assert (event["type"], event["message"], event["involvedObject"]["kind"]) == (
            "Normal",
            "a became leader",
            "Lease",
        )
        assert event["metadata"]["namespace"] == NS
        assert master_status() == 1
        assert kube.requests_to("POST", LEASES)[0].path == f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


async def test_renews_every_retry_period_keeping_acquire_time(kube: FakeKube, clock: JumpClock) -> None:
    """The leader PUTs its record every 2 s (resourceVersion-guarded, the fast path with no GET), moving
    renewTime and the fence's deadline; acquireTime and the transitions stay."""
    a = elector(kube, clock, "a")
    async with running(a):
        await clock.run(a.elected.wait())
        acquired = lease(kube).acquire_time
        gets = len(kube.requests_to("GET", LEASES))
        before = len(kube.requests)
        await clock.advance(2.0)
        renewals = lease_writes(kube, before)
        assert [r.method for r in renewals] == ["PUT"]
        assert renewals[0].body["metadata"]["resourceVersion"]
        await clock.advance(4.0)
        record = lease(kube)
        assert record.acquire_time == acquired and record.transitions == 0
        assert record.renew_time == "2026-01-01T00:16:46.000000Z"
        assert len(kube.requests_to("GET", LEASES)) == gets  # the fast path: no read
        assert a.fence.deadline == clock.now() + 10.0


async def test_standby_waits_until_observed_plus_lease_duration(kube: FakeKube, clock: JumpClock) -> None:
    """A standby respects a live holder: it takes over exactly when ``observed + leaseDurationSeconds`` passes
    after the holder's last renewal (here the holder stopped renewing: its task was killed), with one more
    transition and acquireTime = now; it never writes the Lease before."""
    a = elector(kube, clock, "a")
    task = asyncio.create_task(a.run())
    try:
        await clock.run(a.elected.wait())
        b = elector(kube, clock, "b")
        async with running(b):
            await clock.advance(5.0)  # a renews at +2, +4 while b watches
            assert not b.elected.is_set() and b.leader == "a"
            assert not b.fence.holds()
            task.cancel()  # a dies (no release)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            last_renew = clock.now() - 1.0  # a's last renewal was at +4
            writes_by_b = [r for r in lease_writes(kube) if r.body["spec"]["holderIdentity"] == "b"]
            assert writes_by_b == []
            await clock.advance(last_renew + 15.0 - clock.now() - 0.01)
            assert not b.elected.is_set()
            await clock.run(b.elected.wait())
            assert clock.now() == pytest.approx(last_renew + 15.0, abs=0.01)
            record = lease(kube)
            assert (record.holder, record.transitions) == ("b", 1)
            assert record.acquire_time == record.renew_time
            assert b.fence.holds()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_standby_takes_over_at_once_after_release(kube: FakeKube, clock: JumpClock) -> None:
    """``release()`` (SIGTERM, ReleaseOnCancel) writes holder "" and leaseDurationSeconds 1, keeps the transitions,
    revokes the fence and says '<id> stopped leading' first; the standby, watching, takes the lease at once."""
    a = elector(kube, clock, "a")
    task = asyncio.create_task(a.run())
    try:
        await clock.run(a.elected.wait())
        b = elector(kube, clock, "b")
        async with running(b):
            await clock.advance(1.0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            released_at = clock.now()
            assert await a.release() is True
            assert not a.fence.holds()
            messages = [e["message"] for e in kube.events("LeaderElection")]
            assert messages == ["a became leader", "a stopped leading"]
            await clock.run(b.elected.wait())
            assert clock.now() - released_at < 0.1
            record = lease(kube)
            assert (record.holder, record.transitions, record.lease_duration) == ("b", 1, 15)
            assert await a.release() is False  # once only
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_release_keeps_transitions_and_empties_the_holder(kube: FakeKube, clock: JumpClock) -> None:
    a = elector(kube, clock, "a")
    async with running(a):
        await clock.run(a.elected.wait())
    assert await a.release() is True
    record = lease(kube)
    assert (record.holder, record.lease_duration, record.transitions) == ("", 1, 0)
    assert master_status() == 0


async def test_a_conflict_is_retried_on_the_slow_path(kube: FakeKube, clock: JumpClock) -> None:
    """A 409 on the optimistic renewal: the leader re-reads the Lease (GET) and writes again; the slow-path
    counter moves by one; leadership is kept."""
    a = elector(kube, clock, "a")
    async with running(a):
        await clock.run(a.elected.wait())
        slow = REGISTRY.get_sample_value("leader_election_slowpath_total", {"name": NAME}) or 0.0
        kube.fail("update", ApiError(409, "Conflict", "the object has been modified"), resource=LEASES)
        gets = len(kube.requests_to("GET", LEASES))
        await clock.advance(2.0)
        assert len(kube.requests_to("GET", LEASES)) == gets + 1
        assert REGISTRY.get_sample_value("leader_election_slowpath_total", {"name": NAME}) == slow + 1
        assert a.fence.deadline == clock.now() + 10.0
        assert not a.lost.is_set() and lease(kube).holder == "a"


async def test_renew_deadline_revokes_the_fence_before_lost(kube: FakeKube, clock: JumpClock) -> None:
    """Renewals failing (the apiserver answers 500) until the renew deadline: the fence is closed before
    ``lost`` is set (checked by a waiter woken by ``lost``), no write is sent after the deadline, and the
    elector's run() returns."""
    a = elector(kube, clock, "a")
    sent: list[tuple[str, str, float]] = []
    request = kube.request

    async def timed(method: str, path: str, **kwargs: Any) -> Any:
        sent.append((method, path, clock.now()))
        return await request(method, path, **kwargs)

    kube.request = timed  # type: ignore[method-assign]
    task = asyncio.create_task(a.run())
    try:
        await clock.run(a.elected.wait())
        kube.fail("update", ApiError(500, "InternalError", "etcd down"), resource=LEASES, times=None)
        kube.fail("get", ApiError(500, "InternalError", "etcd down"), resource=LEASES, times=None)
        granted = a.fence.deadline
        seen: list[bool] = []

        async def observe() -> None:
            await a.lost.wait()
            seen.append(a.fence.holds())

        watcher = asyncio.create_task(observe())
        await clock.run(task)
        await watcher
        assert seen == [False]
        assert clock.now() >= granted
        puts = [at for method, path, at in sent if method == "PUT" and "/leases" in path]
        assert puts  # it did try while the fence held
        assert all(at < granted for at in puts), (puts, granted)  # and sent nothing once the deadline passed
        assert master_status() == 0
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_no_renew_is_sent_after_a_clock_jump(kube: FakeKube, clock: JumpClock) -> None:
    """The process was stopped (SIGSTOP) for 30 s: when it runs again its renew timer fires past the fence's
    deadline, so it sends nothing — not even a renewal of its own Lease — and reports the loss."""
    a = elector(kube, clock, "a")
    task = asyncio.create_task(a.run())
    try:
        await clock.run(a.elected.wait())
        await clock.advance(1.0)
        before = len(kube.requests)
        clock.jump(30.0)
        await clock.run(task)
        assert a.lost.is_set() and not a.fence.holds()
        assert kube.requests[before:] == []
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_standby_never_renews_someone_elses_lease(kube: FakeKube, clock: JumpClock) -> None:
    """Two candidates at once: exactly one leads; the other's fence never holds."""
    a, b = elector(kube, clock, "a"), elector(kube, clock, "b")
    async with running(a), running(b):
        await clock.advance(30.0)
        assert a.elected.is_set() != b.elected.is_set()
        leader, standby = (a, b) if a.elected.is_set() else (b, a)
        assert lease(kube).holder == leader.identity
        assert leader.fence.holds() and not standby.fence.holds()


class Gate:
    """A rate limiter whose next wait blocks until opened: a process stopped between the elector's own check and
    the send (here: in the election client's rate limiter)."""

    def __init__(self) -> None:
        self.armed = False
        self.open = asyncio.Event()
        self.waiting = asyncio.Event()

    async def wait(self) -> None:
        if self.armed:
            self.waiting.set()
            await self.open.wait()


async def test_a_renewal_stopped_before_its_send_is_refused_by_the_lease_fence(clock: JumpClock) -> None:
    """The renewal passed the elector's check, then the process stopped (in the client's rate limiter) past the
    deadline: when it runs again the election client's lease fence refuses the PUT, so nothing is sent."""
    gate = Gate()
    kube = FakeKube(rate_limiter=cast(TokenBucket, gate))
    a = elector(kube, clock, "a")
    kube.fence = a.lease_fence
    task = asyncio.create_task(a.run())
    try:
        await clock.run(a.elected.wait())
        assert a.lease_fence.holds()
        gate.armed = True
        await clock.run(gate.waiting.wait())  # the renewal at +2 s waits in the limiter
        before = len(kube.requests)
        slow = slowpath()
        clock.jump(30.0)
        gate.open.set()
        await clock.settle()
        assert kube.requests[before:] == []
        assert not a.lease_fence.holds()
        assert slowpath() == slow  # the fence lapsed: no slow path ran, none is counted
        await clock.run(task)
        assert a.lost.is_set()
        assert kube.requests[before:] == []
        assert await a.release() is False
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_lease_fence_is_open_while_campaigning(kube: FakeKube, clock: JumpClock) -> None:
    """A candidate's own Lease writes pass (it must acquire); a leader's pass while its fence holds."""
    a = elector(kube, clock, "a")
    kube.fence = a.lease_fence
    assert a.lease_fence.holds() and not a.fence.holds()
    async with running(a):
        await clock.run(a.elected.wait())
        await clock.advance(10.0)
        assert lease(kube).holder == "a" and a.lease_fence.holds()
    assert await a.release() is True
    assert lease(kube).holder == ""
    assert not a.lease_fence.holds()


async def test_a_cancelled_campaign_cancels_its_renewal_in_flight(clock: JumpClock) -> None:
    """SIGTERM while a renewal is in flight (here: waiting in the election client's rate limiter): cancelling the
    campaign cancels that renewal too, so it never lands after the cancel (it would re-grant the fence and move
    the Lease's resourceVersion under release()); release() then writes holder "" at once."""
    gate = Gate()
    kube = FakeKube(rate_limiter=cast(TokenBucket, gate))
    a = elector(kube, clock, "a")
    task = asyncio.create_task(a.run())
    try:
        await clock.run(a.elected.wait())
        await a.events.flush()  # 'a became leader' is out
        gate.armed = True
        await clock.run(gate.waiting.wait())  # the renewal at +2 s waits in the limiter
        granted = a.fence.deadline
        before = len(kube.requests)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        gate.armed = False
        gate.open.set()
        await clock.settle()
        assert lease_writes(kube, before) == []  # the renewal did not outlive the campaign
        assert a.fence.deadline == granted
        assert await a.release() is True
        assert lease(kube).holder == ""
        assert not a.fence.holds()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
