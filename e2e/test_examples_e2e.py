"""Every example in ``manifests/examples/v1`` (our equivalents of Karpenter v1.15's ``examples/v1``) on one local
cluster, all applied at once and waited for once.

Per example (the tests are parametrized by the file's name, so the outcome reads as a table): the apiserver
accepts every document; its EC2NodeClass becomes Ready; each pod of its Deployments is bound to a Node of its
NodePool whose NodeClaim is Ready, launched from an AMI of the example's family (the image moto was seeded with
for that family: ``e2e/cluster/aws.py``) with the block device mappings and the user data format Karpenter v1.15
gives that family and example:

========================  ========================  ====================================================
family                    default block devices     user data
========================  ========================  ====================================================
AL2023                    /dev/xvda gp3 20Gi         MIME multi-part with a nodeadm ``NodeConfig``
AL2                       /dev/xvda gp3 20Gi         MIME multi-part running ``/etc/eks/bootstrap.sh``
Bottlerocket              (the example's own)        TOML ``[settings.kubernetes]``
Windows                   /dev/sda1 gp3 50Gi         ``<powershell>`` running ``Start-EKSBootstrap.ps1``
Custom                    (the example's own)        the NodeClass's ``userData``, unchanged
========================  ========================  ====================================================

``${CLUSTER_NAME}``, ``${CLUSTER_ENDPOINT}`` and ``${CLUSTER_CA_BUNDLE}`` are substituted as ``envsubst`` would.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from e2e.cluster.aws import CUSTOM_AMI_NAME
from e2e.helpers import ROOT, KarpyProcess, apply, aws_client, karpy_process, stop_karpy, wait_for
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
EXAMPLES_DIR = ROOT / "manifests" / "examples" / "v1"
EXAMPLES = sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))
K8S = "1.34"
WAIT = 100.0  # seconds for every example at once: EC2NodeClasses Ready, nodes launched, pods bound


@attrs.frozen
class Family:
    """What Karpenter v1.15 does for an AMI family: the seeded image names its AMIs start with, its default
    block devices ((device, type, GiB)) and a regular expression its rendered user data matches."""

    images: tuple[str, ...]
    block_devices: tuple[tuple[str, str, int], ...]
    user_data: str


AL2023 = Family(
    (f"amazon-eks-node-al2023-x86_64-standard-{K8S}-", f"amazon-eks-node-al2023-arm64-standard-{K8S}-"),
    (("/dev/xvda", "gp3", 20),),
    r"(?s)MIME-Version: 1\.0.*Content-Type: application/node\.eks\.aws.*kind: NodeConfig",
)
FAMILIES: dict[str, Family] = {
    "AL2023": AL2023,
    "AL2": Family(
        (f"amazon-eks-node-{K8S}-", f"amazon-eks-arm64-node-{K8S}-"),
        (("/dev/xvda", "gp3", 20),),
        r"(?s)MIME-Version: 1\.0.*/etc/eks/bootstrap\.sh '{cluster}'",
    ),
    "Bottlerocket": Family(
        (f"bottlerocket-aws-k8s-{K8S}-",),  # standard and nvidia, x86_64 and arm64
        (),
        r"(?s)\[settings\.kubernetes\].*cluster-name = '{cluster}'",
    ),
    "Windows2022": Family(
        (f"Windows_Server-2022-English-Core-EKS_Optimized-{K8S}-",),
        (("/dev/sda1", "gp3", 50),),
        r"(?s)<powershell>.*Start-EKSBootstrap\.ps1.*-EKSClusterName '{cluster}'",
    ),
    "Custom": Family((CUSTOM_AMI_NAME,), (), ""),
}


@attrs.frozen
class Example:
    """One example file: its documents, the family it selects, what its launch templates must carry beyond the
    family's ((device, type, GiB) block devices; extra user data patterns)."""

    name: str
    docs: list[dict[str, Any]]
    family: str = "AL2023"
    block_devices: tuple[tuple[str, str, int], ...] = ()
    user_data: tuple[str, ...] = ()

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    @property
    def pool(self) -> str:
        return str(self.of_kind("NodePool")[0]["metadata"]["name"])

    @property
    def nodeclass(self) -> str:
        return str(self.of_kind("EC2NodeClass")[0]["metadata"]["name"])


