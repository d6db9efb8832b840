"""What the e2e scenarios and the demo share: apply manifests, run karpy as a process, wait for conditions.

Manifests are applied with server-side apply (``kubectl apply --server-side`` semantics), through karpy's
own raw client, so the tests exercise exactly the objects a Karpenter user would apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import attrs
import yaml

from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
APPLY_PATCH = "application/apply-patch+yaml"

KINDS: dict[str, Resource] = {
    "Namespace": Resource("", "v1", "namespaces", "Namespace", False),
    "ServiceAccount": Resource("", "v1", "serviceaccounts", "ServiceAccount", True),
    "Service": Resource("", "v1", "services", "Service", True),
    "ConfigMap": Resource("", "v1", "configmaps", "ConfigMap", True),
    "Pod": Resource("", "v1", "pods", "Pod", True),
    "Deployment": Resource("apps", "v1", "deployments", "Deployment", True),
    "DaemonSet": Resource("apps", "v1", "daemonsets", "DaemonSet", True),
    "PodDisruptionBudget": Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True),
    "ClusterRole": Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False),
    "ClusterRoleBinding": Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
    ),
    "Role": Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", True),
    "RoleBinding": Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True),
    "CustomResourceDefinition": Resource(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
    ),
    "ValidatingAdmissionPolicy": Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", False
    ),
    "ValidatingAdmissionPolicyBinding": Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        False,
    ),
    "NodePool": Resource("karpenter.sh", "v1", "nodepools", "NodePool", False),
    "NodeClaim": Resource("karpenter.sh", "v1", "nodeclaims", "NodeClaim", False),
    "EC2NodeClass": Resource("karpenter.k8s.aws", "v1", "ec2nodeclasses", "EC2NodeClass", False),
}


def load_documents(*paths: str | Path) -> list[dict[str, Any]]:
    """Every YAML document in ``paths`` (files or directories, sorted), skipping empty ones and kustomizations."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        p = Path(path)
        files = sorted(p.glob("*.yaml")) if p.is_dir() else [p]
        for f in files:
            if f.name == "kustomization.yaml":
                continue
            docs.extend(d for d in yaml.safe_load_all(f.read_text()) if d)
    return docs


async def apply(client: KubeClient, docs: Iterable[Mapping[str, Any]], *, namespace: str = "default") -> None:
    """Server-side apply each document (field manager ``karpy-e2e``, conflicts forced)."""
    for doc in docs:
        res = KINDS[doc["kind"]]
        ns = (doc.get("metadata") or {}).get("namespace") or (namespace if res.namespaced else None)
        name = doc["metadata"]["name"]
        await client.request(
            "PATCH",
            res.path(ns, name),
            body=dict(doc),
            content_type=APPLY_PATCH,
            query={"fieldManager": "karpy-e2e", "force": "true"},
        )
        if doc["kind"] == "CustomResourceDefinition":
            await wait_for(lambda n=name: _crd_established(client, n), timeout=30, what=f"CRD {name} established")


async def _crd_established(client: KubeClient, name: str) -> bool:
    crd = await client.get(KINDS["CustomResourceDefinition"], name)
    return any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or []
    )


async def scale(client: KubeClient, name: str, replicas: int, namespace: str = "default") -> None:
    """Set a Deployment's replicas."""
    await client.merge_patch(KINDS["Deployment"], name, {"spec": {"replicas": replicas}}, namespace)


