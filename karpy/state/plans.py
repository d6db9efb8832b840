"""The plan owner: which pods the provisioner planned onto which in-flight NodeClaim.

karpy binds the pods it launched a node for itself (:mod:`karpy.controllers.binder`), and while a plan is
open the pods are not pending (no second launch for them) and the new Node's ``karpenter.sh/unregistered``
taint is held as NoSchedule (:mod:`karpy.controllers.nodeclaim_lifecycle`). :class:`Plans` is the one owner of
that knowledge:

* **Index**: pod uid → the NodeClaim it is planned onto (one owner per pod), NodeClaim → its pods (uid → pod
  key), NodeClaim → its batch (the NodeClaims created by one provisioning decision). Only unbound, existing,
  non-terminal pods are in the index: a pod leaves it when it is bound, deleted or finished, or when the binder
  hands it to kube-scheduler (:meth:`release`). Keyed by uid, so a pod deleted and recreated under the same name
  (a StatefulSet's) is a new pod that is not planned.
* **Persistence**: the provisioner writes the plan on the NodeClaim (:meth:`annotations`), as
  ``karpy.sh/plan`` (JSON ``{"batch": id, "pods": {uid: "namespace/name"}}``) and, for older karpy versions and
  humans, ``karpy.sh/planned-pods`` (the sorted pod keys). Both are pruned whenever they are rewritten: only pods
  that exist and are unbound (or bound to a Node being vacated, whose replacement this is) are kept. After a
  restart the LIST rebuilds the index from them (a NodeClaim written by an older karpy has only the key list:
  its keys are resolved to the uids of the pods with those names).
* **Signals**: whenever the pods planned onto a NodeClaim change, or a NodeClaim of a batch registers or goes
  away, subscribers get the NodeClaim's name (the operator enqueues the binder for it and the registration
  hold of its batch), so nobody polls.

It is fed by :class:`~karpy.state.cluster.ClusterState`'s listener (pods, NodeClaims) and by the provisioner's
:meth:`record`; it does no I/O. A NodeClaim being deleted loses its plan: its pods move to another live
NodeClaim whose plan lists them (a re-plan after a failed launch), or become pending again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs
import structlog

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.state.cluster import ClusterState
from karpy.state.views import PodInfo

log = structlog.get_logger("karpy.plans")
PlanListener = Callable[[str], None]
"""Called with a NodeClaim name whenever its plan or its registration changed."""


@attrs.frozen
class RecordedPlan:
    """What a NodeClaim's annotations say: its batch and its pods (uid → key; uid "" for a legacy key-only
    entry)."""

    batch: str
    pods: tuple[tuple[str, str], ...]


def recorded_plan(nodeclaim: NodeClaim) -> RecordedPlan:
    """The plan recorded on a NodeClaim (``karpy.sh/plan``, else the legacy ``karpy.sh/planned-pods``)."""
    name = nodeclaim.name
    annotations = nodeclaim.meta.annotations
    raw = annotations.get(wk.ANNOTATION_PLAN)
    if raw:
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if isinstance(value, dict) and isinstance(value.get("pods"), dict):
            pods = tuple(sorted((str(uid), str(key)) for uid, key in value["pods"].items()))
            return RecordedPlan(batch=str(value.get("batch") or name), pods=pods)
    return RecordedPlan(batch=name, pods=tuple(("", key) for key in planned_pods(annotations)))


def planned_pods(annotations: Mapping[str, str]) -> list[str]:
    """Pod keys of the legacy annotation ``karpy.sh/planned-pods`` (JSON list of ``namespace/name``), from a
    NodeClaim's annotations."""
    raw = annotations.get(wk.ANNOTATION_PLANNED_PODS)
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def _open(info: PodInfo | None) -> bool:
    """A pod that can still follow a plan: exists, unbound, not deleting, not finished."""
    return info is not None and not info.node_name and not info.deleting and not info.terminal