EXPECTED: dict[str, dict[str, Any]] = {
    "al2": {"family": "AL2", "user_data": (r"al2 example: running before bootstrap\.sh",)},
    "bottlerocket": {
        "family": "Bottlerocket",
        "block_devices": (("/dev/xvda", "gp3", 4), ("/dev/xvdb", "gp3", 40)),
        "user_data": (r"kube-api-qps = 30",),
    },
    "windows2022": {"family": "Windows2022"},
    "custom-ami": {"family": "Custom", "block_devices": (("/dev/xvda", "gp3", 30),)},
    "custom-userdata": {
        "user_data": (r"custom-userdata example", r"shutdownGracePeriod: 30s"),
    },
    "multiple-ebs": {
        "block_devices": (("/dev/xvda", "gp3", 50), ("/dev/xvdb", "gp3", 100), ("/dev/xvdc", "io2", 200)),
    },
    "instance-store": {"user_data": (r"(?s)localStorage:\s*\n\s*strategy: RAID0",)},
}


def substitute(text: str, values: Mapping[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("${" + key + "}", value)
    return text


def load_example(name: str, values: Mapping[str, str]) -> Example:
    """The example's documents, substituted, with its workloads scaled from 0 (as shipped) to one pod."""
    text = substitute((EXAMPLES_DIR / f"{name}.yaml").read_text(), values)
    docs = [d for d in yaml.safe_load_all(text) if d]
    for doc in docs:
        if doc["kind"] == "Deployment":
            doc["spec"]["replicas"] = 1
    return Example(name, docs, **EXPECTED.get(name, {}))


def ca_bundle(kubeconfig: Path) -> str:
    """The admin kubeconfig's CA (base64), or a placeholder when it has none."""
    config = yaml.safe_load(kubeconfig.read_text())
    cluster = (config.get("clusters") or [{}])[0].get("cluster") or {}
    data = cluster.get("certificate-authority-data")
    if not data and cluster.get("certificate-authority"):
        data = base64.b64encode(Path(cluster["certificate-authority"]).read_bytes()).decode()
    return str(data or base64.b64encode(b"placeholder").decode())


@attrs.define
class Outcome:
    """What one example reached by the end of the single wait."""

    rejected: list[str] = attrs.field(factory=list)  # "Kind/name: message" per refused document
    pods: list[dict[str, Any]] = attrs.field(factory=list)
    nodes: dict[str, dict[str, Any]] = attrs.field(factory=dict)  # pod name → its Node
    claims: dict[str, dict[str, Any]] = attrs.field(factory=dict)  # node name → its NodeClaim
    nodeclass: dict[str, Any] = attrs.field(factory=dict)


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess, ec2: Any) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy
        self.ec2 = ec2
        self.examples: dict[str, Example] = {}
        self.outcomes: dict[str, Outcome] = {}

    async def observe(self) -> bool:
        """Refresh every example's outcome; True when each accepted one has all its pods on Ready NodeClaims."""
        pods = (await self.client.list(r.PODS, "default"))[0]
        nodes = {n["metadata"]["name"]: n for n in (await self.client.list(r.NODES))[0]}
        claims = {
            c["status"]["nodeName"]: c
            for c in (await self.client.list(r.NODECLAIMS))[0]
            if (c.get("status") or {}).get("nodeName")
        }
        nodeclasses = {n["metadata"]["name"]: n for n in (await self.client.list(r.EC2NODECLASSES))[0]}
        done = True
        for name, example in self.examples.items():
            outcome = self.outcomes[name]
            apps = {d["metadata"]["name"] for d in example.of_kind("Deployment")}
            outcome.pods = [p for p in pods if (p["metadata"].get("labels") or {}).get("app") in apps]
            outcome.nodeclass = nodeclasses.get(example.nodeclass, {})
            outcome.nodes = {}
            outcome.claims = {}
            for pod in outcome.pods:
                node = nodes.get(pod["spec"].get("nodeName") or "")
                if node is not None:
                    outcome.nodes[pod["metadata"]["name"]] = node
                    if node["metadata"]["name"] in claims:
                        outcome.claims[node["metadata"]["name"]] = claims[node["metadata"]["name"]]
            if outcome.rejected:
                continue
            ready = len(outcome.pods) == len(apps) and all(
                is_true(outcome.claims.get(n["metadata"]["name"], {}), "Ready") for n in outcome.nodes.values()
            )
            done = done and ready and len(outcome.nodes) == len(outcome.pods)
        return done


def is_true(obj: Mapping[str, Any], condition: str) -> bool:
    return any(
        c.get("type") == condition and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    """karpy running; every example applied at once (a refused document is recorded, not raised) and one wait
    for all of them to settle (not raised either: each test asserts its own example)."""
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    c = local_cluster
    karpy = await karpy_process(client, c.server, c.cluster_name, tmp_path_factory.mktemp("karpy"), c.aws_env)
    karpy.start()
    env = Env(c, client, karpy, aws_client("ec2", c.aws_env["AWS_ENDPOINT_URL"]))
    values = {
        "CLUSTER_NAME": c.cluster_name,
        "CLUSTER_ENDPOINT": c.server,
        "CLUSTER_CA_BUNDLE": ca_bundle(Path(c.kubeconfig)),
    }
    try:
        for name in EXAMPLES:
            example = load_example(name, values)
            env.examples[name] = example
            env.outcomes[name] = outcome = Outcome()
            # NodeClasses first, so a NodePool never waits for its NodeClass to exist.
            for doc in sorted(example.docs, key=lambda d: d["kind"] != "EC2NodeClass"):
                try:
                    await apply(client, [doc])
                except ApiError as err:
                    outcome.rejected.append(f"{doc['kind']}/{doc['metadata']['name']}: {err}")
        try:
            await wait_for(env.observe, timeout=WAIT, what="every example's pods on Ready NodeClaims", interval=1)
        except AssertionError as err:
            print(err)
        yield env
    finally:

        async def cleanup() -> None:
            for example in env.examples.values():
                for doc in example.of_kind("Deployment"):
                    await _delete(client, r.DEPLOYMENTS, doc["metadata"]["name"], "default")
                for doc in example.of_kind("NodePool"):
                    await _delete(client, r.NODEPOOLS, doc["metadata"]["name"])
            await wait_for(lambda: _no_nodeclaims(client), timeout=60, what="every NodeClaim gone")

        await stop_karpy(karpy, client, cleanup())


async def _delete(client: KubeClient, res: r.Resource, name: str, namespace: str | None = None) -> None:
    try:
        await client.delete(res, name, namespace)
    except ApiError as err:
        if err.status != 404:
            raise


async def _no_nodeclaims(client: KubeClient) -> bool:
    return not (await client.list(r.NODECLAIMS))[0]


# --- the table: one test per example and column ----------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
async def test_accepted(env: Env, name: str) -> None:
    """Every document of the example is accepted by the apiserver (the v1.15 CRDs' schema and CEL rules)."""
    assert not env.outcomes[name].rejected, env.outcomes[name].rejected


@pytest.mark.parametrize("name", EXAMPLES)
async def test_nodeclass_ready(env: Env, name: str) -> None:
    """The EC2NodeClass resolves (subnets, security groups, the family's AMIs, instance profile): Ready."""
    outcome = env.outcomes[name]
    assert not outcome.rejected
    nodeclass = outcome.nodeclass
    assert is_true(nodeclass, "Ready"), (nodeclass.get("status") or {}).get("conditions")
    family = FAMILIES[env.examples[name].family]
    names = [str(a.get("name", "")) for a in nodeclass["status"]["amis"]]
    assert names and all(n.startswith(family.images) for n in names), names


@pytest.mark.parametrize("name", EXAMPLES)
async def test_workload_runs_on_the_familys_node(env: Env, name: str) -> None:
    """Every pod of the example's workload is bound to a Node of its NodePool whose NodeClaim is Ready, and the
    instance behind it runs the family's AMI with the expected block devices and user data."""
    example, outcome = env.examples[name], env.outcomes[name]
    assert not outcome.rejected
    apps = {d["metadata"]["name"] for d in example.of_kind("Deployment")}
    assert len(outcome.pods) == len(apps), [p["metadata"]["name"] for p in outcome.pods]
    family = FAMILIES[example.family]
    for pod in outcome.pods:
        node = outcome.nodes.get(pod["metadata"]["name"])
        assert node is not None, f"pod {pod['metadata']['name']} not bound: {pod.get('status', {}).get('conditions')}"
        assert node["metadata"]["labels"].get(wk.LABEL_NODEPOOL) == example.pool
        claim = outcome.claims.get(node["metadata"]["name"])
        assert claim is not None and is_true(claim, "Ready"), (claim or {}).get("status")
        for key, value in (pod["spec"].get("nodeSelector") or {}).items():
            assert node["metadata"]["labels"].get(key) == value, (key, node["metadata"]["labels"])
        check_instance(env, example, family, claim)


def check_instance(env: Env, example: Example, family: Family, claim: Mapping[str, Any]) -> None:
    """The instance of ``claim``: the family's AMI (one of its EC2NodeClass's status.amis), block devices and
    user data."""
    instance_id = claim["status"]["providerID"].rsplit("/", 1)[-1]
    [instance] = [
        i for res in env.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"] for i in res["Instances"]
    ]
    image_id = instance["ImageId"]
    assert image_id == claim["status"]["imageID"]
    assert image_id in {a["id"] for a in env.outcomes[example.name].nodeclass["status"]["amis"]}
    [image] = env.ec2.describe_images(ImageIds=[image_id])["Images"]
    assert image["Name"].startswith(family.images), image["Name"]
    template = launch_template_data(env.ec2, instance_id, image_id)
    assert template is not None, f"no launch template found for {instance_id}"
    devices = tuple(
        (m["DeviceName"], m["Ebs"].get("VolumeType"), m["Ebs"].get("VolumeSize"))
        for m in template.get("BlockDeviceMappings") or []
        if "Ebs" in m
    )
    assert devices == (example.block_devices or family.block_devices), devices
    user_data = base64.b64decode(template.get("UserData") or "").decode(errors="replace")
    spec_user_data = str(example.of_kind("EC2NodeClass")[0]["spec"].get("userData") or "")
    if example.family == "Custom":
        assert user_data == spec_user_data
    else:
        pattern = family.user_data.replace("{cluster}", re.escape(env.cluster.cluster_name))
        assert re.search(pattern, user_data), user_data
    for pattern in example.user_data:
        assert re.search(pattern, user_data), (pattern, user_data)


def launch_template_data(ec2: Any, instance_id: str, image_id: str) -> dict[str, Any] | None:
    """The LaunchTemplateData (of image ``image_id``) of the fleet that launched ``instance_id`` (karpy launches
    with CreateFleet, one launch template per AMI)."""
    for page in ec2.get_paginator("describe_fleets").paginate():
        for fleet in page.get("Fleets") or []:
            ids = {i for group in fleet.get("Instances") or [] for i in group.get("InstanceIds") or []}
            if instance_id not in ids:
                continue
            for config in fleet.get("LaunchTemplateConfigs") or []:
                spec = config.get("LaunchTemplateSpecification") or {}
                kwargs = {k: v for k, v in spec.items() if k in ("LaunchTemplateId", "LaunchTemplateName")}
                versions = ec2.describe_launch_template_versions(
                    **kwargs, Versions=[str(spec.get("Version") or "$Default")]
                )["LaunchTemplateVersions"]
                if versions and versions[0]["LaunchTemplateData"].get("ImageId") == image_id:
                    return dict(versions[0]["LaunchTemplateData"])
    return None
