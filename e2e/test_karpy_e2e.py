"""karpy end to end on the local cluster: real control plane + KWOK + moto, karpy as its own process.

Scenarios sharing one cluster and one karpy: a Karpenter user's NodePool and EC2NodeClass; a broken second
NodePool reported and ignored; 20 pods scaled up and bound onto nodes karpy launched; scaled down to nothing;
a karpy crash in the middle of a scale-up that ends with exactly one instance per NodeClaim. karpy runs with
its own ServiceAccount's RBAC from ``manifests/``. Each scenario builds what it needs (the user's NodePool
Ready, the Deployment scaled up), so any one runs alone or in any order; the NodeClaim counters' baseline
follows karpy's restarts (:attr:`Env.counter_baseline`).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    ROOT,
    KarpyProcess,
    apply,
    assert_allocatable_as_predicted,
    assert_nodeclaim_counters,
    aws_client,
    karpy_process,
    record_figures,
    scale,
    stop_karpy,
    wait_for,
)
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

pytestmark = [pytest.mark.e2e]
REPLICAS = 20
POOLS = ("default", "broken")
PHASES: dict[str, float] = {}


def record(phase: str, seconds: float) -> None:
    """Keep the wall time of a phase (seconds, one decimal) in .e2e-run/phases.json for the closing note."""
    PHASES[phase] = round(seconds, 1)
    record_figures(**{phase: PHASES[phase]})


def user_manifests(cluster_name: str, name: str) -> list[dict[str, Any]]:
    """A manifest from e2e/manifests with ${CLUSTER_NAME} substituted, as `envsubst` would."""
    import yaml

    text = (ROOT / "e2e" / "manifests" / name).read_text().replace("${CLUSTER_NAME}", cluster_name)
    return [d for d in yaml.safe_load_all(text) if d]


class Env:
    """The cluster, an admin client, karpy's process and an EC2 client on moto."""

    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ec2: Any) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2
        # NodeClaims that existed when the running karpy process started (its counters start at zero then).
        self.counter_baseline = 0

    async def nodeclaims(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.NODECLAIMS))[0]

    async def nodes(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.NODES))[0]

    async def inflate_pods(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": "app=inflate"}))[0]

    def instances(self) -> list[dict[str, Any]]:
        """Non-terminated instances tagged for the cluster."""
        out = []
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[
                {"Name": "tag-key", "Values": [wk.cluster_tag(self.cluster.cluster_name)]},
                {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]},
            ]
        )
        for page in pages:
            for res in page["Reservations"]:
                out.extend(res["Instances"])
        return out


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """Install CRDs and RBAC as `kubectl apply -k manifests/` would, then run karpy as its ServiceAccount."""
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    work = tmp_path_factory.mktemp("karpy")
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, work, c.aws_env)
    karpy.start()
    ec2 = aws_client("ec2", c.aws_env["AWS_ENDPOINT_URL"])
    try:
        await apply(client, user_manifests(local_cluster.cluster_name, "inflate.yaml"))
        yield Env(local_cluster, client, karpy, ec2)
    finally:
        await stop_karpy(karpy, client)


async def _ready(client: KubeClient, res: r.Resource, name: str) -> str:
    obj = await client.get(res, name)
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == "Ready":
            return str(c["status"])
    return ""


async def _user_nodepool_ready(env: Env) -> None:
    """The user's NodePool + EC2NodeClass (``e2e/manifests/nodepool.yaml``) applied and Ready (idempotent)."""
    await apply(env.client, user_manifests(env.cluster.cluster_name, "nodepool.yaml"))
    await wait_for(lambda: _is(env.client, r.EC2NODECLASSES, "default"), timeout=60, what="EC2NodeClass Ready")
    await wait_for(lambda: _is(env.client, r.NODEPOOLS, "default"), timeout=60, what="NodePool Ready")


async def _scaled_up(env: Env) -> None:
    """``inflate`` at REPLICAS pods, all Running (on karpy's nodes: the only NodePool that fits them)."""
    await _user_nodepool_ready(env)
    await scale(env.client, "inflate", REPLICAS)
    await wait_for(lambda: _all_running(env, REPLICAS), timeout=180, what=f"{REPLICAS} inflate pods Running")


async def test_01_user_nodepool_becomes_ready(env: Env) -> None:
    """A Karpenter user's NodePool + EC2NodeClass apply unchanged and become Ready."""
    await _user_nodepool_ready(env)
    nodeclass = await env.client.get(r.EC2NODECLASSES, "default")
    status = nodeclass["status"]
    assert {s["zone"] for s in status["subnets"]} == {"us-east-1a", "us-east-1b", "us-east-1c"}
    assert status["securityGroups"] and status["amis"]


async def _is(client: KubeClient, res: r.Resource, name: str, want: str = "True") -> bool:
    return await _ready(client, res, name) == want


