"""The provisioner's scheduling inputs from cluster state: volume topology per pending pod, namespace labels for
``namespaceSelector``, the preference policy; and cluster state's slim views of the new kinds (issue 3 wiring)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.controllers.provisioner import Provisioner
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.scheduling.model import IN, Requirement
from karpy.state.cluster import KINDS, ClusterState
from tests.unit.disruption_builders import following_plans

JSON = dict[str, Any]
GIB = 2**30
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
_rv = itertools.count(1)


# --- builders ------------------------------------------------------------------------------------------------


def itype(name: str, cpu: int, price: float) -> InstanceType:
    return InstanceType(
        name=name,
        labels={wk.LABEL_INSTANCE_TYPE: name, wk.LABEL_ARCH: "amd64", wk.LABEL_OS: "linux"},
        capacity={"cpu": cpu * 1000, "memory": cpu * 4 * GIB, "pods": 110},
        overhead={},
        offerings=tuple(Offering(z, "on-demand", price + i / 1000) for i, z in enumerate(ZONES)),
    )


CATALOGUE = [itype("c.large", 2, 0.10), itype("c.xlarge", 4, 0.20)]
READY = [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-01-01T00:00:00Z"}]


def nodeclass() -> JSON:
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": "nc", "uid": "uid-nc", "resourceVersion": "1"},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
        "status": {"conditions": READY},
    }


def nodepool() -> JSON:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "np", "uid": "uid-np", "resourceVersion": "1"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"},
                }
            }
        },
        "status": {"conditions": READY},
    }


def pod(name: str, *claims: str, namespace: str = "default", **spec: Any) -> JSON:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": str(next(_rv)),
            "labels": {"app": name},
        },
        "spec": {
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}}}],
            "volumes": [*volumes, {"name": "cfg", "configMap": {"name": "x"}}],
            **spec,
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def zonal_pv(name: str, zone: str, *, local: bool = False) -> JSON:
    expressions = [{"key": wk.LABEL_ZONE, "operator": "In", "values": [zone]}]
    if local:
        expressions.append({"key": wk.LABEL_HOSTNAME, "operator": "In", "values": ["old-node"]})
    source = {"local": {"path": "/mnt/disk"}} if local else {"csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "v"}}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "resourceVersion": str(next(_rv)), "managedFields": [{"manager": "x"}]},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}},
            **source,
        },
        "status": {"phase": "Bound"},
    }


def pvc(name: str, *, volume: str = "", storage_class: str = "", namespace: str = "default") -> JSON:
    spec: JSON = {"resources": {"requests": {"storage": "1Gi"}}, "accessModes": ["ReadWriteOnce"]}
    if volume:
        spec["volumeName"] = volume
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(next(_rv))},
        "spec": spec,
        "status": {"phase": "Bound" if volume else "Pending"},
    }


def storage_class(name: str, mode: str, *zones: str) -> JSON:
    obj: JSON = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "resourceVersion": str(next(_rv))},
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3"},
        "volumeBindingMode": mode,
    }
    if zones:
        obj["allowedTopologies"] = [{"matchLabelExpressions": [{"key": wk.LABEL_ZONE, "values": list(zones)}]}]
    return obj


def namespace(name: str, **labels: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def loaded(objs: list[JSON]) -> ClusterState:
    state = ClusterState()
    by_kind: dict[str, list[JSON]] = {k: [] for k in KINDS}
    for obj in objs:
        by_kind[obj["kind"]].append(obj)
    for kind in KINDS:
        state.replace(kind, by_kind[kind])
    return state


def provisioner(state: ClusterState, kube: FakeKube, **kwargs: Any) -> Provisioner:
    return Provisioner(
        kube, state, FakeCloudProvider(CATALOGUE), EventRecorder(kube), plans=following_plans(state), **kwargs
    )


def no_patches(kube: FakeKube) -> bool:
    """The provisioner only creates NodeClaims here: it has no earlier plan to rewrite."""
    return kube.requests_to("PATCH") == []


def zone_requirement(claim: JSON) -> list[str]:
    return next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_ZONE)


async def settle() -> None:
    """Let the EventRecorder's background tasks run."""
    for _ in range(5):
        await asyncio.sleep(0)


