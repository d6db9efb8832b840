"""The local cluster works: control plane (scheduler, controller manager), KWOK, moto and the node agent.

These run against the session's ``local_cluster`` and clean up after themselves (instances terminated, Nodes,
Pods and Deployments deleted) so later integration and e2e tests start from an empty cluster.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import boto3
import pytest

from e2e.cluster.nodeagent import NodeAgent
from e2e.helpers import KINDS, wait_for
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.integration]
MIB = 2**20
GIB = 2**30

USER_DATA = """MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="//"

--//
Content-Type: application/node.eks.aws

apiVersion: node.eks.aws/v1alpha1
kind: NodeConfig
spec:
  cluster:
    name: {cluster}
  kubelet:
    config:
      maxPods: 29
      kubeReserved: {{cpu: 70m, memory: 574Mi, ephemeral-storage: 1Gi}}
      evictionHard: {{memory.available: 100Mi, nodefs.available: 10%}}
    flags:
    - --node-labels="karpenter.sh/nodepool=agent-test,example.com/run={run}"
    - --register-with-taints="karpenter.sh/unregistered:NoExecute,example.com/team=infra:NoSchedule"

--//--
"""


@pytest.fixture(scope="module")
async def kube(local_cluster: Any) -> AsyncIterator[KubeClient]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    yield client
    await client.close()


@pytest.fixture(scope="module")
def ec2(local_cluster: Any) -> Any:
    env = local_cluster.aws_env
    return boto3.client(
        "ec2",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )


def ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def container(cpu: str) -> dict[str, Any]:
    return {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}


def cluster_tags(cluster: str) -> list[dict[str, Any]]:
    return [{"ResourceType": "instance", "Tags": [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"}]}]


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "containers": [container("100m")],
            "tolerations": [{"operator": "Exists"}],
            **spec,
        },
    }


async def node_by_provider_id(kube: KubeClient, provider_id: str) -> dict[str, Any] | None:
    nodes, _ = await kube.list(r.NODES)
    return next((n for n in nodes if n["spec"].get("providerID") == provider_id), None)


async def delete_quietly(kube: KubeClient, res: Any, name: str, namespace: str | None = None) -> None:
    try:
        await kube.delete(res, name, namespace, body={"gracePeriodSeconds": 0})
    except ApiError as err:
        if not err.not_found:
            raise


def subnet_and_image(ec2: Any, cluster: str) -> tuple[str, str, str]:
    """A subnet seeded for the cluster (its id and zone) and an AMI."""
    subnets = ec2.describe_subnets(Filters=[{"Name": "tag:karpenter.sh/discovery", "Values": [cluster]}])["Subnets"]
    assert len({s["AvailabilityZone"] for s in subnets}) == 3, subnets
    subnet = sorted(subnets, key=lambda s: s["AvailabilityZone"])[1]
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return subnet["SubnetId"], subnet["AvailabilityZone"], image


async def test_node_agent_registers_and_deletes_nodes_like_kubelet_and_ccm(
    local_cluster: Any, kube: KubeClient, ec2: Any
) -> None:
    cluster = local_cluster.cluster_name
    run = uuid.uuid4().hex[:8]
    subnet, zone, image = subnet_and_image(ec2, cluster)
    instance = ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        InstanceType="m5.large",
        SubnetId=subnet,
        UserData=USER_DATA.format(cluster=cluster, run=run),
        TagSpecifications=cluster_tags(cluster),
    )["Instances"][0]
    iid = instance["InstanceId"]
    provider_id = f"aws:///{zone}/{iid}"
    pod_name = f"on-agent-node-{run}"
    try:
        node = await wait_for(lambda: node_by_provider_id(kube, provider_id), timeout=20, what="node registered")
        assert node["metadata"]["name"] == instance["PrivateDnsName"]
        assert node["metadata"]["name"].endswith(".ec2.internal")
        labels = node["metadata"]["labels"]
        assert labels["karpenter.sh/nodepool"] == "agent-test"
        assert labels["example.com/run"] == run
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert labels["node.kubernetes.io/instance-type"] == "m5.large"
        assert labels["topology.kubernetes.io/zone"] == zone
        assert labels["topology.kubernetes.io/region"] == "us-east-1"
        assert labels["kubernetes.io/arch"] == "amd64"
        assert labels["kubernetes.io/os"] == "linux"
        assert labels["topology.k8s.aws/zone-id"].startswith("use1-az")
        taints = {(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints") or []}
        assert ("karpenter.sh/unregistered", None, "NoExecute") in taints
        assert ("example.com/team", "infra", "NoSchedule") in taints
        # m5.large: 2 vCPU, 8192 MiB − 7.5 %; maxPods 29; moto's default 8 GiB root volume.
        capacity = node["status"]["capacity"]
        assert capacity == {"cpu": "2", "memory": "7577Mi", "pods": "29", "ephemeral-storage": "8Gi"}
        allocatable = node["status"]["allocatable"]
        assert allocatable["cpu"] == "1930m"
        assert allocatable["memory"] == f"{7577 - 574 - 100}Mi"
        # nodefs.available=10% as kubelet applies it: float32 10% of 8Gi, truncated = 858993472 (12 bytes over 8Gi/10).
        assert allocatable["ephemeral-storage"] == str(8 * GIB - GIB - 858993472)
        assert allocatable["pods"] == "29"

        name = node["metadata"]["name"]
        node = await wait_for(lambda: _ready_node(kube, name), timeout=30, what="KWOK marks the node Ready")

        # A second agent (a restarted one) leaves the registered Node alone.
        env = local_cluster.aws_env
        agent = NodeAgent(kube, ec2, cluster, env["AWS_REGION"])
        await agent.sync_once()
        assert agent.registered == {}
        assert (await kube.get(r.NODES, name))["metadata"]["uid"] == node["metadata"]["uid"]

        await kube.create(r.PODS, pod(pod_name, nodeName=name), "default")
        running = await wait_for(lambda: _running(kube, pod_name), timeout=30, what="pod Running on the node")
        assert running["spec"]["nodeName"] == name

        ec2.terminate_instances(InstanceIds=[iid])
        await wait_for(lambda: _gone(kube, r.NODES, name), timeout=20, what="node deleted after termination")
    finally:
        ec2.terminate_instances(InstanceIds=[iid])
        await delete_quietly(kube, r.PODS, pod_name, "default")


async def test_instance_without_nodeadm_user_data_gets_no_node(local_cluster: Any, kube: KubeClient, ec2: Any) -> None:
    cluster = local_cluster.cluster_name
    subnet, zone, image = subnet_and_image(ec2, cluster)
    instance = ec2.run_instances(
        ImageId=image,
        MinCount=1,
        MaxCount=1,
        InstanceType="t3.small",
        SubnetId=subnet,
        UserData="#!/bin/bash\n/etc/eks/bootstrap.sh other\n",
        TagSpecifications=cluster_tags(cluster),
    )["Instances"][0]
    iid = instance["InstanceId"]
    try:
        # One agent pass, run here so its decision is observable: it saw the instance and set it aside (no
        # nodeadm user data) — the record that a pass happened and acted on nothing, instead of a sleep.
        env = local_cluster.aws_env
        agent = NodeAgent(kube, ec2, cluster, env["AWS_REGION"])
        await agent.sync_once()
        assert iid in agent.ignored
        assert iid not in agent.registered
        assert await node_by_provider_id(kube, f"aws:///{zone}/{iid}") is None
    finally:
        ec2.terminate_instances(InstanceIds=[iid])


async def test_scheduler_and_controller_manager_run_workloads_on_kwok_nodes(kube: KubeClient) -> None:
    run = uuid.uuid4().hex[:8]
    node_name = f"kwok-{run}"
    size = {"cpu": "4", "memory": "8Gi", "pods": "20"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name, "example.com/run": run}},
        "spec": {"providerID": f"kwok://{node_name}"},
        "status": {"capacity": size, "allocatable": size},
    }
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"web-{run}"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": f"web-{run}"}},
            "template": {
                "metadata": {"labels": {"app": f"web-{run}"}},
                "spec": {
                    "nodeSelector": {"example.com/run": run},
                    "containers": [container("500m")],
                },
            },
        },
    }
    single = f"single-{run}"
    await kube.create(r.NODES, node)
    try:
        await wait_for(lambda: _ready_node(kube, node_name), timeout=30, what="KWOK node Ready")
        # kube-scheduler binds a pod without nodeName onto the Ready KWOK node.
        await kube.create(r.PODS, pod(single, nodeSelector={"example.com/run": run}), "default")
        scheduled = await wait_for(lambda: _running(kube, single), timeout=30, what="scheduled pod Running")
        assert scheduled["spec"]["nodeName"] == node_name
        # kube-controller-manager: Deployment → ReplicaSet → Pods; the scheduler places them.
        await kube.create(KINDS["Deployment"], deployment, "default")

        async def all_running() -> list[dict[str, Any]] | None:
            pods, _ = await kube.list(r.PODS, "default", query={"labelSelector": f"app=web-{run}"})
            ok = len(pods) == 3 and all(p["status"].get("phase") == "Running" for p in pods)
            return pods if ok else None

        pods = await wait_for(all_running, timeout=60, what="3 deployment pods Running")
        assert {p["spec"]["nodeName"] for p in pods} == {node_name}
        assert all(p["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet" for p in pods)
    finally:
        await delete_quietly(kube, KINDS["Deployment"], f"web-{run}", "default")
        await delete_quietly(kube, r.PODS, single, "default")
        await wait_for(
            lambda: _no_pods(kube, f"app in (web-{run},{single})"), timeout=60, what="test pods deleted (KWOK)"
        )
        await delete_quietly(kube, r.NODES, node_name)


async def _ready_node(kube: KubeClient, name: str) -> dict[str, Any] | None:
    node = await kube.get(r.NODES, name)
    return node if ready(node) else None


async def _running(kube: KubeClient, name: str) -> dict[str, Any] | None:
    p = await kube.get(r.PODS, name, "default")
    return p if p["status"].get("phase") == "Running" else None


async def _gone(kube: KubeClient, res: Any, name: str, namespace: str | None = None) -> bool:
    try:
        await kube.get(res, name, namespace)
    except ApiError as err:
        if err.not_found:
            return True
        raise
    return False


async def _no_pods(kube: KubeClient, selector: str) -> bool:
    pods, _ = await kube.list(r.PODS, "default", query={"labelSelector": selector})
    return not pods


async def test_node_of_an_unknown_instance_is_deleted_and_a_foreign_one_kept(
    local_cluster: Any, kube: KubeClient, ec2: Any
) -> None:
    """CCM's node lifecycle: a Node whose instance EC2 does not know goes; one of a running instance stays."""
    cluster = local_cluster.cluster_name
    subnet, zone, image = subnet_and_image(ec2, cluster)
    foreign = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.small", SubnetId=subnet)
    foreign_id = foreign["Instances"][0]["InstanceId"]  # running, not tagged for the cluster
    run = uuid.uuid4().hex[:8]
    names = {"gone": f"gone-{run}", "foreign": f"foreign-{run}"}
    provider_ids = {"gone": f"aws:///{zone}/i-0000000000{run[:7]}", "foreign": f"aws:///{zone}/{foreign_id}"}
    # The foreign Node first: any agent pass that lists the "gone" Node lists the foreign one too, so the pass
    # that deletes "gone" is a pass that judged the foreign Node and kept it.
    for key in ("foreign", "gone"):
        await kube.create(
            r.NODES,
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": names[key]},
                "spec": {"providerID": provider_ids[key]},
            },
        )
    try:
        await wait_for(lambda: _gone(kube, r.NODES, names["gone"]), timeout=20, what="node of unknown instance deleted")
        assert (await kube.get(r.NODES, names["foreign"]))["spec"]["providerID"] == provider_ids["foreign"]
        # And one more pass run here, whose decisions are observable: it keeps the foreign Node.
        agent = NodeAgent(kube, ec2, cluster, local_cluster.aws_env["AWS_REGION"])
        await agent.sync_once()
        assert foreign_id not in agent.deleted
        assert (await kube.get(r.NODES, names["foreign"]))["spec"]["providerID"] == provider_ids["foreign"]
    finally:
        for name in names.values():
            await delete_quietly(kube, r.NODES, name)
        ec2.terminate_instances(InstanceIds=[foreign_id])
