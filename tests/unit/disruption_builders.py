"""Builders for disruption tests: NodePool/NodeClaim/Node/Pod JSON as the apiserver returns them, a cluster
state loaded with them, and an in-memory apiserver fake (merge patch, generateName, finalizers, watch feed)."""

from __future__ import annotations

import asyncio
import copy
import heapq
import itertools
import json
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from karpy.apis import labels as wk
from karpy.apis.hashing import nodeclass_hash, nodepool_hash
from karpy.cloudprovider.types import CloudInstance, InstanceType, Offering
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource
from karpy.state.cluster import KINDS, ClusterState

JSON = dict[str, Any]
R = TypeVar("R")
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


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class FakeKube:
    """An in-memory apiserver for the verbs the disruption controller uses; every write is fed to ``state``
    like a watch event. ``deleted`` lists deleted NodeClaim names in order; ``calls`` every verb."""

    def __init__(self, state: ClusterState | None = None, objs: list[JSON] | None = None) -> None:
        self.state = state
        self.store: dict[tuple[str, str, str], JSON] = {}
        self.calls: list[tuple[str, str, str]] = []
        self.deleted: list[str] = []
        self.rv = 1000
        self.blocked_evictions: set[str] = set()
        self.delete_bodies: dict[str, JSON | None] = {}
        for o in objs or []:
            self.store[self._key_of(o)] = copy.deepcopy(o)

    @staticmethod
    def _plural(kind: str) -> str:
        return {
            "Pod": "pods",
            "Node": "nodes",
            "NodeClaim": "nodeclaims",
            "NodePool": "nodepools",
            "EC2NodeClass": "ec2nodeclasses",
            "PodDisruptionBudget": "poddisruptionbudgets",
            "Namespace": "namespaces",
            "Event": "events",
            "DaemonSet": "daemonsets",
        }[kind]

    def _key_of(self, o: JSON) -> tuple[str, str, str]:
        return (self._plural(o["kind"]), o["metadata"].get("namespace") or "", o["metadata"]["name"])

    def _feed(self, obj: JSON, event: str) -> None:
        if self.state is not None and obj.get("kind") in ("Pod", "Node", "NodeClaim", "NodePool", "EC2NodeClass"):
            self.state.apply(obj["kind"], event, copy.deepcopy(obj))

    def _bump(self, obj: JSON) -> JSON:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        return obj

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        self.calls.append(("get", res.plural, name))
        obj = self.store.get((res.plural, namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f"{res.plural} {name} not found")
        return copy.deepcopy(obj)

    async def list(
        self, res: Resource, namespace: str | None = None, *, query: Mapping[str, Any] | None = None
    ) -> tuple[list[JSON], str]:
        self.calls.append(("list", res.plural, json.dumps(dict(query or {}))))
        items = [copy.deepcopy(o) for (plural, _, _), o in self.store.items() if plural == res.plural]
        selector = (query or {}).get("fieldSelector", "")
        if selector.startswith("spec.nodeName="):
            want = selector.split("=", 1)[1]
            items = [o for o in items if (o.get("spec") or {}).get("nodeName") == want]
        return items, str(self.rv)

    async def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'x-')}{next(_seq):05d}"
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta.setdefault("creationTimestamp", ts(T0))
        if namespace:
            meta["namespace"] = namespace
        obj.setdefault("kind", res.kind)
        self.calls.append(("create", res.plural, meta["name"]))
        self.store[(res.plural, meta.get("namespace") or "", meta["name"])] = self._bump(obj)
        self._feed(obj, "ADDED")
        return copy.deepcopy(obj)

    async def merge_patch(
        self, res: Resource, name: str, patch: JSON, namespace: str | None = None, *, subresource: str | None = None
    ) -> JSON:
        self.calls.append(("patch", res.plural, name))
        key = (res.plural, namespace or "", name)
        if key not in self.store:
            raise ApiError(404, "NotFound", f"{res.plural} {name} not found")
        patch = copy.deepcopy(patch)
        rv = (patch.get("metadata") or {}).pop("resourceVersion", None)
        if rv is not None and rv != self.store[key]["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "resourceVersion mismatch")
        obj = self._bump(_merge(self.store[key], patch))
        self.store[key] = obj
        self._feed(obj, "MODIFIED")
        return copy.deepcopy(obj)

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *, body: JSON | None = None) -> JSON:
        self.calls.append(("delete", res.plural, name))
        key = (res.plural, namespace or "", name)
        obj = self.store.get(key)
        if obj is None:
            raise ApiError(404, "NotFound", f"{res.plural} {name} not found")
        if res.plural == "nodeclaims":
            self.deleted.append(name)
        self.delete_bodies[name] = body
        if obj["metadata"].get("finalizers"):
            obj["metadata"].setdefault("deletionTimestamp", ts(T0))
            self._feed(self._bump(obj), "MODIFIED")
        else:
            del self.store[key]
            self._feed(obj, "DELETED")
        return copy.deepcopy(obj)

    async def create_subresource(
        self, res: Resource, name: str, subresource: str, body: JSON, namespace: str | None = None
    ) -> JSON:
        """Evictions: 429 for pods listed in ``blocked_evictions`` (a PDB says no), else the pod gets a
        deletionTimestamp (as the apiserver does for a pod with a grace period)."""
        self.calls.append((subresource, res.plural, name))
        if name in self.blocked_evictions:
            raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
        obj = self.store.get((res.plural, namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", name)
        obj["metadata"]["deletionTimestamp"] = ts(T0)
        self._feed(self._bump(obj), "MODIFIED")
        return {}

    def objects(self, plural: str) -> dict[str, JSON]:
        return {name: o for (p, _, name), o in self.store.items() if p == plural}


class FakeClock:
    """Virtual time for the disruption code (its ``clock`` and ``sleep``): ``clock()`` reads it; ``await
    clock.sleep(s)`` returns only once the test advanced time past it (:meth:`advance`), or :meth:`run` did.
    Nothing waits on the wall clock, and time passes only where a test says so."""

    SETTLE_ROUNDS = 20

    def __init__(self, now: float = T0) -> None:
        self.now = now
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self.now + seconds, next(self._seq), wake))
        await wake

    @property
    def sleeping(self) -> int:
        """How many sleeps are waiting for time to pass."""
        return sum(1 for _, _, wake in self._sleepers if not wake.done())

    async def settle(self) -> None:
        """Let every runnable task run until it blocks (the fakes never wait on anything real)."""
        for _ in range(self.SETTLE_ROUNDS):
            await asyncio.sleep(0)

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking each sleep due on the way in order, then settle."""
        target = self.now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            at, _, wake = heapq.heappop(self._sleepers)
            self.now = max(self.now, at)
            if not wake.done():
                wake.set_result(None)
                await self.settle()
        self.now = target
        await self.settle()

    async def run(self, work: Awaitable[R], *, limit: float = 3600.0) -> R:
        """Await ``work`` here, letting time jump to the next due sleep whenever everything is blocked on one (as
        the wall clock would pass, without waiting for it). ``work`` returns without an extra turn of the loop:
        a command it started has not run a step yet. Fails if ``work`` blocks on anything else, or needs more
        than ``limit`` virtual seconds."""
        me = asyncio.current_task()
        assert me is not None
        start = self.now
        stuck: list[str] = []

        async def tick() -> None:
            while True:
                await self.settle()
                due = [at for at, _, wake in self._sleepers if not wake.done()]
                if not due or self.now - start > limit:
                    stuck.append("blocked on something other than the clock, or for too long")
                    me.cancel()
                    return
                await self.advance(max(min(due) - self.now, 0.0))

        ticker = asyncio.get_running_loop().create_task(tick())
        try:
            return await work
        except asyncio.CancelledError:
            if stuck:
                raise AssertionError(stuck[0]) from None
            raise
        finally:
            ticker.cancel()
