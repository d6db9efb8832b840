"""Disruption end to end on the local cluster (control plane + KWOK + moto), karpy as its own process.

Scenarios sharing one karpy (poll 1 s, validation 3 s, replacement timeout 25 s). Each builds what it needs:
the consolidated cluster of 1 is a module-scoped fixture (``consolidated``) that 1, 2 and 2b request; 3 and 4
bring up the drift workload themselves and 4 restores the EC2NodeClass and NodePool it breaks; 5 has its own
NodePool. So any one runs alone or in any order:

1. consolidation: a Deployment grown in three steps over paused NodePool ``disr-consol`` and then shrunk
   leaves underutilized nodes; un-pausing lets karpy consolidate them to fewer, cheaper nodes, with no pod
   left Pending and the Deployment's PDB (maxUnavailable 1) never violated;
2. steady: the consolidated cluster makes no disruption across 20 consecutive disruption evaluations;
3. drift: an EC2NodeClass change drifts NodePool ``disr-drift`` (budget ``nodes: 1``): every node is replaced,
   never more than one disrupted at a time, replacements first;
4. drift wave halt: the EC2NodeClass then selects an AMI whose instances never join (the node agent never
   registers instances of an image tagged ``karpy-e2e/never-ready=true``); the replacement never initializes,
   the command is abandoned after 25 s, the NodePool's drift halts and no old node is removed;
5. terminationGracePeriod: a user deletes the NodeClaim of a ``do-not-disrupt`` pod whose PDB allows nothing;
   replacement capacity is requested at once, the pod stays until the deadline forces it, then the node goes.

Measured figures (pods evicted per consolidation, $/hour before and after, timings) are printed and merged
into ``.e2e-run/phases.json``. Everything made here is deleted at module end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    aws_client,
    ec2nodeclass,
    karpy_process,
    record_figures,
    scale,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.aws.pricing import static_on_demand_prices
from karpy.controllers.disruption import controls
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
CONSOL, DRIFT, TGP = "disr-consol", "disr-drift", "disr-tgp"
POOLS = (CONSOL, DRIFT, TGP)
TAINT_KEY = "karpy-e2e/disruption"
NEVER_READY_TAG = "karpy-e2e/never-ready"
PRICES = static_on_demand_prices("us-east-1")
FIGURES: dict[str, Any] = {}


def record(**values: Any) -> None:
    """Keep this module's figures and merge them into .e2e-run/phases.json."""
    FIGURES.update(values)
    record_figures(**values)
    print("disruption figures:", json.dumps(values))


def nodepool(name: str, nodeclass_name: str, disruption: dict[str, Any], annotations: dict[str, str]) -> dict[str, Any]:
    return shared_nodepool(
        name,
        nodeclass=nodeclass_name,
        annotations=annotations,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            {"key": wk.LABEL_INSTANCE_GENERATION, "operator": "Gt", "values": ["4"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ],
        taints=[{"key": TAINT_KEY, "value": name, "effect": "NoSchedule"}],
        disruption=disruption,
    )


def deployment(
    name: str, pool: str, cpu: str, *, spread: bool = False, grace: int = 0, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": grace,
        "nodeSelector": {wk.LABEL_NODEPOOL: pool},
        "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"}],
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
            }
        ],
    }
    if spread:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": wk.LABEL_HOSTNAME}
                ]
            }
        }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}, "annotations": annotations or {}}, "spec": spec},
        },
    }


