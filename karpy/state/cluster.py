"""ClusterState: the one in-memory view of Pods, Nodes, NodeClaims, NodePools, EC2NodeClasses and DaemonSets.
Namespaces, PersistentVolumes, PersistentVolumeClaims and StorageClasses are kept as slim views
(:mod:`karpy.state.storage`) for the scheduling simulation's namespaceSelector and volume topology.
With the ``CapacityBuffer`` gate, CapacityBuffers (JSON) and the PodTemplates, Deployments, StatefulSets and
ReplicaSets they reference (slim views, :mod:`karpy.state.buffers`) are kept too, and must be listed as well.
NodeClaims, NodePools and EC2NodeClasses are kept as their JSON (``nodeclaims``, ``nodepools``, ``nodeclasses``)
and, beside it, as typed views (:mod:`karpy.apis.nodeclaim`, :mod:`karpy.apis.nodepool`,
:mod:`karpy.apis.ec2nodeclass`; ``nodeclaim_view(name)`` …) built once when the object is stored and dropped
with it; each view keeps the JSON it was built from as ``raw``.

Fed by informers (:mod:`karpy.kube.watch`) and by the reconcilers' own writes (read-your-writes: a reconciler
that creates or patches an object applies the apiserver's answer at once, and an older watch event for the
same object is then ignored by resourceVersion). A write's answer can arrive after the watch's DELETED event
for the same object (different connections): the uids of deleted objects are kept as tombstones (uids never
come back; bounded to the last ``TOMBSTONES``), and anything carrying a tombstoned uid is ignored, so a late
answer never re-inserts a deleted object as a ghost. An answer that shows a Node or NodeClaim with a
deletionTimestamp and no finalizers left is itself a deletion (the apiserver removes such an object in that
write). All mutators are synchronous and run on the event loop, so readers never see a half-applied event.
Listeners are told about every change so controllers (and the plan owner, :mod:`karpy.state.plans`) can act.

Indexes: providerID → NodeClaim name and → Node name, node name → pod keys. ``synced`` is Karpenter's
``Cluster.Synced`` (state represents every NodeClaim and Node the apiserver has, joined by providerID):

* every kind listed at least once (``listed``) — karpy's informers are its cache, so from then on every
  existing NodeClaim and Node is in state, and the tombstones keep deleted ones out;
* every live NodeClaim has a providerID: one still launching has no capacity to plan onto yet, and a decision
  made meanwhile would launch a second node for pods that fit on it ("we need to wait to see what the resolved
  values are before continuing");
* every live Node karpy registered (``karpenter.sh/registered=true``) has the NodeClaim with its providerID.

The NodeClaim → Node direction is not required: a NodeClaim legitimately has no Node while it boots, or after
its Node was deleted outside karpy (the disruption rules and garbage collection handle that). Reconcilers that
make the state converge (launch, registration, termination) wait only for ``listed``; decisions (provisioning,
disruption) wait for ``synced``.
What it does not do: talk to the API (the reconcilers do), read karpy's annotations, or decide anything.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.meta import JSON
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodeoverlay import NodeOverlay
from karpy.apis.nodepool import NodePool
from karpy.scheduling.model import DaemonSet
from karpy.scheduling.translate import daemonset_view
from karpy.state.buffers import pod_template_view, workload_view
from karpy.state.storage import (
    namespace_view,
    persistent_volume_view,
    pod_volumes,
    pvc_view,
    storage_class_view,
)
from karpy.state.views import NodeInfo, PodInfo, node_info, pod_info

log = structlog.get_logger("karpy.state")
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
# Deleted objects' uids remembered (a write's answer for one of them is late and must not re-insert it).
TOMBSTONES = 10_000
# Kinds whose deletion has no grace period: a deletionTimestamp with no finalizers left means "gone".
NO_GRACEFUL_DELETION = frozenset({"Node", "NodeClaim", "NodePool", "EC2NodeClass"})
# Kinds kept as JSON and, beside it, as a typed view (karpy.apis) built once per event.
TYPED_VIEWS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "NodeClaim": NodeClaim.from_json,
    "NodePool": NodePool.from_json,
    "EC2NodeClass": EC2NodeClass.from_json,
    "NodeOverlay": NodeOverlay.from_json,
}
# Kinds kept as slim JSON views (karpy.state.storage), not whole objects.
SLIM_VIEWS: dict[str, Callable[[Mapping[str, Any]], JSON]] = {
    "Namespace": namespace_view,
    "PersistentVolume": persistent_volume_view,
    "PersistentVolumeClaim": pvc_view,
    "StorageClass": storage_class_view,
    # CapacityBuffer gate (karpy.state.buffers): what buffers reference, slim.
    "PodTemplate": pod_template_view,
    "Deployment": workload_view,
    "StatefulSet": workload_view,
    "ReplicaSet": workload_view,
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


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _stored_uid(obj: Any) -> str:
    if isinstance(obj, PodInfo):
        return obj.pod.uid
    if isinstance(obj, NodeInfo):
        return obj.uid
    return _uid(obj) if isinstance(obj, dict) else ""


def _finalized(obj: Mapping[str, Any]) -> bool:
    """Deleting with no finalizers left: the apiserver has removed the object."""
    meta = obj.get("metadata") or {}
    return bool(meta.get("deletionTimestamp")) and not meta.get("finalizers")


def _older(new_rv: str, old_rv: str) -> bool:
    """True when ``new_rv`` is strictly older than ``old_rv`` (etcd revisions are integers in practice)."""
    if new_rv.isdigit() and old_rv.isdigit():
        return int(new_rv) < int(old_rv)
    return False


class ClusterState:
    """See the module docstring. ``clock`` returns seconds (monotonic or wall; only differences matter)."""

    def __init__(self, clock: Callable[[], float] = time.time, *, extra_kinds: Iterable[str] = ()) -> None:
        self.clock = clock
        # Every kind that must be listed before :attr:`listed` holds: KINDS and the gated ones whose informers run
        # (``extra_kinds``, e.g. karpy.state.buffers.BUFFER_KINDS with the CapacityBuffer gate).
        self.kinds: tuple[str, ...] = (*KINDS, *extra_kinds)
        self.pods: dict[str, PodInfo] = {}
        self.nodes: dict[str, NodeInfo] = {}
        self.nodeclaims: dict[str, JSON] = {}
        self.nodepools: dict[str, JSON] = {}
        self.nodeclasses: dict[str, JSON] = {}
        # The same objects as typed views (karpy.apis), built when they are stored; read these in new code.
        self.nodeclaim_views: dict[str, NodeClaim] = {}
        self.nodepool_views: dict[str, NodePool] = {}
        self.nodeclass_views: dict[str, EC2NodeClass] = {}
        # NodeOverlays (gate NodeOverlay): JSON and typed views by name.
        self.nodeoverlays: dict[str, JSON] = {}
        self.nodeoverlay_views: dict[str, NodeOverlay] = {}
        self.daemonsets: dict[str, DaemonSet] = {}
        # Slim views (karpy.state.storage): Namespace by name, PV by name, PVC by namespace/name, StorageClass.
        self.namespaces: dict[str, JSON] = {}
        self.persistent_volumes: dict[str, JSON] = {}
        self.pvcs: dict[str, JSON] = {}
        self.storage_classes: dict[str, JSON] = {}
        # CapacityBuffers by namespace/name (whole JSON), and the slim objects they reference (karpy.state.buffers).
        self.capacity_buffers: dict[str, JSON] = {}
        self.pod_templates: dict[str, JSON] = {}
        self.workloads: dict[str, dict[str, JSON]] = {"Deployment": {}, "StatefulSet": {}, "ReplicaSet": {}}
        # Pod key → minimal pod JSON with its PVC-backed volumes, only for pods that have some.
        self.pod_volumes: dict[str, JSON] = {}
        self.pods_by_node: dict[str, set[str]] = defaultdict(set)
        self.node_by_provider_id: dict[str, str] = {}
        self.nodeclaim_by_provider_id: dict[str, str] = {}
        # Last time a non-DaemonSet pod was bound to or left a node (Karpenter lastPodEventTime).
        self.last_pod_event: dict[str, float] = {}
        self._listeners: list[Listener] = []
        self._synced_kinds: set[str] = set()
        self._tombstones: OrderedDict[str, None] = OrderedDict()
        self._sync_waiters: list[asyncio.Future[None]] = []
        self.changed = asyncio.Event()
        self.started_at = clock()

    # Listeners & sync gate ----------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` after every change."""
        self._listeners.append(listener)

    @property
    def listed(self) -> bool:
        """Every kind listed at least once."""
        return self._synced_kinds.issuperset(self.kinds)

    @property
    def synced(self) -> bool:
        """Karpenter ``Cluster.Synced`` (decisions must wait for this): every kind listed, and the NodeClaim ↔
        Node join complete (see the module docstring). Costs one pass over NodeClaims and Nodes."""
        return self.listed and not self.unsynced_reason()

    def unsynced_reason(self) -> str:
        """Why the NodeClaim ↔ Node join is incomplete ("" when it is complete)."""
        for name, claim in self.nodeclaims.items():
            if not deleting(claim) and not provider_id(claim):
                return f"nodeclaim {name} is not launched yet"
        for name, node in self.nodes.items():
            if node.deleting or not node.provider_id or node.labels.get(wk.LABEL_REGISTERED) != "true":
                continue
            if node.provider_id not in self.nodeclaim_by_provider_id:
                return f"node {name} was registered by a nodeclaim not seen yet"
        return ""

    def _notify(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        self.changed.set()
        if self._sync_waiters and kind in ("Node", "NodeClaim"):
            self._wake_sync_waiters()
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
        self._wake_sync_waiters()

    async def wait_listed(self) -> None:
        """Wait until every kind has been listed once."""
        while not self.listed:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._sync_waiters.append(waiter)
            await waiter

    async def wait_synced(self) -> None:
        """Wait until :attr:`synced` holds (re-checked on every Node or NodeClaim change and every LIST)."""
        while not self.synced:
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._sync_waiters.append(waiter)
            await waiter

    def _wake_sync_waiters(self) -> None:
        waiters, self._sync_waiters = self._sync_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def apply(self, kind: str, event_type: str, obj: JSON, *, force: bool = False) -> None:
        """One watch event or one of our own writes (the apiserver's answer).

        An object whose uid was deleted is ignored (a late write answer: see the module docstring); a Node or
        NodeClaim answer with a deletionTimestamp and no finalizers is applied as its deletion."""
        key = object_key(obj)
        uid = _uid(obj)
        if uid and uid in self._tombstones:
            log.debug("ignoring a deleted object", kind=kind, key=key, event_type=event_type)
            return
        if event_type == "DELETED" or (kind in NO_GRACEFUL_DELETION and _finalized(obj)):
            self._delete(kind, key, uid)
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
        if kind in TYPED_VIEWS:
            self._views(kind)[key] = TYPED_VIEWS[kind](obj)
        self._notify(kind, event_type, key, old, store.get(key))

    def _store(self, kind: str) -> dict[str, Any]:
        stores: dict[str, dict[str, Any]] = {
            "Pod": self.pods,
            "Node": self.nodes,
            "NodeClaim": self.nodeclaims,
            "NodePool": self.nodepools,
            "EC2NodeClass": self.nodeclasses,
            "NodeOverlay": self.nodeoverlays,
            "DaemonSet": self.daemonsets,
            "Namespace": self.namespaces,
            "PersistentVolume": self.persistent_volumes,
            "PersistentVolumeClaim": self.pvcs,
            "StorageClass": self.storage_classes,
            "CapacityBuffer": self.capacity_buffers,
            "PodTemplate": self.pod_templates,
            **self.workloads,
        }
        return stores[kind]

    def _views(self, kind: str) -> dict[str, Any]:
        views: dict[str, dict[str, Any]] = {
            "NodeClaim": self.nodeclaim_views,
            "NodePool": self.nodepool_views,
            "EC2NodeClass": self.nodeclass_views,
            "NodeOverlay": self.nodeoverlay_views,
        }
        return views[kind]

    def _bury(self, uid: str) -> None:
        if not uid:
            return
        self._tombstones[uid] = None
        self._tombstones.move_to_end(uid)
        while len(self._tombstones) > TOMBSTONES:
            self._tombstones.popitem(last=False)

    def _delete(self, kind: str, key: str, uid: str = "") -> None:
        store = self._store(kind)
        old = store.get(key)
        if old is not None and uid and _stored_uid(old) not in ("", uid):
            # The DELETED event of an older object with the same name: the stored one is its successor.
            self._bury(uid)
            return
        self._bury(uid or (_stored_uid(old) if old is not None else ""))
        store.pop(key, None)
        if kind in TYPED_VIEWS:
            self._views(kind).pop(key, None)
        if old is None:
            return
        if kind == "Pod":
            self._unindex_pod(old)
            self.pod_volumes.pop(key, None)
        elif kind == "Node":
            if old.provider_id:
                self.node_by_provider_id.pop(old.provider_id, None)
            self.last_pod_event.pop(old.name, None)
        elif kind == "NodeClaim":
            pid = provider_id(old)
            if pid and self.nodeclaim_by_provider_id.get(pid) == key:
                self.nodeclaim_by_provider_id.pop(pid, None)
        self._notify(kind, "DELETED", key, old, None)

    def _put_pod(self, key: str, info: PodInfo) -> None:
        old = self.pods.get(key)
        if old is not None:
            # Only a pod leaving its node (moved, finished) is a pod event; a status update of a pod that stays
            # must not restart the node's consolidateAfter clock (Karpenter's lastPodEventTime: bound or removed).
            left = old.node_name != info.node_name or (info.terminal and not old.terminal)
            self._unindex_pod(old, stamp=left)
        self.pods[key] = info
        if info.node_name and not info.terminal:
            self.pods_by_node[info.node_name].add(key)
            if not info.daemonset and (old is None or old.node_name != info.node_name):
                self.last_pod_event[info.node_name] = self.clock()

    def _put_pod_volumes(self, key: str, obj: JSON) -> None:
        volumes = pod_volumes(obj) if (obj.get("spec") or {}).get("volumes") else None
        if volumes is None:
            self.pod_volumes.pop(key, None)
        else:
            self.pod_volumes[key] = volumes

    def _unindex_pod(self, info: PodInfo, *, stamp: bool = True) -> None:
        if info.node_name:
            keys = self.pods_by_node.get(info.node_name)
            if keys is not None and info.key in keys:
                keys.discard(info.key)
                if stamp and not info.daemonset:
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

    # Queries ----------------------------------------------------------------------------------------

    def nodeclaim_view(self, name: str) -> NodeClaim | None:
        """The NodeClaim ``name`` as a typed view, if stored."""
        return self.nodeclaim_views.get(name)

    def nodepool_view(self, name: str) -> NodePool | None:
        """The NodePool ``name`` as a typed view, if stored."""
        return self.nodepool_views.get(name)

    def nodeclass_view(self, name: str) -> EC2NodeClass | None:
        """The EC2NodeClass ``name`` as a typed view, if stored."""
        return self.nodeclass_views.get(name)

    def node_for_nodeclaim(self, nodeclaim: NodeClaim | Mapping[str, Any]) -> NodeInfo | None:
        """The Node whose providerID is the NodeClaim's (view or JSON), if it has registered."""
        pid = nodeclaim.provider_id if isinstance(nodeclaim, NodeClaim) else provider_id(nodeclaim)
        name = self.node_by_provider_id.get(pid) if pid else None
        return self.nodes.get(name) if name else None

    def nodeclaim_for_node(self, node: NodeInfo) -> JSON | None:
        """The NodeClaim that launched ``node``, by providerID."""
        name = self.nodeclaim_by_provider_id.get(node.provider_id) if node.provider_id else None
        return self.nodeclaims.get(name) if name else None

    def nodeclaim_view_for_node(self, node: NodeInfo) -> NodeClaim | None:
        """The NodeClaim that launched ``node``, by providerID, as a typed view."""
        name = self.nodeclaim_by_provider_id.get(node.provider_id) if node.provider_id else None
        return self.nodeclaim_views.get(name) if name else None

    def pods_on(self, node_name: str) -> Iterable[PodInfo]:
        """Non-terminal pods bound to ``node_name``."""
        for key in self.pods_by_node.get(node_name, ()):
            info = self.pods.get(key)
            if info is not None:
                yield info

    def provisionable_pods(self) -> list[PodInfo]:
        """Provisionable pods (Karpenter ``IsProvisionable``); which of them are planned already is the plan
        owner's business (:meth:`karpy.state.plans.Plans.pending`)."""
        return [info for info in self.pods.values() if info.provisionable]

    def namespace_labels(self) -> dict[str, Mapping[str, str]]:
        """Namespace name → labels (for ``namespaceSelector`` of pod affinity terms)."""
        return {name: ns["metadata"]["labels"] for name, ns in self.namespaces.items()}

    def waits_for_volume_binding(self, pod_key: str) -> bool:
        """The pod has a PVC that is not bound to a volume yet (or does not exist yet, as an ephemeral volume's
        PVC before its controller creates it). Such a pod must be bound by kube-scheduler, whose VolumeBinding
        plugin records the chosen node on the PVC (``volume.kubernetes.io/selected-node``) so the storage
        provisioner creates the volume where the pod runs; a direct Binding would skip that step."""
        volumes = self.pod_volumes.get(pod_key)
        if volumes is None:
            return False
        namespace, pod_name = pod_key.split("/", 1)
        for volume in volumes["spec"]["volumes"]:
            if "persistentVolumeClaim" in volume:
                pvc_name = str(volume["persistentVolumeClaim"].get("claimName", ""))
            else:  # generic ephemeral volume: its PVC is named <pod>-<volume> (Kubernetes ephemeral.VolumeClaimName)
                pvc_name = f"{pod_name}-{volume['name']}"
            pvc = self.pvcs.get(f"{namespace}/{pvc_name}")
            if pvc is None or not pvc["spec"].get("volumeName"):
                return True
        return False

    def nodeclaim_views_of(self, nodepool: str) -> list[NodeClaim]:
        """The NodeClaims labelled with ``karpenter.sh/nodepool=<nodepool>``, as typed views."""
        return [nc for nc in self.nodeclaim_views.values() if nc.nodepool == nodepool]

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
