"""Scheduling constraints end to end on the local cluster (control plane + KWOK + moto), karpy as its own process.

The starred constraints of issue 3, each on its own NodePool (tainted ``karpy-e2e/scheduling=<pool>``, so only
this module's pods land there; every workload selects its pool with ``karpenter.sh/nodepool``). All workloads
are created at once (one karpy, one provisioning wave: the module-scoped ``provisioned`` fixture, which every
test requests, so any one of them runs alone or in any order), then each constraint is checked on what karpy
launched:

- GPU: pods with ``nvidia.com/gpu`` limits on a GPU NodePool (``instance-category In [g, p]``, tainted
  ``nvidia.com/gpu``) land on GPU instance types in moto, whose Nodes (registered by the node agent from the
  instance type) advertise ``nvidia.com/gpu`` capacity; the pods run. The GPU EC2NodeClass selects the seeded
  AL2023 AMI by id: the ``al2023@latest`` alias resolves only the standard variant in moto (no nvidia AMI is
  published there), which Karpenter's AMI requirements keep off GPU instance types.
- pod anti-affinity on ``kubernetes.io/hostname``: 3 pods → 3 nodes;
- topology spread over zones (maxSkew 1, DoNotSchedule): 6 pods → 2 per zone over us-east-1a/b/c;
- volume topology: a bound zonal PV (``local``, node affinity zone us-east-1b, pre-bound PVC) puts its pod's
  node in us-east-1b; a WaitForFirstConsumer StorageClass whose allowedTopologies allow only us-east-1c puts the
  node of its pod in us-east-1c. No CSI driver exists, so that PVC stays Pending: what is asserted is the
  NodeClaim's zone requirement and the launched Node's zone label (and, if the pod got bound, that it is bound
  to that node); the pod's Running state is not, as a real kubelet would wait for the volume forever. A pod
  whose PVC does not exist gets no NodeClaim and a ``FailedScheduling`` Warning from karpy naming the PVC.
- DaemonSet overhead honouring the DaemonSets' own selectors and tolerations: a DaemonSet requesting 2 CPUs that
  selects only NodePool ``sched-ds`` and tolerates its taint makes karpy launch a 4-vCPU instance for a 1-CPU
  pod there, while the same pod on twin NodePool ``sched-nods`` gets a 2-vCPU instance; a 4-CPU DaemonSet
  selecting both pools but not tolerating their taint adds nothing to either NodeClaim.
- DaemonSet overhead from the live DaemonSet pod (Karpenter ``getDaemonSetPods``): a DaemonSet whose template
  requests nothing runs in a namespace whose LimitRange gives every container 2 CPUs by default. Once its pod
  exists (on the ``sched-nods`` node), a 1-CPU pod on a new NodePool the DaemonSet also runs on gets a NodeClaim
  requesting 3 CPUs and a 4-vCPU instance, where the template alone would have asked for 1 CPU and 2 vCPUs.
- DaemonSet host ports per instance type (Karpenter's DaemonSet overhead groups): on a NodePool offering
  c6g (arm64) and c6i (amd64) types, a DaemonSet that runs on arm64 nodes only holds hostPort 9100 there; a pod
  wanting hostPort 9100 gets a NodeClaim of amd64 types only (instead of none, as when the port was reserved
  for the whole NodePool), while a pod without the port keeps the cheaper arm64 types.

Everything made here is deleted at module end, and its NodeClaims, Nodes and instances are waited for.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    aws_client,
    condition_ready,
    deployment,
    ec2nodeclass,
    karpy_process,
    record_figures,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.apis.quantity import parse_resource_list
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
TAINT_KEY = "karpy-e2e/scheduling"
GROUP_LABEL = "karpy-e2e/scheduling-group"
GPU, ANTI, SPREAD, VOL, DS, NODS = "sched-gpu", "sched-anti", "sched-spread", "sched-vol", "sched-ds", "sched-nods"
POOLS = (GPU, ANTI, SPREAD, VOL, DS, NODS)
NODECLASSES = ("sched", "sched-gpu")
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
DAEMONSETS = ("sched-ds-big", "sched-ds-intolerant")
VOLUME_PODS = ("sched-pv-pod", "sched-wffc-pod", "sched-nopvc-pod")
# app label → replicas, NodePool
DEPLOYMENTS = {
    "sched-gpu": (2, GPU),
    "sched-anti": (3, ANTI),
    "sched-spread": (6, SPREAD),
    "sched-ds-app": (1, DS),
    "sched-nods-app": (1, NODS),
}
FIGURES: dict[str, Any] = {}
# The live-DaemonSet-pod scenario: its own NodePool, namespace (with a LimitRange), DaemonSet and app.
LR, LR_NAMESPACE, LR_DAEMONSET, LR_APP = "sched-lr", "sched-lr", "sched-ds-lr", "sched-lr-app"
LIMITRANGES = r.Resource("", "v1", "limitranges", "LimitRange", True)
# The DaemonSet-host-port scenario: a NodePool with arm64 and amd64 types, an arm64-only DaemonSet on port 9100.
PORT, PORT_DAEMONSET, PORT_APP, FREE_APP = "sched-port", "sched-ds-port", "sched-port-app", "sched-port-free"


def record(**values: Any) -> None:
    """Keep this module's figures and merge them into .e2e-run/phases.json."""
    FIGURES.update(values)
    record_figures(**values)
    print("scheduling figures:", json.dumps(values))


