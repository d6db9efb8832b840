"""The operator under leader election: a standby runs only its warm tasks (informers feeding cluster state, Plans
and the routing into the work queues, observability) and writes nothing; its writers start once it is elected.
``karpy run`` stops on a lost lease without releasing it (exit code 1) and releases it on SIGTERM (exit 0)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sys
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from karpy.cli import main as cli
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import LEASES
from karpy.operator import Operator, _run_until_stopped
from karpy.runtime.clock import FakeClock
from karpy.runtime.fence import Fence
from karpy.runtime.leader import LeaderElectionLost, LeaderElector, LeaseConfig, LeaseRecord
from karpy.settings import from_environment

NS, NAME = "karpy", "karpenter-leader-election"
CLAIM = {
    "apiVersion": "karpenter.sh/v1",
    "kind": "NodeClaim",
    "metadata": {"name": "claim-1", "labels": {"karpenter.sh/nodepool": "default"}},
    "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
}
PENDING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "default"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    "status": {
        "phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    },
}
WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Resolver:
    async def resolve_nodeclass(self, nodeclass: Any) -> Any:
        raise AssertionError("not resolved in this test")


def supervised() -> set[str]:
    """The names of the running tasks the operator supervises."""
    return {t.get_name() for t in asyncio.all_tasks() if not t.done()}


async def test_a_standby_runs_warm_tasks_only_and_its_writers_once_elected() -> None:
    """Before election: the informers list and watch (the NodeClaim reaches cluster state and its key waits in
    the lifecycle queue), no writer task exists and no write reaches the apiserver. Once elected: every writer
    task starts, in the same list as an unelected operator's."""
    kube = FakeKube([CLAIM, PENDING])
    op = Operator(from_environment({"CLUSTER_NAME": "c"}), kube, FakeCloudProvider(), nodeclasses=Resolver())
    elected = asyncio.Event()
    task = asyncio.create_task(op.run(elected))
    try:
        await asyncio.wait_for(op.state.wait_listed(), 5)
        for _ in range(20):
            await asyncio.sleep(0)
        warm = {name for name, _ in op.warm_tasks()}
        writers = {name for name, _ in op.leader_tasks()}
        # metrics.state reads the cloud provider's instance types (and only while leading): warm, not a writer
        trim = {"memory.trim"} if op.heap_trimmer is not None else set()  # glibc: freed heap back to the OS
        assert warm == {f"informer/{i.resource.kind}" for i in op.informers} | {"observability", "metrics.state"} | trim
        assert "provisioner" in writers and "garbagecollection" in writers and not warm & writers
        running = supervised()
        assert warm <= running and not writers & running
        assert "claim-1" in op.state.nodeclaims
        assert len(op.lifecycle.queue) > 0  # routed and waiting, deduplicated
        assert [r for r in kube.requests if r.method in WRITES] == []
        elected.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert writers <= supervised()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class StubOperator:
    """Stands in for :class:`Operator` in ``_run_until_stopped``: its writers "run" once elected."""

    def __init__(self) -> None:
        self.leading = asyncio.Event()
        self.cancelled = False

    async def run(self, elected: asyncio.Event | None) -> None:
        try:
            if elected is not None:
                await elected.wait()
            self.leading.set()
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def elector(kube: FakeKube, clock: FakeClock) -> LeaderElector:
    return LeaderElector(
        kube,
        LeaseConfig(NAME, NS, "me"),
        clock=clock,
        wall=lambda: datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=clock.now()),
        fence=Fence("me", clock),
        events=EventRecorder(kube),
        rng=random.Random(3),
    )


def holder(kube: FakeKube) -> LeaseRecord:
    lease = kube.object(LEASES, NAME, NS)
    assert lease is not None
    return LeaseRecord.from_lease(lease)


