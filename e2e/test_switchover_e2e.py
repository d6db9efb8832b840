"""Switching from Karpenter v1.15 in place, end to end on the local cluster (control plane + KWOK + moto).

The test plays Karpenter v1.15 first, then hands the cluster to karpy:

1. **What Karpenter left.** A NodePool and an EC2NodeClass applied as a user applies them, stamped with the hash
   annotations Karpenter's hash controllers write (core ``pkg/controllers/nodepool/hash``, AWS
   ``pkg/controllers/nodeclass/hash``; the values come from the reference built from Karpenter's own Go modules,
   ``e2e/karpenter_ref``, never from karpy) and the status Karpenter's nodeclass/nodepool controllers write.
   Then two NodeClaims as Karpenter's provisioner creates them (core ``provisioning/scheduling/nodeclaimtemplate.go``:
   ``<nodepool>-<5 chars>`` names, NodePool owner reference, the NodePool hash and version, template labels,
   requirements) and carries them through its lifecycle (core ``pkg/controllers/nodeclaim/lifecycle``): launch
   (an instance in moto with the launch tags of AWS ``utils.GetTags`` and the user data the reference renders;
   ``instanceToNodeClaim`` labels, the EC2NodeClass hash and instance-profile annotations, providerID, imageID,
   capacity, allocatable), registration (the Node the node agent registers as kubelet from that user data gets
   the termination finalizer, the owner reference, the NodeClaim's labels and annotations, loses the
   ``karpenter.sh/unregistered`` taint), initialization and the AWS tagging controller (``Name``,
   ``karpenter.sh/nodeclaim`` tags, the ``tagged`` annotations). kube-scheduler places a Deployment's pods on
   the two Nodes.
2. **karpy takes over** with no Karpenter running. For ``SWITCHOVER_WINDOW`` seconds (300: the issue's five
   minutes) every NodeClaim, Node and Pod watch event is recorded: none may be a deletion, a deletionTimestamp,
   a pod moved, or a ``Drifted`` condition; karpy's counters show no NodeClaim created and no disruption
   decision, its ``eligible_nodes{reason="drifted"}`` gauge is 0, its disruption evaluations saw the two
   NodeClaims as candidates and its NodeClaim disruption reconciler wrote their ``Consolidatable`` condition
   (the reconcile that also decides drift), and the NodePool and EC2NodeClass keep Karpenter's hash annotations.
3. **A real change drifts them.** A template label is added to the NodePool: karpy stamps the hash the reference
   computes for the new spec, both NodeClaims become ``Drifted`` (``NodePoolDrifted``) and are replaced one at a
   time (budget ``nodes: 1``) by NodeClaims carrying the new label and the reference's hashes; the pods run again.

Everything made here is deleted at module end (karpy still running, so its terminator releases finalizers).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    aws_client,
    ec2nodeclass,
    karpy_process,
    nodepool,
    record_figures,
    scrape_metrics,
    stop_karpy,
    wait_for,
)
from e2e.karpenter_ref import KarpenterRef, ensure_binary, go_available
from karpy.apis import labels as wk
from karpy.controllers.disruption.types import DRIFTED
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
POOL = CLASS = "switchover"
APP = "switchover"
TAINT = {"key": "karpy-e2e/switchover", "value": "true", "effect": "NoSchedule"}
INSTANCE_TYPE = "m5.large"
REPLICAS = 2
# The five minutes of watching karpy adopt the cluster; KARPY_SWITCHOVER_WINDOW shortens it while
# developing the test, never in `make test`.
SWITCHOVER_WINDOW = float(os.environ.get("KARPY_SWITCHOVER_WINDOW", "300"))
# A cluster CA bundle both "Karpenter" (the reference) and karpy hash the EC2NodeClass with (CLUSTER_CA_BUNDLE):
# the local apiserver's kubeconfig skips TLS verification, so there is no CA to discover.
CA_BUNDLE = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIBswitchover\n-----END CERTIFICATE-----\n").decode()
# What Karpenter's instance type provider labels an m5.large with (AWS pkg/providers/instancetype/types.go, from
# EC2 DescribeInstanceTypes: 2 vCPU Intel at 3.1 GHz, 8 GiB, Nitro, 750 Mbps network, 4750 Mbps EBS).
M5_LARGE_LABELS = {
    wk.LABEL_INSTANCE_TYPE: INSTANCE_TYPE,
    wk.LABEL_ARCH: "amd64",
    wk.LABEL_OS: "linux",
    wk.LABEL_INSTANCE_CATEGORY: "m",
    wk.LABEL_INSTANCE_FAMILY: "m5",
    wk.LABEL_INSTANCE_GENERATION: "5",
    wk.LABEL_INSTANCE_SIZE: "large",
    wk.LABEL_INSTANCE_CPU: "2",
    wk.LABEL_INSTANCE_CPU_MANUFACTURER: "intel",
    wk.LABEL_INSTANCE_CPU_SUSTAINED_CLOCK: "3100",
    wk.LABEL_INSTANCE_MEMORY: "8192",
    wk.LABEL_INSTANCE_EBS_BANDWIDTH: "4750",
    wk.LABEL_INSTANCE_NETWORK_BANDWIDTH: "750",
    wk.LABEL_INSTANCE_HYPERVISOR: "nitro",
    wk.LABEL_INSTANCE_ENCRYPTION_IN_TRANSIT: "false",
}
# Karpenter's m5.large capacity (VM_MEMORY_OVERHEAD_PERCENT 0.075, 29 ENI-limited pods, 20Gi root volume) and
# allocatable (kube-reserved 70m / 255Mi + 11Mi per pod / 1Gi, eviction 100Mi memory and 10% storage).
CAPACITY = {"cpu": "2", "memory": "7577Mi", "ephemeral-storage": "20Gi", "pods": "29"}
ALLOCATABLE = {"cpu": "1930m", "memory": "6903Mi", "ephemeral-storage": "17Gi", "pods": "29"}
SERVICE_CIDR, KUBE_DNS_IP = "10.0.0.0/24", "10.0.0.10"  # the local apiserver's --service-cluster-ip-range
NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's generateName alphabet


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, reason: str = "", generation: int = 1) -> dict[str, Any]:
    """A True condition as operatorpkg's status writes it (reason defaults to the type)."""
    return {
        "type": kind,
        "status": "True",
        "reason": reason or kind,
        "message": "",
        "lastTransitionTime": now_rfc3339(),
        "observedGeneration": generation,
    }


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


