"""``kubectl apply -k manifests/`` on the real apiserver: 2 replicas with leader election, the PodDisruptionBudget and
the RBAC are accepted, and the ServiceAccount may do exactly the Lease operations leader election needs.

The manifests are applied with ``kubectl apply -k`` when kubectl is on PATH (the control-plane build does not ship
it). Without kubectl the kustomization's ``resources`` are applied in their listed order with server-side apply,
then the ConfigMaps of its ``configMapGenerator`` (files only, no name-suffix hash, labels): the base has no
patches or transformers, so that is what kustomize renders (the test checks the kustomization has nothing else,
and compares with ``kubectl kustomize`` when kubectl exists).

The RBAC check is a ``SubjectAccessReview`` per operation for ``system:serviceaccount:karpy:karpy`` (with the groups
the apiserver gives a ServiceAccount token), against what client-go's ``LeaseLock`` and karpy's elector send: GET and
WATCH (``fieldSelector=metadata.name=…``) the Lease, CREATE it the first time, UPDATE (and PATCH) only
``karpenter-leader-election``, and Events about it; and nothing else on Leases (no list, no delete, no other Lease,
no other namespace). The Deployment is deleted at the end so its pending pods do not reach other tests' karpy.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from e2e.helpers import KINDS, ROOT, apply, load_documents, wait_for
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.integration]

MANIFESTS = ROOT / "manifests"
NAMESPACE = "karpy"
LEASE = "karpenter-leader-election"
SERVICE_ACCOUNT = f"system:serviceaccount:{NAMESPACE}:karpy"
SA_GROUPS = ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}", "system:authenticated"]
PDB = KINDS["PodDisruptionBudget"]
DEPLOYMENT = KINDS["Deployment"]


def kustomization_documents() -> list[dict[str, Any]]:
    """What kustomize renders for ``manifests/``: its resources' documents in the listed order, then the generated
    ConfigMaps."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    # Resources and plain file ConfigMaps only: anything else (patches, namespace, ...) would change the rendering.
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "configMapGenerator"}
    docs = [doc for path in kustomization["resources"] for doc in load_documents(MANIFESTS / path)]
    return docs + [generated_configmap(gen) for gen in kustomization.get("configMapGenerator", [])]


def generated_configmap(gen: dict[str, Any]) -> dict[str, Any]:
    """The ConfigMap kustomize generates from a ``configMapGenerator`` entry of files (no suffix hash)."""
    assert set(gen) <= {"name", "namespace", "files", "options"}
    options = gen.get("options", {})
    assert set(options) <= {"disableNameSuffixHash", "labels"} and options.get("disableNameSuffixHash") is True
    meta: dict[str, Any] = {"name": gen["name"], "namespace": gen["namespace"]}
    if options.get("labels"):
        meta["labels"] = dict(options["labels"])
    data = {name: (MANIFESTS / name).read_text() for name in gen["files"]}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


async def apply_kustomization(kube: KubeClient, kubeconfig: str) -> str:
    """``kubectl apply -k manifests/`` (or its equivalent without kubectl); returns how it was applied."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        await apply(kube, kustomization_documents())
        return "server-side apply of the kustomization's resources"
    rendered = (await _run(kubectl, "kustomize", str(MANIFESTS))).stdout
    ids = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(rendered) if d}
    assert ids == {(d["kind"], d["metadata"]["name"]) for d in kustomization_documents()}
    done = await _run(kubectl, "--kubeconfig", kubeconfig, "apply", "-k", str(MANIFESTS))
    assert done.returncode == 0, done.stderr
    return "kubectl apply -k"


async def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run a command off the event loop (its output captured as text)."""
    return await asyncio.to_thread(subprocess.run, list(argv), capture_output=True, text=True, timeout=120)


