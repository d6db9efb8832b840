"""karpy's controllers against the real apiserver and moto, wired as karpy wires them (``Operator``).

Each test runs the operator in-process on the session loop, acts like a user would, and checks the outcome
in the apiserver and in moto.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from operator_harness import running_operator
from structlog.testing import capture_logs

from e2e.helpers import apply, assert_allocatable_as_predicted, ec2nodeclass, wait_for
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POD = "default/it-one"  # the pod the PDB protects, as karpy's log records name it


def nodepool(name: str, nodeclass_name: str, **spec: Any) -> dict[str, Any]:
    pool = shared_nodepool(
        name,
        nodeclass=nodeclass_name,
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
        ],
        disruption={"consolidateAfter": "Never"},
    )
    pool["spec"].update(spec)
    return pool


def pod(name: str, cpu: str = "500m", memory: str = "256Mi", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
            **spec,
        },
    }


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    """The operator graph, running in-process against the local cluster and moto."""
    async with running_operator(local_cluster, kube) as op:
        try:
            yield op
        finally:
            await _remove_everything_made_here(kube)


async def _remove_everything_made_here(kube: KubeClient) -> None:
    """Delete this module's NodePools, pods and NodeClaims while the operator still runs (its terminator
    releases the finalizers), so the cluster shared with later tests is left as it was found."""
    for name in ("it", "np-late"):
        with contextlib.suppress(ApiError):
            await kube.delete(r.NODEPOOLS, name)
    with contextlib.suppress(ApiError):
        await kube.delete(r.PODS, "it-one", "default")
    for claim in (await kube.list(r.NODECLAIMS))[0]:
        if claim["metadata"]["labels"].get(wk.LABEL_NODEPOOL) in ("it", "np-late"):
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODECLAIMS, claim["metadata"]["name"])

    async def gone() -> bool:
        claims = (await kube.list(r.NODECLAIMS))[0]
        return not [c for c in claims if c["metadata"]["labels"].get(wk.LABEL_NODEPOOL) in ("it", "np-late")]

    await wait_for(gone, timeout=60, what="integration NodeClaims released")


async def _condition(kube: KubeClient, res: r.Resource, name: str, type_: str) -> dict[str, Any]:
    obj = await kube.get(res, name)
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


async def test_nodepool_readiness_follows_its_nodeclass(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    """Missing EC2NodeClass → Ready=False/NodeClassNotFound + event; once it exists and resolves → Ready=True."""
    await apply(kube, [nodepool("np-late", "late-class")])

    async def not_found() -> bool:
        return (await _condition(kube, r.NODEPOOLS, "np-late", "Ready")).get("reason") == "NodeClassNotFound"

    await wait_for(not_found, timeout=20, what="NodeClassNotFound")
    await apply(kube, [ec2nodeclass("late-class", local_cluster.cluster_name)])

    async def ready() -> bool:
        return (await _condition(kube, r.NODEPOOLS, "np-late", "Ready")).get("status") == "True"

    await wait_for(ready, timeout=30, what="NodePool Ready once its class resolves")
    await kube.delete(r.NODEPOOLS, "np-late")


async def _it_one_bound(kube: KubeClient, cluster: Any) -> tuple[str, list[dict[str, Any]]]:
    """The pod ``it-one`` (1500m, NodePool ``it``) bound and its NodeClaims registered — created along with the
    EC2NodeClass and NodePool when missing, so each test that needs it builds it itself.
    Returns (node name, the pool's NodeClaims)."""
    await apply(kube, [ec2nodeclass("it", cluster.cluster_name), nodepool("it", "it")])
    try:
        await kube.get(r.PODS, "it-one", "default")
    except ApiError as err:
        if not err.not_found:
            raise
        await kube.create(r.PODS, pod("it-one", cpu="1500m", nodeSelector={wk.LABEL_NODEPOOL: "it"}), "default")

    async def bound() -> str:
        p = await kube.get(r.PODS, "it-one", "default")
        return str(p["spec"].get("nodeName") or "")

    node_name = await wait_for(bound, timeout=60, what="pod bound")

    async def registered() -> list[dict[str, Any]]:
        # karpy binds while registration still holds the unregistered taint (as NoSchedule), so the pod can be
        # bound a moment before the NodeClaim records its node and the taint is dropped.
        claims = [c for c in (await kube.list(r.NODECLAIMS))[0] if c["metadata"]["labels"][wk.LABEL_NODEPOOL] == "it"]
        return claims if all((c.get("status") or {}).get("nodeName") for c in claims) else []

    return node_name, await wait_for(registered, timeout=30, what="nodeclaim registered")


async def test_pending_pod_gets_one_nodeclaim_and_is_bound(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    """An unschedulable pod yields exactly one NodeClaim; its node registers; karpy binds the pod."""
    node_name, claims = await _it_one_bound(kube, local_cluster)
    assert len(claims) == 1
    claim = claims[0]
    assert claim["status"]["nodeName"] == node_name
    assert wk.FINALIZER_TERMINATION in claim["metadata"]["finalizers"]
    node = await kube.get(r.NODES, node_name)
    assert node["spec"]["providerID"] == claim["status"]["providerID"]
    assert node["metadata"]["labels"][wk.LABEL_REGISTERED] == "true"
    assert all(t["key"] != wk.TAINT_UNREGISTERED_KEY for t in node["spec"].get("taints") or [])
    # karpy's overhead model predicted what the node's kubelet (the node agent, from karpy's user data) reports.
    await assert_allocatable_as_predicted(kube, claims)
    # A second decision over the same state creates nothing: the pod is planned or bound already.
    assert await operator.provisioner.provision_once() == []


async def test_deleting_a_nodeclaim_drains_through_pdb_and_terminates(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    """Eviction honours a PodDisruptionBudget; the instance is terminated; finalizers are released."""
    node_name, claims = await _it_one_bound(kube, local_cluster)
    claim = next(c for c in claims if c["status"]["nodeName"] == node_name)
    await apply(
        kube,
        [
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "it-one", "namespace": "default"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "it-one"}}},
            }
        ],
    )
    await wait_for(lambda: _pdb_observed(kube), timeout=30, what="PDB status")
    await kube.delete(r.NODECLAIMS, claim["metadata"]["name"])

    async def tainted() -> bool:
        node = await kube.get(r.NODES, node_name)
        return any(t["key"] == wk.TAINT_DISRUPTED_KEY for t in node["spec"].get("taints") or [])

    await wait_for(tainted, timeout=20, what="disrupted taint")
    # Proof that the PDB blocked the eviction, not that too little time passed: the terminator's own decision
    # records — two refused evictions of this pod (the apiserver answered 429), i.e. a retry after a refusal.
    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as records:

        async def refused_twice() -> bool:
            return len(_records(records, "eviction blocked by a PodDisruptionBudget, retrying", pod=POD)) >= 2

        await wait_for(refused_twice, timeout=30, what="two evictions of it-one refused by the PDB")
    still = await kube.get(r.PODS, "it-one", "default")
    assert not still["metadata"].get("deletionTimestamp"), "the PDB must block the eviction"
    assert not _records(records, "evicted pod", pod=POD), "no eviction may succeed while the PDB holds"
    await kube.delete(r.PDBS, "it-one", "default")

    async def gone() -> bool:
        claims = [c for c in (await kube.list(r.NODECLAIMS))[0] if c["metadata"]["name"] == claim["metadata"]["name"]]
        return not claims

    await wait_for(gone, timeout=60, what="nodeclaim released")
    instance = await operator.cloud.list()
    assert claim["status"]["providerID"] not in {i.provider_id for i in instance}


def _records(records: list[dict[str, Any]], event: str, **fields: Any) -> list[dict[str, Any]]:
    """The captured structlog records with message ``event`` and every field in ``fields``."""
    return [r for r in records if r.get("event") == event and all(r.get(k) == v for k, v in fields.items())]


async def _pdb_observed(kube: KubeClient) -> bool:
    pdb = await kube.get(r.PDBS, "it-one", "default")
    return (pdb.get("status") or {}).get("observedGeneration") == pdb["metadata"]["generation"]
