"""Nodes in a placement group, replaced into another when the EC2NodeClass's selector changes (issue 11, item 6).

A cluster placement group in moto (the test environment's extension, ``e2e/cluster/placementgroups.py``), an
EC2NodeClass selecting it by name with explicit ``networkInterfaces`` (one primary ENA interface), a NodePool and a
pending Deployment. ``karpy run`` launches the node into the group: the launch template carries
``Placement.GroupId`` and the interfaces, the instance is in the group, the Node reaches Ready labelled
``karpenter.k8s.aws/placement-group-id`` and the pod runs on it. Then the selector is switched to a second group:
the NodeClaim drifts (``NodeClassDrift``, the selector is hashed) and is replaced by a node in the new group, its
pod moved there, replacement first.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
    deployment,
    ec2nodeclass,
    nodeclaims_of,
    pool_env,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

pytestmark = [pytest.mark.e2e]
POOL = "pg-e2e"
INTERFACES = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]


def _app() -> dict[str, Any]:
    return deployment(
        POOL,
        1,
        {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    )


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PoolEnv]:
    async with pool_env(local_cluster, tmp_path_factory.mktemp("karpy-pg"), POOL, PoolEnv) as e:
        yield e


async def _ready_claim(client: KubeClient, group_id: str) -> dict[str, Any] | None:
    """The Ready NodeClaim of the pool labelled with ``group_id``, not being deleted."""
    for claim in await nodeclaims_of(client, POOL):
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (claim.get("status") or {}).get("conditions") or []
        )
        labels = claim["metadata"].get("labels") or {}
        if (
            ready
            and labels.get(wk.LABEL_PLACEMENT_GROUP_ID) == group_id
            and not claim["metadata"].get("deletionTimestamp")
        ):
            return claim
    return None


async def _pod_on(client: KubeClient, node_name: str) -> bool:
    pods, _ = await client.list(r.PODS, "default", query={"labelSelector": f"app={POOL}"})
    return any(
        p["spec"].get("nodeName") == node_name and (p.get("status") or {}).get("phase") == "Running" for p in pods
    )


async def test_nodes_launched_into_the_group_and_replaced_into_the_new_one(local_cluster: Any, env: PoolEnv) -> None:
    client, ec2 = env.client, env.ec2
    first_name, second_name = f"e2e-{uuid.uuid4().hex[:8]}", f"e2e-{uuid.uuid4().hex[:8]}"
    first = ec2.create_placement_group(GroupName=first_name, Strategy="cluster")["PlacementGroup"]["GroupId"]
    second = ec2.create_placement_group(GroupName=second_name, Strategy="cluster")["PlacementGroup"]["GroupId"]
    nodeclass = ec2nodeclass(
        POOL,
        local_cluster.cluster_name,
        placementGroupSelector={"name": first_name},
        networkInterfaces=INTERFACES,
    )
    pool = shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "100%"}]},
    )
    await apply(client, [nodeclass, pool, _app()])

    claim = await wait_for(lambda: _ready_claim(client, first), timeout=240, what="a Ready NodeClaim in the group")
    node_name = claim["status"]["nodeName"]
    node = await client.get(r.NODES, node_name)
    assert node["metadata"]["labels"][wk.LABEL_PLACEMENT_GROUP_ID] == first
    await wait_for(lambda: _pod_on(client, node_name), timeout=120, what="the pod running on the group's node")
    instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
    instance = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert (instance["Placement"]["GroupName"], instance["Placement"]["GroupId"]) == (first_name, first)
    templates = ec2.describe_launch_templates(Filters=[{"Name": f"tag:{wk.TAG_NODECLASS}", "Values": [POOL]}])
    data = [
        ec2.describe_launch_template_versions(LaunchTemplateId=t["LaunchTemplateId"])["LaunchTemplateVersions"][0][
            "LaunchTemplateData"
        ]
        for t in templates["LaunchTemplates"]
    ]
    assert data and all(d["Placement"]["GroupId"] == first for d in data)
    assert all(
        [(i["NetworkCardIndex"], i["DeviceIndex"], i["InterfaceType"]) for i in d["NetworkInterfaces"]]
        == [(0, 0, "interface")]
        for d in data
    )

    # The selector switched to the second group: the node drifts and is replaced into it, with its pod.
    await client.merge_patch(r.EC2NODECLASSES, POOL, {"spec": {"placementGroupSelector": {"name": second_name}}})
    replacement = await wait_for(
        lambda: _ready_claim(client, second), timeout=300, what="a Ready replacement in the second group"
    )

    async def old_gone() -> bool:
        names = {c["metadata"]["name"] for c in await nodeclaims_of(client, POOL)}
        return claim["metadata"]["name"] not in names

    await wait_for(old_gone, timeout=240, what="the drifted NodeClaim removed")
    new_node = replacement["status"]["nodeName"]
    await wait_for(lambda: _pod_on(client, new_node), timeout=120, what="the pod running in the second group")
    instance_id = replacement["status"]["providerID"].rsplit("/", 1)[-1]
    instance = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
    assert instance["Placement"]["GroupId"] == second
