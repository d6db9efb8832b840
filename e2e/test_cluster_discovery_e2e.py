"""karpy started without ``CLUSTER_ENDPOINT`` on the local cluster: it discovers the endpoint and the CA bundle
through EKS DescribeCluster (moto's EKS cluster answers the local apiserver's endpoint and serving CA; karpy's
kubeconfig skips TLS verification, so it has no CA data), as Karpenter's AWS operator does
(``ResolveClusterEndpoint``, ``GetCABundle``), and the node it launches carries both in its user data."""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.kubelet import decode_user_data, parse_user_data
from e2e.helpers import (
    apply,
    aws_client,
    delete_nodeclaims,
    ec2nodeclass,
    instance_id_of,
    karpy_process,
    nodeclaims_of,
    nodepool,
    stop_karpy,
    wait_for,
)
from karpy.kube import resources as r
from karpy.kube.client import ApiError, KubeClient

pytestmark = [pytest.mark.e2e]
POOL = "discovery"


def pending_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POOL, "namespace": "default"},
        "spec": {
            "nodeSelector": {"karpenter.sh/nodepool": POOL},
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


def user_data_of(ec2: Any, instance_id: str) -> bytes:
    """The instance's user data: its attribute, else its fleet's launch template version's."""
    attr = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
    value = (attr.get("UserData") or {}).get("Value")
    if not value:
        for page in ec2.get_paginator("describe_fleets").paginate():
            for fleet in page.get("Fleets") or []:
                ids = {i for group in fleet.get("Instances") or [] for i in group.get("InstanceIds") or []}
                if instance_id not in ids:
                    continue
                spec = fleet["LaunchTemplateConfigs"][0]["LaunchTemplateSpecification"]
                versions = ec2.describe_launch_template_versions(
                    LaunchTemplateId=spec["LaunchTemplateId"], Versions=[str(spec.get("Version") or "$Default")]
                )["LaunchTemplateVersions"]
                value = versions[0]["LaunchTemplateData"].get("UserData")
    return decode_user_data(value)


async def test_node_user_data_carries_the_discovered_endpoint_and_ca(local_cluster: Any, tmp_path: Path) -> None:
    c = local_cluster
    ca = base64.b64encode((c.workdir / "pki" / "apiserver.crt").read_bytes()).decode()
    eks = aws_client("eks", c.aws_env["AWS_ENDPOINT_URL"])
    described = eks.describe_cluster(name=c.cluster_name)["cluster"]
    assert (described["endpoint"], described["certificateAuthority"]["data"]) == (c.server, ca)
    ec2 = aws_client("ec2", c.aws_env["AWS_ENDPOINT_URL"])
    client = await KubeClient.from_environment(str(c.kubeconfig))
    # CLUSTER_ENDPOINT empty is unset (as for Karpenter); karpy's ServiceAccount kubeconfig has no CA data.
    karpy = await karpy_process(client, c.server, c.cluster_name, tmp_path, c.aws_env, CLUSTER_ENDPOINT="")
    karpy.start()

    async def cleanup() -> None:
        with contextlib.suppress(ApiError):
            await client.delete(r.PODS, POOL, "default")
        with contextlib.suppress(ApiError):
            await client.delete(r.NODEPOOLS, POOL)
        await delete_nodeclaims(client, lambda: nodeclaims_of(client, POOL), timeout=120, what="NodeClaims gone")
        with contextlib.suppress(ApiError):
            await client.delete(r.EC2NODECLASSES, POOL)

    try:
        await apply(client, [ec2nodeclass(POOL, c.cluster_name), nodepool(POOL), pending_pod()])

        async def launched() -> str:
            claims = await nodeclaims_of(client, POOL)
            return next(
                (str(x["status"]["providerID"]) for x in claims if (x.get("status") or {}).get("providerID")), ""
            )

        provider_id = await wait_for(launched, timeout=120, what="a NodeClaim launched")
        [started] = [line for line in karpy.logs() if line.get("message") == "starting karpy"]
        assert (started["endpoint"], started["endpoint_discovered"]) == (c.server, True)
        config = parse_user_data(user_data_of(ec2, instance_id_of(provider_id)))
        assert config is not None
        assert config.cluster["apiServerEndpoint"] == c.server
        assert config.cluster["certificateAuthority"] == ca

        async def registered() -> bool:  # the node agent booted from that user data and the Node joined
            claims = await nodeclaims_of(client, POOL)
            return any((x.get("status") or {}).get("nodeName") for x in claims)

        await wait_for(registered, timeout=120, what="the NodeClaim's Node registered")
    finally:
        await stop_karpy(karpy, client, cleanup())
