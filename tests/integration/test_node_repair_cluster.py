"""Node repair (``FEATURE_GATES=NodeRepair=true``, the v1.15 path) on the local cluster: the operator in-process
(``operator_harness``) on the real apiserver and moto, the node agent reporting Node conditions as the EKS node
monitoring agent would (``karpy-e2e/condition/<Type>`` instance tags, :mod:`e2e.cluster.nodeagent`).

A Deployment's two pods run on two nodes of one NodePool (hostname anti-affinity). Both instances report
``NetworkingReady=False``: 2 of 2 unhealthy is more than ⌈20 % of 2⌉ = 1, so repair is blocked
(``NodeRepairBlocked`` on the NodePool) and no NodeClaim is deleted. One heals: the other is repaired — its
NodeClaim deleted forcefully, counted in ``karpenter_nodeclaims_unhealthy_disrupted_total`` — and its pod runs
again on a new node.

The AWS policies wait 30 minutes; the test serves the same shape with a 2-second toleration and a forceful drain
(the AWS provider's ``REPAIR_POLICIES``, patched for this module's operator only).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import RunningOperator, running_operator_with_clients, tainted_pool

from e2e.cluster.nodeagent import condition_tag
from e2e.helpers import (
    apply,
    aws_client,
    delete_nodeclaims,
    deployment,
    ec2nodeclass,
    instance_id_of,
    nodeclaims_of,
    wait_for,
)
from karpy.apis import labels as wk
from karpy.cloudprovider.types import RepairPolicy
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from tests.unit.metrics_helpers import sample

pytestmark = [pytest.mark.integration]
POOL = "repair-int"
TAINT = "karpy-test/repair-int"
FAST_POLICIES = (
    RepairPolicy("NetworkingReady", "False", 2.0, ".*", termination_grace_period_seconds=0.0),
    RepairPolicy("KernelReady", "False", 3600.0, "", termination_grace_period_seconds=600.0),  # the fallback
)


def workload() -> dict[str, Any]:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
        "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": POOL}}, "topologyKey": wk.LABEL_HOSTNAME}
                ]
            }
        },
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
    }
    return deployment(POOL, 2, spec)


@pytest.fixture
async def running(
    local_cluster: Any, kube: KubeClient, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[RunningOperator]:
    monkeypatch.setattr("karpy.aws.cloudprovider.REPAIR_POLICIES", FAST_POLICIES)
    async with running_operator_with_clients(
        local_cluster, kube, FEATURE_GATES="NodeRepair=true", DISRUPTION_POLL_INTERVAL="1s"
    ) as op:
        try:
            yield op
        finally:
            for res, name, ns in ((r.DEPLOYMENTS, POOL, "default"), (r.NODEPOOLS, POOL, None)):
                with contextlib.suppress(ApiError):
                    await kube.delete(res, name, ns)
            await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, POOL), timeout=90, what="repair NodeClaims gone")
            with contextlib.suppress(ApiError):
                await kube.delete(r.EC2NODECLASSES, POOL)


async def running_pods(kube: KubeClient) -> dict[str, str]:
    """Pod name → node name of the workload's Running pods."""
    items = (await kube.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"}))[0]
    return {
        p["metadata"]["name"]: p["spec"]["nodeName"]
        for p in items
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


async def test_unhealthy_node_replaced_unless_too_much_of_the_nodepool_is_unhealthy(
    running: RunningOperator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(
        kube,
        [
            ec2nodeclass(POOL, local_cluster.cluster_name),
            tainted_pool(POOL, TAINT, {"consolidateAfter": "Never"}),
            workload(),
        ],
    )

    async def two_nodes() -> dict[str, str] | None:
        pods = await running_pods(kube)
        return pods if len(set(pods.values())) == 2 else None

    await wait_for(two_nodes, timeout=180, what="two pods Running on two nodes")
    claims = {c["status"]["nodeName"]: c for c in await nodeclaims_of(kube, POOL)}
    assert len(claims) == 2, sorted(claims)
    (sick_node, sick), (healed_node, healed) = sorted(claims.items())
    ec2 = aws_client("ec2", local_cluster.aws_env["AWS_ENDPOINT_URL"])
    ids = {name: instance_id_of(c["status"]["providerID"]) for name, c in claims.items()}
    ec2.create_tags(Resources=list(ids.values()), Tags=[condition_tag("NetworkingReady", "False", "IPAMDNotRunning")])

    async def blocked() -> list[dict[str, Any]]:
        events = (await kube.list(r.EVENTS, "default"))[0]
        return [e for e in events if e.get("reason") == "NodeRepairBlocked" and e["involvedObject"].get("name") == POOL]

    event = (await wait_for(blocked, timeout=60, what="NodeRepairBlocked on the NodePool"))[0]
    assert event["type"] == "Warning"
    assert event["message"] == f'more than 20% of nodes in nodepool "{POOL}" are unhealthy'
    current = await nodeclaims_of(kube, POOL)
    assert len(current) == 2 and not any(c["metadata"].get("deletionTimestamp") for c in current), "none repaired"

    series = {
        "condition": "networking_ready",
        "nodepool": POOL,
        "capacity_type": "on-demand",
        "image_id": sick["status"]["imageID"],
        "termination_mode": "forceful",
    }
    before = sample("karpenter_nodeclaims_unhealthy_disrupted_total", **series) or 0.0
    ec2.create_tags(Resources=[ids[healed_node]], Tags=[condition_tag("NetworkingReady", "True", "Healed")])

    async def replaced() -> dict[str, str] | None:
        names = {c["metadata"]["name"] for c in await nodeclaims_of(kube, POOL)}
        pods = await running_pods(kube)
        moved = sick["metadata"]["name"] not in names and len(set(pods.values())) == 2
        return pods if moved and sick_node not in pods.values() else None

    pods = await wait_for(replaced, timeout=180, what="the unhealthy node replaced and its pod running elsewhere")
    assert healed_node in pods.values(), "the healed node was left alone"
    assert sample("karpenter_nodeclaims_unhealthy_disrupted_total", **series) == before + 1
    terminating = [
        e
        for e in (await kube.list(r.EVENTS, "default"))[0]
        if e.get("reason") == "DisruptionTerminating" and e["involvedObject"].get("name") == sick["metadata"]["name"]
    ]
    assert terminating and terminating[0]["message"].startswith("Disrupting NodeClaim: Unhealthy"), terminating
    assert healed["metadata"]["name"] in {c["metadata"]["name"] for c in await nodeclaims_of(kube, POOL)}