def planned(claims: list[JSON]) -> set[str]:
    return {k for c in claims for k in json.loads(c["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS])}


# --- cluster state ----------------------------------------------------------------------------------------------


def test_state_waits_for_the_new_kinds_and_keeps_slim_views() -> None:
    state = ClusterState()
    for kind in KINDS:
        if kind != "StorageClass":
            state.replace(kind, [])
    assert not state.synced, "StorageClasses not listed yet"
    state.replace("StorageClass", [storage_class("gp3", "WaitForFirstConsumer", "us-east-1b")])
    assert state.synced
    assert {"Namespace", "PersistentVolume", "PersistentVolumeClaim", "StorageClass"} <= set(KINDS)

    state.apply("PersistentVolume", "ADDED", zonal_pv("pv-1", "us-east-1b", local=True))
    state.apply("PersistentVolumeClaim", "ADDED", pvc("data", volume="pv-1"))
    state.apply("Namespace", "ADDED", namespace("team-a", tier="gold"))
    pv = state.persistent_volumes["pv-1"]
    assert "managedFields" not in pv["metadata"] and "status" not in pv and "capacity" not in pv["spec"]
    assert pv["spec"]["local"] == {"path": "/mnt/disk"}
    assert state.pvcs["default/data"]["spec"] == {"volumeName": "pv-1"}
    assert "parameters" not in state.storage_classes["gp3"]
    assert state.namespace_labels() == {"team-a": {"tier": "gold", "kubernetes.io/metadata.name": "team-a"}}
    state.apply("Namespace", "DELETED", namespace("team-a"))
    assert state.namespace_labels() == {}


def test_only_pods_with_claims_keep_their_volumes() -> None:
    state = loaded([])
    state.apply("Pod", "ADDED", pod("plain"))
    state.apply("Pod", "ADDED", pod("db", "data"))
    assert set(state.pod_volumes) == {"default/db"}
    assert state.pod_volumes["default/db"]["spec"]["volumes"] == [
        {"name": "v0", "persistentVolumeClaim": {"claimName": "data"}}
    ]
    state.apply("Pod", "DELETED", pod("db", "data"))
    assert state.pod_volumes == {}


# --- scheduling_pods -------------------------------------------------------------------------------------------


def test_scheduling_pods_derive_volume_terms_and_skip_unsatisfiable_volumes() -> None:
    state = loaded(
        [
            zonal_pv("pv-b", "us-east-1b", local=True),
            pvc("bound", volume="pv-b"),
            storage_class("wffc", "WaitForFirstConsumer", "us-east-1c"),
            storage_class("immediate", "Immediate"),
            pvc("late", storage_class="wffc"),
            pvc("now", storage_class="immediate"),
            pod("plain"),
            pod("pinned", "bound"),
            pod("wffc", "late"),
            pod("missing", "nope"),
            pod("immediate", "now"),
        ]
    )
    prov = provisioner(state, FakeKube())
    pending = sorted(state.provisionable_pods(), key=lambda p: p.key)
    pods, errors = prov.scheduling_pods(pending)
    by_key = {p.key: p for p in pods}
    assert set(by_key) == {"default/plain", "default/pinned", "default/wffc"}
    assert by_key["default/plain"] is state.pods["default/plain"].pod, "pods without volumes pass through untouched"
    # the local PV's hostname requirement is dropped (a new node never has the old node's name)
    assert by_key["default/pinned"].volume_terms == ((Requirement(wk.LABEL_ZONE, IN, ("us-east-1b",)),),)
    assert by_key["default/wffc"].volume_terms == ((Requirement(wk.LABEL_ZONE, IN, ("us-east-1c",)),),)
    assert errors == {
        "default/missing": 'waiting for volumes: persistentvolumeclaim "default/nope" not found',
        "default/immediate": (
            'waiting for volumes: persistentvolumeclaim "default/now" is unbound and storageclass "immediate" binds '
            "Immediate"
        ),
    }


# --- provision_once ------------------------------------------------------------------------------------------


async def test_provision_once_pins_nodeclaims_to_the_volume_zone_and_reports_waiting_pods() -> None:
    state = loaded(
        [
            nodeclass(),
            nodepool(),
            zonal_pv("pv-b", "us-east-1b"),
            pvc("bound", volume="pv-b"),
            pod("pinned", "bound"),
            pod("missing", "nope"),
        ]
    )
    kube = FakeKube()
    created = await provisioner(state, kube).provision_once()
    await settle()
    [claim] = created
    assert zone_requirement(claim) == ["us-east-1b"], "unconstrained, us-east-1a would be cheapest"
    warnings = kube.events("FailedScheduling")
    assert [(e["involvedObject"]["name"], e["type"]) for e in warnings] == [("missing", "Warning")]
    assert "persistentvolumeclaim" in warnings[0]["message"] and "not found" in warnings[0]["message"]
    assert no_patches(kube)


async def test_a_pvc_appearing_later_makes_the_pod_schedulable() -> None:
    state = loaded(
        [nodeclass(), nodepool(), storage_class("wffc", "WaitForFirstConsumer", "us-east-1c"), pod("db", "d")]
    )
    kube = FakeKube()
    prov = provisioner(state, kube)
    assert await prov.provision_once() == []
    state.apply("PersistentVolumeClaim", "ADDED", pvc("d", storage_class="wffc"))
    [claim] = await prov.provision_once()
    assert zone_requirement(claim) == ["us-east-1c"]
    assert no_patches(kube)


def _affinity_to(selector_labels: dict[str, str]) -> JSON:
    return {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {"matchLabels": {"app": "anchor"}},
                    "namespaceSelector": {"matchLabels": selector_labels},
                    "topologyKey": wk.LABEL_ZONE,
                }
            ]
        }
    }


