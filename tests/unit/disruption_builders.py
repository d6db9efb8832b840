"""Builders for disruption and termination tests: NodePool/NodeClaim/Node/Pod JSON as the apiserver returns them
and a cluster state loaded with them (the apiserver is :class:`karpy.kube.fake.FakeKube`, the clock
:class:`karpy.runtime.clock.FakeClock`)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.hashing import nodeclass_hash, nodepool_hash
from karpy.cloudprovider.types import CloudInstance, InstanceType, Offering
from karpy.state.cluster import KINDS, ClusterState
from karpy.state.plans import Plans

JSON = dict[str, Any]
GIB = 2**30
T0 = 1_800_000_000.0  # "now" of the tests (2027-01-15), seconds since the epoch
_seq = itertools.count(1)


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def itype(
    name: str, cpu: int, mem_gib: int, od: float, spot: float | None = None, zone: str = "us-east-1a"
) -> InstanceType:
    offerings = [Offering(zone, "on-demand", od)]
    if spot is not None:
        offerings.append(Offering(zone, "spot", spot))
    return InstanceType(
        name=name,
        labels={wk.LABEL_INSTANCE_TYPE: name, wk.LABEL_ARCH: "amd64", wk.LABEL_OS: "linux"},
        capacity={"cpu": cpu * 1000, "memory": mem_gib * GIB, "pods": 110},
        overhead={},
        offerings=tuple(offerings),
    )


CATALOGUE = [
    itype("c.large", 2, 4, 0.10, 0.03),
    itype("c.xlarge", 4, 8, 0.20, 0.06),
    itype("c.2xlarge", 8, 16, 0.40, 0.12),
]


def nodeclass(name: str = "nc", amis: tuple[str, ...] = ("ami-1",)) -> JSON:
    obj: JSON = {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
        "status": {
            "amis": [{"id": a, "name": a} for a in amis],
            "subnets": [{"id": "subnet-a", "zone": "us-east-1a"}],
            "securityGroups": [{"id": "sg-1"}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": ts(T0)}],
        },
    }
    return obj


def nodepool(
    name: str = "np",
    *,
    budgets: list[JSON] | None = None,
    annotations: Mapping[str, str] | None = None,
    policy: str = "WhenEmptyOrUnderutilized",
    after: str = "0s",
    **template_spec: Any,
) -> JSON:
    disruption: JSON = {"consolidationPolicy": policy, "consolidateAfter": after}
    if budgets is not None:
        disruption["budgets"] = budgets
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "template": {
                "spec": {
                    "requirements": [{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
                    "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"},
                    **template_spec,
                }
            },
            "disruption": disruption,
        },
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": ts(0)}]},
    }


def nodeclaim(
    name: str,
    pool: JSON,
    nclass: JSON | None = None,
    *,
    instance_type: str = "c.xlarge",
    capacity_type: str = "on-demand",
    created: float = T0 - 3600,
    initialized: bool = True,
    image: str = "ami-1",
    annotations: Mapping[str, str] | None = None,
    **spec: Any,
) -> JSON:
    notes = {
        wk.ANNOTATION_NODEPOOL_HASH: nodepool_hash(pool),
        wk.ANNOTATION_NODEPOOL_HASH_VERSION: wk.NODEPOOL_HASH_VERSION,
        wk.ANNOTATION_NODECLASS_HASH: nodeclass_hash(nclass or nodeclass()),
        wk.ANNOTATION_NODECLASS_HASH_VERSION: wk.NODECLASS_HASH_VERSION,
        **(annotations or {}),
    }
    conditions = [{"type": "Launched", "status": "True", "reason": "Launched", "lastTransitionTime": ts(created)}]
    if initialized:
        conditions.append(
            {"type": "Initialized", "status": "True", "reason": "Initialized", "lastTransitionTime": ts(created)}
        )
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": str(next(_seq)),
            "creationTimestamp": ts(created),
            "finalizers": [wk.FINALIZER_TERMINATION],
            "labels": {
                wk.LABEL_NODEPOOL: pool["metadata"]["name"],
                wk.LABEL_INSTANCE_TYPE: instance_type,
                wk.LABEL_CAPACITY_TYPE: capacity_type,
                wk.LABEL_ZONE: "us-east-1a",
                wk.LABEL_ARCH: "amd64",
                wk.LABEL_OS: "linux",
            },
            "annotations": notes,
        },
        "spec": {"nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": "nc"}, **spec},
        "status": {
            "providerID": f"aws:///us-east-1a/i-{name}",
            "imageID": image,
            "nodeName": f"node-{name}",
            "conditions": conditions,
        },
    }


def hash_stamped(obj: JSON, ca_bundle: str | None = None) -> JSON:
    """A copy of ``obj`` (a NodePool or EC2NodeClass) with the hash annotations its hash stamping writes for its
    current spec (Karpenter's ``nodepool/hash`` / ``nodeclass/hash`` controllers; karpy's status reconcilers)."""
    obj = copy.deepcopy(obj)
    notes = obj["metadata"].setdefault("annotations", {})
    if obj["kind"] == "NodePool":
        notes[wk.ANNOTATION_NODEPOOL_HASH] = nodepool_hash(obj)
        notes[wk.ANNOTATION_NODEPOOL_HASH_VERSION] = wk.NODEPOOL_HASH_VERSION
    else:
        notes[wk.ANNOTATION_NODECLASS_HASH] = nodeclass_hash(obj, ca_bundle)
        notes[wk.ANNOTATION_NODECLASS_HASH_VERSION] = wk.NODECLASS_HASH_VERSION
    return obj


def node(
    claim: JSON, *, cpu: int | None = None, ready: bool = True, annotations: Mapping[str, str] | None = None
) -> JSON:
    it = next(i for i in CATALOGUE if i.name == claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE])
    cores = cpu if cpu is not None else it.capacity["cpu"] // 1000
    mem = it.capacity["memory"] // GIB
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": claim["status"]["nodeName"],
            "resourceVersion": str(next(_seq)),
            "creationTimestamp": claim["metadata"]["creationTimestamp"],
            "labels": {
                **claim["metadata"]["labels"],
                wk.LABEL_HOSTNAME: claim["status"]["nodeName"],
                wk.LABEL_REGISTERED: "true",
                wk.LABEL_INITIALIZED: "true",
            },
            "annotations": dict(annotations or {}),
            "finalizers": [wk.FINALIZER_TERMINATION],
        },
        "spec": {"providerID": claim["status"]["providerID"]},
        "status": {
            "allocatable": {"cpu": str(cores), "memory": f"{mem}Gi", "pods": "110"},
            "capacity": {"cpu": str(cores), "memory": f"{mem}Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    node_name: str = "",
    *,
    cpu: str = "500m",
    owner: str = "rs-a",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    daemonset: bool = False,
    namespace: str = "default",
) -> JSON:
    refs = [
        {"kind": "DaemonSet" if daemonset else "ReplicaSet", "name": owner, "uid": f"uid-{owner}", "controller": True}
    ]
    status: JSON = {"phase": "Running" if node_name else "Pending"}
    if not node_name:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": str(next(_seq)),
            "labels": dict(labels or {"app": owner}),
            "annotations": dict(annotations or {}),
            "ownerReferences": refs,
            "creationTimestamp": ts(T0 - 7200),
        },
        "spec": {
            "nodeName": node_name or None,
            "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}}}],
        },
        "status": status,
    }


def pdb(name: str, match: Mapping[str, str], allowed: int, namespace: str = "default") -> JSON:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": dict(match)}},
        "status": {"disruptionsAllowed": allowed},
    }


def loaded_state(objs: list[JSON], now: float = T0) -> ClusterState:
    """A synced ClusterState holding ``objs`` (kinds from each object's ``kind``); pod events dated long ago."""
    clock = [now - 7200]
    state = ClusterState(clock=lambda: clock[0])
    by_kind: dict[str, list[JSON]] = {k: [] for k in KINDS}
    for o in objs:
        by_kind[o["kind"]].append(o)
    first = ("EC2NodeClass", "NodePool", "NodeClaim", "Node", "Pod")  # claims before nodes before pods
    for kind in (*first, *(k for k in KINDS if k not in first)):
        state.replace(kind, by_kind[kind])
    assert state.synced
    clock[0] = now
    state.clock = lambda: clock[0]
    return state


def following_plans(state: ClusterState) -> Plans:
    """Plans over ``state`` following its changes, as the operator's ``wire()`` step makes it."""
    plans = Plans(state)
    plans.follow()
    return plans


def cloud_instance(claim: JSON, subnet: str = "subnet-a", groups: tuple[str, ...] = ("sg-1",)) -> CloudInstance:
    return CloudInstance(
        instance_id=f"i-{claim['metadata']['name']}",
        provider_id=claim["status"]["providerID"],
        instance_type=claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE],
        zone="us-east-1a",
        capacity_type="on-demand",
        state="running",
        image_id=claim["status"]["imageID"],
        launch_time=datetime.fromtimestamp(T0 - 3600, UTC),
        tags={},
        subnet_id=subnet,
        security_group_ids=groups,
    )
