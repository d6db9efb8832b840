"""Placement groups on the real apiserver + moto (with the test environment's placement-group extension,
``e2e/cluster/placementgroups.py``): an EC2NodeClass with a ``placementGroupSelector`` resolves
(``PlacementGroupReady``), its node is launched into the group (the launch template's ``Placement``, the instance's
placement, the NodeClaim's ``karpenter.k8s.aws/placement-group-id``), and the NodeClaim drifts when the group the
selector resolves to changes (``PlacementGroupDrift``) and when the selector changes (``NodeClassDrift``: the
selector is part of the EC2NodeClass hash, which Karpenter checks first)."""

from __future__ import annotations

import uuid
from typing import Any

from operator_harness import cleanup_pool, pinned_pod, running_operator_with_clients

from e2e.helpers import apply, aws_client, ec2nodeclass, nodeclaims_of, nodepool, wait_for
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

POOL = "it-placement"


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


async def test_placement_group_resolved_launched_into_and_drifted(local_cluster: Any, kube: KubeClient) -> None:
    ec2 = aws_client("ec2", local_cluster.aws_env["AWS_ENDPOINT_URL"])
    name = f"it-{uuid.uuid4().hex[:8]}"
    group = ec2.create_placement_group(GroupName=name, Strategy="cluster")["PlacementGroup"]
    docs = [
        ec2nodeclass(POOL, local_cluster.cluster_name, placementGroupSelector={"name": name}),
        nodepool(
            POOL,
            requirements=[
                {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            ],
            # drift is judged but nothing is replaced: the test reads the condition
            disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]},
        ),
    ]
    async with running_operator_with_clients(local_cluster, kube, DRIFT_CHECK_INTERVAL="2s") as running:
        try:
            await apply(kube, docs)

            async def placement_ready() -> bool:
                obj = await kube.get(r.EC2NODECLASSES, POOL)
                ready, placed = _condition(obj, "Ready"), _condition(obj, "PlacementGroupReady")
                return bool(ready and placed and ready["status"] == placed["status"] == "True")

            await wait_for(placement_ready, timeout=60, what="EC2NodeClass PlacementGroupReady and Ready")
            await apply(kube, [pinned_pod(POOL, POOL)])

            async def launched() -> dict[str, Any] | None:
                claims = await nodeclaims_of(kube, POOL)
                return next((c for c in claims if (c.get("status") or {}).get("providerID")), None)

            claim = await wait_for(launched, timeout=90, what="a launched NodeClaim")
            assert claim["metadata"]["labels"][wk.LABEL_PLACEMENT_GROUP_ID] == group["GroupId"]
            instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
            instance = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
            assert instance["Placement"]["GroupId"] == group["GroupId"]
            assert instance["Placement"]["GroupName"] == name
            templates = ec2.describe_launch_templates(Filters=[{"Name": f"tag:{wk.TAG_NODECLASS}", "Values": [POOL]}])[
                "LaunchTemplates"
            ]
            assert templates
            for template in templates:
                data = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])[
                    "LaunchTemplateVersions"
                ][0]["LaunchTemplateData"]
                assert data["Placement"] == {"GroupId": group["GroupId"], "Tenancy": "default"}
                assert data["NetworkInterfaces"][0]["DeviceIndex"] == 0 and data["NetworkInterfaces"][0]["Groups"]

            async def drifted(reason: str) -> bool:
                obj = await kube.get(r.NODECLAIMS, claim["metadata"]["name"])
                found = _condition(obj, wk.COND_DRIFTED)
                return bool(found and found["status"] == "True" and found["reason"] == reason)

            assert not await drifted("PlacementGroupDrift")
            # The group replaced under the same name: the selector now resolves to another id.
            ec2.delete_placement_group(GroupName=name)
            ec2.create_placement_group(GroupName=name, Strategy="cluster")
            running.operator.cloud.placement_groups.forget()  # type: ignore[attr-defined]  # not the 1-minute TTL
            await wait_for(lambda: drifted("PlacementGroupDrift"), timeout=60, what="PlacementGroupDrift")

            # The selector changed: the EC2NodeClass hash drifts first (Karpenter's order).
            other = f"it-{uuid.uuid4().hex[:8]}"
            ec2.create_placement_group(GroupName=other, Strategy="spread")
            await kube.merge_patch(r.EC2NODECLASSES, POOL, {"spec": {"placementGroupSelector": {"name": other}}})
            await wait_for(lambda: drifted("NodeClassDrift"), timeout=60, what="NodeClassDrift")
        finally:
            await cleanup_pool(kube, POOL, "placement-group NodeClaims")