def pdb(name: str, app: str, **budget: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {**(budget or {"maxUnavailable": 1}), "selector": {"matchLabels": {"app": app}}},
    }


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ec2: Any) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2

    async def claims(self, pool: str) -> list[dict[str, Any]]:
        items = (await self.client.list(r.NODECLAIMS, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={pool}"}))[0]
        return items

    async def pods(self, app: str) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={app}"}))[0]

    async def all_running(self, app: str, n: int) -> bool:
        pods = [p for p in await self.pods(app) if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)

    def lines(self, message: str, since: int = 0) -> list[dict[str, Any]]:
        return [line for line in self.karpy.logs()[since:] if line.get("message") == message]


def cost(claims: list[dict[str, Any]]) -> float:
    """USD/hour of the NodeClaims' instance types (on-demand, karpy's shipped price table)."""
    return round(sum(PRICES[c["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE]] for c in claims), 4)


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    work = tmp_path_factory.mktemp("karpy-disruption")
    c = local_cluster
    karpy = await karpy_process(
        client,
        c.server,
        c.cluster_name,
        work,
        c.aws_env,
        BATCH_MAX_DURATION="5s",
        DISRUPTION_POLL_INTERVAL="1s",
        DISRUPTION_VALIDATION_DELAY="3s",
        DISRUPTION_REPLACEMENT_TIMEOUT="25s",
    )
    karpy.start()
    ec2 = aws_client("ec2", c.aws_env["AWS_ENDPOINT_URL"])
    e = Env(local_cluster, client, karpy, ec2)
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    """Delete this module's workloads, NodePools, NodeClaims and NodeClasses while karpy still runs."""
    for name in POOLS:
        with contextlib.suppress(ApiError):
            await env.client.delete(r.DEPLOYMENTS, name, "default")
        with contextlib.suppress(ApiError):
            await env.client.delete(r.PDBS, name, "default")
    for name in POOLS:
        with contextlib.suppress(ApiError):
            await env.client.delete(r.NODEPOOLS, name)
    for pool in POOLS:
        for claim in await env.claims(pool):
            with contextlib.suppress(ApiError):
                await env.client.delete(r.NODECLAIMS, claim["metadata"]["name"])

    async def gone() -> bool:
        claims = [c for p in POOLS for c in await env.claims(p)]
        nodes = [
            n
            for n in (await env.client.list(r.NODES))[0]
            if n["metadata"].get("labels", {}).get(wk.LABEL_NODEPOOL) in POOLS
        ]
        return not claims and not nodes

    try:
        await wait_for(gone, timeout=120, what="disruption test nodeclaims and nodes gone", interval=1)
    except AssertionError:
        for pool in POOLS:
            for claim in await env.claims(pool):
                print("left behind:", claim["metadata"]["name"], claim["metadata"].get("finalizers"), claim["status"])
        raise
    for name in ("disr", "disr-drift"):
        with contextlib.suppress(ApiError):
            await env.client.delete(r.EC2NODECLASSES, name)


async def _nodeclass_ready(env: Env, name: str) -> bool:
    obj = await env.client.get(r.EC2NODECLASSES, name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


async def _pool_ready(env: Env, name: str) -> bool:
    obj = await env.client.get(r.NODEPOOLS, name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


class Watch:
    """Samples pods and NodeClaims every 0.25 s while a disruption runs: PDB and budget invariants."""

    def __init__(self, env: Env, app: str, pool: str, replicas: int) -> None:
        self.env, self.app, self.pool, self.replicas = env, app, pool, replicas
        self.min_running = replicas
        self.max_deleting = 0
        self.samples = 0
        self.task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(ApiError):
                pods = await self.env.pods(self.app)
                running = sum(
                    1
                    for p in pods
                    if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                )
                self.min_running = min(self.min_running, running)
                claims = await self.env.claims(self.pool)
                self.max_deleting = max(
                    self.max_deleting, sum(1 for c in claims if c["metadata"].get("deletionTimestamp"))
                )
                self.samples += 1
            await asyncio.sleep(0.25)

    def __enter__(self) -> Watch:
        self.task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()


@attrs.frozen
class Consolidation:
    """What the consolidation of the ``consolidated`` fixture did: NodeClaims before and after, the decision
    records of its commands, cost before (USD/hour), the fewest Running pods seen, the abandoned commands."""

    before: list[dict[str, Any]]
    after: list[dict[str, Any]]
    commands: list[dict[str, Any]]
    cost_before: float
    min_running: int
    abandoned: list[dict[str, Any]]
    seconds: float


@pytest.fixture(scope="module")
async def consolidated(env: Env) -> Consolidation:
    """A consolidated cluster, built once for the scenarios that start from one: a Deployment grown in three
    batches over paused NodePool ``disr-consol``, shrunk to one pod per node, then un-paused until karpy's
    consolidation converges."""
    cluster = env.cluster.cluster_name
    await apply(env.client, [ec2nodeclass("disr", cluster), ec2nodeclass("disr-drift", cluster)])
    paused = {controls.ANNOTATION_PAUSED: "true", controls.ANNOTATION_COOLDOWN: "0s"}
    consol = {
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "consolidateAfter": "5s",
        "budgets": [{"nodes": "100%"}],
    }
    await apply(env.client, [nodepool(CONSOL, "disr", consol, paused)])
    await wait_for(lambda: _nodeclass_ready(env, "disr"), timeout=60, what="EC2NodeClass disr Ready")
    await wait_for(lambda: _pool_ready(env, CONSOL), timeout=60, what="NodePool Ready")
    await apply(env.client, [deployment(CONSOL, CONSOL, "1"), pdb(CONSOL, CONSOL)])
    for replicas in (3, 6, 9):  # three batches: three separately sized nodes
        await scale(env.client, CONSOL, replicas)
        await wait_for(lambda n=replicas: env.all_running(CONSOL, n), timeout=120, what=f"{replicas} pods Running")
    # Keep one pod per node on scale-down (the ReplicaSet deletes the lowest pod-deletion-cost first), so
    # every node is left underutilized rather than some empty.
    keep: dict[str, str] = {}
    for p in await env.pods(CONSOL):
        keep.setdefault(p["spec"]["nodeName"], p["metadata"]["name"])
    for name in list(keep.values())[:3]:
        patch = {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "1000"}}}
        await env.client.merge_patch(r.PODS, name, patch, "default")
    await scale(env.client, CONSOL, 3)
    await wait_for(lambda: env.all_running(CONSOL, 3), timeout=60, what="scaled down to 3")
    spread = {p["spec"]["nodeName"] for p in await env.pods(CONSOL)}
    before = await env.claims(CONSOL)
    cost_before = cost(before)
    assert len(before) >= 2 and len(spread) == len(before), (spread, [c["metadata"]["name"] for c in before])
    mark = len(env.karpy.logs())
    start = time.monotonic()
    with Watch(env, CONSOL, CONSOL, 3) as watch:
        await env.client.merge_patch(
            r.NODEPOOLS, CONSOL, {"metadata": {"annotations": {controls.ANNOTATION_PAUSED: None}}}
        )

        async def converged() -> bool:
            claims = await env.claims(CONSOL)
            if any(c["metadata"].get("deletionTimestamp") for c in claims) or cost(claims) >= cost_before:
                return False
            if not all(
                any(x["type"] == "Initialized" and x["status"] == "True" for x in c["status"].get("conditions", []))
                for c in claims
            ):
                return False
            done = env.lines("disruption command done", mark)
            quiet = not done or time.time() - _ts(done[-1]) > 15
            return quiet and await env.all_running(CONSOL, 3)

        await wait_for(converged, timeout=240, what="consolidation converged", interval=1)
    assert await env.all_running(CONSOL, 3) and not [
        p for p in await env.pods(CONSOL) if p["status"].get("phase") == "Pending"
    ]
    return Consolidation(
        before=before,
        after=await env.claims(CONSOL),
        commands=[line["command"] for line in env.lines("disruption command done", mark)],
        cost_before=cost_before,
        min_running=watch.min_running,
        abandoned=env.lines("disruption command abandoned", mark),
        seconds=round(time.monotonic() - start, 1),
    )


async def test_01_consolidation_to_fewer_cheaper_nodes(env: Env, consolidated: Consolidation) -> None:
    before, after, commands = consolidated.before, consolidated.after, consolidated.commands
    cost_before = consolidated.cost_before
    assert commands and all(c["reason"] in ("Underutilized", "Empty") for c in commands)
    assert any(c["reason"] == "Underutilized" and c["podsMoved"] > 0 for c in commands), commands
    assert len(after) < len(before) and cost(after) < cost_before
    assert consolidated.min_running >= 2, "PDB maxUnavailable=1: never two pods down at once"
    assert not consolidated.abandoned
    record(
        consolidation_nodes_before=len(before),
        consolidation_nodes_after=len(after),
        consolidation_cost_before_usd_per_hour=cost_before,
        consolidation_cost_after_usd_per_hour=cost(after),
        consolidation_commands=len(commands),
        consolidation_pods_evicted_per_command=[c["podsMoved"] for c in commands],
        consolidation_decisions=[f"{c['method']}/{c['decision']}" for c in commands],
        consolidation_min_running_of_3=consolidated.min_running,
        consolidation_s=consolidated.seconds,
    )
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS)


def _ts(line: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(str(line["timestamp"]).replace("Z", "+00:00")).timestamp()


async def test_02_steady_cluster_makes_no_disruption(env: Env, consolidated: Consolidation) -> None:
    """20 consecutive disruption evaluations on the consolidated cluster: no command, no NodeClaim change."""
    names = sorted(c["metadata"]["name"] for c in await env.claims(CONSOL))
    mark = len(env.karpy.logs())

    async def twenty() -> bool:
        return len(env.lines("disruption evaluation", mark)) >= 20

    await wait_for(twenty, timeout=90, what="20 disruption evaluations", interval=1)
    evaluations = env.lines("disruption evaluation", mark)
    assert all(e.get("command") is None for e in evaluations), [e["command"] for e in evaluations if e.get("command")]
    assert not env.lines("disrupting nodeclaim", mark)
    assert sorted(c["metadata"]["name"] for c in await env.claims(CONSOL)) == names
    record(steady_evaluations_without_disruption=len(evaluations))
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS)


async def test_02b_single_node_replace_launches_first(env: Env, consolidated: Consolidation) -> None:
    """Scaled to one pod, the 4-CPU node is replaced by a cheaper 2-CPU one, initialized before the old goes."""
    (old,) = await env.claims(CONSOL)
    old_name, old_cost = old["metadata"]["name"], cost([old])
    mark = len(env.karpy.logs())
    start = time.monotonic()
    await scale(env.client, CONSOL, 1)

    async def replaced() -> bool:
        claims = await env.claims(CONSOL)
        return [c["metadata"]["name"] for c in claims] != [old_name] and len(claims) == 1

    await wait_for(replaced, timeout=120, what="node replaced by a cheaper one", interval=1)
    await wait_for(lambda: env.all_running(CONSOL, 1), timeout=60, what="pod Running on the replacement")
    (new,) = await env.claims(CONSOL)
    (command,) = [line["command"] for line in env.lines("disruption command done", mark)]
    assert command["method"] == "single-node" and command["decision"] == "replace" and command["podsMoved"] == 1
    launched = {line["nodeclaim"]: _ts(line) for line in env.lines("initialized nodeclaim", mark)}
    disrupted = {line["nodeclaim"]: _ts(line) for line in env.lines("disrupting nodeclaim", mark)}
    assert launched[new["metadata"]["name"]] <= disrupted[old_name], "replacement initialized before the delete"
    assert cost([new]) < old_cost
    record(
        replace_cost_before_usd_per_hour=old_cost,
        replace_cost_after_usd_per_hour=cost([new]),
        replace_pods_evicted=command["podsMoved"],
        replace_s=round(time.monotonic() - start, 1),
    )
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS)


async def _drift_workload(env: Env) -> None:
    """EC2NodeClass ``disr-drift``, NodePool ``disr-drift`` (never consolidated, budget ``nodes: 1``) and three
    spread pods Running on three of its nodes (idempotent: returns at once when they already run)."""
    await apply(env.client, [ec2nodeclass("disr-drift", env.cluster.cluster_name)])
    drift_disruption = {"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]}
    await apply(env.client, [nodepool(DRIFT, "disr-drift", drift_disruption, {})])
    await wait_for(lambda: _nodeclass_ready(env, "disr-drift"), timeout=60, what="EC2NodeClass disr-drift Ready")
    await wait_for(lambda: _pool_ready(env, DRIFT), timeout=60, what="NodePool disr-drift Ready")
    await apply(env.client, [deployment(DRIFT, DRIFT, "500m", spread=True)])
    await scale(env.client, DRIFT, 3)
    await wait_for(lambda: env.all_running(DRIFT, 3), timeout=120, what="3 spread pods Running")


async def test_03_drift_replaces_within_budget(env: Env) -> None:
    await _drift_workload(env)
    original = {c["metadata"]["name"] for c in await env.claims(DRIFT)}
    assert len(original) == 3
    mark = len(env.karpy.logs())
    start = time.monotonic()
    with Watch(env, DRIFT, DRIFT, 3) as watch:
        await env.client.merge_patch(r.EC2NODECLASSES, "disr-drift", {"spec": {"tags": {"karpy-e2e/revision": "2"}}})

        async def replaced() -> bool:
            claims = await env.claims(DRIFT)
            names = {c["metadata"]["name"] for c in claims}
            return not names & original and len(claims) == 3 and await env.all_running(DRIFT, 3)

        await wait_for(replaced, timeout=240, what="all drifted nodes replaced", interval=1)
    commands = [line["command"] for line in env.lines("disruption command done", mark)]
    assert len(commands) == 3 and all(c["reason"] == "Drifted" and c["decision"] == "replace" for c in commands)
    drifted = [line for line in env.lines("nodeclaim drifted", mark) if line["nodeclaim"] in original]
    assert {line["reason"] for line in drifted} == {"NodeClassDrift"}
    assert watch.max_deleting <= 1, "budget nodes=1: one drifted node at a time"
    assert watch.min_running >= 2, "replacement first: at most the one moving pod is down"
    record(
        drift_nodes_replaced=len(commands),
        drift_replacement_s=round(time.monotonic() - start, 1),
        drift_max_nodes_disrupted_at_once=watch.max_deleting,
    )
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS)


async def test_04_drift_wave_halts_on_never_ready_ami(env: Env) -> None:
    await _drift_workload(env)
    try:
        await _drift_wave_halts(env)
    finally:
        # Leave the drift workload as it was found: the AMI selector back, the halt lifted (no drift follows:
        # the old nodes still run the image the alias selects).
        selector = {"amiFamily": None, "amiSelectorTerms": [{"alias": "al2023@latest"}]}
        await env.client.merge_patch(r.EC2NODECLASSES, "disr-drift", {"spec": selector})
        await env.client.merge_patch(
            r.NODEPOOLS, DRIFT, {"metadata": {"annotations": {controls.ANNOTATION_DRIFT_HALTED: None}}}
        )


async def _drift_wave_halts(env: Env) -> None:
    good = env.ec2.describe_images(
        Owners=["self"], Filters=[{"Name": "name", "Values": ["amazon-eks-node-al2023-x86_64-*"]}]
    )
    source = good["Images"][0]["ImageId"]
    bad = env.ec2.copy_image(SourceImageId=source, SourceRegion="us-east-1", Name="karpy-e2e-never-ready")["ImageId"]
    env.ec2.create_tags(Resources=[bad], Tags=[{"Key": NEVER_READY_TAG, "Value": "true"}])
    before = {c["metadata"]["name"] for c in await env.claims(DRIFT)}
    mark = len(env.karpy.logs())
    start = time.monotonic()
    await env.client.merge_patch(
        r.EC2NODECLASSES, "disr-drift", {"spec": {"amiFamily": "AL2023", "amiSelectorTerms": [{"id": bad}]}}
    )

    async def halted() -> str:
        pool = await env.client.get(r.NODEPOOLS, DRIFT)
        return str((pool["metadata"].get("annotations") or {}).get(controls.ANNOTATION_DRIFT_HALTED) or "")

    halt = await wait_for(halted, timeout=120, what="drift halted", interval=1)
    halt_s = round(time.monotonic() - start, 1)
    assert "not initialized" in json.loads(halt)["reason"]
    launched = [line for line in env.lines("launched replacement", mark)]
    assert len(launched) == 1, "budget 1: one replacement tried, then the breaker tripped"
    drifted = {line["nodeclaim"]: line["reason"] for line in env.lines("nodeclaim drifted", mark)}
    assert {drifted.get(n) for n in before} == {"AMIDrift"}
    mark2 = len(env.karpy.logs())
    await wait_for(lambda: _evaluations(env, mark2, 5), timeout=30, what="5 more evaluations")

    async def only_old() -> bool:
        claims = await env.claims(DRIFT)
        return {c["metadata"]["name"] for c in claims} == before

    await wait_for(only_old, timeout=60, what="the failed replacement gone", interval=1)
    claims = await env.claims(DRIFT)
    assert not any(c["metadata"].get("deletionTimestamp") for c in claims), "no old node was removed"
    assert not env.lines("launched replacement", mark2) and not env.lines("disrupting nodeclaim", mark)
    assert await env.all_running(DRIFT, 3)
    events = (await env.client.list(r.EVENTS, "default", query={"fieldSelector": f"involvedObject.name={DRIFT}"}))[0]
    assert any(e["reason"] == "DisruptionHalted" for e in events)
    record(drift_wave_halt_s=halt_s, drift_wave_old_nodes_removed=len(before - {c["metadata"]["name"] for c in claims}))
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS)


async def _evaluations(env: Env, mark: int, n: int) -> bool:
    return len(env.lines("disruption evaluation", mark)) >= n


async def test_05_termination_grace_period_forces_the_drain(env: Env) -> None:
    await apply(env.client, [ec2nodeclass("disr", env.cluster.cluster_name)])
    await wait_for(lambda: _nodeclass_ready(env, "disr"), timeout=60, what="EC2NodeClass disr Ready")
    pool = nodepool(TGP, "disr", {"consolidateAfter": "Never"}, {})
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "20s"
    await apply(env.client, [pool])
    await wait_for(lambda: _pool_ready(env, TGP), timeout=60, what="NodePool disr-tgp Ready")
    dnd = {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}
    await apply(env.client, [deployment(TGP, TGP, "500m", grace=5, annotations=dnd), pdb(TGP, TGP, minAvailable=1)])
    await scale(env.client, TGP, 1)
    await wait_for(lambda: env.all_running(TGP, 1), timeout=120, what="do-not-disrupt pod Running")
    (claim,) = await env.claims(TGP)
    name = claim["metadata"]["name"]
    (victim,) = await env.pods(TGP)
    start = time.monotonic()
    await env.client.delete(r.NODECLAIMS, name)

    async def replacement() -> list[dict[str, Any]]:
        return [c for c in await env.claims(TGP) if c["metadata"]["name"] != name]

    await wait_for(replacement, timeout=30, what="replacement capacity requested", interval=0.2)
    requested_s = round(time.monotonic() - start, 1)
    old = await env.client.get(r.NODECLAIMS, name)
    deadline = old["metadata"]["annotations"][wk.ANNOTATION_TERMINATION_TIMESTAMP]
    assert _iso(deadline) == _iso(old["metadata"]["deletionTimestamp"]) + 20

    async def victim_deleting() -> float:
        pods = {p["metadata"]["name"]: p for p in await env.pods(TGP)}
        current = pods.get(victim["metadata"]["name"])
        if current is None:
            return time.monotonic()
        return time.monotonic() if current["metadata"].get("deletionTimestamp") else 0.0

    deleted_at = await wait_for(victim_deleting, timeout=40, what="pod deleted at the deadline", interval=0.2)
    forced_s = round(deleted_at - start, 1)
    assert forced_s >= 20 - 5 - 2, f"the do-not-disrupt pod under a blocking PDB left after {forced_s}s"

    async def old_gone() -> bool:
        return name not in {c["metadata"]["name"] for c in await env.claims(TGP)}

    await wait_for(old_gone, timeout=40, what="old nodeclaim terminated", interval=0.5)
    await wait_for(lambda: env.all_running(TGP, 1), timeout=60, what="pod Running on the replacement")
    evictions = [line for line in env.karpy.logs() if line.get("message") == "deleted pod at the termination deadline"]
    assert evictions and evictions[-1]["pod"] == f"default/{victim['metadata']['name']}"
    record(
        tgp_replacement_requested_s=requested_s,
        tgp_pod_forced_after_s=forced_s,
        tgp_old_node_gone_s=round(time.monotonic() - start, 1),
    )
    await assert_nodeclaim_counters(env.client, env.karpy, POOLS)


def _iso(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