async def test_namespace_labels_reach_the_solver() -> None:
    """A required pod affinity to pods in namespaces labelled tier=gold: satisfiable only if the solver knows
    that namespace team-a carries tier=gold (the anchor pod lives there and goes on the same new node)."""
    anchor = pod("anchor", namespace="team-a")
    follower = pod("follower", affinity=_affinity_to({"tier": "gold"}))
    objs = [nodeclass(), nodepool(), anchor, follower]
    with_labels = loaded([*objs, namespace("team-a", tier="gold"), namespace("default")])
    kube = FakeKube()
    claims = await provisioner(with_labels, kube).provision_once()
    assert no_patches(kube)
    assert planned(claims) == {"default/follower", "team-a/anchor"}
    assert len({tuple(zone_requirement(c)) for c in claims}) == 1, "follower in the anchor's zone"

    without = loaded([*objs, namespace("team-a"), namespace("default")])
    kube = FakeKube()
    claims = await provisioner(without, kube).provision_once()
    await settle()
    assert planned(claims) == {"team-a/anchor"}
    assert [e["involvedObject"]["name"] for e in kube.events("FailedScheduling")] == ["follower"]
    assert no_patches(kube)


@pytest.mark.parametrize("policy", ["Respect", "Ignore"])
async def test_the_preference_policy_is_passed_to_the_solver(policy: str) -> None:
    """A preferred zone (us-east-1c) that is not the cheapest: Respect honours it, Ignore takes the cheapest."""
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 1,
                    "preference": {
                        "matchExpressions": [{"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1c"]}]
                    },
                }
            ]
        }
    }
    state = loaded([nodeclass(), nodepool(), pod("web", affinity=preferred)])
    kube = FakeKube()
    [claim] = await provisioner(state, kube, preference_policy=policy).provision_once()
    assert no_patches(kube)
    zones = zone_requirement(claim) if any(r["key"] == wk.LABEL_ZONE for r in claim["spec"]["requirements"]) else []
    if policy == "Respect":
        assert zones == ["us-east-1c"]
    else:
        assert zones != ["us-east-1c"], "Ignore: the preference does not pin the zone"


# --- DaemonSet overhead from the live pod ---------------------------------------------------------------------


def daemonset(name: str, cpu: str) -> JSON:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "uid": f"uid-ds-{name}", "resourceVersion": "1"},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
    }


