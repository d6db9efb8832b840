"""NodeClaim lifecycle: launch → registration → initialization, and the liveness timeouts.

Karpenter core ``pkg/controllers/nodeclaim/lifecycle/`` (``launch.go``, ``registration.go``,
``initialization.go``, ``liveness.go``), with the AWS provider's ``pkg/cloudprovider/cloudprovider.go``
(``Create``) for what a launch writes back:

* **Launch**: resolve the EC2NodeClass, ask the cloud provider for one instance among the NodeClaim's
  instance types, write ``status.providerID``/``imageID``/``capacity``/``allocatable``, the instance's labels
  and ``Launched=True``. ICE or a NodeClass that is not Ready deletes the NodeClaim (the next batch re-plans);
  any other error sets ``Launched=Unknown`` and retries with backoff. Every failure also backs off the pods
  planned onto the NodeClaim and tells them why (:mod:`karpy.controllers.launch_backoff`); a launch resets
  their back-off. The cloud provider adopts an instance
  already tagged with this NodeClaim's name, so a restart between launch and the status write never launches
  twice.
* **Registration**: the Node with the same providerID gets the NodeClaim's labels, ``karpenter.sh/registered``,
  the termination finalizer and an ownerReference; ``karpenter.sh/unregistered`` is removed;
  ``status.nodeName`` and ``Registered=True`` are set. karpy adds one step Karpenter does not need, because
  karpy binds its pods itself: the first patch turns ``karpenter.sh/unregistered`` from NoExecute into
  NoSchedule, so the binder can bind the pods planned onto this NodeClaim (a Binding ignores NoSchedule, and
  NoExecute would have the taint manager evict them; the binder waits ``BIND_SETTLE`` after the change, so the
  taint manager has seen it too) while kube-scheduler cannot race it onto the new node;
  the taint is removed once every pod planned onto this NodeClaim or a still-unregistered one of its batch (the
  same provisioning decision) is bound, or ``BIND_HOLD`` seconds after the Node appeared. The plan owner
  (:class:`~karpy.state.plans.Plans`) re-enqueues the hold when one of those pods is bound or a sibling
  registers, so nothing polls. ``status.nodeName`` is written when the Node is first linked, before any pod
  can be bound to it, so a NodeClaim never lags behind the pods running on its Node.
* **Initialization**: Node Ready, startup and ephemeral taints gone, requested extended resources present →
  ``karpenter.sh/initialized=true``, ``Initialized=True``, ``Ready=True``.
* **Liveness**: not launched 5 min after creation, or not registered 15 min after launch → delete
  (``liveness.go``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import attrs
import structlog

from karpy import metrics
from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json, set_condition
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.quantity import format_resource_list
from karpy.apis.taints import Taint, taints_json
from karpy.cloudprovider.types import (
    CloudProvider,
    InsufficientCapacityError,
    LaunchRequest,
    LaunchResult,
    NodeClaimNotFoundError,
    NodeClassNotReadyError,
)
from karpy.controllers import events as ev
from karpy.controllers.launch_backoff import LaunchBackoff, record_launch_failure
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.runtime.controller import Result
from karpy.runtime.fence import NotLeader
from karpy.scheduling.nodeoverlay import OverlayStore
from karpy.scheduling.translate import EPHEMERAL_TAINT_KEYS
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans, planned_pods
from karpy.state.views import NodeInfo

log = structlog.get_logger("karpy.nodeclaim.lifecycle")
LAUNCH_TTL = 300.0
OVERLAY_WAIT = 1.0  # seconds between launch attempts while the NodePool's NodeOverlays are not evaluated yet
REGISTRATION_TTL = 900.0
# Concurrent reconciles: ``Settings.linear_workers(MIN_WORKERS, MAX_WORKERS)`` (Karpenter core
# ``nodeclaim/lifecycle/controller.go``: ``LinearScaleReconciles(cpus, 1000, 5000)``, "higher concurrency limit
# since we want fast reaction to node syncing and launch"); idle workers are parked coroutines (a few KiB each).
# A launch holds its worker for the whole CreateFleet round trip, so a batch of N NodeClaims needs N workers to
# launch in parallel, and a Node that registers meanwhile must not wait behind launches (its pods are bound only
# once it is synced).
MIN_WORKERS = 1000
MAX_WORKERS = 5000
# Longest time the unregistered taint is held (as NoSchedule) for karpy's binder; a pod that cannot be bound
# by then is left to kube-scheduler (seconds since the Node was created).
BIND_HOLD = 15.0


def bind_hold_left(node: NodeInfo, now: float) -> float:
    """Seconds of ``node``'s bind hold left at ``now`` (epoch seconds; 0 once over)."""
    return max(BIND_HOLD - (now - node.created), 0.0)


