"""NodeClaim tagging on the local cluster (Karpenter AWS ``pkg/controllers/nodeclaim/tagging/controller.go``): a
NodeClaim karpy launched registers, then its moto instance is tagged ``Name=<node name>`` (beside the
``karpenter.sh/nodeclaim`` and ``eks:eks-cluster-name`` tags karpy wrote at launch) and the NodeClaim carries
``karpenter.k8s.aws/tagged`` and ``compatibility.karpenter.k8s.aws/cluster-name-tagged``, both ``"true"``.

The operator runs in-process (``operator_harness``), on the real apiserver and moto.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import RunningOperator, on_demand_pool, pinned_pod, running_operator_with_clients

from e2e.helpers import apply, delete_nodeclaims, nodeclaims_of, wait_for
from karpy.apis import labels as wk
from karpy.aws.instances import parse_provider_id
from karpy.controllers.nodeclaim_tagging import ANNOTATION_CLUSTER_NAME_TAGGED
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.integration]
POOL = "tagging"
POD = "tagging-pod"


def pod() -> dict[str, Any]:
    return pinned_pod(POD, POOL)


@pytest.fixture
async def running(local_cluster: Any, kube: KubeClient) -> AsyncIterator[RunningOperator]:
    async with running_operator_with_clients(local_cluster, kube) as op:
        try:
            yield op
        finally:
            with contextlib.suppress(ApiError):
                await kube.delete(r.PODS, POD, "default")
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODEPOOLS, POOL)

            async def claims() -> list[dict[str, Any]]:
                return await nodeclaims_of(kube, POOL)

            await delete_nodeclaims(kube, claims, timeout=60, what="tagging NodeClaims released")


async def test_registered_nodeclaim_instance_gets_name_tag_and_annotations(
    running: RunningOperator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(kube, on_demand_pool(POOL, local_cluster.cluster_name))
    await kube.create(r.PODS, pod(), "default")

    async def annotated() -> dict[str, Any] | None:
        for claim in await nodeclaims_of(kube, POOL):
            notes = claim["metadata"].get("annotations") or {}
            if notes.get(wk.ANNOTATION_TAGGED) == "true" and notes.get(ANNOTATION_CLUSTER_NAME_TAGGED) == "true":
                return claim
        return None

    claim = await wait_for(annotated, timeout=90, what="NodeClaim annotated tagged")
    node_name = claim["status"]["nodeName"]
    assert node_name
    instance_id = parse_provider_id(claim["status"]["providerID"])
    found = await running.clients.ec2.describe_instances(InstanceIds=[instance_id])
    tags = {t["Key"]: t["Value"] for t in found["Reservations"][0]["Instances"][0].get("Tags") or []}
    assert tags[wk.TAG_NAME] == node_name
    assert tags[wk.TAG_NODECLAIM] == claim["metadata"]["name"]
    assert tags[wk.TAG_EKS_CLUSTER_NAME] == local_cluster.cluster_name
    # The NodeClaim is annotated only after the instance was tagged: one NodeClaim, one instance.
    assert len(await nodeclaims_of(kube, POOL)) == 1