class Plans:
    """See the module docstring. It starts from what ``state`` already holds and follows its changes once
    :meth:`follow` is called — before anything else subscribes to ``state``, so that its index is up to date when
    other listeners run."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._following = False
        self._owner: dict[str, str] = {}  # pod uid → NodeClaim name
        self._pods: dict[str, dict[str, str]] = {}  # NodeClaim name → {pod uid: pod key} it owns
        self._listed: dict[str, dict[str, str]] = {}  # NodeClaim name → {uid: key} its annotations list
        # Entries whose pod is not in state yet (a restart's LIST of NodeClaims before the Pods' one): pod uid →
        # (key, NodeClaim), and pod key → NodeClaim for key-only entries of an older karpy.
        self._awaiting: dict[str, tuple[str, str]] = {}
        self._legacy: dict[str, str] = {}
        self._batch: dict[str, str] = {}  # NodeClaim name → batch id
        self._batches: dict[str, set[str]] = {}  # batch id → live NodeClaim names
        self._seen: dict[str, str] = {}  # NodeClaim name → the annotation value last adopted
        self._registered: dict[str, bool] = {}  # live NodeClaim name → Registered=True when last seen
        self._listeners: list[PlanListener] = []
        for name, claim in state.nodeclaim_views.items():
            self._on_nodeclaim(name, claim)

    def follow(self) -> None:
        """Subscribe to ``state``'s changes (once; later calls do nothing). The constructor never does: the
        operator's wiring step calls this, as tests that change ``state`` afterwards must."""
        if not self._following:
            self._following = True
            self.state.subscribe(self._on_change)

    # Subscriptions ------------------------------------------------------------------------------------

    def subscribe(self, listener: PlanListener) -> None:
        """Call ``listener(nodeclaim_name)`` whenever that NodeClaim's plan or registration changes."""
        self._listeners.append(listener)

    def _signal(self, names: Iterable[str]) -> None:
        for name in sorted(set(names)):
            for listener in self._listeners:
                try:
                    listener(name)
                except Exception:  # a listener bug must not corrupt the plans
                    log.exception("plan listener failed", nodeclaim=name)

    # Queries ------------------------------------------------------------------------------------------

    def owner(self, uid: str) -> str | None:
        """The NodeClaim the pod with ``uid`` is planned onto, if any."""
        return self._owner.get(uid)

    def pods_of(self, nodeclaim: str) -> list[PodInfo]:
        """The open pods planned onto ``nodeclaim`` (sorted by key)."""
        out = []
        for uid, key in sorted(self._pods.get(nodeclaim, {}).items(), key=lambda item: item[1]):
            info = self.state.pods.get(key)
            if info is not None and info.pod.uid == uid and _open(info):
                out.append(info)
        return out

    def batch_of(self, nodeclaim: str) -> set[str]:
        """The live NodeClaims created by the same provisioning decision as ``nodeclaim`` (itself included)."""
        batch = self._batch.get(nodeclaim)
        return set(self._batches.get(batch, ())) | {nodeclaim} if batch else {nodeclaim}

    def batch_id(self, nodeclaim: str) -> str:
        """The batch id recorded for ``nodeclaim`` (its own name when it has none)."""
        return self._batch.get(nodeclaim, nodeclaim)

    def listed(self, nodeclaim: str) -> dict[str, str]:
        """Every pod ``nodeclaim``'s plan lists and that still exists, bound or not (uid → key): a replacement's
        plan keeps the pods still bound to the Node it replaces."""
        return dict(self._listed.get(nodeclaim, {}))

    def pending(self) -> list[PodInfo]:
        """Provisionable pods not planned onto a live NodeClaim."""
        return [info for info in self.state.provisionable_pods() if info.pod.uid not in self._owner]

    def nominated(self) -> set[str]:
        """NodeClaims with open pods planned onto them (Karpenter nomination: not disruption candidates)."""
        return {name for name, pods in self._pods.items() if pods}

    def __len__(self) -> int:
        return len(self._owner)

    # The provisioner's writes -------------------------------------------------------------------------

    def annotations(self, nodeclaim: str, batch: str, pods: Iterable[PodInfo | Any]) -> dict[str, str]:
        """The plan annotations for ``nodeclaim`` after adding ``pods`` (PodInfo or scheduling Pods) to what it
        lists, pruned to pods that exist and are unbound or still bound to a Node being vacated."""
        entries = {uid: key for uid, key in self._listed.get(nodeclaim, {}).items() if self._keep(uid, key)}
        for pod in pods:
            p = pod.pod if isinstance(pod, PodInfo) else pod
            entries[p.uid] = p.key
        return {
            wk.ANNOTATION_PLAN: json.dumps({"batch": batch, "pods": dict(sorted(entries.items()))}),
            wk.ANNOTATION_PLANNED_PODS: json.dumps(sorted(set(entries.values()))),
        }

    def record(self, nodeclaim: Mapping[str, Any]) -> None:
        """Adopt the plan written on ``nodeclaim`` (JSON: the apiserver's answer to the provisioner's create or
        patch): its pods are planned onto it from now on, even if an older plan held them."""
        self._adopt(NodeClaim.from_json(nodeclaim), take=True)

    def release(self, uid: str) -> None:
        """The pod is no longer planned (the binder left it to kube-scheduler); it may be planned again."""
        owner = self._owner.pop(uid, None)
        if owner is not None:
            self._pods.get(owner, {}).pop(uid, None)
            self._listed.get(owner, {}).pop(uid, None)
            self._signal([owner])

    # State changes ------------------------------------------------------------------------------------

    def _on_change(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        if kind == "Pod":
            self._on_pod(key, old, new)
        elif kind == "NodeClaim":
            # Cluster state stored the view with the JSON, before telling its listeners.
            self._on_nodeclaim(key, self.state.nodeclaim_view(key) if new is not None else None)

    def _on_pod(self, key: str, old: PodInfo | None, new: PodInfo | None) -> None:
        if new is not None and (self._awaiting or self._legacy):
            self._arrived(key, new)
        if new is not None and _open(new):
            return
        info = new or old
        if info is None:
            return
        uid = info.pod.uid
        owner = self._owner.pop(uid, None)
        if new is None or owner is not None:
            # Deleted, or bound where it was planned to go (or elsewhere): no plan lists it any more. A pod that
            # was already bound when planned (for a replacement of its Node) stays listed until it is deleted.
            for listed in self._listed.values():
                listed.pop(uid, None)
        if owner is not None:
            self._pods.get(owner, {}).pop(uid, None)
            self._signal([owner])

    def _arrived(self, key: str, info: PodInfo) -> None:
        """A pod a plan listed before it was in state."""
        uid = info.pod.uid
        entry = self._awaiting.pop(uid, None)
        claim = entry[1] if entry is not None else self._legacy.pop(key, None)
        if claim is None or claim not in self._pods:
            return
        self._listed[claim][uid] = key
        if _open(info) and uid not in self._owner:
            self._take(uid, key, claim)
            self._signal([claim])

    def _on_nodeclaim(self, name: str, new: NodeClaim | None) -> None:
        if new is None or new.deleting:
            self._forget(name)
            return
        self._adopt(new, take=False)
        registered = new.is_true(wk.COND_REGISTERED)
        before = self._registered.get(name)
        self._registered[name] = registered
        if before is not None and before != registered:
            self._signal([name])  # the registration hold of its batch siblings may end

    def _adopt(self, claim: NodeClaim, *, take: bool) -> None:
        """Index the plan annotated on a live NodeClaim, once per annotation value. ``take``: its pods move to
        it from any other NodeClaim; otherwise (a LIST after a restart, a watch event) a pod keeps a live owner."""
        name = claim.name
        annotations = claim.meta.annotations
        raw = f"{annotations.get(wk.ANNOTATION_PLAN, '')}\n{annotations.get(wk.ANNOTATION_PLANNED_PODS, '')}"
        if not take and self._seen.get(name) == raw and name in self._pods:
            return
        self._seen[name] = raw
        plan = recorded_plan(claim)
        self._set_batch(name, plan.batch)
        self._pods.setdefault(name, {})
        listed = self._listed.setdefault(name, {})
        changed = {name}
        for uid, key in plan.pods:
            info = self.state.pods.get(key)
            if info is None:  # not listed yet (or gone: then it never arrives, and goes with the NodeClaim)
                if uid:
                    self._awaiting[uid] = (key, name)
                else:
                    self._legacy[key] = name
                continue
            uid = uid or info.pod.uid  # a key-only entry of an older karpy: the pod of that name
            if info.pod.uid != uid:
                continue  # replaced by a new pod of the same name
            listed[uid] = key
            if not _open(info):
                continue
            owner = self._owner.get(uid)
            if owner == name:
                continue
            if owner is None or take or owner not in self._pods:
                if owner is not None:
                    changed.add(owner)
                self._take(uid, key, name)
        self._signal(changed)

    def _take(self, uid: str, key: str, name: str) -> None:
        owner = self._owner.get(uid)
        if owner is not None:
            self._pods.get(owner, {}).pop(uid, None)
        self._owner[uid] = name
        self._pods[name][uid] = key

    def _forget(self, name: str) -> None:
        """NodeClaim ``name`` is being deleted or gone: its pods move to another live NodeClaim whose plan lists
        them, or become pending again."""
        owned = self._pods.pop(name, None)
        self._listed.pop(name, None)
        self._seen.pop(name, None)
        self._registered.pop(name, None)
        batch = self._batch.pop(name, None)
        siblings: set[str] = set()
        if batch is not None:
            members = self._batches.get(batch, set())
            members.discard(name)
            siblings = set(members)
            if not members:
                self._batches.pop(batch, None)
        for key, claim in list(self._legacy.items()):
            if claim == name:
                del self._legacy[key]
        for uid, (_, claim) in list(self._awaiting.items()):
            if claim == name:
                del self._awaiting[uid]
        if owned is None:
            return
        changed = {name} | siblings
        for uid, key in owned.items():
            self._owner.pop(uid, None)
            heir = next((other for other, listed in self._listed.items() if uid in listed), None)
            if heir is not None and _open(self.state.pods.get(key)):
                self._take(uid, key, heir)
                changed.add(heir)
        self._signal(changed)

    def _set_batch(self, name: str, batch: str) -> None:
        previous = self._batch.get(name)
        if previous == batch:
            return
        if previous is not None:
            self._batches.get(previous, set()).discard(name)
        self._batch[name] = batch
        self._batches.setdefault(batch, set()).add(name)

    def _keep(self, uid: str, key: str) -> bool:
        """Whether a listed pod stays in a rewritten plan: it exists and is unbound, or is still bound to the
        Node of a NodeClaim being deleted (the pods a replacement was launched for)."""
        info = self.state.pods.get(key)
        if info is None or info.pod.uid != uid or info.deleting or info.terminal:
            return False
        if not info.node_name:
            return True
        node = self.state.nodes.get(info.node_name)
        claim = self.state.nodeclaim_view_for_node(node) if node is not None else None
        return claim is not None and claim.deleting


__all__ = ["PlanListener", "Plans", "RecordedPlan", "planned_pods", "recorded_plan"]
