"""``consolidationPolicy: Balanced`` against the real apiserver and moto, the operator in-process.

Two Balanced NodePools, one node each (so a move's score is its saving's share of the node's price):

* ``bal-it-a`` (c5.large or m5.2xlarge): a 6-CPU pod and a small one land on an m5.2xlarge; once the big pod goes,
  replacing the node by a c5.large saves 78 %: Balanced approves (``ConsolidationApproved`` on the NodeClaim,
  ``karpenter_consolidation_moves_total{decision="approved"}``), the replacement is launched and initialized, the
  old NodeClaim deleted with its decision record.
* ``bal-it-b`` (c5.large or m5.large): a 4 GiB pod and a small one land on an m5.large; once the big pod goes, a
  c5.large would save 11.5 % — enough for karpy's 10 % savings threshold (WhenEmptyOrUnderutilized would take it)
  but a score of 0.11 < 0.5: Balanced refuses (``decision="rejected"`` counted and scored) and the node stays.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import running_operator
from prometheus_client import REGISTRY

from e2e.helpers import apply, delete_nodeclaims, deployment, ec2nodeclass, nodeclaims_of, nodepool, wait_for
from karpy.apis import labels as wk
from karpy.controllers.disruption import controls
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
A, B = "bal-it-a", "bal-it-b"
TAINT = "karpy-test/balanced"
DISRUPTION = {"consolidationPolicy": "Balanced", "consolidateAfter": "1s", "budgets": [{"nodes": "100%"}]}


def pool(name: str, types: list[str]) -> dict[str, Any]:
    return nodepool(
        name,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": types},
        ],
        taints=[{"key": TAINT, "effect": "NoSchedule"}],
        disruption=DISRUPTION,
    )


def pod_spec(pool_name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: pool_name},
        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }


def pod(name: str, pool_name: str, cpu: str, memory: str) -> dict[str, Any]:
    """A bare pod (deleted by the test to leave its node underutilized)."""
    spec = pod_spec(pool_name, cpu, memory)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec}


# Bare pods the test deletes, and one-replica Deployments that stay (their pod moves with a replacement).
BIG = [("a-big", A, "6", "256Mi"), ("b-big", B, "100m", "4Gi")]
SMALL = [("a-small", A, "500m", "128Mi"), ("b-small", B, "500m", "128Mi")]


def moves(decision: str, pool_name: str) -> float:
    labels = {"decision": decision, "nodepool": pool_name, "policy": "Balanced"}
    return REGISTRY.get_sample_value("karpenter_consolidation_moves_total", labels) or 0.0


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    async with running_operator(
        local_cluster,
        kube,
        DISRUPTION_POLL_INTERVAL="500ms",
        DISRUPTION_VALIDATION_DELAY="1s",
        DISRUPTION_COOLDOWN="0s",
    ) as op:
        try:
            yield op
        finally:
            for name, *_ in BIG:
                with contextlib.suppress(ApiError):
                    await kube.delete(r.PODS, name, "default")
            for name, *_ in SMALL:
                with contextlib.suppress(ApiError):
                    await kube.delete(r.DEPLOYMENTS, name, "default")
            for name in (A, B):
                with contextlib.suppress(ApiError):
                    await kube.delete(r.NODEPOOLS, name)
            for name in (A, B):
                await delete_nodeclaims(
                    kube, lambda name=name: nodeclaims_of(kube, name), timeout=60, what=f"{name} NodeClaims released"
                )
            for name in (A, B):
                with contextlib.suppress(ApiError):
                    await kube.delete(r.EC2NODECLASSES, name)


async def _bound(kube: KubeClient, name: str) -> str:
    return str((await kube.get(r.PODS, name, "default"))["spec"].get("nodeName") or "")


async def _app_nodes(kube: KubeClient, app: str) -> list[str]:
    """The nodes the live pods of Deployment ``app`` are bound to ("" for one not bound yet)."""
    pods = (await kube.list(r.PODS, "default", query={"labelSelector": f"app={app}"}))[0]
    return [str(p["spec"].get("nodeName") or "") for p in pods if not p["metadata"].get("deletionTimestamp")]


async def _app_bound(kube: KubeClient, app: str) -> bool:
    nodes = await _app_nodes(kube, app)
    return len(nodes) == 1 and bool(nodes[0])


async def _events(kube: KubeClient, name: str, reason: str) -> list[dict[str, Any]]:
    query = {"fieldSelector": f"involvedObject.name={name}"}
    return [e for e in (await kube.list(r.EVENTS, "default", query=query))[0] if e["reason"] == reason]


async def test_balanced_replaces_the_node_worth_it_and_keeps_the_other(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    cluster = local_cluster.cluster_name
    await apply(
        kube,
        [
            ec2nodeclass(A, cluster),
            ec2nodeclass(B, cluster),
            pool(A, ["c5.large", "m5.2xlarge"]),
            pool(B, ["c5.large", "m5.large"]),
        ],
    )
    approved_before, rejected_before = moves("approved", A), moves("rejected", B)
    for name, pool_name, cpu, memory in BIG:
        await kube.create(r.PODS, pod(name, pool_name, cpu, memory), "default")
    await apply(kube, [deployment(name, 1, pod_spec(p, cpu, memory)) for name, p, cpu, memory in SMALL])
    for name, *_ in BIG:
        await wait_for(lambda name=name: _bound(kube, name), timeout=90, what=f"pod {name} bound")
    for name, *_ in SMALL:
        await wait_for(lambda name=name: _app_bound(kube, name), timeout=90, what=f"deployment {name}'s pod bound")
    ((claim_a,), (claim_b,)) = (await nodeclaims_of(kube, A), await nodeclaims_of(kube, B))
    assert claim_a["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "m5.2xlarge"
    assert claim_b["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "m5.large"
    old_a, old_b = claim_a["metadata"]["name"], claim_b["metadata"]["name"]
    await kube.delete(r.PODS, "a-big", "default")
    await kube.delete(r.PODS, "b-big", "default")

    # bal-it-a: approved, replaced (replacement first), the old NodeClaim deleted with its record.
    async def replaced() -> bool:
        names = [c["metadata"]["name"] for c in await nodeclaims_of(kube, A)]
        return old_a not in names and len(names) == 1

    await wait_for(replaced, timeout=120, what="bal-it-a's m5.2xlarge replaced")
    (new_a,) = await nodeclaims_of(kube, A)
    assert new_a["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "c5.large"
    (approved,) = (await _events(kube, old_a, "ConsolidationApproved"))[:1]
    assert approved["message"].startswith("score 0.78 >= threshold 0.50 (k: 2, savings 77.9%")
    terminating = await _events(kube, old_a, "DisruptionTerminating")
    assert terminating and '"reason": "Underutilized"' in terminating[0]["message"]
    assert '"decision": "replace"' in terminating[0]["message"]
    assert moves("approved", A) >= approved_before + 1
    replacement_node = new_a["status"]["nodeName"]

    async def moved() -> bool:
        return await _app_nodes(kube, "a-small") == [replacement_node]

    await wait_for(moved, timeout=90, what="a-small's pod on the replacement")

    # bal-it-b: scored and refused; the node stays (the refusal is the proof, not a wait).
    await wait_for(
        lambda: _async(moves("rejected", B) >= rejected_before + 1), timeout=60, what="bal-it-b's move refused"
    )
    stored = await kube.get(r.NODECLAIMS, old_b)
    assert not stored["metadata"].get("deletionTimestamp")
    assert controls.ANNOTATION_DECISION not in (stored["metadata"].get("annotations") or {})
    assert not await _events(kube, old_b, "ConsolidationApproved")
    assert [c["metadata"]["name"] for c in await nodeclaims_of(kube, B)] == [old_b]
    score_count = REGISTRY.get_sample_value(
        "karpenter_consolidation_score_count", {"decision": "rejected", "nodepool": B, "policy": "Balanced"}
    )
    assert score_count and score_count >= 1


async def _async(value: bool) -> bool:
    return value