# --- manifests ------------------------------------------------------------------------------------------------


def nodepool(name: str, nodeclass_name: str, requirements: list[dict[str, Any]], **template: Any) -> dict[str, Any]:
    taints = [{"key": TAINT_KEY, "value": name, "effect": "NoSchedule"}, *template.pop("extra_taints", [])]
    return shared_nodepool(
        name,
        nodeclass=nodeclass_name,
        labels=template.pop("labels", {}),
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            *requirements,
        ],
        taints=taints,
        # Never consolidated while the module runs: the nodes must stay what karpy first launched.
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    )


GENERAL = [
    {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
    {"key": wk.LABEL_INSTANCE_GENERATION, "operator": "Gt", "values": ["4"]},
]
# The DaemonSet pools: 2, 4 or 8 vCPUs, compute optimised (the cheapest 2-vCPU type fits a 1-CPU pod alone).
SIZED = [
    {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c"]},
    {"key": wk.LABEL_INSTANCE_GENERATION, "operator": "Gt", "values": ["4"]},
    {"key": wk.LABEL_INSTANCE_CPU, "operator": "In", "values": ["2", "4", "8"]},
]


def pod_spec(pool: str, cpu: str = "250m", memory: str = "256Mi", **extra: Any) -> dict[str, Any]:
    limits = extra.pop("limits", None)
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = limits
    return {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: pool},
        "tolerations": [{"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}, *extra.pop("tolerate", [])],
        "containers": [
            {"name": "app", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7", "resources": resources}
        ],
        **extra,
    }


def workloads() -> list[dict[str, Any]]:
    gpu_toleration = {"key": wk.RESOURCE_NVIDIA_GPU, "operator": "Exists", "effect": "NoSchedule"}
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "sched-anti"}}, "topologyKey": wk.LABEL_HOSTNAME}
            ]
        }
    }
    # minDomains 3: kube-scheduler counts only zones that already have a node, karpy every zone the NodePool can
    # launch into. Without it, kube-scheduler may put the pods karpy planned for a zone whose node registers last
    # onto the nodes of the other zones before karpy's binder gets to them (the same race Karpenter users meet;
    # minDomains is the documented cure), and what the test would then measure is that race, not karpy.
    spread = [
        {
            "maxSkew": 1,
            "minDomains": 3,
            "topologyKey": wk.LABEL_ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "sched-spread"}},
        }
    ]
    return [
        deployment(
            "sched-gpu",
            2,
            pod_spec(GPU, "500m", "512Mi", limits={wk.RESOURCE_NVIDIA_GPU: "1"}, tolerate=[gpu_toleration]),
        ),
        deployment("sched-anti", 3, pod_spec(ANTI, affinity=anti)),
        deployment("sched-spread", 6, pod_spec(SPREAD, topologySpreadConstraints=spread)),
        deployment("sched-ds-app", 1, pod_spec(DS, "1", "1Gi")),
        deployment("sched-nods-app", 1, pod_spec(NODS, "1", "1Gi")),
    ]