async def wait_for(check: Callable[[], Awaitable[T]], *, timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``check`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await check()
            if last:
                return last
        except ApiError as err:
            last = err
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)


async def service_account_kubeconfig(client: KubeClient, server: str, namespace: str, name: str, path: Path) -> Path:
    """A kubeconfig authenticating as a ServiceAccount (TokenRequest API), so karpy runs with its own RBAC."""
    sa = KINDS["ServiceAccount"]
    token = await client.request(
        "POST",
        sa.path(namespace, name, "token"),
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}},
    )
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": name, "user": {"token": token["status"]["token"]}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": name}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config))  # noqa: ASYNC240 - a small local file
    return path


def ec2nodeclass(name: str, cluster: str, **spec: Any) -> dict[str, Any]:
    """An EC2NodeClass written as a Karpenter user writes one for the local cluster: the discovery-tagged subnets
    and security groups, the cluster's node role, AL2023 AMIs by alias; ``spec`` adds or overrides fields."""
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": f"KarpenterNodeRole-{cluster}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": cluster}}],
            **spec,
        },
    }


def nodepool(
    name: str,
    *,
    nodeclass: str | None = None,
    requirements: Iterable[Mapping[str, Any]] = (),
    taints: Iterable[Mapping[str, Any]] | None = None,
    disruption: Mapping[str, Any] | None = None,
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A karpenter.sh/v1 NodePool whose template points at the EC2NodeClass ``nodeclass`` (``name`` by default).
    ``taints``, ``disruption``, ``annotations`` and template ``labels`` are left out when None; ``spec`` adds or
    overrides top-level spec fields."""
    template_spec: dict[str, Any] = {"requirements": list(requirements)}
    if taints is not None:
        template_spec["taints"] = list(taints)
    template_spec["nodeClassRef"] = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass or name}
    template: dict[str, Any] = {"spec": template_spec}
    if labels is not None:
        template = {"metadata": {"labels": labels}, **template}
    metadata: dict[str, Any] = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    pool_spec: dict[str, Any] = {"template": template}
    if disruption is not None:
        pool_spec["disruption"] = disruption
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": metadata, "spec": {**pool_spec, **spec}}


def tainted_nodepool(name: str, taint: str, requirements: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A :func:`nodepool` only the pods tolerating ``<taint>=true:NoSchedule`` land on (so a scenario sees just
    the nodes its own pods asked for), whose nodes are never consolidated (``WhenEmpty``, ``consolidateAfter:
    Never``)."""
    return nodepool(
        name,
        requirements=requirements,
        taints=[{"key": taint, "value": "true", "effect": "NoSchedule"}],
        disruption={"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never"},
    )


def deployment(app: str, replicas: int, spec: dict[str, Any]) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods labelled ``app=<app>`` with the pod ``spec``."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app}},
            "template": {"metadata": {"labels": {"app": app}}, "spec": spec},
        },
    }


PAUSE_IMAGE = "public.ecr.aws/eks-distro/kubernetes/pause:3.7"


def pool_pod_spec(
    pool: str, taint: str, requests: Mapping[str, str], limits: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The pod spec of a workload pinned to NodePool ``pool`` (node selector ``karpenter.sh/nodepool=<pool>``),
    tolerating the ``NoSchedule`` taint key ``taint`` (any value): one pause container ``app`` with the resource
    ``requests`` (and ``limits`` when given; quantities as strings), no termination grace period."""
    resources: dict[str, Any] = {"requests": dict(requests)}
    if limits is not None:
        resources["limits"] = dict(limits)
    return {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: pool},
        "tolerations": [{"key": taint, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "app", "image": PAUSE_IMAGE, "resources": resources}],
    }


async def condition_ready(client: KubeClient, res: Resource, name: str) -> bool:
    """Whether the cluster-scoped object ``name`` of ``res`` (a NodePool, an EC2NodeClass) has condition Ready=True.

    No ``status.conditions`` (absent or null) is not Ready yet; an ApiError (e.g. not found) propagates (wait_for
    keeps polling on it)."""
    conditions = ((await client.get(res, name)).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def nodeclaims_of(client: KubeClient, pool: str) -> list[dict[str, Any]]:
    """The NodeClaims labelled with NodePool ``pool``."""
    return (await client.list(r.NODECLAIMS, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={pool}"}))[0]


async def delete_nodeclaims(
    client: KubeClient,
    claims: Callable[[], Awaitable[list[dict[str, Any]]]],
    *,
    timeout: float,
    what: str,
    interval: float = 0.5,
) -> None:
    """Delete every NodeClaim ``claims`` lists (API errors ignored) and wait until it lists none."""
    for claim in await claims():
        with contextlib.suppress(ApiError):
            await client.delete(r.NODECLAIMS, claim["metadata"]["name"])

    async def gone() -> bool:
        return not await claims()

    await wait_for(gone, timeout=timeout, what=what, interval=interval)


# What NodeClaim.status.allocatable (karpy's prediction) and Node.status.allocatable (kubelet's report) are
# compared on: the resources every node has. Extended resources come from device plugins the node agent does not
# model (neuron cores, EFA), so they are left out.
ALLOCATABLE_COMPARED = ("cpu", "memory", "ephemeral-storage", "pods")


def allocatable_mismatches(claim: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """The resources whose predicted allocatable (``NodeClaim.status.allocatable``: karpy's overhead model) differs
    from what the node's kubelet reports (``Node.status.allocatable``), as {resource: (predicted, reported)} in
    canonical units (millicores, bytes, counts). Empty when the model is right.

    Exact, but for one documented rounding: kubelet applies a percentage eviction threshold in single precision,
    truncated (``10%`` of 20Gi reserves 2147483680 bytes), where Karpenter and karpy take
    ``ceil(capacity × p / 100)`` in double precision (2147483648). The two differ by at most the float32 error of
    the percentage, ``capacity × 2⁻²⁴`` bytes (1.3 KiB on 20 GiB), so memory and ephemeral-storage may differ by
    that much; a wrong reservation (a MiB, a percent) is far outside it.
    """
    from karpy.apis.quantity import parse_resource_list

    predicted = parse_resource_list((claim.get("status") or {}).get("allocatable"))
    reported = parse_resource_list((node.get("status") or {}).get("allocatable"))
    capacity = parse_resource_list((node.get("status") or {}).get("capacity"))
    out: dict[str, tuple[int, int]] = {}
    for name in ALLOCATABLE_COMPARED:
        want, got = int(predicted.get(name, 0)), int(reported.get(name, 0))
        slack = (int(capacity.get(name, 0)) >> 24) + 1 if name in ("memory", "ephemeral-storage") else 0
        if abs(want - got) > slack:
            out[name] = (want, got)
    return out


async def assert_allocatable_as_predicted(client: KubeClient, claims: Iterable[Mapping[str, Any]]) -> None:
    """Every registered NodeClaim in ``claims`` predicted its Node's allocatable (:func:`allocatable_mismatches`);
    an AssertionError names each NodeClaim, resource, prediction and report otherwise."""
    wrong: dict[str, dict[str, tuple[int, int]]] = {}
    checked = 0
    for claim in claims:
        node_name = (claim.get("status") or {}).get("nodeName")
        if not node_name:
            continue
        node = await client.get(r.NODES, node_name)
        checked += 1
        if mismatches := allocatable_mismatches(claim, node):
            wrong[claim["metadata"]["name"]] = mismatches
    assert checked, "no registered NodeClaim to compare with its Node"
    assert not wrong, f"NodeClaim.status.allocatable (predicted) ≠ Node.status.allocatable (kubelet): {wrong}"


def record_figures(**values: Any) -> None:
    """Merge measured figures into ``.e2e-run/phases.json`` (every e2e module adds its own keys; the closing
    notes quote them)."""
    out = ROOT / ".e2e-run"
    out.mkdir(exist_ok=True)
    path = out / "phases.json"
    try:
        current = json.loads(path.read_text())
    except (OSError, ValueError):
        current = {}
    path.write_text(json.dumps({**current, **values}, indent=2))


def install_documents() -> list[dict[str, Any]]:
    """What ``kubectl apply -k manifests/`` installs, less the Deployment (tests run karpy as a local process)."""
    docs = load_documents(ROOT / "manifests" / "crds")
    return docs + [d for d in load_documents(ROOT / "manifests") if d["kind"] != "Deployment"]


async def karpy_process(
    client: KubeClient, server: str, cluster_name: str, work: Path, env: Mapping[str, str], **settings: str
) -> KarpyProcess:
    """karpy's CRDs and RBAC installed, and karpy (not started yet) authenticated as its own ServiceAccount.

    ``env`` carries the AWS variables of the local cluster; ``settings`` add or override karpy's environment
    variables (defaults: free metrics and probe ports, 1 s / 10 s batch windows, info logs); the metrics port
    is :attr:`KarpyProcess.metrics_port` (see :func:`assert_nodeclaim_counters`). Logs go to
    ``work/karpy.log``, its kubeconfig to ``work/karpy.kubeconfig``.
    """
    await apply(client, install_documents())
    kubeconfig = await service_account_kubeconfig(client, server, "karpy", "karpy", work / "karpy.kubeconfig")
    return KarpyProcess(
        {
            **env,
            "KUBECONFIG": str(kubeconfig),
            "CLUSTER_NAME": cluster_name,
            "CLUSTER_ENDPOINT": server,
            "METRICS_PORT": str(free_port()),
            "HEALTH_PROBE_PORT": str(free_port()),
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "10s",
            "LOG_LEVEL": "info",
            "LEADER_ELECTION_NAMESPACE": "karpy",  # outside a pod: the Lease goes in karpy's namespace
            **settings,
        },
        work / "karpy.log",
    )


async def stop_karpy(karpy: KarpyProcess, client: KubeClient, cleanup: Awaitable[None] | None = None) -> None:
    """End of an e2e module: ``cleanup`` (run while karpy still runs, so its terminator releases finalizers),
    then karpy stopped, its log tail printed, the client closed — whatever ``cleanup`` raised."""
    try:
        if cleanup is not None:
            await cleanup
    finally:
        karpy.stop()
        print(f"\nkarpy log: {karpy.log_path}\n{karpy.tail(20)}")
        await client.close()


# An object an e2e module deletes before its NodePool: (resource, name, namespace or None when cluster-scoped).
Workload = tuple[Resource, str, str | None]


@attrs.define
class PoolEnv:
    """What an e2e module's ``env`` fixture gives its tests (:func:`pool_env`): ``cluster`` (the ``local_cluster``
    fixture), ``client`` (admin), ``karpy`` (started, its own process), ``pool`` (the module's NodePool, whose
    EC2NodeClass has the same name)."""

    cluster: Any
    client: KubeClient
    karpy: KarpyProcess
    pool: str

    @functools.cached_property
    def ec2(self) -> Any:
        """A boto3 EC2 client on the cluster's moto (made on first use)."""
        return aws_client("ec2", self.cluster.aws_env["AWS_ENDPOINT_URL"])

    async def claims(self) -> list[dict[str, Any]]:
        """The NodeClaims of the NodePool (terminating ones included)."""
        return await nodeclaims_of(self.client, self.pool)

    async def pods(self, *apps: str, terminating: bool = False) -> list[dict[str, Any]]:
        """The pods in ``default`` labelled ``app=<app>`` for each of ``apps`` in turn (the pool's name when none
        is given), without the ones being deleted unless ``terminating``."""
        items: list[dict[str, Any]] = []
        for app in apps or (self.pool,):
            items += (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={app}"}))[0]
        return items if terminating else [p for p in items if not p["metadata"].get("deletionTimestamp")]


E = TypeVar("E", bound=PoolEnv)


async def delete_pool(client: KubeClient, pool: str, workloads: Iterable[Workload] | None = None) -> None:
    """End of a NodePool's e2e module, in the order that lets karpy drain and release its nodes: the
    ``workloads`` deleted (by default the Deployment ``default/<pool>``), then the NodePool ``pool``, then its
    NodeClaims deleted and waited gone (120 s; AssertionError after), then the EC2NodeClass ``pool``. An object
    already gone (any API error on a delete) is passed over."""
    for res, name, namespace in [(r.DEPLOYMENTS, pool, "default")] if workloads is None else workloads:
        with contextlib.suppress(ApiError):
            await client.delete(res, name, namespace)
    with contextlib.suppress(ApiError):
        await client.delete(r.NODEPOOLS, pool)
    claims = functools.partial(nodeclaims_of, client, pool)
    await delete_nodeclaims(client, claims, timeout=120, what=f"NodeClaims of {pool} gone", interval=1)
    with contextlib.suppress(ApiError):
        await client.delete(r.EC2NODECLASSES, pool)


@contextlib.asynccontextmanager
async def pool_env(
    cluster: Any,
    work: Path,
    pool: str,
    env_type: Callable[[Any, KubeClient, KarpyProcess, str], E],
    *,
    workloads: Iterable[Workload] | None = None,
    **settings: str,
) -> AsyncIterator[E]:
    """karpy started for an e2e module's NodePool ``pool`` on the local ``cluster`` (:func:`karpy_process`: logs
    and kubeconfig in ``work``; ``settings`` such as ``FEATURE_GATES="NodeRepair=true"`` add to or override its
    environment), yielding ``env_type(cluster, client, karpy, pool)`` (:class:`PoolEnv` or a subclass). On exit,
    while karpy still runs, :func:`delete_pool` with ``workloads``; then karpy is stopped and the client closed
    (:func:`stop_karpy`)."""
    client = await KubeClient.from_environment(str(cluster.kubeconfig))
    karpy = await karpy_process(client, cluster.server, cluster.cluster_name, work, cluster.aws_env, **settings)
    env = env_type(cluster, client, karpy, pool)
    karpy.start()
    try:
        yield env
    finally:
        await stop_karpy(karpy, client, delete_pool(client, pool, workloads))


async def scrape_metrics(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """karpy's ``/metrics`` on 127.0.0.1:``port`` as {(sample name, labels): value} (Prometheus text format)."""
    from prometheus_client.parser import text_string_to_metric_families

    def fetch() -> str:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            return str(answer.read().decode())

    text = await asyncio.to_thread(fetch)
    return {
        (sample.name, frozenset(sample.labels.items())): float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def nodeclaim_counters(port: int, pools: Iterable[str] | None = None) -> tuple[int, int]:
    """(``karpenter_nodeclaims_created_total``, ``karpenter_nodeclaims_terminated_total``) summed over the
    NodePools ``pools`` (every NodePool when None), as karpy's process at ``port`` counted them since it started."""
    wanted = None if pools is None else set(pools)
    created = terminated = 0.0
    for (name, labels), value in (await scrape_metrics(port)).items():
        pool = dict(labels).get("nodepool", "")
        if wanted is not None and pool not in wanted:
            continue
        if name == "karpenter_nodeclaims_created_total":
            created += value
        elif name == "karpenter_nodeclaims_terminated_total":
            terminated += value
    return int(created), int(terminated)


async def live_nodeclaims(client: KubeClient, pools: Iterable[str] | None = None) -> list[str]:
    """Names of the NodeClaims the apiserver holds (terminating ones included), of ``pools`` when given."""
    from karpy.apis import labels as wk

    wanted = None if pools is None else set(pools)
    items, _ = await client.list(KINDS["NodeClaim"])
    return sorted(
        str(c["metadata"]["name"])
        for c in items
        if wanted is None or ((c["metadata"].get("labels") or {}).get(wk.LABEL_NODEPOOL) in wanted)
    )


async def assert_nodeclaim_counters(
    client: KubeClient,
    karpy: KarpyProcess,
    pools: Iterable[str] | None = None,
    *,
    baseline: int = 0,
    timeout: float = 30.0,
) -> tuple[int, int]:
    """Karpenter's NodeClaim counters do not lie: created − terminated == live NodeClaims − ``baseline``.

    Counts are restricted to the NodePools ``pools`` (all when None) on both sides; ``baseline`` is how many of
    those NodeClaims existed when this karpy process started (its counters start at zero on each start, e.g.
    after :meth:`KarpyProcess.kill` + ``start``). Each NodeClaim is counted created once (when karpy's create
    succeeds) and terminated once (when its termination finalizer is released). Counter and apiserver are read
    until they agree — a create or release in flight between the two reads settles within ``timeout`` seconds —
    and an AssertionError names both sides otherwise. Returns (created, terminated).
    """
    if not karpy.metrics_port:
        raise AssertionError("karpy runs without METRICS_PORT: nodeclaim counters cannot be checked")
    pool_list = None if pools is None else list(pools)
    seen: dict[str, Any] = {}

    async def agree() -> bool:
        created, terminated = await nodeclaim_counters(karpy.metrics_port, pool_list)
        live = await live_nodeclaims(client, pool_list)
        seen.update(created=created, terminated=terminated, live=live, baseline=baseline)
        return created - terminated == len(live) - baseline

    try:
        await wait_for(agree, timeout=timeout, what="nodeclaim counters to match live NodeClaims", interval=1)
    except AssertionError as err:
        raise AssertionError(
            f"karpenter_nodeclaims_created_total ({seen.get('created')}) − terminated_total "
            f"({seen.get('terminated')}) ≠ live NodeClaims {seen.get('live')} − baseline {baseline}"
        ) from err
    return int(seen["created"]), int(seen["terminated"])


def run_tagged_instance(ec2: Any, cluster_name: str, tags: Mapping[str, str]) -> str:
    """Launch an m5.large by hand (not through karpy) in a subnet of the cluster, from a seeded AMI, with
    ``tags``: a leaked or foreign instance for garbage-collection tests. Returns the instance id."""
    discovery = [{"Name": "tag:karpenter.sh/discovery", "Values": [cluster_name]}]
    subnet = ec2.describe_subnets(Filters=discovery)["Subnets"][0]["SubnetId"]
    image = ec2.describe_images(Owners=["self"])["Images"][0]["ImageId"]
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}]
    out = ec2.run_instances(
        ImageId=image, InstanceType="m5.large", MinCount=1, MaxCount=1, SubnetId=subnet, TagSpecifications=spec
    )
    return str(out["Instances"][0]["InstanceId"])


def aws_client(service: str, endpoint_url: str) -> Any:
    """A boto3 client on the local moto server (us-east-1, moto's test credentials)."""
    import boto3

    return boto3.client(
        service,
        region_name="us-east-1",
        endpoint_url=endpoint_url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KarpyProcess:
    """karpy (``python -m karpy run``) as a child process with JSON logs captured to a file.

    Several may run on one cluster (leader election: one leads, the others stand by): :meth:`sibling` gives
    another process with the same settings, its own ``name``, log file and metrics/health ports.
    """

    def __init__(
        self, env: Mapping[str, str], log_path: Path, name: str | None = None, python: str | None = None
    ) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.name = name or log_path.stem
        # The interpreter running ``-m karpy run``: this one unless told (the live benchmark runs karpy from a
        # virtualenv holding only karpy's own dependencies, as the image does).
        self.python = python or sys.executable
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.paused = False

    def sibling(self, name: str, **settings: str) -> KarpyProcess:
        """Another karpy process (not started) on the same cluster with the same settings, named ``name``: its
        log is ``<name>.log`` next to this one's, its metrics and health probe ports are fresh free ports (so
        none collide), and ``settings`` add or override environment variables."""
        env = {**self.env, "METRICS_PORT": str(free_port()), "HEALTH_PROBE_PORT": str(free_port()), **settings}
        return KarpyProcess(env, self.log_path.with_name(f"{name}.log"), name, self.python)

    def start(self) -> None:
        """Start (appending to the same log)."""
        self.starts += 1
        self.paused = False
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [self.python, "-m", "karpy", "run"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def kill(self) -> None:
        """SIGKILL: a crash in the middle of whatever karpy was doing."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP the process group: karpy freezes mid-flight (a long GC pause, a stopped VM) while its monotonic
        clock, its lease's expiry and the rest of the cluster go on."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        """SIGCONT the process group after :meth:`pause`."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s (a paused process is resumed so that it sees the SIGTERM)."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            if self.paused:
                self.resume()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def returncode(self) -> int | None:
        """The exit code once the process has ended (negative: killed by that signal); None while it runs."""
        return None if self.proc is None else self.proc.poll()

    @property
    def metrics_port(self) -> int:
        """The port karpy serves ``/metrics`` on (0: not served)."""
        return int(self.env.get("METRICS_PORT") or 0)

    @property
    def health_port(self) -> int:
        """The port karpy serves ``/healthz`` and ``/readyz`` on (0: not served)."""
        return int(self.env.get("HEALTH_PROBE_PORT") or 0)

    def probe(self, path: str = "/readyz") -> int:
        """The HTTP status of ``GET <path>`` on the health probe port (0: no answer within 2 s)."""
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as answer:
                return int(answer.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    @property
    def identity(self) -> str:
        """This process's leader-election identity (``<hostname>_<uuid>``, a new one per start): the ``identity``
        field of the last log line that has one ("" before it logged one)."""
        found = [str(line["identity"]) for line in self.logs() if line.get("identity")]
        return found[-1] if found else ""

    @property
    def alive(self) -> bool:
        """The process is running."""
        return self.proc is not None and self.proc.poll() is None

    def logs(self) -> list[dict[str, Any]]:
        """Every JSON log line so far (non-JSON lines are returned as {"raw": line})."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"raw": line})
        return out

    def tail(self, n: int = 40) -> str:
        """The last ``n`` log lines, for failure messages."""
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""


LIVE_INSTANCE_STATES = frozenset({"pending", "running", "stopping", "stopped"})


def instance_id_of(provider_id: str) -> str:
    """The instance id in ``aws:///<zone>/<instance-id>`` ("" when there is none)."""
    last = provider_id.rstrip("/").rsplit("/", 1)[-1] if provider_id else ""
    return last if last.startswith("i-") else ""


@dataclass
class Invariants:
    """One snapshot of the safety invariants karpy must keep whatever happens to it (crash, restart, races).

    Every list holds keys like ``instance/i-…`` or ``nodeclaim/<name>``, stable across snapshots so a caller can
    tell how long a violation has persisted; ``details`` says more about some keys (instance ids, finalizers).
    Empty lists everywhere mean the invariants hold.

    - ``leaks``: live instances owned by the cluster, launched at least ``launch_grace`` seconds ago, with no
      NodeClaim of their providerID nor of their ``karpenter.sh/nodeclaim`` tag (Karpenter's garbage collection
      terminates these; a leak that outlives it is a defect).
    - ``double_launches``: NodeClaim names with more than one instance tagged for them, in any state (a second
      instance garbage collection terminated later still was a double launch).
    - ``orphan_nodes``: Nodes whose providerID is no NodeClaim's.
    - ``orphan_nodeclaims``: NodeClaims not being deleted whose launched instance is not live any more
      (Karpenter's garbage collection deletes these).
    - ``stuck``: NodeClaims, Nodes and Pods with a ``deletionTimestamp`` older than ``stuck_after`` seconds.
    """

    leaks: list[str] = field(default_factory=list)
    double_launches: list[str] = field(default_factory=list)
    orphan_nodes: list[str] = field(default_factory=list)
    orphan_nodeclaims: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    details: dict[str, str] = field(default_factory=dict)

    def violations(self) -> dict[str, list[str]]:
        """Category → keys, only the categories that have any."""
        out = {
            "leaks": self.leaks,
            "double_launches": self.double_launches,
            "orphan_nodes": self.orphan_nodes,
            "orphan_nodeclaims": self.orphan_nodeclaims,
            "stuck": self.stuck,
        }
        return {k: v for k, v in out.items() if v}

    @property
    def clean(self) -> bool:
        """Every invariant holds."""
        return not self.violations()


def cluster_instances(ec2: Any, cluster_name: str) -> list[dict[str, Any]]:
    """Every instance tagged ``kubernetes.io/cluster/<cluster_name>``, in any state (boto3 EC2 client)."""
    out: list[dict[str, Any]] = []
    pages = ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": "tag-key", "Values": [f"kubernetes.io/cluster/{cluster_name}"]}]
    )
    for page in pages:
        for res in page["Reservations"]:
            out.extend(res["Instances"])
    return out


def _deletion_age(obj: Mapping[str, Any], now: float) -> float | None:
    """Seconds since ``metadata.deletionTimestamp`` (None when not being deleted)."""
    from datetime import datetime

    stamp = (obj.get("metadata") or {}).get("deletionTimestamp")
    if not stamp:
        return None
    return now - datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


async def cluster_invariants(
    client: KubeClient,
    ec2: Any,
    cluster_name: str,
    *,
    launch_grace: float = 30.0,
    stuck_after: float = 60.0,
    pod_namespace: str | None = None,
) -> Invariants:
    """A snapshot of :class:`Invariants` from the API server and EC2 (a boto3 client, called in a thread).

    ``launch_grace`` (seconds) keeps an instance whose launch is still being recorded out of ``leaks``;
    ``stuck_after`` (seconds) is how old a ``deletionTimestamp`` must be to count as stuck; Pods are read in
    ``pod_namespace`` (all namespaces when None). Wall-clock ages: the API server runs on this machine.
    """
    from karpy.kube import resources as r

    claims = (await client.list(r.NODECLAIMS))[0]
    nodes = (await client.list(r.NODES))[0]
    pods = (await client.list(r.PODS, pod_namespace))[0]
    instances = await asyncio.to_thread(cluster_instances, ec2, cluster_name)
    now = time.time()
    inv = Invariants()

    claim_names = {c["metadata"]["name"] for c in claims}
    claim_ids = {instance_id_of((c.get("status") or {}).get("providerID", "")) for c in claims} - {""}
    live: set[str] = set()
    tagged: dict[str, list[str]] = {}
    for inst in instances:
        tags = {t["Key"]: t["Value"] for t in inst.get("Tags", [])}
        iid = inst["InstanceId"]
        if claim := tags.get("karpenter.sh/nodeclaim"):
            tagged.setdefault(claim, []).append(iid)
        if inst["State"]["Name"] not in LIVE_INSTANCE_STATES:
            continue
        live.add(iid)
        age = now - inst["LaunchTime"].timestamp()
        if iid not in claim_ids and tags.get("karpenter.sh/nodeclaim") not in claim_names and age >= launch_grace:
            inv.leaks.append(f"instance/{iid}")
    for name, ids in sorted(tagged.items()):
        if len(ids) > 1:
            inv.double_launches.append(f"nodeclaim/{name}")
            inv.details[f"nodeclaim/{name}"] = "instances " + ",".join(sorted(ids))
    for node in nodes:
        iid = instance_id_of((node.get("spec") or {}).get("providerID", ""))
        if iid not in claim_ids:
            inv.orphan_nodes.append(f"node/{node['metadata']['name']}")
    for c in claims:
        iid = instance_id_of((c.get("status") or {}).get("providerID", ""))
        if iid and iid not in live and not c["metadata"].get("deletionTimestamp"):
            inv.orphan_nodeclaims.append(f"nodeclaim/{c['metadata']['name']}")
            inv.details[f"nodeclaim/{c['metadata']['name']}"] = f"instance {iid} not live"
    for kind, objs in (("nodeclaim", claims), ("node", nodes), ("pod", pods)):
        for obj in objs:
            age = _deletion_age(obj, now)
            if age is not None and age > stuck_after:
                meta = obj["metadata"]
                name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
                inv.stuck.append(f"{kind}/{name}")
                inv.details[f"{kind}/{name}"] = f"deleting for {age:.0f}s, finalizers {meta.get('finalizers', [])}"
    return inv
