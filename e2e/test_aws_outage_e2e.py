"""A 75 s AWS outage in the middle of a scale-up, end to end: nothing is thrown away, everything recovers.

karpy runs as its own process with ``AWS_ENDPOINT_URL`` on a small TCP proxy (asyncio, loopback only, in a
thread of this test) in front of the cluster's moto server; the node agent keeps talking to moto directly. A
first pod warms karpy's caches; then the proxy stops listening and drops every connection it carries (so
karpy's pooled connections fail too: *connection refused* for 75 s), and the Deployment is scaled up: karpy
creates NodeClaims it cannot launch, and its EC2NodeClass refresh (every 60 s) fails during the window.
Proven from watch streams opened before the outage: no NodeClaim DELETED event and no deletionTimestamp, and the
EC2NodeClass never lost its resolved ``status.subnets``/``status.amis`` nor its ``Ready=True``; karpy's log shows
the failed refresh kept the last known status. After the proxy listens again every pod runs.

Everything this module creates is removed at its end (the session's cluster is shared).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    aws_client,
    ec2nodeclass,
    karpy_process,
    scale,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
POOL = "outage-e2e"
TAINT = "karpy-test/outage-e2e"
OUTAGE_S = 75.0
REPLICAS = 3


class Proxy:
    """A loopback TCP proxy to ``target`` that can stop listening (connections refused) and listen again on the
    same port. Runs its own event loop in a daemon thread, so it is independent of the test's loop."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.Server | None = None
        self.port = 0
        self.writers: set[asyncio.StreamWriter] = set()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True, name="aws-proxy")
        self.thread.start()

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self.writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self.writers -= {writer, up_writer}

    async def _listen(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):  # pooled keep-alive connections fail as well
            writer.transport.abort()
        await self.server.wait_closed()
        self.server = None

    def listen(self) -> None:
        """Accept connections (on the same port as before, once there was one)."""
        self._call(self._listen())

    def refuse(self) -> None:
        """Close the listening socket and every proxied connection: new connections are refused."""
        self._call(self._close())

    def stop(self) -> None:
        if self.server is not None:
            self.refuse()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def manifests(cluster: str) -> list[dict[str, Any]]:
    """An EC2NodeClass, a NodePool of 2-vCPU types (tainted so only this module's pods land there) and a
    Deployment whose pods need a node each (1.2 vCPU of 2)."""
    return [
        ec2nodeclass(POOL, cluster),
        shared_nodepool(
            POOL,
            requirements=[
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "In", "values": ["2"]},
            ],
            taints=[{"key": TAINT, "effect": "NoSchedule"}],
            disruption={"consolidateAfter": "Never"},
        ),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": POOL, "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": POOL}},
                "template": {
                    "metadata": {"labels": {"app": POOL}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
                        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": "app",
                                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": {"requests": {"cpu": "1200m", "memory": "512Mi"}},
                            }
                        ],
                    },
                },
            },
        },
    ]


class Watcher:
    """A watch stream on one resource from a resourceVersion, keeping every event (type, object)."""

    def __init__(self, client: KubeClient, res: r.Resource, rv: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.task = asyncio.create_task(self._run(client, res, rv))

    async def _run(self, client: KubeClient, res: r.Resource, rv: str) -> None:
        query = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "false", "timeoutSeconds": 900}
        async for line in client.stream_lines(res.path(), query, read_timeout=900):
            event = json.loads(line)
            self.events.append((event["type"], event["object"]))

    def check(self) -> None:
        """Fail when the stream itself ended with an error (a gap would make the proof worthless)."""
        if self.task.done() and self.task.exception() is not None:
            raise AssertionError(f"watch ended: {self.task.exception()!r}")

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, proxy: Proxy, ec2: Any) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.proxy = proxy
        self.ec2 = ec2

    async def claims(self) -> list[dict[str, Any]]:
        items = (await self.client.list(r.NODECLAIMS))[0]
        return [c for c in items if c["metadata"]["labels"].get(wk.LABEL_NODEPOOL) == POOL]

    async def running(self, n: int) -> bool:
        pods = (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        return len(live) == n and all(p["status"].get("phase") == "Running" for p in live)


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """karpy as its ServiceAccount, with its AWS endpoint on the proxy in front of moto."""
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    moto = urlsplit(local_cluster.aws_env["AWS_ENDPOINT_URL"])
    proxy = Proxy(moto.hostname or "127.0.0.1", moto.port or (443 if moto.scheme == "https" else 80))
    proxy.listen()
    endpoint = urlunsplit((moto.scheme, f"127.0.0.1:{proxy.port}", moto.path, "", ""))
    work = tmp_path_factory.mktemp("karpy-outage")
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, work, {**c.aws_env, "AWS_ENDPOINT_URL": endpoint})
    karpy.start()
    e = Env(local_cluster, client, karpy, proxy, aws_client("ec2", local_cluster.aws_env["AWS_ENDPOINT_URL"]))
    try:
        yield e
    finally:
        try:
            if proxy.server is None:
                proxy.listen()  # a failed test may have left it refusing: karpy's cleanup needs AWS
            await stop_karpy(karpy, client, _cleanup(e))
        finally:
            proxy.stop()