def daemonsets() -> list[dict[str, Any]]:
    def ds(name: str, cpu: str, node_selector: dict[str, str], tolerations: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "terminationGracePeriodSeconds": 0,
                        "nodeSelector": node_selector,
                        "tolerations": tolerations,
                        "containers": [
                            {
                                "name": "agent",
                                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                                "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
                            }
                        ],
                    },
                },
            },
        }

    tolerate = [{"key": TAINT_KEY, "operator": "Equal", "value": DS, "effect": "NoSchedule"}]
    return [
        ds("sched-ds-big", "2", {wk.LABEL_NODEPOOL: DS}, tolerate),
        ds("sched-ds-intolerant", "4", {GROUP_LABEL: "ds"}, []),
    ]


def volume_objects() -> list[tuple[r.Resource, dict[str, Any]]]:
    zone_b = {"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1b"]}
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "sched-pv-b"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "sched-static",
            "local": {"path": "/mnt/sched"},
            "claimRef": {"namespace": "default", "name": "sched-pvc-b"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [zone_b]}]}},
        },
    }
    wffc = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "sched-wffc"},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": wk.LABEL_ZONE, "values": ["us-east-1c"]}]}],
    }

    def claim(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec},
        }

    def volume_pod(name: str, claim_name: str) -> dict[str, Any]:
        spec = pod_spec(VOL, volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}])
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
            "spec": spec,
        }

    return [
        (r.PERSISTENTVOLUMES, pv),
        (r.PERSISTENTVOLUMECLAIMS, claim("sched-pvc-b", storageClassName="sched-static", volumeName="sched-pv-b")),
        (r.STORAGECLASSES, wffc),
        (r.PERSISTENTVOLUMECLAIMS, claim("sched-pvc-wffc", storageClassName="sched-wffc")),
        (r.PODS, volume_pod("sched-pv-pod", "sched-pvc-b")),
        (r.PODS, volume_pod("sched-wffc-pod", "sched-pvc-wffc")),
        (r.PODS, volume_pod("sched-nopvc-pod", "sched-missing")),
    ]


