"""Nodes of every Linux AMI family reach Ready on the local cluster (issue 9, AMI families).

One EC2NodeClass per family (``al2023@latest`` and ``bottlerocket@latest`` by alias; ``amiFamily: AL2`` on the
seeded golden AMI by tags, since Karpenter refuses AL2 aliases on Kubernetes 1.33+), each with a NodePool and a
pending Deployment selecting it. karpy resolves the alias through the seeded SSM parameters, launches with the
family's user data (nodeadm NodeConfig, Bottlerocket TOML, AL2 ``bootstrap.sh`` MIME) and block devices; the
node agent reads that user data back as kubelet would and registers the Node. Each NodeClaim must become Ready,
its Node carry the NodePool label, its taint and the family's OS,
its launch template hold the family's block devices, and the pods run there. (Windows is not here: karpy's
instance types offer ``kubernetes.io/os=linux`` only, so a Windows NodePool has no instance type yet.)
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.cluster.aws import CUSTOM_AMI_TAGS
from e2e.helpers import (
    KarpyProcess,
    apply,
    aws_client,
    deployment,
    ec2nodeclass,
    karpy_process,
    nodeclaims_of,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
# pool/nodeclass name → (alias, "" for AL2 by tags; OS; marker of the family's user data; template block devices)
FAMILIES = {
    "fam-al2023": ("al2023@latest", "linux", "kind: NodeConfig", ["/dev/xvda"]),
    "fam-bottlerocket": ("bottlerocket@latest", "linux", "[settings.kubernetes]", ["/dev/xvda", "/dev/xvdb"]),
    "fam-al2": ("", "linux", "/etc/eks/bootstrap.sh", ["/dev/xvda"]),
}


def _pool(name: str, os_name: str) -> dict[str, Any]:
    return shared_nodepool(
        name,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": [os_name]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        taints=[{"key": "karpy-e2e/family", "value": name, "effect": "NoSchedule"}],
        disruption={"consolidateAfter": "Never"},
    )


def _app(name: str, os_name: str) -> dict[str, Any]:
    return deployment(
        name,
        1,
        {
            "nodeSelector": {wk.LABEL_NODEPOOL: name, "kubernetes.io/os": os_name},
            "tolerations": [{"key": "karpy-e2e/family", "operator": "Equal", "value": name, "effect": "NoSchedule"}],
            "containers": [{"name": "app", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    )


@pytest.fixture(scope="module")
async def env(
    local_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[KubeClient, KarpyProcess]]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, tmp_path_factory.mktemp("karpy-families"), c.aws_env)
    karpy.start()

    async def cleanup() -> None:
        for name in FAMILIES:
            with contextlib.suppress(ApiError):
                await client.delete(r.DEPLOYMENTS, name, namespace="default")
            with contextlib.suppress(ApiError):
                await client.delete(r.NODEPOOLS, name)

        async def gone() -> bool:
            return not any([await nodeclaims_of(client, n) for n in FAMILIES])

        await wait_for(gone, timeout=120, what="the family NodeClaims deleted")
        for name in FAMILIES:
            with contextlib.suppress(ApiError):
                await client.delete(r.EC2NODECLASSES, name)

    try:
        yield client, karpy
    finally:
        await stop_karpy(karpy, client, cleanup())


async def test_every_family_reaches_ready(local_cluster: Any, env: tuple[KubeClient, KarpyProcess]) -> None:
    client, _ = env
    cluster = local_cluster.cluster_name
    docs: list[dict[str, Any]] = []
    for name, (alias, os_name, _, _) in FAMILIES.items():
        if alias:
            nodeclass = ec2nodeclass(name, cluster, amiSelectorTerms=[{"alias": alias}])
        else:  # AL2 aliases are refused on Kubernetes 1.33+: the AL2 family on the seeded golden AMI, by tags
            nodeclass = ec2nodeclass(name, cluster, amiFamily="AL2", amiSelectorTerms=[{"tags": CUSTOM_AMI_TAGS}])
        docs += [nodeclass, _pool(name, os_name)]
        docs.append(_app(name, os_name))
    await apply(client, docs)

    async def all_ready() -> list[dict[str, Any]] | None:
        claims = []
        for name in FAMILIES:
            found = await nodeclaims_of(client, name)
            ready = [
                c
                for c in found
                if any(
                    k.get("type") == "Ready" and k.get("status") == "True"
                    for k in (c.get("status") or {}).get("conditions") or []
                )
            ]
            if not ready:
                return None
            claims.append(ready[0])
        return claims

    claims = await wait_for(all_ready, timeout=240, what="a Ready NodeClaim of every family")
    assert claims is not None
    ec2 = aws_client("ec2", local_cluster.aws_env["AWS_ENDPOINT_URL"])
    for claim in claims:
        pool = claim["metadata"]["labels"][wk.LABEL_NODEPOOL]
        _, os_name, marker, root_device = FAMILIES[pool]
        node = await client.get(r.NODES, claim["status"]["nodeName"])
        assert node["metadata"]["labels"]["kubernetes.io/os"] == os_name
        assert node["metadata"]["labels"][wk.LABEL_NODEPOOL] == pool
        # The NodePool's taint reached the Node through the family's own taint syntax.
        assert {"key": "karpy-e2e/family", "value": pool, "effect": "NoSchedule"} in node["spec"]["taints"]
        instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
        attribute = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        assert marker in base64.b64decode(attribute["UserData"]["Value"]).decode()
        reservation = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        assert reservation["ImageId"] == claim["status"]["imageID"]
        owned = ec2.describe_launch_templates(Filters=[{"Name": f"tag:{wk.TAG_NODECLASS}", "Values": [pool]}])
        assert owned["LaunchTemplates"], f"no launch template of EC2NodeClass {pool}"
        for template in owned["LaunchTemplates"]:
            version = ec2.describe_launch_template_versions(LaunchTemplateId=template["LaunchTemplateId"])
            data = version["LaunchTemplateVersions"][0]["LaunchTemplateData"]
            assert [m["DeviceName"] for m in data["BlockDeviceMappings"]] == root_device

    async def pods_running() -> bool:
        pods = (await client.list(r.PODS, namespace="default"))[0]
        mine = [p for p in pods if p["metadata"].get("labels", {}).get("app") in FAMILIES]
        return len(mine) == len(FAMILIES) and all((p.get("status") or {}).get("phase") == "Running" for p in mine)

    await wait_for(pods_running, timeout=120, what="the pods of every family Running")