async def _cleanup(env: Env) -> None:
    """Delete the Deployment, NodePool and NodeClaims while karpy runs; wait until claims and instances are gone."""
    for res, name, ns in ((r.DEPLOYMENTS, POOL, "default"), (r.NODEPOOLS, POOL, None)):
        try:
            await env.client.delete(res, name, ns)
        except ApiError as err:
            if not err.not_found:
                raise
    for claim in await env.claims():
        with contextlib.suppress(ApiError):
            await env.client.delete(r.NODECLAIMS, claim["metadata"]["name"])

    def live() -> list[str]:
        pages = env.ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": f"tag:{wk.TAG_NODEPOOL}", "Values": [POOL]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
            ]
        )
        return [i["InstanceId"] for p in pages for res in p["Reservations"] for i in res["Instances"]]

    async def gone() -> bool:
        return not await env.claims() and not live()

    await wait_for(gone, timeout=120, what="outage e2e NodeClaims and instances gone", interval=1)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.EC2NODECLASSES, POOL)


def _ready(obj: dict[str, Any]) -> str | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == wk.COND_READY:
            return str(c.get("status"))
    return None


async def test_aws_outage_mid_scale_up_deletes_nothing_and_recovers(env: Env) -> None:
    """75 s of refused AWS connections while NodeClaims wait to launch: none deleted, the EC2NodeClass keeps its
    resolved status and Ready, and every pod runs after recovery."""
    await apply(env.client, manifests(env.cluster.cluster_name))

    async def class_ready() -> dict[str, Any] | None:
        obj = await env.client.get(r.EC2NODECLASSES, POOL)
        return obj if _ready(obj) == "True" else None

    resolved = await wait_for(class_ready, timeout=60, what="EC2NodeClass Ready")
    assert resolved is not None
    subnets, amis = resolved["status"]["subnets"], resolved["status"]["amis"]
    assert subnets and amis
    await wait_for(lambda: env.running(1), timeout=180, what="the first pod Running (karpy's caches warm)")

    _, claims_rv = await env.client.list(r.NODECLAIMS)
    _, classes_rv = await env.client.list(r.EC2NODECLASSES)
    claims_watch = Watcher(env.client, r.NODECLAIMS, claims_rv)
    class_watch = Watcher(env.client, r.EC2NODECLASSES, classes_rv)
    before = {c["metadata"]["name"] for c in await env.claims()}
    log_lines_before = len(env.karpy.logs())

    env.proxy.refuse()
    down = time.monotonic()
    try:
        await scale(env.client, POOL, REPLICAS)

        async def new_claims() -> set[str]:
            names = {c["metadata"]["name"] for c in await env.claims()} - before
            return names if len(names) >= REPLICAS - 1 else set()

        created = await wait_for(new_claims, timeout=OUTAGE_S - 10, what="NodeClaims created during the outage")
        # The outage lasts its full length whatever happens meanwhile (the watches record everything).
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
        during = {c["metadata"]["name"]: c for c in await env.claims()}
    finally:
        env.proxy.listen()
    unlaunched = [
        n
        for n in created
        if not any(
            c.get("type") == wk.COND_LAUNCHED and c.get("status") == "True"
            for c in (during.get(n, {}).get("status") or {}).get("conditions") or []
        )
    ]
    assert unlaunched, "the NodeClaims created during the outage could not launch while AWS was unreachable"

    await wait_for(lambda: env.running(REPLICAS), timeout=240, what=f"{REPLICAS} pods Running after recovery")
    claims_watch.check()
    class_watch.check()
    await claims_watch.close()
    await class_watch.close()

    ours = [
        (t, o) for t, o in claims_watch.events if (o["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL) == POOL
    ]
    deleted = sorted(
        {o["metadata"]["name"] for t, o in ours if t == "DELETED" or o["metadata"].get("deletionTimestamp")}
    )
    assert not deleted, f"NodeClaims deleted around the outage: {deleted}"
    assert created <= {o["metadata"]["name"] for _, o in ours}, "the watch saw the NodeClaims created in the outage"
    for kind, obj in class_watch.events:
        if obj["metadata"]["name"] != POOL:
            continue
        status = obj.get("status") or {}
        assert kind != "DELETED"
        assert _ready(obj) == "True", f"EC2NodeClass Ready flipped: {status.get('conditions')}"
        assert status.get("subnets") == subnets and status.get("amis") == amis, "resolved status lost"
    final = await env.client.get(r.EC2NODECLASSES, POOL)
    assert final["status"]["subnets"] == subnets and final["status"]["amis"] == amis
    assert _ready(final) == "True"
    kept = [
        line
        for line in env.karpy.logs()[log_lines_before:]
        if line.get("controller") == "ec2nodeclass.status" and "last known status kept" in str(line.get("error"))
    ]
    assert kept, "the EC2NodeClass refresh ran during the outage and kept the last known status"
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