# --- environment ------------------------------------------------------------------------------------------------


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ec2: Any) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2

    async def claims(self, pool: str) -> list[dict[str, Any]]:
        return (await self.client.list(r.NODECLAIMS, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={pool}"}))[0]

    async def nodes(self, pool: str) -> dict[str, dict[str, Any]]:
        items = (await self.client.list(r.NODES, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={pool}"}))[0]
        return {n["metadata"]["name"]: n for n in items}

    async def pods(self, app: str) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={app}"}))[0]

    async def running(self, app: str, n: int) -> bool:
        pods = [p for p in await self.pods(app) if not p["metadata"].get("deletionTimestamp")]
        return len(pods) == n and all(p["status"].get("phase") == "Running" for p in pods)

    async def node_of(self, pod: dict[str, Any]) -> dict[str, Any]:
        return await self.client.get(r.NODES, pod["spec"]["nodeName"])

    def instance_types(self, ids: list[str]) -> dict[str, str]:
        """Instance id → instance type, from moto."""
        out = {}
        for res in self.ec2.describe_instances(InstanceIds=ids)["Reservations"]:
            for inst in res["Instances"]:
                out[inst["InstanceId"]] = inst["InstanceType"]
        return out


def _standard_ami(ec2: Any) -> str:
    """The seeded AL2023 x86_64 AMI (the GPU EC2NodeClass selects it by id)."""
    images = ec2.describe_images(Owners=["self"])["Images"]
    [image] = [i for i in images if str(i.get("Name", "")).startswith("amazon-eks-node-al2023-x86_64-standard-")]
    return str(image["ImageId"])


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    work = tmp_path_factory.mktemp("karpy-scheduling")
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, work, c.aws_env, BATCH_MAX_DURATION="5s")
    ec2 = aws_client("ec2", c.aws_env["AWS_ENDPOINT_URL"])
    e = Env(local_cluster, client, karpy, ec2)
    karpy.start()
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    """Delete this module's workloads, volumes, NodePools and NodeClaims while karpy runs; wait for the nodes."""
    for app in (*DEPLOYMENTS, LR_APP, PORT_APP, FREE_APP):
        with contextlib.suppress(ApiError):
            await env.client.delete(r.DEPLOYMENTS, app, "default")
    for name in (*DAEMONSETS, PORT_DAEMONSET):
        with contextlib.suppress(ApiError):
            await env.client.delete(r.DAEMONSETS, name, "default")
    for res, name in ((r.DAEMONSETS, LR_DAEMONSET), (LIMITRANGES, "defaults")):
        with contextlib.suppress(ApiError):
            await env.client.delete(res, name, LR_NAMESPACE)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.NAMESPACES, LR_NAMESPACE)
    for name in VOLUME_PODS:
        with contextlib.suppress(ApiError):
            await env.client.delete(r.PODS, name, "default")
    for res, name in (
        (r.PERSISTENTVOLUMECLAIMS, "sched-pvc-b"),
        (r.PERSISTENTVOLUMECLAIMS, "sched-pvc-wffc"),
        (r.PERSISTENTVOLUMES, "sched-pv-b"),
        (r.STORAGECLASSES, "sched-wffc"),
    ):
        with contextlib.suppress(ApiError):
            await env.client.delete(res, name, "default" if res.namespaced else None)
    for name in (*POOLS, LR, PORT):
        with contextlib.suppress(ApiError):
            await env.client.delete(r.NODEPOOLS, name)
    for pool in (*POOLS, LR, PORT):
        for claim in await env.claims(pool):
            with contextlib.suppress(ApiError):
                await env.client.delete(r.NODECLAIMS, claim["metadata"]["name"])

    async def gone() -> bool:
        for pool in (*POOLS, LR, PORT):
            if await env.claims(pool) or await env.nodes(pool):
                return False
        return True

    await wait_for(gone, timeout=120, what="scheduling test nodeclaims and nodes gone", interval=1)
    for name in NODECLASSES:
        with contextlib.suppress(ApiError):
            await env.client.delete(r.EC2NODECLASSES, name)


# --- scenario ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def provisioned(env: Env) -> Env:
    """The provisioning wave every check below looks at, built once per module whichever test asks first:
    NodePools Ready, DaemonSets known, then every workload at once until all pods with bound volumes run."""
    cluster = env.cluster.cluster_name
    await apply(
        env.client,
        [
            ec2nodeclass("sched", cluster),
            ec2nodeclass("sched-gpu", cluster, amiSelectorTerms=[{"id": _standard_ami(env.ec2)}], amiFamily="AL2023"),
            nodepool(
                GPU,
                "sched-gpu",
                [{"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["g", "p"]}],
                extra_taints=[{"key": wk.RESOURCE_NVIDIA_GPU, "value": "true", "effect": "NoSchedule"}],
            ),
            nodepool(ANTI, "sched", GENERAL),
            nodepool(SPREAD, "sched", GENERAL),
            nodepool(VOL, "sched", GENERAL),
            nodepool(DS, "sched", SIZED, labels={GROUP_LABEL: "ds"}),
            nodepool(NODS, "sched", SIZED, labels={GROUP_LABEL: "ds"}),
        ],
    )
    for pool in POOLS:
        await wait_for(
            lambda p=pool: condition_ready(env.client, r.NODEPOOLS, p), timeout=60, what=f"NodePool {pool} Ready"
        )
    await apply(env.client, daemonsets())
    await wait_for(lambda: _karpy_synced(env), timeout=30, what="karpy's cluster state synced", interval=0.5)
    start = time.monotonic()
    await apply(env.client, workloads())
    for res, obj in volume_objects():
        await env.client.create(res, obj, "default" if res.namespaced else None)

    async def all_running() -> bool:
        for app, (replicas, _) in DEPLOYMENTS.items():
            if not await env.running(app, replicas):
                return False
        return await env.running("sched-pv-pod", 1)

    try:
        await wait_for(all_running, timeout=150, what="every workload Running", interval=1)
    finally:
        record(scheduling_all_running_s=round(time.monotonic() - start, 1))
    return env


async def test_01_all_workloads_provisioned(provisioned: Env) -> None:
    """NodePools Ready, DaemonSets known, then every workload at once: all pods with bound volumes Running
    (the ``provisioned`` fixture), karpy alive and its NodeClaim counters true."""
    env = provisioned
    assert env.karpy.alive
    await assert_nodeclaim_counters(env.client, env.karpy, [*POOLS, LR, PORT])


async def _karpy_synced(env: Env) -> bool:
    return any(line.get("message") == "cluster state synced" for line in env.karpy.logs())


async def test_02_gpu_pods_on_gpu_instances(provisioned: Env) -> None:
    """GPU pods run on g/p instances whose Nodes advertise nvidia.com/gpu capacity."""
    env = provisioned
    pods = await env.pods("sched-gpu")
    claims = await env.claims(GPU)
    assert claims
    ids = [c["status"]["providerID"].rsplit("/", 1)[-1] for c in claims]
    types = env.instance_types(ids)
    assert all(t.split(".")[0][0] in "gp" for t in types.values()), types
    on_node: Counter[str] = Counter(p["spec"]["nodeName"] for p in pods)
    for name, count in on_node.items():
        node = await env.client.get(r.NODES, name)
        labels = node["metadata"]["labels"]
        assert labels[wk.LABEL_NODEPOOL] == GPU
        assert labels[wk.LABEL_INSTANCE_CATEGORY] in ("g", "p")
        gpus = parse_resource_list(node["status"]["capacity"]).get(wk.RESOURCE_NVIDIA_GPU, 0)
        assert gpus >= count >= 1, f"{name}: {gpus} GPUs for {count} GPU pods"
        assert parse_resource_list(node["status"]["allocatable"]).get(wk.RESOURCE_NVIDIA_GPU, 0) >= count
    record(scheduling_gpu_instance_types=sorted(types.values()))


async def test_03_anti_affinity_one_pod_per_node(provisioned: Env) -> None:
    """Required anti-affinity on hostname: 3 pods on 3 distinct nodes, 3 NodeClaims."""
    env = provisioned
    pods = await env.pods("sched-anti")
    assert len({p["spec"]["nodeName"] for p in pods}) == 3
    assert len(await env.claims(ANTI)) == 3


async def test_04_topology_spread_over_three_zones(provisioned: Env) -> None:
    """maxSkew 1 over zones: karpy plans one NodeClaim per zone, and the 6 pods run 2 in each of us-east-1a/b/c
    (checked on the Nodes' zone labels)."""
    env = provisioned
    claim_zones = Counter(c["metadata"]["labels"][wk.LABEL_ZONE] for c in await env.claims(SPREAD))
    assert set(claim_zones) == set(ZONES), claim_zones
    pods = await env.pods("sched-spread")
    zones: Counter[str] = Counter()
    for p in pods:
        node = await env.node_of(p)
        zones[node["metadata"]["labels"][wk.LABEL_ZONE]] += 1
    assert set(zones) == set(ZONES), zones
    assert max(zones.values()) - min(zones.values()) <= 1, zones


async def test_05_bound_zonal_volume_pins_the_node(provisioned: Env) -> None:
    """The pod of the us-east-1b PV runs on a node karpy launched in us-east-1b."""
    env = provisioned
    [pod] = await env.pods("sched-pv-pod")
    node = await env.node_of(pod)
    assert node["metadata"]["labels"][wk.LABEL_NODEPOOL] == VOL
    assert node["metadata"]["labels"][wk.LABEL_ZONE] == "us-east-1b"

    async def claim_bound() -> bool:  # kube-controller-manager's PV controller binds the pre-bound pair
        pvc = await env.client.get(r.PERSISTENTVOLUMECLAIMS, "sched-pvc-b", "default")
        return bool(pvc["status"].get("phase") == "Bound")

    await wait_for(claim_bound, timeout=60, what="PVC sched-pvc-b Bound")


async def test_06_wait_for_first_consumer_class_zone(provisioned: Env) -> None:
    """The WaitForFirstConsumer class allows only us-east-1c: karpy's NodeClaim for that pod requires
    us-east-1c and its Node is there; the PVC stays Pending (no CSI driver provisions it)."""
    env = provisioned

    async def claim_for_wffc_pod() -> dict[str, Any] | None:
        for claim in await env.claims(VOL):
            planned = json.loads(claim["metadata"].get("annotations", {}).get(wk.ANNOTATION_PLANNED_PODS, "[]"))
            decision = json.loads(claim["metadata"].get("annotations", {}).get(wk.ANNOTATION_DECISION, "{}"))
            if "default/sched-wffc-pod" in planned + decision.get("podKeys", []):
                return claim
        return None

    claim = await wait_for(claim_for_wffc_pod, timeout=30, what="the NodeClaim planned for sched-wffc-pod")
    zone_req = [q for q in claim["spec"]["requirements"] if q["key"] == wk.LABEL_ZONE]
    assert zone_req and zone_req[0]["operator"] == "In" and zone_req[0]["values"] == ["us-east-1c"], zone_req

    async def node_of_claim() -> dict[str, Any] | None:
        name = (await env.client.get(r.NODECLAIMS, claim["metadata"]["name"])).get("status", {}).get("nodeName")
        return (await env.client.get(r.NODES, name)) if name else None

    node = await wait_for(node_of_claim, timeout=60, what="the node of the WaitForFirstConsumer NodeClaim")
    assert node["metadata"]["labels"][wk.LABEL_ZONE] == "us-east-1c"
    [pod] = await env.pods("sched-wffc-pod")
    assert pod["spec"].get("nodeName") in (None, node["metadata"]["name"])
    if pod["spec"].get("nodeName"):
        # kube-scheduler would wait in PreBind for the volume; only karpy's binder binds it before that.
        bound = {line.get("pod") for line in env.karpy.logs() if line.get("message") == "bound pod"}
        assert "default/sched-wffc-pod" in bound
    pvc = await env.client.get(r.PERSISTENTVOLUMECLAIMS, "sched-pvc-wffc", "default")
    assert pvc["status"]["phase"] == "Pending"


def _cpu(obj: dict[str, Any], *path: str) -> int:
    value: Any = obj
    for key in path:
        value = value[key]
    return parse_resource_list(value)["cpu"]


async def test_07_daemonset_overhead_by_selector_and_tolerations(provisioned: Env) -> None:
    """The 2-CPU DaemonSet selecting sched-ds and tolerating its taint is in that NodeClaim's requests and makes
    karpy launch 4 vCPUs for a 1-CPU pod; on twin pool sched-nods the same pod gets 2 vCPUs; the 4-CPU
    DaemonSet that does not tolerate the taint is counted nowhere."""
    env = provisioned
    [with_ds] = await env.claims(DS)
    [without] = await env.claims(NODS)
    requested_with = _cpu(with_ds, "spec", "resources", "requests")
    requested_without = _cpu(without, "spec", "resources", "requests")
    assert requested_with - requested_without == 2000, (requested_with, requested_without)
    assert requested_without < 4000, "the intolerant DaemonSet's 4 CPUs are not counted"
    node_with = await env.client.get(r.NODES, with_ds["status"]["nodeName"])
    node_without = await env.client.get(r.NODES, without["status"]["nodeName"])
    cpus = (_cpu(node_without, "status", "capacity"), _cpu(node_with, "status", "capacity"))
    assert cpus == (2000, 4000), cpus
    record(
        scheduling_daemonset_instance_types={
            DS: with_ds["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE],
            NODS: without["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE],
        }
    )

    async def big_agent_running() -> bool:
        pods = await env.pods("sched-ds-big")
        return len(pods) == 1 and pods[0]["status"].get("phase") == "Running"

    await wait_for(big_agent_running, timeout=60, what="the big DaemonSet's pod Running on the sched-ds node")
    assert not await env.pods("sched-ds-intolerant"), "the intolerant DaemonSet runs nowhere"


async def test_08_missing_claim_is_reported_not_provisioned(provisioned: Env) -> None:
    """A pod mounting a PVC that does not exist: no NodeClaim plans it, karpy's Warning names the claim."""
    env = provisioned

    async def karpy_warning() -> list[dict[str, Any]]:
        query = {"fieldSelector": "involvedObject.name=sched-nopvc-pod"}
        events = (await env.client.list(r.EVENTS, "default", query=query))[0]
        return [
            e
            for e in events
            if e["type"] == "Warning" and e["reason"] == "FailedScheduling" and e["source"].get("component") == "karpy"
        ]

    [event, *_] = await wait_for(karpy_warning, timeout=30, what="karpy's FailedScheduling event for sched-nopvc-pod")
    assert 'persistentvolumeclaim "default/sched-missing" not found' in event["message"], event["message"]
    planned = {
        key
        for pool in POOLS
        for claim in await env.claims(pool)
        for key in json.loads(claim["metadata"].get("annotations", {}).get(wk.ANNOTATION_PLANNED_PODS, "[]"))
    }
    assert "default/sched-nopvc-pod" not in planned
    [pod] = await env.pods("sched-nopvc-pod")
    assert not pod["spec"].get("nodeName")


async def test_09_daemonset_overhead_from_the_live_pod(provisioned: Env) -> None:
    """The DaemonSet's template requests nothing, but the LimitRange of its namespace makes its pods request 2
    CPUs: karpy sizes the new NodeClaim by the live pod (1-CPU app + 2 CPUs = 3 CPUs, a 4-vCPU instance), as
    Karpenter does, not by the template (1 CPU, 2 vCPUs). The DaemonSet's pod then runs beside the app."""
    env = provisioned
    await env.client.create(r.NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LR_NAMESPACE}})
    limits = {"type": "Container", "defaultRequest": {"cpu": "2", "memory": "128Mi"}}
    await env.client.create(
        LIMITRANGES,
        {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults"}, "spec": {"limits": [limits]}},
        LR_NAMESPACE,
    )
    # Runs on the sched-nods node (so a live pod exists before the new pool is used) and on sched-lr nodes.
    tolerate = [{"key": TAINT_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"} for pool in (NODS, LR)]
    template_spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {GROUP_LABEL: "ds"},
        "tolerations": tolerate,
        "containers": [{"name": "agent", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7"}],
    }
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": LR_DAEMONSET, "namespace": LR_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app": LR_DAEMONSET}},
            "template": {"metadata": {"labels": {"app": LR_DAEMONSET}}, "spec": template_spec},
        },
    }
    await env.client.create(r.DAEMONSETS, daemonset, LR_NAMESPACE)

    async def live_pod() -> dict[str, Any] | None:
        query = {"labelSelector": f"app={LR_DAEMONSET}"}
        pods = (await env.client.list(r.PODS, LR_NAMESPACE, query=query))[0]
        return pods[0] if pods else None

    pod = await wait_for(live_pod, timeout=60, what="the DaemonSet's first pod (on the sched-nods node)")
    assert _cpu(pod["spec"]["containers"][0], "resources", "requests") == 2000, "the LimitRange's default request"

    await apply(env.client, [nodepool(LR, "sched", SIZED, labels={GROUP_LABEL: "ds"})])
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, LR), timeout=60, what=f"NodePool {LR} Ready")
    await apply(env.client, [deployment(LR_APP, 1, pod_spec(LR, "1", "1Gi"))])

    async def launched() -> dict[str, Any] | None:
        claims = [c for c in await env.claims(LR) if (c.get("status") or {}).get("nodeName")]
        return claims[0] if claims else None

    claim = await wait_for(launched, timeout=90, what="the sched-lr NodeClaim launched and registered")
    assert len(await env.claims(LR)) == 1
    assert _cpu(claim, "spec", "resources", "requests") == 3000, claim["spec"]["resources"]
    node = await env.client.get(r.NODES, claim["status"]["nodeName"])
    assert _cpu(node, "status", "capacity") == 4000, node["metadata"]["labels"].get(wk.LABEL_INSTANCE_TYPE)
    record(scheduling_live_daemonset_instance_type=claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE])
    await wait_for(lambda: env.running(LR_APP, 1), timeout=60, what="the sched-lr app Running")

    async def agent_running_beside() -> bool:
        query = {"labelSelector": f"app={LR_DAEMONSET}", "fieldSelector": f"spec.nodeName={node['metadata']['name']}"}
        pods = (await env.client.list(r.PODS, LR_NAMESPACE, query=query))[0]
        return len(pods) == 1 and pods[0]["status"].get("phase") == "Running"

    await wait_for(agent_running_beside, timeout=60, what="the DaemonSet's pod Running on the sched-lr node")
    await assert_nodeclaim_counters(env.client, env.karpy, [*POOLS, LR, PORT])


def _planned_for(claims: list[dict[str, Any]], pod: dict[str, Any]) -> dict[str, Any] | None:
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    for claim in claims:
        annotations = claim["metadata"].get("annotations", {})
        planned = json.loads(annotations.get(wk.ANNOTATION_PLANNED_PODS, "[]"))
        decision = json.loads(annotations.get(wk.ANNOTATION_DECISION, "{}"))
        if key in planned + decision.get("podKeys", []):
            return claim
    return None


async def test_10_daemonset_host_ports_per_instance_type(provisioned: Env) -> None:
    """An arm64-only DaemonSet holding hostPort 9100 keeps a pod wanting 9100 off the arm64 types only: its
    NodeClaim lists amd64 (c6i) types, the pod without the port gets one that lists the cheaper arm64 (c6g)."""
    env = provisioned
    pool = nodepool(
        PORT,
        "sched",
        [
            {"key": wk.LABEL_INSTANCE_FAMILY, "operator": "In", "values": ["c6g", "c6i"]},
            {"key": wk.LABEL_INSTANCE_CPU, "operator": "In", "values": ["2"]},
        ],
    )
    requirements = pool["spec"]["template"]["spec"]["requirements"]
    for req in requirements:
        if req["key"] == wk.LABEL_ARCH:
            req["values"] = ["amd64", "arm64"]
    exporter = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": PORT_DAEMONSET, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": PORT_DAEMONSET}},
            "template": {
                "metadata": {"labels": {"app": PORT_DAEMONSET}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "nodeSelector": {wk.LABEL_ARCH: "arm64"},
                    "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": PORT, "effect": "NoSchedule"}],
                    "containers": [
                        {
                            "name": "exporter",
                            "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                            "ports": [{"containerPort": 9100, "hostPort": 9100}],
                        }
                    ],
                },
            },
        },
    }
    await apply(env.client, [pool, exporter])
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, PORT), timeout=60, what=f"NodePool {PORT} Ready")
    ported = pod_spec(PORT, "1500m", "1Gi")
    ported["containers"][0]["ports"] = [{"containerPort": 9100, "hostPort": 9100}]
    # 1.5 CPU each on 2-vCPU types: the two pods cannot share a node.
    await apply(env.client, [deployment(PORT_APP, 1, ported), deployment(FREE_APP, 1, pod_spec(PORT, "1500m", "1Gi"))])

    async def both_planned() -> tuple[dict[str, Any], dict[str, Any]] | None:
        claims = await env.claims(PORT)
        pods = {app: await env.pods(app) for app in (PORT_APP, FREE_APP)}
        if not all(pods.values()):
            return None
        with_port, without = _planned_for(claims, pods[PORT_APP][0]), _planned_for(claims, pods[FREE_APP][0])
        return (with_port, without) if with_port is not None and without is not None else None

    with_port, without = await wait_for(both_planned, timeout=60, what="NodeClaims planned for both sched-port pods")

    def types_of(claim: dict[str, Any]) -> list[str]:
        reqs = claim["spec"]["requirements"]
        return [v for q in reqs if q["key"] == wk.LABEL_INSTANCE_TYPE and q["operator"] == "In" for v in q["values"]]

    assert with_port["metadata"]["name"] != without["metadata"]["name"]
    ported_types, free_types = types_of(with_port), types_of(without)
    assert ported_types and all(t.startswith("c6i.") for t in ported_types), ported_types
    assert any(t.startswith("c6g.") for t in free_types), free_types
    archs = {
        t["InstanceType"]: t["ProcessorInfo"]["SupportedArchitectures"]
        for t in env.ec2.describe_instance_types(InstanceTypes=ported_types)["InstanceTypes"]
    }
    assert all("x86_64" in a for a in archs.values()), archs
    record(scheduling_host_port_instance_types={PORT_APP: ported_types, FREE_APP: free_types})
    await wait_for(lambda: env.running(PORT_APP, 1), timeout=90, what="the hostPort pod Running on an amd64 node")
    [pod] = await env.pods(PORT_APP)
    assert (await env.node_of(pod))["metadata"]["labels"][wk.LABEL_ARCH] == "amd64"
    await assert_nodeclaim_counters(env.client, env.karpy, [*POOLS, LR, PORT])
