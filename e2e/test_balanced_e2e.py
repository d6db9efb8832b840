"""``consolidationPolicy: Balanced`` end to end on the local cluster (control plane + KWOK + moto), karpy as its own
process with its production disruption timings (10 s poll, 15 s validation) and the cooldown off for the pool.

NodePool ``bal`` (Balanced, on-demand c5.large or m5.2xlarge, ``consolidateAfter: 5s``): a 6-CPU pod and a small
one get one m5.2xlarge. Once the big pod is gone, replacing the node by a c5.large saves 78 % of the NodePool's
cost for 100 % of its disruption: score 0.78 ≥ 0.5, so Balanced replaces it — replacement launched and
initialized first, the small pod moved, the m5.2xlarge's NodeClaim deleted with ``ConsolidationApproved`` and
``DisruptionTerminating`` events, ``karpenter_consolidation_moves_total{decision="approved",policy="Balanced"}``
and ``karpenter_consolidation_score`` observed on ``/metrics``, and the NodeClaim counters matching the NodeClaims
left.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e import metrics_check
from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    deployment,
    ec2nodeclass,
    nodepool,
    pool_env,
    scrape_metrics,
    wait_for,
)
from karpy.apis import labels as wk
from karpy.controllers.disruption import controls
from karpy.kube import resources as r

pytestmark = [pytest.mark.e2e]
POOL = "bal"
TAINT = "karpy-e2e/balanced"
BIG, SMALL = "bal-big", "bal-small"  # a bare pod the test deletes; a one-replica Deployment that stays


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PoolEnv]:
    work = tmp_path_factory.mktemp("karpy-balanced")
    workloads = [(r.PODS, BIG, "default"), (r.DEPLOYMENTS, SMALL, "default")]
    async with pool_env(local_cluster, work, POOL, PoolEnv, workloads=workloads) as e:
        yield e


def _spec(cpu: str) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}],
    }


async def _bound(env: PoolEnv, name: str) -> str:
    return str((await env.client.get(r.PODS, name, "default"))["spec"].get("nodeName") or "")


async def _small_nodes(env: PoolEnv, running: bool = False) -> list[str]:
    """The nodes of the small Deployment's live pods ("" for a pod not bound; only Running ones if ``running``)."""
    live = await env.pods(SMALL)
    if running:
        live = [p for p in live if p["status"].get("phase") == "Running"]
    return [str(p["spec"].get("nodeName") or "") for p in live]


async def _events(env: PoolEnv, name: str, reason: str) -> list[dict[str, Any]]:
    query = {"fieldSelector": f"involvedObject.name={name}"}
    return [e for e in (await env.client.list(r.EVENTS, "default", query=query))[0] if e["reason"] == reason]


def _sum(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, **labels: str) -> float:
    return sum(v for (n, lab), v in samples.items() if n == metric and set(labels.items()) <= lab)


async def test_balanced_replaces_an_oversized_node(local_cluster: Any, env: PoolEnv) -> None:
    requirements = [
        {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["c5.large", "m5.2xlarge"]},
    ]
    disruption = {"consolidationPolicy": "Balanced", "consolidateAfter": "5s", "budgets": [{"nodes": "100%"}]}
    await apply(
        env.client,
        [
            ec2nodeclass(POOL, local_cluster.cluster_name),
            nodepool(
                POOL,
                requirements=requirements,
                taints=[{"key": TAINT, "effect": "NoSchedule"}],
                disruption=disruption,
                annotations={controls.ANNOTATION_COOLDOWN: "0s"},
            ),
        ],
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": BIG, "namespace": "default"}, "spec": _spec("6")}
    await env.client.create(r.PODS, pod, "default")
    await apply(env.client, [deployment(SMALL, 1, _spec("500m"))])
    await wait_for(lambda: _bound(env, BIG), timeout=180, what="the big pod bound", interval=1)

    async def small_bound() -> bool:
        nodes = await _small_nodes(env)
        return len(nodes) == 1 and bool(nodes[0])

    await wait_for(small_bound, timeout=180, what="the small pod bound", interval=1)
    (claim,) = await env.claims()
    assert claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "m5.2xlarge"
    old = claim["metadata"]["name"]
    before = await scrape_metrics(env.karpy.metrics_port)
    await env.client.delete(r.PODS, BIG, "default")

    async def replaced() -> dict[str, Any] | None:
        claims = await env.claims()
        if len(claims) == 1 and claims[0]["metadata"]["name"] != old:
            return claims[0]
        return None

    new = await wait_for(replaced, timeout=240, what="the m5.2xlarge replaced", interval=1)
    assert new["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "c5.large"
    node = new["status"]["nodeName"]

    async def small_moved() -> bool:
        return await _small_nodes(env, running=True) == [node]

    await wait_for(small_moved, timeout=120, what="the small pod running on the replacement", interval=1)
    (approved, *_) = await _events(env, old, "ConsolidationApproved")
    assert approved["message"].startswith("score 0.78 >= threshold 0.50 (k: 2, savings 77.9%, disruption 100.0%)")
    (terminating, *_) = await _events(env, old, "DisruptionTerminating")
    assert '"decision": "replace"' in terminating["message"] and '"reason": "Underutilized"' in terminating["message"]
    after = await scrape_metrics(env.karpy.metrics_port)
    labels = {"decision": "approved", "nodepool": POOL, "policy": "Balanced"}
    assert (
        _sum(after, "karpenter_consolidation_moves_total", **labels)
        - _sum(before, "karpenter_consolidation_moves_total", **labels)
        >= 1
    )
    assert _sum(after, "karpenter_consolidation_score_count", **labels) >= 1
    assert metrics_check.label_mismatches(after) == []  # every sample, these two included, labelled as Karpenter's
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
