"""ClusterState: the one in-memory view of Pods, Nodes, NodeClaims, NodePools, EC2NodeClasses and DaemonSets.
Namespaces, PersistentVolumes, PersistentVolumeClaims and StorageClasses are kept as slim views
(:mod:`karpy.state.storage`) for the scheduling simulation's namespaceSelector and volume topology.

Fed by informers (:mod:`karpy.kube.watch`) and by the reconcilers' own writes (read-your-writes: a reconciler
that creates or patches an object applies the apiserver's answer at once, and an older watch event for the
same object is then ignored by resourceVersion). All mutators are synchronous and run on the event loop, so
readers never see a half-applied event. Listeners are told about every change so controllers can enqueue keys.

Indexes: providerID → NodeClaim name and → Node name, node name → pod keys. ``synced`` is true once every
informer delivered its first LIST and every launched NodeClaim's Node (if any) is known (Karpenter H8).
What it does not do: talk to the API (the reconcilers do) or decide anything.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.scheduling.model import DaemonSet
from karpy.state.storage import (
    claim_view,
    namespace_view,
    persistent_volume_view,
    pod_volumes,
    storage_class_view,
)
from karpy.state.views import NodeInfo, PodInfo, daemonset_view, node_info, pod_info

log = structlog.get_logger("karpy.state")
JSON = dict[str, Any]
Listener = Callable[[str, str, str, Any, Any], None]
"""(kind, event_type, key, old, new) — called after every change."""

KINDS = (
    "Pod",
    "Node",
    "NodeClaim",
    "NodePool",
    "EC2NodeClass",
    "DaemonSet",
    # Scheduling inputs (issue 3): namespaceSelector of pod affinity terms, and volume topology.
    "Namespace",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "StorageClass",
)
# Kinds kept as slim JSON views (karpy.state.storage), not whole objects.
SLIM_VIEWS: dict[str, Callable[[Mapping[str, Any]], JSON]] = {
    "Namespace": namespace_view,
    "PersistentVolume": persistent_volume_view,
    "PersistentVolumeClaim": claim_view,
    "StorageClass": storage_class_view,
}


def object_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` for namespaced objects, ``name`` for cluster-scoped ones."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def _rv(obj: Any) -> str:
    if isinstance(obj, PodInfo | NodeInfo):
        return obj.resource_version
    if isinstance(obj, dict):
        return str((obj.get("metadata") or {}).get("resourceVersion", ""))
    return ""


def _older(new_rv: str, old_rv: str) -> bool:
    """True when ``new_rv`` is strictly older than ``old_rv`` (etcd revisions are integers in practice)."""
    if new_rv.isdigit() and old_rv.isdigit():
        return int(new_rv) < int(old_rv)
    return False


class ClusterState:
    """See the module docstring. ``clock`` returns seconds (monotonic or wall; only differences matter)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.pods: dict[str, PodInfo] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.nodeclaims: dict[str, JSON] = {}
        self.nodepools: dict[str, JSON] = {}
        self.nodeclasses: dict[str, JSON] = {}
        self.daemonsets: dict[str, DaemonSet] = {}
        # Slim views (karpy.state.storage): Namespace by name, PV by name, PVC by namespace/name, StorageClass.
        self.namespaces: dict[str, JSON] = {}
        self.persistent_volumes: dict[str, JSON] = {}
        self.claims: dict[str, JSON] = {}
        self.storage_classes: dict[str, JSON] = {}
        # Pod key → minimal pod JSON with its PVC-backed volumes, only for pods that have some.
        self.pod_volumes: dict[str, JSON] = {}
        self.pods_by_node: dict[str, set[str]] = defaultdict(set)
        self.node_by_provider_id: dict[str, str] = {}
        self.nodeclaim_by_provider_id: dict[str, str] = {}
        # Last time a non-DaemonSet pod was bound to or left a node (Karpenter lastPodEventTime).
        self.last_pod_event: dict[str, float] = {}
        # Pods the provisioner planned onto in-flight NodeClaims: pod key → NodeClaim name.
        self.planned: dict[str, str] = {}
        self._listeners: list[Listener] = []
        self._synced_kinds: set[str] = set()
        self.changed = asyncio.Event()
        self._synced_event = asyncio.Event()
        self.started_at = clock()

    # Listeners & sync gate ----------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` after every change."""
        self._listeners.append(listener)

    @property
    def synced(self) -> bool:
        """Every kind listed at least once (decisions must wait for this)."""
        return self._synced_kinds.issuperset(KINDS)

    def _notify(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        self.changed.set()
        for listener in self._listeners:
            try:
                listener(kind, event, key, old, new)
            except Exception:  # a listener bug must not corrupt the state
                log.exception("state listener failed", kind=kind, key=key)

    # WatchSink ------------------------------------------------------------------------------------------

    def replace(self, kind: str, items: list[JSON], resource_version: str = "") -> None:
        """A complete LIST of ``kind`` taken at ``resource_version``: apply every item, and drop what is no
        longer there.

        A re-list (after 410 Gone) must not undo karpy's own writes made after the LIST's snapshot: an item older
        than the stored object is skipped, and an object missing from the LIST is kept when it is newer than the
        snapshot (created after it; its deletion, if any, arrives through the watch).
        """
        current = {object_key(i) for i in items}
        store = self._store(kind)
        for key in list(store):
            if key not in current and not _older(resource_version, _rv(store[key])):
                self._delete(kind, key)
        for item in items:
            self.apply(kind, "MODIFIED", item)
        self._synced_kinds.add(kind)
        if self.synced:
            self._synced_event.set()

    async def wait_synced(self) -> None:
        """Wait until every kind has been listed once."""
        await self._synced_event.wait()

    def apply(self, kind: str, event_type: str, obj: JSON, *, force: bool = False) -> None:
        """One watch event or one of our own writes (the apiserver's answer)."""
        key = object_key(obj)
        if event_type == "DELETED":
            self._delete(kind, key)
            return
        store = self._store(kind)
        old = store.get(key)
        if old is not None and not force and _older(_rv(obj), _rv(old)):
            return  # a stale watch event after our own newer write
        if kind == "Pod":
            self._put_pod(key, pod_info(obj))
            self._put_pod_volumes(key, obj)
        elif kind == "Node":
            self._put_node(key, node_info(obj))
        elif kind == "NodeClaim":
            self._put_nodeclaim(key, obj)
        elif kind == "DaemonSet":
            self.daemonsets[key] = daemonset_view(obj)
        elif kind in SLIM_VIEWS:
            store[key] = SLIM_VIEWS[kind](obj)
        else:
            store[key] = obj
        self._notify(kind, event_type, key, old, store.get(key))

    def _store(self, kind: str) -> dict[str, Any]:
        stores: dict[str, dict[str, Any]] = {
            "Pod": self.pods,
            "Node": self.nodes,
            "NodeClaim": self.nodeclaims,
            "NodePool": self.nodepools,
            "EC2NodeClass": self.nodeclasses,
            "DaemonSet": self.daemonsets,
            "Namespace": self.namespaces,
            "PersistentVolume": self.persistent_volumes,
            "PersistentVolumeClaim": self.claims,
            "StorageClass": self.storage_classes,
        }
        return stores[kind]

    def _delete(self, kind: str, key: str) -> None:
        store = self._store(kind)
        old = store.pop(key, None)
        if old is None:
            return
        if kind == "Pod":
            self._unindex_pod(old)
            self.planned.pop(key, None)
            self.pod_volumes.pop(key, None)
        elif kind == "Node":
            if old.provider_id:
                self.node_by_provider_id.pop(old.provider_id, None)
            self.last_pod_event.pop(old.name, None)
        elif kind == "NodeClaim":
            pid = provider_id(old)
            if pid and self.nodeclaim_by_provider_id.get(pid) == key:
                self.nodeclaim_by_provider_id.pop(pid, None)
            self._replan_away_from(key)
        self._notify(kind, "DELETED", key, old, None)

    def _put_pod(self, key: str, info: PodInfo) -> None:
        old = self.pods.get(key)
        if old is not None:
            self._unindex_pod(old)
        self.pods[key] = info
        if info.node_name and not info.terminal:
            self.pods_by_node[info.node_name].add(key)
            self.planned.pop(key, None)  # bound: the plan is fulfilled
            if not info.daemonset and (old is None or old.node_name != info.node_name):
                self.last_pod_event[info.node_name] = self.clock()

    def _put_pod_volumes(self, key: str, obj: JSON) -> None:
        volumes = pod_volumes(obj) if (obj.get("spec") or {}).get("volumes") else None
        if volumes is None:
            self.pod_volumes.pop(key, None)
        else:
            self.pod_volumes[key] = volumes

    def _unindex_pod(self, info: PodInfo) -> None:
        if info.node_name:
            keys = self.pods_by_node.get(info.node_name)
            if keys is not None and info.key in keys:
                keys.discard(info.key)
                if not info.daemonset:
                    self.last_pod_event[info.node_name] = self.clock()
                if not keys:
                    self.pods_by_node.pop(info.node_name, None)

    def _put_node(self, key: str, info: NodeInfo) -> None:
        old = self.nodes.get(key)
        if old is not None and old.provider_id and old.provider_id != info.provider_id:
            self.node_by_provider_id.pop(old.provider_id, None)
        self.nodes[key] = info
        if info.provider_id:
            self.node_by_provider_id[info.provider_id] = key
        self.last_pod_event.setdefault(key, self.clock())

    def _put_nodeclaim(self, key: str, obj: JSON) -> None:
        old = self.nodeclaims.get(key)
        if old is not None:
            old_pid = provider_id(old)
            if old_pid and old_pid != provider_id(obj):
                self.nodeclaim_by_provider_id.pop(old_pid, None)
        self.nodeclaims[key] = obj
        pid = provider_id(obj)
        if pid:
            self.nodeclaim_by_provider_id[pid] = key
        if deleting(obj):
            self._replan_away_from(key)
            return
        for pod_key in planned_pods(obj):
            pod = self.pods.get(pod_key)
            if pod is not None and pod.node_name:
                continue
            owner = self.planned.get(pod_key)
            # A pod re-planned onto this NodeClaim after its first one failed (deleted, e.g. on ICE) belongs
            # here now: keeping the dead owner would make the provisioner plan it again and again.
            if owner is None or owner == key or not self._live_nodeclaim(owner):
                self.planned[pod_key] = key

    def _live_nodeclaim(self, name: str) -> bool:
        claim = self.nodeclaims.get(name)
        return claim is not None and not deleting(claim)

    def _replan_away_from(self, name: str) -> None:
        """Pods planned onto NodeClaim ``name`` (deleting or deleted) move to another live NodeClaim whose plan
        lists them, or become pending again."""
        moved = [p for p, nc in self.planned.items() if nc == name]
        if not moved:
            return
        for pod_key in moved:
            self.planned.pop(pod_key, None)
        wanted = set(moved)
        for other, claim in self.nodeclaims.items():
            if other == name or deleting(claim):
                continue
            for pod_key in planned_pods(claim):
                if pod_key in wanted:
                    self.planned[pod_key] = other
                    wanted.discard(pod_key)

    # Queries ----------------------------------------------------------------------------------------

    def node_for_nodeclaim(self, nodeclaim: Mapping[str, Any]) -> NodeInfo | None:
        """The Node whose providerID is the NodeClaim's, if it has registered."""
        pid = provider_id(nodeclaim)
        name = self.node_by_provider_id.get(pid) if pid else None
        return self.nodes.get(name) if name else None

    def nodeclaim_for_node(self, node: NodeInfo) -> JSON | None:
        """The NodeClaim that launched ``node``, by providerID."""
        name = self.nodeclaim_by_provider_id.get(node.provider_id) if node.provider_id else None
        return self.nodeclaims.get(name) if name else None

    def pods_on(self, node_name: str) -> Iterable[PodInfo]:
        """Non-terminal pods bound to ``node_name``."""
        for key in self.pods_by_node.get(node_name, ()):
            info = self.pods.get(key)
            if info is not None:
                yield info

    def pending_pods(self) -> list[PodInfo]:
        """Provisionable pods (Karpenter ``IsProvisionable``) not already planned onto a live NodeClaim."""
        out = []
        for key, info in self.pods.items():
            if not info.provisionable:
                continue
            planned_on = self.planned.get(key)
            if (
                planned_on is not None
                and planned_on in self.nodeclaims
                and not deleting(self.nodeclaims[planned_on])
            ):
                continue
            out.append(info)
        return out

    def namespace_labels(self) -> dict[str, Mapping[str, str]]:
        """Namespace name → labels (for ``namespaceSelector`` of pod affinity terms)."""
        return {name: ns["metadata"]["labels"] for name, ns in self.namespaces.items()}

    def waits_for_volume_binding(self, pod_key: str) -> bool:
        """The pod has a PVC that is not bound to a volume yet (or does not exist yet, as an ephemeral volume's
        claim before its controller creates it). Such a pod must be bound by kube-scheduler, whose VolumeBinding
        plugin records the chosen node on the claim (``volume.kubernetes.io/selected-node``) so the storage
        provisioner creates the volume where the pod runs; a direct Binding would skip that step."""
        volumes = self.pod_volumes.get(pod_key)
        if volumes is None:
            return False
        namespace, pod_name = pod_key.split("/", 1)
        for volume in volumes["spec"]["volumes"]:
            if "persistentVolumeClaim" in volume:
                claim_name = str(volume["persistentVolumeClaim"].get("claimName", ""))
            else:  # generic ephemeral volume: its claim is named <pod>-<volume> (Kubernetes ephemeral.VolumeClaimName)
                claim_name = f"{pod_name}-{volume['name']}"
            claim = self.claims.get(f"{namespace}/{claim_name}")
            if claim is None or not claim["spec"].get("volumeName"):
                return True
        return False

    def nodeclaims_of(self, nodepool: str) -> list[JSON]:
        """The NodeClaims labelled with ``karpenter.sh/nodepool=<nodepool>``."""
        return [
            nc
            for nc in self.nodeclaims.values()
            if ((nc.get("metadata") or {}).get("labels") or {}).get(wk.LABEL_NODEPOOL) == nodepool
        ]


def provider_id(obj: Mapping[str, Any]) -> str:
    """``status.providerID`` of a NodeClaim ("" before launch)."""
    return str((obj.get("status") or {}).get("providerID") or "")


def deleting(obj: Mapping[str, Any]) -> bool:
    """The object has a deletionTimestamp."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def planned_pods(nodeclaim: Mapping[str, Any]) -> list[str]:
    """Pod keys recorded on a NodeClaim by the provisioner (annotation ``karpy.sh/planned-pods``)."""
    import json

    raw = ((nodeclaim.get("metadata") or {}).get("annotations") or {}).get(wk.ANNOTATION_PLANNED_PODS)
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    """The status condition of ``type_``, if present."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    """The condition exists with status True."""
    c = condition(obj, type_)
    return bool(c and c.get("status") == "True")