async def test_a_lost_lease_stops_everything_without_a_release() -> None:
    """Renewals fail past the renew deadline: the writers are cancelled, the fence is closed, the Lease still
    names this process (no release: controller-runtime exits without a graceful shutdown) and the loss is
    reported (``karpy run`` then raises LeaderElectionLost)."""
    clock = FakeClock()
    kube = FakeKube()
    candidate = elector(kube, clock)
    stub = StubOperator()
    outcome = asyncio.ensure_future(_run_until_stopped(cast(Operator, stub), candidate, asyncio.Event()))
    try:
        await clock.run(stub.leading.wait())
        kube.fail("update", ApiError(500, "InternalError", "etcd down"), resource=LEASES, times=None)
        kube.fail("get", ApiError(500, "InternalError", "etcd down"), resource=LEASES, times=None)
        assert await clock.run(outcome) is True
        assert stub.cancelled and candidate.lost.is_set() and not candidate.fence.holds()
        assert holder(kube).holder == "me"
        assert [e["message"] for e in kube.events("LeaderElection")] == ["me became leader"]
    finally:
        outcome.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await outcome


async def test_a_stop_cancels_the_writers_then_releases_the_lease() -> None:
    """SIGTERM: the writers are cancelled first, then the Lease is released (holder "", 1 s), 'stopped leading'."""
    clock = FakeClock()
    kube = FakeKube()
    candidate = elector(kube, clock)
    stub = StubOperator()
    stop = asyncio.Event()
    outcome = asyncio.ensure_future(_run_until_stopped(cast(Operator, stub), candidate, stop))
    try:
        await clock.run(stub.leading.wait())
        stop.set()
        assert await clock.run(outcome) is False
        assert stub.cancelled and not candidate.fence.holds()
        record = holder(kube)
        assert (record.holder, record.lease_duration) == ("", 1)
        assert [e["message"] for e in kube.events("LeaderElection")] == ["me became leader", "me stopped leading"]
    finally:
        outcome.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await outcome


async def test_a_stop_on_a_standby_releases_nothing() -> None:
    clock = FakeClock()
    kube = FakeKube()
    other = LeaseRecord("someone-else", 15, None, None, 0)
    kube.seed({"kind": "Lease", "metadata": {"name": NAME, "namespace": NS}, "spec": other.spec()})
    candidate = elector(kube, clock)
    stub = StubOperator()
    stop = asyncio.Event()
    outcome = asyncio.ensure_future(_run_until_stopped(cast(Operator, stub), candidate, stop))
    try:
        await clock.advance(3.0)
        assert not stub.leading.is_set()
        stop.set()
        assert await clock.run(outcome) is False
        assert holder(kube).holder == "someone-else"
        assert [r for r in kube.requests if r.method in WRITES] == []
    finally:
        outcome.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await outcome


def test_karpy_run_exits_1_when_leadership_is_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """``karpy run``: a lost lease is exit code 1 (the kubelet restarts the process, as a standby)."""
    import karpy.operator

    async def lose(settings: Any) -> None:
        raise LeaderElectionLost("me", NAME)

    monkeypatch.setenv("CLUSTER_NAME", "c")
    monkeypatch.setattr(karpy.operator, "run", lose)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # keep the test's event loop policy
    assert cli.main(["run"]) == 1


async def test_a_campaign_that_fails_is_a_loss() -> None:
    """The elector's run() raises once elected (no renewal runs any more): the fence is revoked, ``lost`` is set,
    the writers are cancelled and the loss is reported (exit code 1), rather than a process that stays up, ready,
    with writers refused forever."""
    clock = FakeClock()
    kube = FakeKube()
    candidate = elector(kube, clock)

    async def broken() -> None:
        await clock.sleep(1.0)
        raise RuntimeError("renewals crashed")

    candidate._renew = broken  # type: ignore[method-assign]
    stub = StubOperator()
    outcome = asyncio.ensure_future(_run_until_stopped(cast(Operator, stub), candidate, asyncio.Event()))
    try:
        await clock.run(stub.leading.wait())
        assert candidate.fence.holds()
        assert await clock.run(outcome) is True
        assert stub.cancelled and candidate.lost.is_set() and not candidate.fence.holds()
        assert holder(kube).holder == "me"  # not released
    finally:
        outcome.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await outcome