async def can(kube: KubeClient, verb: str, resource: str, *, group: str = "", name: str = "", namespace: str) -> bool:
    """Whether karpy's ServiceAccount may ``verb`` the resource (a SubjectAccessReview, as the authorizer decides)."""
    review = await kube.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": SERVICE_ACCOUNT,
                "groups": SA_GROUPS,
                "resourceAttributes": {
                    "group": group,
                    "resource": resource,
                    "verb": verb,
                    "name": name,
                    "namespace": namespace,
                },
            },
        },
    )
    return bool(review["status"].get("allowed"))


async def lease_ops(kube: KubeClient, namespace: str, name: str) -> dict[str, bool]:
    verbs = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
    return {
        verb: await can(kube, verb, "leases", group="coordination.k8s.io", name=name, namespace=namespace)
        for verb in verbs
    }


async def test_apply_k_runs_two_elected_replicas_with_pdb_and_lease_rbac(kube: KubeClient, local_cluster: Any) -> None:
    how = await apply_kustomization(kube, str(local_cluster.kubeconfig))
    try:
        # The Deployment as stored: 2 replicas, rolling one at a time, leader election on (not disabled), the
        # Lease in the pod's namespace.
        dep = await kube.get(DEPLOYMENT, "karpy", NAMESPACE)
        assert dep["spec"]["replicas"] == 2, how
        assert dep["spec"]["strategy"]["type"] == "RollingUpdate"
        assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 1  # maxSurge: the apiserver's 25 %
        [controller] = dep["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e for e in controller["env"]}
        assert "DISABLE_LEADER_ELECTION" not in env
        assert env["LEADER_ELECTION_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
        # kube-controller-manager acts on it: two pods (whether they can be scheduled here does not matter).
        await wait_for(lambda: _status_replicas(kube), timeout=60, what="the Deployment's ReplicaSet to create 2 pods")
        pdb = await kube.get(PDB, "karpy", NAMESPACE)
        assert pdb["spec"]["maxUnavailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        # The Grafana dashboard, labelled for Grafana's dashboard sidecar.
        dashboard = await kube.get(KINDS["ConfigMap"], "karpy-grafana-dashboard", NAMESPACE)
        assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert '"panels"' in dashboard["data"]["grafana-dashboard.json"]

        # The elector's Lease operations, and no more.
        assert await lease_ops(kube, NAMESPACE, LEASE) == {
            "get": True,
            "list": False,
            "watch": True,
            "create": True,
            "update": True,
            "patch": True,
            "delete": False,
            "deletecollection": False,
        }
        other = await lease_ops(kube, NAMESPACE, "someone-elses-lease")
        assert {verb for verb, allowed in other.items() if allowed} == {"get", "watch", "create"}
        assert {verb for verb, allowed in (await lease_ops(kube, "kube-system", LEASE)).items() if allowed} == set()
        # A watch on one Lease (fieldSelector metadata.name) is authorized as a watch without a name.
        assert await can(kube, "watch", "leases", group="coordination.k8s.io", namespace=NAMESPACE)
        # "became leader" / "stopped leading" Events on the Lease.
        for group in ("", "events.k8s.io"):
            assert await can(kube, "create", "events", group=group, namespace=NAMESPACE)
            assert await can(kube, "patch", "events", group=group, namespace=NAMESPACE)
    finally:
        # Its pods stay pending here: delete them so another test's karpy never sees them.
        await kube.request("DELETE", DEPLOYMENT.path(NAMESPACE, "karpy"), query={"propagationPolicy": "Foreground"})
        await wait_for(lambda: _deployment_gone(kube), timeout=60, what="the karpy Deployment deleted")


async def _status_replicas(kube: KubeClient) -> bool:
    dep = await kube.get(DEPLOYMENT, "karpy", NAMESPACE)
    return (dep.get("status") or {}).get("replicas") == 2


async def _deployment_gone(kube: KubeClient) -> bool:
    try:
        await kube.get(DEPLOYMENT, "karpy", NAMESPACE)
    except ApiError as err:
        return err.status == 404
    return False