async def test_02_broken_nodepool_reported_not_fatal(env: Env) -> None:
    """A NodePool naming a missing EC2NodeClass gets Ready=False with a reason and a Warning event."""
    await apply(env.client, user_manifests(env.cluster.cluster_name, "broken-nodepool.yaml"))
    await wait_for(lambda: _is(env.client, r.NODEPOOLS, "broken", "False"), timeout=30, what="broken Ready=False")
    pool = await env.client.get(r.NODEPOOLS, "broken")
    ready = next(c for c in pool["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "NodeClassNotFound" and "does-not-exist" in ready["message"]

    async def warning_event() -> list[dict[str, Any]]:
        events = (await env.client.list(r.EVENTS, "default", query={"fieldSelector": "involvedObject.name=broken"}))[0]
        return [e for e in events if e["type"] == "Warning" and e["reason"] == "NodeClassNotFound"]

    await wait_for(warning_event, timeout=30, what="NodeClassNotFound event")
    assert env.karpy.alive


async def test_03_scale_up_20_pods(env: Env) -> None:
    """20 pods (1 CPU, 1.5Gi) go Running on nodes karpy launched and bound, instances tagged in moto."""
    await _user_nodepool_ready(env)
    start = time.monotonic()
    await scale(env.client, "inflate", REPLICAS)
    await wait_for(lambda: _all_running(env, REPLICAS), timeout=180, what=f"{REPLICAS} inflate pods Running")
    record("scale_up_to_all_running_s", time.monotonic() - start)
    await _assert_one_instance_per_nodeclaim(env)
    claims = await env.nodeclaims()
    nodes = {n["metadata"]["name"]: n for n in await env.nodes()}
    karpy_nodes = {c["status"]["nodeName"] for c in claims}
    assert all(nodes[n]["metadata"]["labels"].get(wk.LABEL_NODEPOOL) == "default" for n in karpy_nodes)
    pods = await env.inflate_pods()
    assert {p["spec"]["nodeName"] for p in pods} <= karpy_nodes
    bound = {line.get("pod") for line in env.karpy.logs() if line.get("message") == "bound pod"}
    assert {f"default/{p['metadata']['name']}" for p in pods} <= bound, "every pod bound by karpy's binder"
    for inst in env.instances():
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        assert tags[wk.TAG_NODEPOOL] == "default"
        assert tags[wk.TAG_NODECLASS] == "default"
        assert tags[wk.cluster_tag(env.cluster.cluster_name)] == "owned"
    assert all(c["metadata"]["labels"][wk.LABEL_NODEPOOL] == "default" for c in claims), "broken pool unused"
    # karpy's overhead model predicted what each node's kubelet reports (Node Allocatable from the node's own
    # kubelet configuration, i.e. the user data karpy launched it with, merged over nodeadm's).
    await assert_allocatable_as_predicted(env.client, claims)
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS, baseline=env.counter_baseline)


async def _all_running(env: Env, n: int) -> bool:
    pods = await env.inflate_pods()
    return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)


async def _assert_one_instance_per_nodeclaim(env: Env) -> None:
    claims = await env.nodeclaims()
    claim_ids = sorted(c["status"]["providerID"].rsplit("/", 1)[-1] for c in claims)
    instance_ids = sorted(i["InstanceId"] for i in env.instances())
    assert claim_ids == instance_ids, f"nodeclaims {claim_ids} vs instances {instance_ids}"
    assert len(set(claim_ids)) == len(claims)


async def test_04_scale_down_removes_everything(env: Env) -> None:
    """Scaled to 0: after consolidateAfter every NodeClaim, Node and instance is gone."""
    await _scaled_up(env)  # something to remove, whether or not the scale-up scenario ran first
    assert await env.nodeclaims() and env.instances()
    start = time.monotonic()
    await scale(env.client, "inflate", 0)

    async def all_gone() -> bool:
        return not await env.nodeclaims() and not await env.nodes() and not env.instances()

    await wait_for(all_gone, timeout=180, what="all nodeclaims, nodes and instances gone", interval=1)
    record("scale_down_to_nothing_s", time.monotonic() - start)
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS, baseline=env.counter_baseline)


async def test_05_restart_mid_scale_up(env: Env) -> None:
    """karpy killed right after its first NodeClaims exist: after restart, one instance per NodeClaim, no leak."""
    await _user_nodepool_ready(env)
    await scale(env.client, "inflate", 0)

    async def nothing_left() -> bool:
        return not await env.nodeclaims() and not env.instances()

    await wait_for(nothing_left, timeout=180, what="a cluster without karpy nodes to start from", interval=1)
    start = time.monotonic()
    await scale(env.client, "inflate", REPLICAS)
    await wait_for(env.nodeclaims, timeout=60, what="first nodeclaim", interval=0.05)
    env.karpy.kill()
    claims_at_kill = len(await env.nodeclaims())
    running_at_kill = sum(1 for p in await env.inflate_pods() if p["status"].get("phase") == "Running")
    env.karpy.start()
    env.counter_baseline = claims_at_kill
    # The premise: the crash came in the middle of the scale-up, with pods still waiting for capacity.
    assert running_at_kill < REPLICAS, "karpy was killed after the scale-up had finished"
    await wait_for(lambda: _all_running(env, REPLICAS), timeout=240, what=f"{REPLICAS} pods Running after restart")
    record("scale_up_with_restart_s", time.monotonic() - start)
    await _assert_one_instance_per_nodeclaim(env)
    await scale(env.client, "inflate", 0)

    async def all_gone() -> bool:
        return not await env.nodeclaims() and not env.instances()

    await wait_for(all_gone, timeout=180, what="cleanup after restart scenario", interval=1)
    # The restarted process counts from zero: the NodeClaims that existed at the kill are its baseline.
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS, baseline=env.counter_baseline)


async def test_06_logs_are_json(env: Env) -> None:
    """Every line karpy wrote is a structlog JSON object with a level and a timestamp."""

    async def synced() -> bool:  # something to read, whether or not another scenario ran first
        return any(line.get("message") == "cluster state synced" for line in env.karpy.logs())

    await wait_for(synced, timeout=60, what="karpy's 'cluster state synced' log line")
    lines = env.karpy.logs()
    assert lines and all("raw" not in line for line in lines), [line for line in lines if "raw" in line][:3]
    assert all({"level", "timestamp", "message"} <= line.keys() for line in lines)
    assert os.path.getsize(env.karpy.log_path) > 0  # noqa: ASYNC240 - a small local file
