"""Emptiness end to end on the local cluster (control plane + KWOK + moto), karpy as its own process.

A Deployment of 12 pods spread one per node (hostname anti-affinity) over NodePool ``empt``
(``consolidateAfter: 20s``, budget ``100%``) is scaled to zero, and Karpenter's emptiness deletes the 12 empty
nodes in ONE command once they are Consolidatable (core ``emptiness.go``): the decision record lists every
node, ``karpenter_voluntary_disruption_decisions_total{reason="empty"}`` moves by exactly one. karpy runs with
its production disruption timings (10 s poll, 15 s validation).

1. pods that stop at once: every NodeClaim is gone within ``consolidateAfter`` + 30 s of the last pod leaving;
2. pods stuck Terminating, as on a dead kubelet (a finalizer holds them; a ValidatingAdmissionPolicy stops
   KWOK, which plays every kubelet, from clearing it) under ``WhenEmptyOrUnderutilized``: a node whose pods are
   all terminating is empty (Karpenter ``IsReschedulable``), so the 12 go in one emptiness command decided
   within ``consolidateAfter`` + 30 s of the scale-down — not one consolidation per node (issue 7, defect 4:
   12 nodes, 12 commands, 302 s). The drain waits for the terminating pods until they are stuck (a minute past
   their deletionTimestamp, Karpenter ``IsStuckTerminating``), then the nodes go with the pods still there.

After each, the NodeClaim counters match the NodeClaims left (created − terminated = live). The first also
scrapes ``/metrics`` before the scale-up, once the nodes are up and after they are gone, and checks every
sample's label names against Karpenter v1.15's reference and the families' values against the NodeClaims that
came and went (:mod:`e2e.metrics_check`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e import metrics_check
from e2e.helpers import (
    KINDS,
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    delete_nodeclaims,
    ec2nodeclass,
    karpy_process,
    nodeclaims_of,
    record_figures,
    scale,
    scrape_metrics,
    stop_karpy,
    wait_for,
)
from e2e.test_disruption_e2e import deployment, nodepool
from karpy.controllers.disruption import controls
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
POOL = "empt"
NODES = 12
CONSOLIDATE_AFTER = 20.0
HOLD = "karpy-e2e/hold"
RELEASE = "karpy-e2e/release"
DEAD_KUBELET = "karpy-e2e-dead-kubelet"


class Env:
    def __init__(self, client: KubeClient, karpy: KarpyProcess) -> None:
        self.client = client
        self.karpy = karpy

    async def claims(self) -> list[dict[str, Any]]:
        return await nodeclaims_of(self.client, POOL)

    async def pods(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]

    async def all_running(self, n: int) -> bool:
        pods = [p for p in await self.pods() if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)

    def lines(self, message: str, since: int = 0) -> list[dict[str, Any]]:
        return [line for line in self.karpy.logs()[since:] if line.get("message") == message]

    def timeline(self, since: int) -> None:
        """Print the disruption decisions and terminations since log line ``since`` (for a failure's output)."""
        for line in self.karpy.logs()[since:]:
            message = line.get("message")
            command = line.get("command") if isinstance(line.get("command"), dict) else None
            if message == "disruption evaluation" and not command:
                continue
            if message in ("disruption evaluation", "disruption command done", "disruption command abandoned"):
                print(line.get("timestamp"), message, command and (command["method"], len(command["candidates"])))
            elif message in ("disruption command rejected by validation", "terminated nodeclaim"):
                print(line.get("timestamp"), message, line.get("nodeclaim", ""))


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    karpy = await karpy_process(
        client, c.server, c.cluster_name, tmp_path_factory.mktemp("karpy-emptiness"), c.aws_env, BATCH_MAX_DURATION="5s"
    )
    karpy.start()
    e = Env(client, karpy)
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


def dead_kubelet_policy() -> list[dict[str, Any]]:
    """A ValidatingAdmissionPolicy (and its binding) refusing to drop the ``karpy-e2e/hold`` finalizer from a pod
    unless the same update annotates it ``karpy-e2e/release``: KWOK's pod-delete stage cannot finish the pod,
    which stays Terminating as on a dead kubelet."""
    expression = (
        f"!(has(oldObject.metadata.finalizers) && '{HOLD}' in oldObject.metadata.finalizers)"
        f" || (has(object.metadata.finalizers) && '{HOLD}' in object.metadata.finalizers)"
        f" || (has(object.metadata.annotations) && '{RELEASE}' in object.metadata.annotations)"
    )
    group = "admissionregistration.k8s.io/v1"
    return [
        {
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": DEAD_KUBELET},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}
                    ]
                },
                "validations": [{"expression": expression, "message": "the kubelet of this pod is gone"}],
            },
        },
        {
            "apiVersion": group,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": DEAD_KUBELET},
            "spec": {"policyName": DEAD_KUBELET, "validationActions": ["Deny"]},
        },
    ]