class Watcher:
    """A watch stream on one resource from a resourceVersion, keeping every event (type, object)."""

    def __init__(self, client: KubeClient, res: r.Resource, rv: str, namespace: str | None = None) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.task = asyncio.create_task(self._run(client, res, rv, namespace))

    async def _run(self, client: KubeClient, res: r.Resource, rv: str, namespace: str | None) -> None:
        query = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "false", "timeoutSeconds": 1800}
        async for line in client.stream_lines(res.path(namespace), query, read_timeout=1800):
            event = json.loads(line)
            self.events.append((event["type"], event["object"]))

    def check(self) -> None:
        """Fail when the stream ended (a gap would make the proof worthless)."""
        if self.task.done():
            raise AssertionError(f"watch ended early: {self.task.exception() if not self.task.cancelled() else ''!r}")

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ref: KarpenterRef) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ref = ref
        endpoint = cluster.aws_env["AWS_ENDPOINT_URL"]
        self.ec2 = aws_client("ec2", endpoint)
        self.ssm = aws_client("ssm", endpoint)
        self.iam = aws_client("iam", endpoint)

    async def claims(self) -> list[dict[str, Any]]:
        query = {"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"}
        return (await self.client.list(r.NODECLAIMS, query=query))[0]

    async def pods(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={APP}"}))[0]

    async def running_on(self, nodes: set[str]) -> bool:
        """All replicas Running, none terminating, each on one of ``nodes``."""
        pods = [p for p in await self.pods() if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == REPLICAS and all(
            p["status"].get("phase") == "Running" and p["spec"].get("nodeName") in nodes for p in pods
        )


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    if not go_available():
        pytest.skip("no Go toolchain on PATH: the Karpenter v1.15 reference (e2e/karpenter_ref) is built from Go")
    ref = KarpenterRef(await asyncio.to_thread(ensure_binary))
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    karpy = await karpy_process(
        client,
        c.server,
        c.cluster_name,
        tmp_path_factory.mktemp("karpy-switchover"),
        c.aws_env,
        CLUSTER_CA_BUNDLE=CA_BUNDLE,
        DISRUPTION_POLL_INTERVAL="2s",
    )
    e = Env(local_cluster, client, karpy, ref)
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    """Delete the workload, NodePool, NodeClaims and EC2NodeClass; karpy (if started) releases finalizers."""
    with contextlib.suppress(ApiError):
        await env.client.delete(r.DEPLOYMENTS, APP, "default")
    with contextlib.suppress(ApiError):
        await env.client.delete(r.NODEPOOLS, POOL)
    for claim in await env.claims():
        with contextlib.suppress(ApiError):
            await env.client.delete(r.NODECLAIMS, claim["metadata"]["name"])
    if env.karpy.alive:
        await wait_for(lambda: _none(env.claims), timeout=120, what="switchover NodeClaims gone", interval=1)
    else:  # the test failed before karpy took over: play Karpenter's termination, roughly
        for claim in await env.claims():
            node = (claim.get("status") or {}).get("nodeName")
            for res, name in ((r.NODES, node), (r.NODECLAIMS, claim["metadata"]["name"])):
                if name:
                    with contextlib.suppress(ApiError):
                        await env.client.merge_patch(res, name, {"metadata": {"finalizers": None}})
                        await env.client.delete(res, name)
        tag = [{"Name": f"tag:{wk.TAG_NODEPOOL}", "Values": [POOL]}]
        ids = [
            i["InstanceId"] for res in env.ec2.describe_instances(Filters=tag)["Reservations"] for i in res["Instances"]
        ]
        if ids:
            env.ec2.terminate_instances(InstanceIds=ids)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.EC2NODECLASSES, CLASS)


async def _none(lister: Any) -> bool:
    return not await lister()


# --- Playing Karpenter v1.15 -------------------------------------------------------------------------------------


async def karpenter_hashes(env: Env) -> tuple[dict[str, str], dict[str, str]]:
    """The hash annotations Karpenter's hash controllers write for the stored NodePool and EC2NodeClass."""
    pool = await env.client.get(r.NODEPOOLS, POOL)
    nclass = await env.client.get(r.EC2NODECLASSES, CLASS)
    hashed = await asyncio.to_thread(env.ref.hashes, [pool, nclass], CA_BUNDLE)
    by_kind = {h.kind: h.annotations for h in hashed}
    return by_kind["NodePool"], by_kind["EC2NodeClass"]


def discovery(env: Env) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The subnets and security groups tagged ``karpenter.sh/discovery=<cluster>``."""
    tag = [{"Name": "tag:karpenter.sh/discovery", "Values": [env.cluster.cluster_name]}]
    return env.ec2.describe_subnets(Filters=tag)["Subnets"], env.ec2.describe_security_groups(Filters=tag)[
        "SecurityGroups"
    ]


async def k8s_version(client: KubeClient) -> str:
    info = await client.request("GET", "/version")
    return f"{info['major']}.{str(info['minor']).rstrip('+')}"


async def nodeclass_status(env: Env) -> dict[str, Any]:
    """The status Karpenter's nodeclass controller writes: discovered subnets and security groups, the AMIs of
    ``al2023@latest`` (the EKS SSM parameters), the instance profile it created (named ``<cluster>_<hash>``)."""
    subnets, groups = discovery(env)
    version = await k8s_version(env.client)
    amis = []
    for arch, label in (("x86_64", "amd64"), ("arm64", "arm64")):
        path = f"/aws/service/eks/optimized-ami/{version}/amazon-linux-2023/{arch}/standard/recommended/image_id"
        image_id = env.ssm.get_parameter(Name=path)["Parameter"]["Value"]
        name = env.ec2.describe_images(ImageIds=[image_id])["Images"][0].get("Name", image_id)
        amis.append(
            {
                "id": image_id,
                "name": name,
                "requirements": [{"key": wk.LABEL_ARCH, "operator": "In", "values": [label]}],
            }
        )
    cluster = env.cluster.cluster_name
    profile = f"{cluster}_{random.getrandbits(63)}"
    env.iam.create_instance_profile(
        InstanceProfileName=profile,
        Tags=[
            {"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"},
            {"Key": wk.TAG_NODECLASS, "Value": CLASS},
            {"Key": "topology.kubernetes.io/region", "Value": "us-east-1"},
            {"Key": wk.TAG_EKS_CLUSTER_NAME, "Value": cluster},
        ],
    )
    env.iam.add_role_to_instance_profile(InstanceProfileName=profile, RoleName=f"KarpenterNodeRole-{cluster}")
    ready = [
        condition(t)
        for t in (
            wk.COND_AMIS_READY,
            wk.COND_SUBNETS_READY,
            wk.COND_SECURITY_GROUPS_READY,
            wk.COND_INSTANCE_PROFILE_READY,
            wk.COND_VALIDATION_SUCCEEDED,
            wk.COND_READY,
        )
    ]
    return {
        "subnets": [
            {"id": s["SubnetId"], "zone": s["AvailabilityZone"], "zoneID": s.get("AvailabilityZoneId", "")}
            for s in subnets
        ],
        "securityGroups": [{"id": g["GroupId"], "name": g["GroupName"]} for g in groups],
        "amis": amis,
        "instanceProfile": profile,
        "conditions": ready,
    }


def nodeclaim_name() -> str:
    return f"{POOL}-" + "".join(random.choice(NAME_CHARS) for _ in range(5))


def nodeclaim(pool: dict[str, Any], nodepool_notes: dict[str, str]) -> dict[str, Any]:
    """A NodeClaim as Karpenter's provisioner creates it from ``pool`` (``NewNodeClaimTemplate`` + ``ToNodeClaim``)."""
    template = pool["spec"]["template"]
    template_labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels = {**template_labels, wk.LABEL_NODEPOOL: POOL, wk.LABEL_EC2NODECLASS: CLASS}
    requirements = [
        *template["spec"]["requirements"],
        *({"key": k, "operator": "In", "values": [v]} for k, v in labels.items()),
    ]
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": nodeclaim_name(),
            "labels": labels,
            "annotations": dict(nodepool_notes),
            "ownerReferences": [
                {
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodePool",
                    "name": POOL,
                    "uid": pool["metadata"]["uid"],
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": [wk.FINALIZER_TERMINATION],
        },
        "spec": {
            "taints": template["spec"].get("taints") or [],
            "requirements": requirements,
            "nodeClassRef": template["spec"]["nodeClassRef"],
            "expireAfter": template["spec"].get("expireAfter", "720h"),
            "resources": {"requests": {"cpu": "500m", "memory": "256Mi", "pods": "1"}},
        },
    }


async def launch(env: Env, claim: dict[str, Any], nclass: dict[str, Any], class_notes: dict[str, str]) -> str:
    """Karpenter's launch of ``claim``: the instance (launch tags, rendered user data, the NodeClass's subnet and
    security groups, the amd64 AMI) and the NodeClaim updated as ``PopulateNodeClaimDetails`` leaves it.
    Returns the instance id."""
    cluster = env.cluster.cluster_name
    status = nclass["status"]
    subnet = status["subnets"][0]
    image = next(a["id"] for a in status["amis"] if a["requirements"][0]["values"] == ["amd64"])
    _, user_data = await asyncio.to_thread(
        env.ref.userdata,
        nclass,
        claim,
        cluster_name=cluster,
        cluster_endpoint=env.cluster.server,
        ca_bundle=CA_BUNDLE,
        cluster_cidr=SERVICE_CIDR,
        kube_dns_ip=KUBE_DNS_IP,
        max_pods=int(CAPACITY["pods"]),
    )
    tags = {
        **(nclass["spec"].get("tags") or {}),
        f"kubernetes.io/cluster/{cluster}": "owned",
        wk.TAG_NODEPOOL: POOL,
        wk.TAG_EKS_CLUSTER_NAME: cluster,
        wk.TAG_NODECLASS: CLASS,
    }
    tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
    out = env.ec2.run_instances(
        ImageId=image,
        InstanceType=INSTANCE_TYPE,
        MinCount=1,
        MaxCount=1,
        SubnetId=subnet["id"],
        SecurityGroupIds=[g["id"] for g in status["securityGroups"]],
        IamInstanceProfile={"Name": status["instanceProfile"]},
        UserData=user_data,
        TagSpecifications=[{"ResourceType": t, "Tags": tag_list} for t in ("instance", "volume")],
    )
    instance_id = str(out["Instances"][0]["InstanceId"])
    name = claim["metadata"]["name"]
    labels = {
        **M5_LARGE_LABELS,
        wk.LABEL_ZONE: subnet["zone"],
        wk.LABEL_CAPACITY_TYPE: "on-demand",
        wk.LABEL_INSTANCE_TENANCY: "default",
        **({wk.LABEL_ZONE_ID: subnet["zoneID"]} if subnet.get("zoneID") else {}),
        **claim["metadata"]["labels"],
    }
    notes = {**class_notes, wk.ANNOTATION_INSTANCE_PROFILE: status["instanceProfile"]}
    await env.client.merge_patch(r.NODECLAIMS, name, {"metadata": {"labels": labels, "annotations": notes}})
    await env.client.merge_patch(
        r.NODECLAIMS,
        name,
        {
            "status": {
                "providerID": f"aws:///{subnet['zone']}/{instance_id}",
                "imageID": image,
                "capacity": CAPACITY,
                "allocatable": ALLOCATABLE,
                "conditions": [condition(wk.COND_LAUNCHED)],
            }
        },
        subresource="status",
    )
    return instance_id


async def register_and_initialize(env: Env, name: str, instance_id: str) -> str:
    """Karpenter's registration, initialization and tagging of NodeClaim ``name`` once the node agent (kubelet)
    registered the instance's Node; returns the Node's name."""

    async def registered_node() -> dict[str, Any] | None:
        nodes = (await env.client.list(r.NODES))[0]
        mine = [n for n in nodes if (n.get("spec") or {}).get("providerID", "").endswith(f"/{instance_id}")]
        ready = [n for n in mine if conditions_of(n).get("Ready", {}).get("status") == "True"]
        return ready[0] if ready else None

    node = await wait_for(registered_node, timeout=60, what=f"the Node of {instance_id} Ready", interval=0.5)
    assert node is not None
    claim = await env.client.get(r.NODECLAIMS, name)
    node_name = str(node["metadata"]["name"])
    taints = [t for t in node["spec"].get("taints") or [] if t["key"] != wk.TAINT_UNREGISTERED_KEY]
    for t in claim["spec"].get("taints") or []:
        if not any(have["key"] == t["key"] and have["effect"] == t["effect"] for have in taints):
            taints.append(t)
    meta = node["metadata"]
    await env.client.request(
        "PATCH",
        r.NODES.path(None, node_name),
        body=[
            {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
            {"op": "replace", "path": "/spec/taints", "value": taints},
            {
                "op": "add",
                "path": "/metadata/finalizers",
                "value": [*meta.get("finalizers", []), "karpenter.sh/termination"],
            },
            {
                "op": "add",
                "path": "/metadata/ownerReferences",
                "value": [
                    {
                        "apiVersion": "karpenter.sh/v1",
                        "kind": "NodeClaim",
                        "name": name,
                        "uid": claim["metadata"]["uid"],
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            {
                "op": "add",
                "path": "/metadata/labels",
                "value": {**meta["labels"], **claim["metadata"]["labels"], wk.LABEL_REGISTERED: "true"},
            },
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": {**meta.get("annotations", {}), **claim["metadata"]["annotations"]},
            },
        ],
        content_type="application/json-patch+json",
    )
    await env.client.merge_patch(
        r.NODECLAIMS,
        name,
        {
            "status": {
                "nodeName": node_name,
                "conditions": [*claim["status"]["conditions"], condition(wk.COND_REGISTERED)],
            }
        },
        subresource="status",
    )
    await env.client.merge_patch(r.NODES, node_name, {"metadata": {"labels": {wk.LABEL_INITIALIZED: "true"}}})
    claim = await env.client.get(r.NODECLAIMS, name)
    done = [*claim["status"]["conditions"], condition(wk.COND_INITIALIZED), condition(wk.COND_READY)]
    await env.client.merge_patch(r.NODECLAIMS, name, {"status": {"conditions": done}}, subresource="status")
    # AWS pkg/controllers/nodeclaim/tagging: Name and karpenter.sh/nodeclaim once the Node's name is known.
    env.ec2.create_tags(
        Resources=[instance_id],
        Tags=[
            {"Key": wk.TAG_NAME, "Value": node_name},
            {"Key": wk.TAG_NODECLAIM, "Value": name},
            {"Key": wk.TAG_EKS_CLUSTER_NAME, "Value": env.cluster.cluster_name},
        ],
    )
    tagged = {wk.ANNOTATION_TAGGED: "true", "compatibility.karpenter.k8s.aws/cluster-name-tagged": "true"}
    await env.client.merge_patch(r.NODECLAIMS, name, {"metadata": {"annotations": tagged}})
    return node_name


def workload() -> dict[str, Any]:
    """One pod per node (hostname anti-affinity), tolerating the NodePool's taint, on its nodes only."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
                    "tolerations": [{**TAINT, "operator": "Equal"}],
                    "affinity": {
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {"labelSelector": {"matchLabels": {"app": APP}}, "topologyKey": wk.LABEL_HOSTNAME}
                            ]
                        }
                    },
                    "containers": [
                        {
                            "name": "app",
                            "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
                        }
                    ],
                },
            },
        },
    }


async def karpenter_left_cluster(env: Env) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Build what Karpenter v1.15 leaves (module docstring, step 1); returns (NodePool hash annotations,
    EC2NodeClass hash annotations, NodeClaim name → Node name)."""
    pool_manifest = nodepool(
        POOL,
        nodeclass=CLASS,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": [INSTANCE_TYPE]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ],
        taints=[TAINT],
        labels={"team": "switchover"},
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "20s", "budgets": [{"nodes": "1"}]},
    )
    await apply(env.client, [ec2nodeclass(CLASS, env.cluster.cluster_name), pool_manifest])
    pool_notes, class_notes = await karpenter_hashes(env)
    await env.client.merge_patch(r.EC2NODECLASSES, CLASS, {"metadata": {"annotations": class_notes}})
    await env.client.merge_patch(r.NODEPOOLS, POOL, {"metadata": {"annotations": pool_notes}})
    status = await nodeclass_status(env)
    nclass = await env.client.merge_patch(r.EC2NODECLASSES, CLASS, {"status": status}, subresource="status")
    pool_conditions = [condition(t) for t in (wk.COND_VALIDATION_SUCCEEDED, wk.COND_NODECLASS_READY, wk.COND_READY)]
    pool = await env.client.merge_patch(
        r.NODEPOOLS, POOL, {"status": {"conditions": pool_conditions}}, subresource="status"
    )
    nodes: dict[str, str] = {}
    for _ in range(REPLICAS):
        claim = await env.client.create(r.NODECLAIMS, nodeclaim(pool, pool_notes))
        name = claim["metadata"]["name"]
        instance_id = await launch(env, claim, nclass, class_notes)
        nodes[name] = await register_and_initialize(env, name, instance_id)
    total = {"cpu": "4", "memory": "15154Mi", "ephemeral-storage": "40Gi", "pods": "58", "nodes": str(REPLICAS)}
    await env.client.merge_patch(
        r.NODEPOOLS, POOL, {"status": {"resources": total, "nodes": REPLICAS}}, subresource="status"
    )
    await apply(env.client, [workload()])
    await wait_for(
        lambda: env.running_on(set(nodes.values())), timeout=90, what="pods Running on Karpenter's nodes", interval=1
    )
    return pool_notes, class_notes, nodes


# --- The test ------------------------------------------------------------------------------------------------------


def drifted(obj: dict[str, Any]) -> bool:
    return conditions_of(obj).get(wk.COND_DRIFTED, {}).get("status") == "True"


async def metric_values(env: Env, name: str, **labels: str) -> list[float]:
    """Every sample of ``name`` in karpy's /metrics whose labels include ``labels``."""
    samples = await scrape_metrics(env.karpy.metrics_port)
    return [
        v for (n, ls), v in samples.items() if n == name and all(dict(ls).get(k) == want for k, want in labels.items())
    ]


async def test_karpy_adopts_karpenters_nodes_then_drifts_them_on_a_real_change(env: Env) -> None:
    pool_notes, class_notes, nodes = await karpenter_left_cluster(env)
    claims_before = {c["metadata"]["name"]: c for c in await env.claims()}
    assert set(claims_before) == set(nodes)
    for c in claims_before.values():
        notes = c["metadata"]["annotations"]
        assert notes[wk.ANNOTATION_NODEPOOL_HASH] == pool_notes[wk.ANNOTATION_NODEPOOL_HASH]
        assert notes[wk.ANNOTATION_NODECLASS_HASH_VERSION] == class_notes[wk.ANNOTATION_NODECLASS_HASH_VERSION]
    pods_before = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in await env.pods()}

    # Step 2: karpy takes over; every NodeClaim, Node and Pod event of the window is recorded.
    _, claim_rv = await env.client.list(r.NODECLAIMS)
    _, node_rv = await env.client.list(r.NODES)
    _, pod_rv = await env.client.list(r.PODS, "default")
    watchers = {
        "NodeClaim": Watcher(env.client, r.NODECLAIMS, claim_rv),
        "Node": Watcher(env.client, r.NODES, node_rv),
        "Pod": Watcher(env.client, r.PODS, pod_rv, "default"),
    }
    started = time.monotonic()
    env.karpy.start()
    try:

        async def consolidatable_written() -> bool:
            claims = await env.claims()
            return len(claims) == REPLICAS and all(wk.COND_CONSOLIDATABLE in conditions_of(c) for c in claims)

        await wait_for(
            consolidatable_written, timeout=SWITCHOVER_WINDOW, what="karpy's Consolidatable on Karpenter's NodeClaims"
        )
        await asyncio.sleep(max(0.0, SWITCHOVER_WINDOW - (time.monotonic() - started)))
        for w in watchers.values():
            w.check()
        window = time.monotonic() - started
        assert env.karpy.alive, env.karpy.tail()
    finally:
        for w in watchers.values():
            await w.close()

    violations: list[str] = []
    for kind, w in watchers.items():
        for event, obj in w.events:
            meta = obj.get("metadata") or {}
            if kind == "Pod" and (meta.get("labels") or {}).get("app") != APP:
                continue
            if kind == "NodeClaim" and (meta.get("labels") or {}).get(wk.LABEL_NODEPOOL) != POOL:
                continue
            if kind == "Node" and meta.get("name") not in set(nodes.values()):
                continue
            if event == "DELETED" or meta.get("deletionTimestamp"):
                violations.append(f"{kind} {meta.get('name')} deleted ({event})")
            if kind == "NodeClaim" and (event == "ADDED" or drifted(obj)):
                violations.append(f"NodeClaim {meta.get('name')} {event}, drifted={drifted(obj)}")
            if kind == "Pod" and pods_before.get(meta.get("name", "")) != (obj.get("spec") or {}).get("nodeName"):
                violations.append(f"Pod {meta.get('name')} {event} on {(obj.get('spec') or {}).get('nodeName')}")
    assert not violations, violations
    claim_events = sum(1 for _, o in watchers["NodeClaim"].events if o["metadata"]["name"] in nodes)
    assert claim_events >= REPLICAS, "karpy's Consolidatable writes must be in the recorded NodeClaim stream"

    assert sum(await metric_values(env, "karpenter_nodeclaims_created_total")) == 0
    assert sum(await metric_values(env, "karpenter_voluntary_disruption_decisions_total")) == 0
    assert await metric_values(env, "karpenter_voluntary_disruption_eligible_nodes", reason=DRIFTED.lower()) == [0.0]
    evaluations = [line for line in env.karpy.logs() if line.get("message") == "disruption evaluation"]
    assert evaluations and all(line.get("command") is None for line in evaluations)
    assert max(line.get("candidates", 0) for line in evaluations) >= REPLICAS, "karpy evaluated Karpenter's nodes"
    stored_pool = await env.client.get(r.NODEPOOLS, POOL)
    stored_class = await env.client.get(r.EC2NODECLASSES, CLASS)
    for notes, stored in ((pool_notes, stored_pool), (class_notes, stored_class)):
        assert {k: stored["metadata"]["annotations"][k] for k in notes} == notes, "karpy kept Karpenter's hashes"
    for name, claim in {c["metadata"]["name"]: c for c in await env.claims()}.items():
        before = claims_before[name]["metadata"]["annotations"]
        assert {k: claim["metadata"]["annotations"].get(k) for k in (*pool_notes, *class_notes)} == {
            k: before.get(k) for k in (*pool_notes, *class_notes)
        }, f"{name} was re-stamped"
    record_figures(
        switchover_window_seconds=round(window, 1),
        switchover_disruption_evaluations=len(evaluations),
        switchover_watch_events={k: len(w.events) for k, w in watchers.items()},
    )

    # Step 3: a real NodePool change drifts them; they are replaced one at a time.
    changed = await env.client.merge_patch(
        r.NODEPOOLS, POOL, {"spec": {"template": {"metadata": {"labels": {"karpy-e2e/switched": "yes"}}}}}
    )
    new_hash = (await asyncio.to_thread(env.ref.hashes, [changed], CA_BUNDLE))[0].annotations
    assert new_hash[wk.ANNOTATION_NODEPOOL_HASH] != pool_notes[wk.ANNOTATION_NODEPOOL_HASH]
    _, claim_rv = await env.client.list(r.NODECLAIMS)
    stream = Watcher(env.client, r.NODECLAIMS, claim_rv)
    drift_started = time.monotonic()
    try:

        async def stamped() -> bool:
            notes = (await env.client.get(r.NODEPOOLS, POOL))["metadata"]["annotations"]
            return bool(notes.get(wk.ANNOTATION_NODEPOOL_HASH) == new_hash[wk.ANNOTATION_NODEPOOL_HASH])

        await wait_for(stamped, timeout=30, what="karpy to stamp the reference's hash of the changed NodePool")

        async def replaced() -> set[str] | None:
            claims = await env.claims()
            live = [c for c in claims if not c["metadata"].get("deletionTimestamp")]
            if any(c["metadata"]["name"] in nodes for c in claims) or len(live) != REPLICAS:
                return None
            if not all(conditions_of(c).get(wk.COND_INITIALIZED, {}).get("status") == "True" for c in live):
                return None
            new_nodes = {c["status"]["nodeName"] for c in live}
            return new_nodes if await env.running_on(new_nodes) else None

        await wait_for(replaced, timeout=300, what="Karpenter's drifted NodeClaims replaced", interval=1)
        stream.check()
    finally:
        await stream.close()
    drift_seconds = time.monotonic() - drift_started

    reasons: dict[str, str] = {}
    deleting: set[str] = set()
    most_deleting = 0
    for event, obj in stream.events:
        name = obj["metadata"]["name"]
        if name in nodes and drifted(obj):
            reasons[name] = conditions_of(obj)[wk.COND_DRIFTED]["reason"]
        if name in nodes and event == "DELETED":
            deleting.discard(name)
        elif name in nodes and obj["metadata"].get("deletionTimestamp"):
            deleting.add(name)
            most_deleting = max(most_deleting, len(deleting))
    assert reasons == dict.fromkeys(nodes, "NodePoolDrifted")
    assert most_deleting == 1, f"budget nodes: 1, but {most_deleting} of Karpenter's NodeClaims were disrupted at once"
    for claim in await env.claims():
        notes = claim["metadata"]["annotations"]
        assert claim["metadata"]["labels"].get("karpy-e2e/switched") == "yes"
        assert notes[wk.ANNOTATION_NODEPOOL_HASH] == new_hash[wk.ANNOTATION_NODEPOOL_HASH]
        assert notes[wk.ANNOTATION_NODECLASS_HASH] == class_notes[wk.ANNOTATION_NODECLASS_HASH]
    decisions = await metric_values(env, "karpenter_voluntary_disruption_decisions_total", reason=DRIFTED.lower())
    assert sum(decisions) == REPLICAS
    record_figures(switchover_drift_replacement_seconds=round(drift_seconds, 1))
    print("switchover figures:", json.dumps({"window_s": round(window, 1), "drift_s": round(drift_seconds, 1)}))