class NodeClaimLifecycle:
    """Keyed by NodeClaim name."""

    name = "nodeclaim.lifecycle"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        events: EventRecorder,
        *,
        clock: Callable[[], float] = time.time,
        plans: Plans,
        backoff: LaunchBackoff | None = None,
        overlays: OverlayStore | None = None,
    ) -> None:
        self.client = client
        # NodeOverlays (gate NodeOverlay; None: off): the launch sees the NodePool's overlaid instance types, as
        # Karpenter AWS ``CloudProvider.Create`` applies the store (prices order the CreateFleet overrides).
        self.overlays = overlays
        self.state = state
        self.cloud = cloud
        self.events = events
        self.clock = clock
        self.plans = plans
        # Shared with the provisioner (which holds new NodeClaims for pods backing off).
        self.backoff = backoff or LaunchBackoff()

    async def reconcile(self, key: str) -> Result:
        """One step of the lifecycle for NodeClaim ``key``."""
        claim = self.state.nodeclaim_view(key)
        if claim is None or claim.deleting:
            return Result()
        if not claim.is_true(wk.COND_LAUNCHED):
            return await self._launch(claim)
        if not claim.is_true(wk.COND_REGISTERED):
            return await self._register(claim)
        if not claim.is_true(wk.COND_INITIALIZED):
            return await self._initialize(claim)
        return Result()

    def _applied(self, updated: dict[str, Any]) -> NodeClaim:
        """Apply the apiserver's answer for a NodeClaim to cluster state and return its view."""
        self.state.apply("NodeClaim", "MODIFIED", updated)
        return self.state.nodeclaim_view(str(updated["metadata"]["name"])) or NodeClaim.from_json(updated)

    # Launch -------------------------------------------------------------------------------------------

    async def _launch(self, claim: NodeClaim) -> Result:
        age = self.clock() - claim.meta.creation_timestamp
        if age > LAUNCH_TTL:
            return await self._delete(claim, "launch_timeout", f"not launched within {int(LAUNCH_TTL)}s")
        class_name = claim.node_class_ref.name
        nodeclass = self.state.nodeclass_view(class_name)
        if nodeclass is None or not nodeclass.is_true(wk.COND_READY):
            message = f"EC2NodeClass {class_name!r} not found or not ready"
            self._launch_failed(claim, "NodeClassNotReady", message)
            return await self._delete(claim, "nodeclass_not_ready", message)
        if self.overlays is not None and claim.nodepool and self.overlays.apply(claim.nodepool, ()) is None:
            # Karpenter fails the launch while the NodePool's overlays are not evaluated; karpy waits for them.
            log.debug("launch waits for the nodeoverlay evaluation", nodeclaim=claim.name, nodepool=claim.nodepool)
            return Result(requeue_after=OVERLAY_WAIT)
        try:
            request = await self._launch_request(claim, nodeclass)
            result = await self.cloud.create(request)
        except InsufficientCapacityError as err:
            self.events.record(ev.insufficient_capacity_error(claim, str(err)))
            self._launch_failed(claim, "InsufficientCapacityError", str(err))
            return await self._delete(claim, "insufficient_capacity", str(err))
        except NodeClassNotReadyError as err:
            self._launch_failed(claim, "NodeClassNotReady", str(err))
            return await self._delete(claim, "nodeclass_not_ready", str(err))
        except NotLeader:
            # The fence refused a write: this process is not (surely) the leader. Not a launch failure: no
            # backoff for the pods, no LaunchFailed condition (that write would be refused too); the leader
            # launches the claim, adopting an instance that this launch may have made.
            raise
        except Exception as err:
            self._launch_failed(claim, "LaunchFailed", str(err))
            await self._patch_conditions(claim, wk.COND_LAUNCHED, "Unknown", "LaunchFailed", str(err)[:300])
            raise
        await self._record_launch(claim, result)
        self.backoff.succeeded(planned_pods(claim.meta.annotations))
        return Result(requeue_after=REGISTRATION_TTL)

    def _launch_failed(self, claim: NodeClaim, reason: str, message: str) -> None:
        """Back off the NodeClaim's planned pods and publish ``reason`` on each (Warning)."""
        record_launch_failure(self.backoff, self.state, self.events, claim, reason, message[:300])

    async def _launch_request(self, claim: NodeClaim, nodeclass: EC2NodeClass) -> LaunchRequest:
        allowed: list[str] | None = None
        for req in claim.requirements:
            if req.key == wk.LABEL_INSTANCE_TYPE and req.operator == "In":
                allowed = list(req.values)
        types = await self.cloud.get_instance_types(nodeclass.raw)
        if self.overlays is not None and claim.nodepool:
            types = self.overlays.apply(claim.nodepool, types) or types
        catalogue = {it.name: it for it in types}
        if allowed is not None and any(n not in catalogue for n in allowed):
            # Types left out since the plan (the AMIs changed): the launch names the AMI instead of "no offering".
            left_out = (await self.cloud.incompatible_instance_types(nodeclass.raw)).instance_types
            catalogue.update({it.name: it for it in left_out if it.name not in catalogue})
        if allowed is None:
            instance_types = list(catalogue.values())
        else:
            instance_types = [catalogue[n] for n in allowed if n in catalogue]
        spec = claim.raw.get("spec") or {}  # the cloud provider takes requirements and taints as JSON
        return LaunchRequest(
            nodeclaim_name=claim.name,
            nodepool_name=claim.nodepool,
            nodeclass=nodeclass.raw,
            requirements=spec.get("requirements") or [],
            instance_types=instance_types,
            labels=dict(claim.meta.labels),
            taints=list(spec.get("taints") or []) + list(spec.get("startupTaints") or []),
            kubelet=nodeclass.kubelet,
        )

    async def _record_launch(self, claim: NodeClaim, result: LaunchResult) -> None:
        name = claim.name
        conditions = set_condition(
            conditions_json(claim.raw), wk.COND_LAUNCHED, "True", "Launched", "", claim.meta.generation
        )
        status = {
            "providerID": result.provider_id,
            "imageID": result.image_id,
            "capacity": format_resource_list(dict(result.capacity)),
            "allocatable": format_resource_list(dict(result.allocatable)),
            "conditions": conditions,
        }
        try:
            # Labels first: once Launched=True is written, a retry goes straight to registration and would never
            # write them (and the Node would never get the instance type, zone and capacity type).
            labels = {k: v for k, v in result.labels.items() if claim.meta.labels.get(k) != v}
            if labels:
                labelled = await self.client.merge_patch(NODECLAIMS, name, {"metadata": {"labels": labels}})
                self.state.apply("NodeClaim", "MODIFIED", labelled)
            updated = await self.client.merge_patch(NODECLAIMS, name, {"status": status}, subresource="status")
        except ApiError as err:
            if err.not_found:
                # Deleted while launching: its terminator found no instance yet and let it go; nothing else
                # would terminate this one before garbage collection's grace period.
                await self._terminate_unrecorded(result)
            raise
        self.state.apply("NodeClaim", "MODIFIED", updated)
        log.info(
            "launched nodeclaim",
            nodeclaim=name,
            provider_id=result.provider_id,
            instance_type=result.instance_type,
            zone=result.zone,
            capacity_type=result.capacity_type,
        )
        # No event here: the status-condition controller publishes Karpenter's "Launched" event (Status condition
        # transitioned, Type: Launched, Status: Unknown -> True) for this write (controllers/status_conditions.py).

    async def _terminate_unrecorded(self, result: LaunchResult) -> None:
        try:
            await self.cloud.delete(result.provider_id)
        except NodeClaimNotFoundError:
            return
        log.info("terminated instance of a deleted nodeclaim", provider_id=result.provider_id)

    # Registration -------------------------------------------------------------------------------------

    async def _register(self, claim: NodeClaim) -> Result:
        node = self.state.node_for_nodeclaim(claim)
        if node is None:
            launched = claim.condition(wk.COND_LAUNCHED)
            since = self.clock() - (launched.last_transition_time if launched is not None else 0.0)
            if since > REGISTRATION_TTL:
                return await self._delete(
                    claim, "registration_timeout", f"node not registered within {int(REGISTRATION_TTL)}s"
                )
            return Result(requeue_after=REGISTRATION_TTL - since + 1)
        if claim.node_name != node.name:
            claim = await self._link(claim, node)
            node = self.state.nodes.get(node.name) or node  # its resourceVersion may have moved meanwhile
        hold = self._binding_pending(claim, node)
        if node.labels.get(wk.LABEL_REGISTERED) != "true" or _unregistered_taint(node) != (
            "NoSchedule" if hold else None
        ):
            await self._sync_node(
                claim, node, hold=hold, initialized=not hold and _initialized_once_synced(claim, node)
            )
        if hold:
            # Re-enqueued by the plan owner when a pod of the batch is bound or a sibling registers; at the latest
            # when the hold expires.
            return Result(requeue_after=bind_hold_left(node, self.clock()) + 0.1)
        generation = claim.meta.generation
        conditions = set_condition(conditions_json(claim.raw), wk.COND_REGISTERED, "True", "Registered", "", generation)
        # A Node already initialized when it registers (Ready, no startup/ephemeral taint left: the hold for the
        # binder often outlasts kubelet's boot) gets Registered, Initialized and Ready in one status write instead
        # of two; the Node's initialized label is written before it, as initialization does.
        node = self.state.nodes.get(node.name) or node  # as the sync just left it
        initialized = not initialization_blocker(claim, node)
        if initialized:
            await self._label_initialized(node)
            conditions = _initialized_conditions(conditions, generation)
        updated = await self.client.merge_patch(
            NODECLAIMS,
            claim.name,
            {"status": {"nodeName": node.name, "conditions": conditions}},
            subresource="status",
        )
        registered = self._applied(updated)
        metrics.NODES_CREATED.labels(nodepool=claim.nodepool, zone=claim.meta.labels.get(wk.LABEL_ZONE, "")).inc()
        log.info("registered nodeclaim", nodeclaim=claim.name, node=node.name)
        if initialized:
            return _initialized(claim, node)
        return await self._initialize(registered)

    async def _link(self, claim: NodeClaim, node: NodeInfo) -> NodeClaim:
        """Write ``status.nodeName`` as soon as the Node with the NodeClaim's providerID is seen: before the Node
        is labelled registered, hence before the binder binds anything to it (Registered=True follows once the
        hold ends)."""
        updated = await self.client.merge_patch(
            NODECLAIMS, claim.name, {"status": {"nodeName": node.name}}, subresource="status"
        )
        return self._applied(updated)

    def _binding_pending(self, claim: NodeClaim, node: NodeInfo) -> bool:
        """Pods planned onto this NodeClaim, or onto another NodeClaim of its batch that has not registered yet,
        still wait for karpy's binder — within ``BIND_HOLD`` seconds of the Node's creation.

        The batch's other NodeClaims count because a node that registers early with room to spare would otherwise
        let kube-scheduler take pods planned for a node still booting (their plans were made together); holding
        the early node until the late one registers keeps every planned pod where the plan put it. NodeClaims of
        other decisions do not hold it.
        """
        if self.clock() - node.created > BIND_HOLD:
            return False
        name = claim.name
        for sibling in sorted(self.plans.batch_of(name)):
            if sibling != name and not self._unregistered_inflight(sibling):
                continue
            for info in self.plans.pods_of(sibling):
                if not self.state.waits_for_volume_binding(info.key):
                    return True
        return False

    def _unregistered_inflight(self, claim_name: str) -> bool:
        other = self.state.nodeclaim_view(claim_name)
        return other is not None and not other.deleting and not other.is_true(wk.COND_REGISTERED)

    async def _sync_node(
        self, claim: NodeClaim, node: NodeInfo, *, hold: bool = False, initialized: bool = False
    ) -> None:
        """Labels, taints, finalizer and ownerReference onto the Node; the unregistered taint becomes
        NoSchedule while ``hold`` (planned pods are being bound) and is dropped otherwise. ``initialized``: the
        Node is initialized once this patch lands, so it carries ``karpenter.sh/initialized=true`` too (one Node
        write, and one Node update event for kube-scheduler to re-queue its pods on, instead of two).

        One JSON patch (:func:`registration_ops`) without a resourceVersion precondition: the node's kubelet
        (KWOK, the node agent) updates the Node's status all the time, and a precondition on the whole object
        would make most of these writes 409s (Karpenter ``registration.go`` patches with an optimistic lock and
        requeues on conflict). The lists it edits are guarded by ``test`` operations on exactly the entries it
        changes, so a concurrent change of those fails the patch (422) instead of being overwritten; then the
        Node is read again into cluster state and the error raised: the reconcile is retried, and decides the hold
        and initialization again from the Node as it now is (as Karpenter requeues on a conflict).

        Raises:
            ApiError: the patch failed (a 422 after cluster state was refreshed).
        """
        try:
            updated = await self.client.json_patch(NODES, node.name, registration_ops(claim, node, hold, initialized))
        except ApiError as err:
            if err.status == 422:
                log.debug("registration patch test failed, reading the node again", node=node.name, error=str(err))
                self.state.apply("Node", "MODIFIED", await self.client.get(NODES, node.name))
            raise
        self.state.apply("Node", "MODIFIED", updated)

    # Initialization -----------------------------------------------------------------------------------

    async def _initialize(self, claim: NodeClaim) -> Result:
        node = self.state.node_for_nodeclaim(claim)
        if node is None:
            return Result(requeue_after=5.0)
        waiting = initialization_blocker(claim, node)
        if waiting:
            return Result(requeue_after=2.0)
        await self._label_initialized(node)
        generation = claim.meta.generation
        conditions = _initialized_conditions(conditions_json(claim.raw), generation)
        updated = await self.client.merge_patch(
            NODECLAIMS,
            claim.name,
            {"status": {"conditions": conditions}},
            subresource="status",
        )
        self.state.apply("NodeClaim", "MODIFIED", updated)
        return _initialized(claim, node)

    async def _label_initialized(self, node: NodeInfo) -> None:
        """``karpenter.sh/initialized=true`` on the Node (no write when it has it)."""
        if node.labels.get(wk.LABEL_INITIALIZED) != "true":
            updated_node = await self.client.merge_patch(
                NODES, node.name, {"metadata": {"labels": {wk.LABEL_INITIALIZED: "true"}}}
            )
            self.state.apply("Node", "MODIFIED", updated_node)

    # Helpers ------------------------------------------------------------------------------------------

    async def _patch_conditions(self, claim: NodeClaim, type_: str, status: str, reason: str, message: str) -> None:
        conditions = set_condition(conditions_json(claim.raw), type_, status, reason, message, claim.meta.generation)
        try:
            updated = await self.client.merge_patch(
                NODECLAIMS,
                claim.name,
                {"status": {"conditions": conditions}},
                subresource="status",
            )
            self.state.apply("NodeClaim", "MODIFIED", updated)
        except ApiError as err:
            log.debug("condition not written", error=str(err))

    async def _delete(self, claim: NodeClaim, reason: str, message: str) -> Result:
        name = claim.name
        log.info("deleting nodeclaim", nodeclaim=name, reason=reason, message=message)
        try:
            await self.client.delete(NODECLAIMS, name)
        except ApiError as err:
            if not err.not_found:
                raise
            return Result()
        # ``reason`` is Karpenter's: launch_timeout, registration_timeout, insufficient_capacity, nodeclass_not_ready.
        metrics.nodeclaim_disrupted(claim, reason)
        return Result()


