"""Leader election on the real apiserver (``coordination.k8s.io/v1`` Lease, controller-runtime's 15 s / 10 s / 2 s):
two candidates elect exactly one leader; when the leader dies without releasing, the other takes over within
``lease duration + 5 s``; a release (SIGTERM) hands over at once; and an operator that is a standby writes nothing,
to the apiserver or to AWS, while the leader provisions, yet keeps its cluster state and work queues warm, and it
finishes the work once it leads.

The electors and operators run in-process on the test loop (as ``operator_harness`` runs one), each with its own
client, against the local cluster and moto.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from operator_harness import on_demand_pool, pinned_pod

from e2e.helpers import apply, delete_nodeclaims, nodeclaims_of, wait_for
from karpy.aws.session import AWSClients
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.operator import Operator, aws_operator, kubernetes_version
from karpy.runtime.leader import JITTER_FACTOR, LeaderElector, LeaseConfig, LeaseRecord
from karpy.settings import from_environment

pytestmark = [pytest.mark.integration]
NAMESPACE = "default"
POOL = "election"
POD = "election-pod"
MUTATING_PREFIXES = ("Create", "Delete", "Terminate", "Run", "Modify", "Add", "Remove", "Put", "Receive", "Send")


class RecordingKubeClient(KubeClient):
    """A client that remembers every request it sends (verb and path)."""

    sent: list[tuple[str, str]]

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        if not hasattr(self, "sent"):
            self.sent = []
        self.sent.append((method.upper(), path))
        return await super().request(method, path, **kwargs)

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in getattr(self, "sent", []) if m not in ("GET", "HEAD")]


async def new_client(cluster: Any, cls: type[KubeClient] = KubeClient) -> KubeClient:
    return await cls.from_environment(str(cluster.kubeconfig))


def candidate(client: KubeClient, name: str, identity: str) -> LeaderElector:
    return LeaderElector(client, LeaseConfig(name, NAMESPACE, identity), events=EventRecorder(client))


@contextlib.asynccontextmanager
async def campaigning(elector: LeaderElector, after: asyncio.Event | None = None) -> AsyncIterator[asyncio.Task[None]]:
    """``elector`` campaigning (once ``after`` is set, when given) until the block exits."""

    async def campaign() -> None:
        if after is not None:
            await after.wait()
        await elector.run()

    task = asyncio.create_task(campaign(), name=f"elector/{elector.identity}")
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def holder(kube: KubeClient, name: str) -> LeaseRecord:
    return LeaseRecord.from_lease(
        await kube.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{name}")
    )


async def test_two_candidates_one_leader_and_takeover_after_a_death(local_cluster: Any, kube: KubeClient) -> None:
    """Exactly one of two candidates leads; the Lease names it. Its task is killed (no release): the other takes
    over within lease duration + 5 s of the dead leader's last renewal, with one more transition."""
    name = f"election-{uuid.uuid4().hex[:8]}"
    clients = [await new_client(local_cluster), await new_client(local_cluster)]
    a, b = candidate(clients[0], name, "a"), candidate(clients[1], name, "b")
    try:
        async with campaigning(a) as task_a, campaigning(b) as task_b:
            either = [asyncio.ensure_future(a.elected.wait()), asyncio.ensure_future(b.elected.wait())]
            _, pending = await asyncio.wait(either, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            for waiter in pending:
                waiter.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            leader, standby, task = (a, b, task_a) if a.elected.is_set() else (b, a, task_b)
            assert leader.elected.is_set() and not standby.elected.is_set()
            record = await holder(kube, name)
            assert (record.holder, record.lease_duration, record.transitions) == (leader.identity, 15, 0)
            await wait_for(
                lambda: _true(standby.leader == leader.identity), timeout=10, what="standby observed the leader"
            )
            assert not standby.elected.is_set() and not standby.fence.holds()
            task.cancel()  # the leader dies: no release
            with contextlib.suppress(asyncio.CancelledError):
                await task
            died = time.monotonic()
            await asyncio.wait_for(standby.elected.wait(), 15 + 5 + 5)
            takeover = time.monotonic() - died
            record = await holder(kube, name)
            assert (record.holder, record.transitions) == (standby.identity, 1)
            assert takeover <= 15 + 5, takeover
            assert standby.fence.holds()
    finally:
        for client in clients:
            await client.close()


async def test_release_hands_over_at_once(local_cluster: Any, kube: KubeClient) -> None:
    """SIGTERM's release (holder "", leaseDurationSeconds 1, ReleaseOnCancel): the watching standby takes the lease
    within a retry period; '<id> became leader' / 'stopped leading' Events are on the Lease."""
    name = f"election-{uuid.uuid4().hex[:8]}"
    clients = [await new_client(local_cluster), await new_client(local_cluster)]
    a, b = candidate(clients[0], name, "a"), candidate(clients[1], name, "b")
    try:
        async with campaigning(a) as task_a, campaigning(b, after=a.elected):
            await asyncio.wait_for(a.elected.wait(), 30)
            await wait_for(lambda: _true(b.leader == "a"), timeout=10, what="standby observed the leader")
            task_a.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task_a
            released = time.monotonic()
            assert await a.release()
            await asyncio.wait_for(b.elected.wait(), 15)
            # The watch makes it near-immediate; the jittered fallback poll waits at most retry × (1 + jitter).
            assert time.monotonic() - released < (1 + JITTER_FACTOR) * 2.0 + 1.0
            record = await holder(kube, name)
            assert (record.holder, record.transitions, record.lease_duration) == ("b", 1, 15)
            await b.events.flush()
        events, _ = await kube.list(r.EVENTS, NAMESPACE, query={"fieldSelector": f"involvedObject.name={name}"})
        messages = sorted(e["message"] for e in events if e.get("reason") == "LeaderElection")
        assert messages == ["a became leader", "a stopped leading", "b became leader"]
    finally:
        for client in clients:
            await client.close()


def _true(value: bool) -> Any:
    async def check() -> bool:
        return value

    return check()


def pod() -> dict[str, Any]:
    return pinned_pod(POD, POOL)


class AWSCalls:
    """Every AWS API call made through some clients, by operation name (botocore's ``before-call`` event)."""

    def __init__(self, clients: AWSClients) -> None:
        self.calls: list[str] = []
        for service in ("ec2", "iam", "sqs", "ssm", "pricing", "eks"):
            client = getattr(clients, service, None)
            if client is not None:
                client.meta.events.register("before-call", self._record)

    def _record(self, event_name: str, **_: Any) -> None:
        self.calls.append(event_name.rsplit(".", 1)[-1])

    def mutating(self) -> list[str]:
        return [c for c in self.calls if c.startswith(MUTATING_PREFIXES)]


@contextlib.asynccontextmanager
async def elected_operator(
    cluster: Any, client: KubeClient, lease: str, identity: str, settings: Mapping[str, str]
) -> AsyncIterator[tuple[Operator, LeaderElector, AWSCalls, asyncio.Task[None], asyncio.Task[None]]]:
    """An operator built as ``karpy run`` builds it, its writers started once its own elector leads."""
    env = {**cluster.aws_env, "CLUSTER_NAME": cluster.cluster_name, **settings}
    config = from_environment(env)
    election_client = await new_client(cluster)
    elector = candidate(election_client, lease, identity)
    client.fence = elector.fence  # as karpy run: the operator's writes need the lease, the election's do not
    async with AWSClients.create(
        config.aws_region, config.aws_endpoint_url, fence=elector.fence, identity=identity
    ) as clients:
        calls = AWSCalls(clients)
        op = aws_operator(
            config,
            client,
            clients,
            cluster_endpoint=cluster.server,
            k8s_version=await kubernetes_version(client),
            interruption_queue=None,
        )
        op.wire()
        campaign = asyncio.create_task(elector.run(), name=f"elector/{identity}")
        main = asyncio.create_task(op.run(elector.elected), name=f"operator/{identity}")
        try:
            yield op, elector, calls, campaign, main
        finally:
            for task in (main, campaign):
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            await election_client.close()


async def test_a_standby_operator_writes_nothing_while_the_leader_provisions(
    local_cluster: Any, kube: KubeClient
) -> None:
    """Operator A leads and launches a NodeClaim for a pending pod; operator B, a standby on the same cluster and
    moto, lists and watches (its state holds A's NodeClaim, its work queues hold the keys) but sends no write to
    the apiserver and no mutating AWS call. A dies without releasing: B takes over and cleans up once the pod and
    NodePool are deleted (its terminator releases the NodeClaim)."""
    lease = f"election-{uuid.uuid4().hex[:8]}"
    settings = {"BATCH_IDLE_DURATION": "200ms", "BATCH_MAX_DURATION": "2s"}
    client_a = await new_client(local_cluster)
    # As karpy run names its main client: the identity in the user agent, "karpy" before the first "/".
    client_a._api.user_agent = "karpy/0.1.0 (operator-a)"
    client_b = await new_client(local_cluster, RecordingKubeClient)
    assert isinstance(client_b, RecordingKubeClient)
    try:
        async with elected_operator(local_cluster, client_a, lease, "operator-a", settings) as (
            _op_a,
            elector_a,
            _,
            a_campaign,
            a_main,
        ):
            await asyncio.wait_for(elector_a.elected.wait(), 30)
            async with elected_operator(local_cluster, client_b, lease, "operator-b", settings) as (
                op_b,
                elector_b,
                calls_b,
                _,
                _,
            ):
                await asyncio.wait_for(op_b.state.wait_listed(), 30)
                assert not elector_b.elected.is_set()
                await apply(kube, on_demand_pool(POOL, local_cluster.cluster_name))
                await kube.create(r.PODS, pod(), "default")

                async def launched() -> dict[str, Any] | None:
                    for claim in await nodeclaims_of(kube, POOL):
                        if (claim.get("status") or {}).get("providerID"):
                            return claim
                    return None

                claim = await wait_for(launched, timeout=90, what="the leader launched a NodeClaim")
                claim_name = claim["metadata"]["name"]
                # The apiserver's default field manager is the user agent before its first "/": still "karpy".
                managers = {entry["manager"] for entry in claim["metadata"].get("managedFields") or []}
                assert managers == {"karpy"}, managers
                await wait_for(
                    lambda: _true(claim_name in op_b.state.nodeclaims), timeout=10, what="standby state has it"
                )
                assert len(op_b.lifecycle.queue) > 0  # keys routed to the standby wait in its queue
                assert not elector_b.elected.is_set()
                assert client_b.writes() == []
                assert calls_b.mutating() == []
                # A dies, without a release; B takes over and finishes the work.
                for task in (a_main, a_campaign):
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                await asyncio.wait_for(elector_b.elected.wait(), 15 + 5 + 5)
                assert not elector_a.fence.holds()  # A's grant ended before B could take the lease
                await kube.delete(r.PODS, POD, "default")
                await kube.delete(r.NODEPOOLS, POOL)

                async def claims() -> list[dict[str, Any]]:
                    return await nodeclaims_of(kube, POOL)

                await delete_nodeclaims(kube, claims, timeout=90, what="election NodeClaims released by the new leader")
                assert client_b.writes(), "the new leader wrote"
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(r.PODS, POD, "default")
        with contextlib.suppress(ApiError):
            await kube.delete(r.NODEPOOLS, POOL)
        await client_a.close()
        await client_b.close()