def daemon_pod(ds: JSON, name: str, cpu: str, created: str) -> JSON:
    """A pod the DaemonSet controller made, after a LimitRange or webhook changed its requests."""
    obj = pod(name, namespace="kube-system", nodeName="other-node")
    obj["metadata"]["creationTimestamp"] = created
    obj["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": ds["metadata"]["name"],
            "uid": ds["metadata"]["uid"],
            "controller": True,
        }
    ]
    obj["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    obj["status"] = {"phase": "Running"}
    return obj


async def test_daemonset_overhead_comes_from_the_newest_live_pod() -> None:
    """Karpenter ``getDaemonSetPods``: the template asks for 100m, the DaemonSet's pods run with 1600m; with a
    500m pending pod the NodeClaim needs 2.1 CPU, so only the 4-CPU type remains."""
    ds = daemonset("agent", "100m")
    older = daemon_pod(ds, "agent-old", "200m", "2026-01-01T00:00:00Z")
    newest = daemon_pod(ds, "agent-new", "1600m", "2026-01-02T00:00:00Z")
    state = loaded([nodeclass(), nodepool(), ds, older, newest, pod("web")])
    kube = FakeKube()
    prov = provisioner(state, kube)
    [agent] = prov.daemonsets()
    assert agent.pod.requests["cpu"] == 1_600
    [claim] = await prov.provision_once()
    await settle()
    types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE)
    assert types == ["c.xlarge"]
    assert claim["spec"]["resources"]["requests"]["cpu"] == "2100m"
    assert no_patches(kube)
    # Without a live pod the template's 100m counts and the 2-CPU type is the cheapest.
    state = loaded([nodeclass(), nodepool(), ds, pod("web")])
    kube = FakeKube()
    [claim] = await provisioner(state, kube).provision_once()
    await settle()
    types = next(r["values"] for r in claim["spec"]["requirements"] if r["key"] == wk.LABEL_INSTANCE_TYPE)
    assert types[0] == "c.large"
    assert no_patches(kube)


# --- existing capacity: initialized first ------------------------------------------------------------------------


def _nodeclaim(name: str, provider: str = "") -> JSON:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": {wk.LABEL_NODEPOOL: "np"}},
        "spec": {"requirements": [], "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"}},
        "status": {"providerID": provider, "allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}},
    }


def _node(name: str, provider: str, **labels: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels},
        "spec": {"providerID": provider},
        "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10"}, "conditions": READY},
    }


def test_existing_capacity_says_which_nodes_are_initialized() -> None:
    """Karpenter ``StateNode.Initialized``: a managed Node by its ``karpenter.sh/initialized`` label, an unmanaged
    Node always, an in-flight NodeClaim never. The scheduler tries initialized capacity first."""
    managed = {wk.LABEL_NODEPOOL: "np"}
    state = loaded(
        [
            _nodeclaim("np-booting", "aws:///us-east-1a/i-1"),
            _node("booting", "aws:///us-east-1a/i-1", **managed),
            _nodeclaim("np-ready", "aws:///us-east-1a/i-2"),
            _node("ready", "aws:///us-east-1a/i-2", **managed, **{wk.LABEL_INITIALIZED: "true"}),
            _node("plain", "aws:///us-east-1a/i-3"),
            _nodeclaim("np-inflight"),
        ]
    )
    existing = provisioner(state, FakeKube())._existing_capacity()
    assert {e.name: e.initialized for e in existing} == {
        "booting": False,
        "ready": True,
        "plain": True,
        "nodeclaim/np-inflight": False,
    }


async def test_nodepools_survive_a_nodepool_deleted_while_instance_types_load() -> None:
    """The NodePool loop awaits the cloud provider once per EC2NodeClass; a watch event that deletes a NodePool in
    that window must not break the pass ("dictionary changed size during iteration" was seen live when a NodePool
    was deleted while the disruption controller built its simulation)."""
    second = nodepool()
    second["metadata"].update(name="np-2", uid="uid-np-2")
    state = loaded([nodeclass(), nodepool(), second])
    cloud = FakeCloudProvider(CATALOGUE)
    loading = cloud.get_instance_types

    async def deleting_meanwhile(nc: Any) -> list[InstanceType]:
        state.apply("NodePool", "DELETED", second)
        return await loading(nc)

    cloud.get_instance_types = deleting_meanwhile  # type: ignore[method-assign]
    prov = Provisioner(FakeKube(), state, cloud, EventRecorder(FakeKube()), plans=following_plans(state))
    pools, views = await prov._nodepools()
    assert "np" in views
    assert [p.name for p in pools] == list(views)