def _synced_labels(claim: NodeClaim, initialized: bool) -> dict[str, str]:
    labels = {**claim.meta.labels, wk.LABEL_REGISTERED: "true"}
    if initialized:
        labels[wk.LABEL_INITIALIZED] = "true"
    return labels


def _owner_reference(claim: NodeClaim) -> dict[str, Any]:
    return {
        "apiVersion": f"{wk.GROUP}/{wk.VERSION}",
        "kind": "NodeClaim",
        "name": claim.name,
        "uid": claim.meta.uid,
        "blockOwnerDeletion": True,
    }


def _missing_taints(claim: NodeClaim, kept: list[Taint]) -> list[Taint]:
    """The NodeClaim's taints and startup taints the Node does not carry (by key and effect)."""
    wanted = list(claim.taints) + list(claim.startup_taints)
    return [t for t in wanted if all((t.key, t.effect) != (k.key, k.effect) for k in kept)]


def _pointer(token: str) -> str:
    """A JSON pointer token (RFC 6901: ``~`` and ``/`` escaped)."""
    return token.replace("~", "~0").replace("/", "~1")


def registration_ops(claim: NodeClaim, node: NodeInfo, hold: bool, initialized: bool) -> list[dict[str, Any]]:
    """The registration sync of ``node`` as JSON patch operations (RFC 6902) against the Node as cluster state
    holds it: each label set on its own (other labels untouched), the ownerReferences set to the NodeClaim's, the
    termination finalizer appended, and the taint list edited in place — the unregistered taint at its index
    (``test`` on its key and effect first) turned NoSchedule while ``hold`` or removed, the NodeClaim's missing
    taints appended. A list the Node does not have is added after a ``test`` that it is still absent (the
    apiserver's JSON patch takes ``null`` as matching a missing member)."""
    ops: list[dict[str, Any]] = []
    labels = _synced_labels(claim, initialized)
    if node.labels:
        ops += [
            {"op": "add", "path": f"/metadata/labels/{_pointer(k)}", "value": v}
            for k, v in labels.items()
            if node.labels.get(k) != v
        ]
    else:
        ops += [{"op": "test", "path": "/metadata/labels", "value": None}]
        ops += [{"op": "add", "path": "/metadata/labels", "value": labels}]
    ops.append({"op": "add", "path": "/metadata/ownerReferences", "value": [_owner_reference(claim)]})
    if not node.finalizers:
        ops.append({"op": "test", "path": "/metadata/finalizers", "value": None})
        ops.append({"op": "add", "path": "/metadata/finalizers", "value": [wk.FINALIZER_TERMINATION]})
    elif wk.FINALIZER_TERMINATION not in node.finalizers:
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": wk.FINALIZER_TERMINATION})
    index = next((i for i, t in enumerate(node.taints) if t.key == wk.TAINT_UNREGISTERED_KEY), None)
    kept = [t for t in node.taints if t.key != wk.TAINT_UNREGISTERED_KEY]
    if hold:
        kept.append(Taint(key=wk.TAINT_UNREGISTERED_KEY, effect="NoSchedule"))
    added = _missing_taints(claim, kept)
    if index is not None:
        current = node.taints[index]
        ops.append({"op": "test", "path": f"/spec/taints/{index}/key", "value": current.key})
        ops.append({"op": "test", "path": f"/spec/taints/{index}/effect", "value": current.effect})
        if hold:
            if current.effect != "NoSchedule":
                ops.append({"op": "replace", "path": f"/spec/taints/{index}/effect", "value": "NoSchedule"})
        else:
            ops.append({"op": "remove", "path": f"/spec/taints/{index}"})
    elif hold:
        added.append(Taint(key=wk.TAINT_UNREGISTERED_KEY, effect="NoSchedule"))
    if added and not node.taints:
        ops.append({"op": "test", "path": "/spec/taints", "value": None})
        ops.append({"op": "add", "path": "/spec/taints", "value": taints_json(added)})
    else:
        ops += [{"op": "add", "path": "/spec/taints/-", "value": t} for t in taints_json(added)]
    return ops