async def _release_pods(env: Env) -> None:
    """Remove the test's finalizer from every pod of the Deployment (they finish terminating)."""
    for p in await env.pods():
        if p["metadata"].get("finalizers"):
            patch = {"metadata": {"finalizers": None, "annotations": {RELEASE: "true"}}}
            with contextlib.suppress(ApiError):
                await env.client.merge_patch(r.PODS, p["metadata"]["name"], patch, "default")


async def _cleanup(env: Env) -> None:
    with contextlib.suppress(ApiError):
        await env.client.delete(r.DEPLOYMENTS, POOL, "default")
    await _release_pods(env)
    for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
        with contextlib.suppress(ApiError):
            await env.client.delete(KINDS[kind], DEAD_KUBELET)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(env.client, env.claims, timeout=120, what="emptiness test nodeclaims gone", interval=1)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.EC2NODECLASSES, POOL)


async def _ready(env: Env, res: r.Resource, name: str) -> bool:
    obj = await env.client.get(res, name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


async def _decisions(env: Env) -> float:
    """``karpenter_voluntary_disruption_decisions_total{reason="empty"}`` summed over its other labels."""
    samples = await scrape_metrics(env.karpy.metrics_port)
    return sum(
        v
        for (name, labels), v in samples.items()
        if name == "karpenter_voluntary_disruption_decisions_total" and dict(labels).get("reason") == "empty"
    )


async def _settled(env: Env, n: int) -> bool:
    """``n`` Initialized NodeClaims, none deleting, each hosting one of the Running pods. (kube-scheduler may
    bind a pod onto a node karpy planned for another one, which then gets a node of its own: the node left empty
    is removed by emptiness first, and the scenario starts from the settled cluster.)"""
    claims = await env.claims()
    pods = [p for p in await env.pods() if not p["metadata"].get("deletionTimestamp")]
    hosts = {p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running"}
    return (
        len(claims) == n
        and len(pods) == n
        and {c["status"].get("nodeName") for c in claims} == hosts
        and all(
            not c["metadata"].get("deletionTimestamp")
            and any(x["type"] == "Initialized" and x["status"] == "True" for x in c["status"].get("conditions", []))
            for c in claims
        )
    )


async def _pool(env: Env, cluster_name: str, policy: str, annotations: dict[str, str]) -> None:
    """The EC2NodeClass and NodePool ``empt`` (consolidation ``policy``, ``consolidateAfter`` 20 s, budget 100%)
    applied and Ready: each scenario builds its own, whatever ran before."""
    await apply(env.client, [ec2nodeclass(POOL, cluster_name)])
    disruption = {
        "consolidationPolicy": policy,
        "consolidateAfter": f"{CONSOLIDATE_AFTER:.0f}s",
        "budgets": [{"nodes": "100%"}],
    }
    await apply(env.client, [nodepool(POOL, POOL, disruption, annotations)])
    await wait_for(lambda: _ready(env, r.EC2NODECLASSES, POOL), timeout=60, what="EC2NodeClass Ready")
    await wait_for(lambda: _ready(env, r.NODEPOOLS, POOL), timeout=60, what="NodePool Ready")


async def test_01_empty_nodes_within_budget_go_in_one_command(local_cluster: Any, env: Env) -> None:
    await _pool(env, local_cluster.cluster_name, "WhenEmpty", {})
    scrape_empty = await scrape_metrics(env.karpy.metrics_port)
    await apply(env.client, [deployment(POOL, POOL, "500m", spread=True, grace=5)])
    await scale(env.client, POOL, NODES)
    await wait_for(lambda: env.all_running(NODES), timeout=240, what=f"{NODES} spread pods Running", interval=1)
    await wait_for(lambda: _settled(env, NODES), timeout=180, what=f"{NODES} nodes, one pod each", interval=1)
    before = {c["metadata"]["name"] for c in await env.claims()}
    assert len(before) == NODES
    scrape_up = await scrape_metrics(env.karpy.metrics_port)
    assert metrics_check.label_mismatches(scrape_up) == []
    metrics_check.check_scale_up(scrape_empty, scrape_up, nodepool=POOL, nodeclaims=NODES)
    decisions_before = await _decisions(env)
    mark = len(env.karpy.logs())
    await scale(env.client, POOL, 0)

    async def no_pods() -> bool:
        return not await env.pods()

    await wait_for(no_pods, timeout=60, what="every pod gone", interval=0.2)
    empty_at = time.monotonic()

    async def all_gone() -> bool:
        return not {c["metadata"]["name"] for c in await env.claims()} & before

    await wait_for(all_gone, timeout=180, what="every empty nodeclaim gone", interval=0.5)
    gone_s = round(time.monotonic() - empty_at, 1)
    env.timeline(mark)
    commands = [line["command"] for line in env.lines("disruption command done", mark)]
    assert len(commands) == 1, [(c["method"], len(c["candidates"])) for c in commands]
    (command,) = commands
    assert command["reason"] == "Empty" and command["decision"] == "delete"
    assert set(command["candidates"]) == before, command
    assert await _decisions(env) - decisions_before == 1
    records = {len(line["record"]["candidates"]) for line in env.lines("disrupting nodeclaim", mark)}
    assert records == {NODES}, "every nodeclaim carries the same one-command decision record"
    record_figures(emptiness_nodes=NODES, emptiness_commands=len(commands), emptiness_gone_after_empty_s=gone_s)
    print(f"emptiness: {NODES} nodes gone in {len(commands)} command(s), {gone_s}s after the last pod left")
    assert gone_s <= CONSOLIDATE_AFTER + 30, f"gone {gone_s}s after empty, want ≤ consolidateAfter + 30 s"
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
    scrape_down = await scrape_metrics(env.karpy.metrics_port)
    assert metrics_check.label_mismatches(scrape_down) == []
    metrics_check.check_scale_down(scrape_up, scrape_down, nodepool=POOL, nodeclaims=NODES)


async def test_02_nodes_left_with_terminating_pods_go_in_one_command(local_cluster: Any, env: Env) -> None:
    await _pool(env, local_cluster.cluster_name, "WhenEmptyOrUnderutilized", {controls.ANNOTATION_COOLDOWN: "0s"})
    await apply(env.client, dead_kubelet_policy())
    held = deployment(POOL, POOL, "500m", spread=True, grace=5)
    held["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
    await apply(env.client, [held])
    await scale(env.client, POOL, NODES)
    await wait_for(lambda: env.all_running(NODES), timeout=240, what=f"{NODES} spread pods Running", interval=1)
    await wait_for(lambda: _settled(env, NODES), timeout=180, what=f"{NODES} nodes, one pod each", interval=1)
    before = {c["metadata"]["name"] for c in await env.claims()}
    assert len(before) == NODES
    decisions_before = await _decisions(env)
    mark = len(env.karpy.logs())
    await scale(env.client, POOL, 0)

    async def all_terminating() -> bool:
        pods = await env.pods()
        return len(pods) >= NODES and all(p["metadata"].get("deletionTimestamp") for p in pods)

    await wait_for(all_terminating, timeout=60, what="every pod Terminating", interval=0.2)
    terminating_at = time.monotonic()

    async def all_deleting() -> bool:
        claims = {c["metadata"]["name"]: c for c in await env.claims()}
        return all(claims.get(n, {}).get("metadata", {}).get("deletionTimestamp") for n in before)

    try:
        await wait_for(all_deleting, timeout=CONSOLIDATE_AFTER + 60, what="every nodeclaim deleting", interval=0.5)
    finally:
        env.timeline(mark)
    decided_s = round(time.monotonic() - terminating_at, 1)
    records = [line["record"] for line in env.lines("disrupting nodeclaim", mark)]
    assert {json_key(x) for x in records} == {("emptiness", "Empty", NODES)}, records
    assert not env.lines("launched replacement", mark), "nothing to replace: the nodes are empty"
    stuck_at = max(_iso(p["metadata"]["deletionTimestamp"]) for p in await env.pods()) + 60
    assert time.time() < stuck_at and await env.claims(), "the drain waits for pods not stuck yet"

    async def all_gone() -> bool:
        return not {c["metadata"]["name"] for c in await env.claims()} & before

    await wait_for(all_gone, timeout=stuck_at - time.time() + 60, what="every nodeclaim gone", interval=0.5)
    gone_after_stuck_s = round(time.time() - stuck_at, 1)
    pods = await env.pods()
    assert len(pods) >= NODES and all(p["metadata"].get("deletionTimestamp") for p in pods), "pods still stuck"
    assert gone_after_stuck_s >= 0, "the drain waited until the pods were stuck"
    await _release_pods(env)
    commands = [line["command"] for line in env.lines("disruption command done", mark)]
    assert len(commands) == 1 and commands[0]["reason"] == "Empty", commands
    assert await _decisions(env) - decisions_before == 1
    record_figures(
        emptiness_terminating_pods_commands=len(commands),
        emptiness_terminating_pods_decided_s=decided_s,
        stuck_terminating_drain_ended_after_s=gone_after_stuck_s,
    )
    print(f"emptiness with terminating pods: {NODES} nodes in {len(commands)} command(s), decided in {decided_s}s")
    assert decided_s <= CONSOLIDATE_AFTER + 30, f"decided {decided_s}s after the scale-down"
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])


def json_key(record: dict[str, Any]) -> tuple[str, str, int]:
    """(method, reason, number of candidates) of a decision record."""
    return (str(record["method"]), str(record["reason"]), len(record["candidates"]))


def _iso(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