def _initialized_conditions(conditions: list[dict[str, Any]], generation: int | None) -> list[dict[str, Any]]:
    """``conditions`` with Initialized and Ready True (Karpenter core ``nodeclaim/lifecycle/initialization.go``)."""
    conditions = set_condition(conditions, wk.COND_INITIALIZED, "True", "Initialized", "", generation)
    return set_condition(conditions, wk.COND_READY, "True", "Ready", "", generation)


def _initialized(claim: NodeClaim, node: NodeInfo) -> Result:
    """Log the NodeClaim initialized (its Initialized/Ready status written); nothing left to do for it."""
    log.info("initialized nodeclaim", nodeclaim=claim.name, node=node.name)
    return Result()


def _initialized_once_synced(claim: NodeClaim, node: NodeInfo) -> bool:
    """The Node will be initialized as soon as registration drops its unregistered taint: Ready, no other
    ephemeral taint, every requested extended resource registered, and no startup taint (the sync puts the
    NodeClaim's startup taints on the Node)."""
    if claim.startup_taints:
        return False
    synced = attrs.evolve(node, taints=tuple(t for t in node.taints if t.key != wk.TAINT_UNREGISTERED_KEY))
    return not initialization_blocker(claim, synced)


def _unregistered_taint(node: NodeInfo) -> str | None:
    """The effect of the Node's ``karpenter.sh/unregistered`` taint, None when it has none."""
    return next((t.effect for t in node.taints if t.key == wk.TAINT_UNREGISTERED_KEY), None)


def initialization_blocker(claim: NodeClaim, node: NodeInfo) -> str:
    """Why ``node`` is not initialized yet ("" when it is): Node Ready, no startup taint of the NodeClaim and no
    known ephemeral taint left, every requested extended resource registered (Karpenter core
    ``pkg/controllers/nodeclaim/lifecycle/initialization.go``)."""
    if not node.ready:
        return "node not ready"
    startup = {(t.key, t.effect) for t in claim.startup_taints}
    for t in node.taints:
        if (t.key, t.effect) in startup:
            return f"startup taint {t.key} present"
        if t.key in EPHEMERAL_TAINT_KEYS or t.key.startswith("readiness.k8s.io/"):
            return f"ephemeral taint {t.key} present"
    for resource, amount in claim.requests.items():
        if (
            amount > 0
            and resource not in ("cpu", "memory", "pods", "ephemeral-storage")
            and node.allocatable.get(resource, 0) <= 0
        ):
            return f"extended resource {resource} not registered"
    return ""
