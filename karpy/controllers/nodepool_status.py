"""NodePool status: ``ValidationSucceeded``, ``NodeClassReady``, ``Ready``, ``resources``, ``nodes`` and the hash.

Karpenter core ``pkg/controllers/nodepool/{readiness,validation,counter,hash}/controller.go``: ``Ready`` =
``ValidationSucceeded`` ∧ ``NodeClassReady``; ``status.resources`` is the summed capacity of the pool's
NodeClaims and ``status.nodes`` their number; the ``karpenter.sh/nodepool-hash`` annotations are kept current.
Only Ready NodePools provision;
an invalid NodePool or one whose EC2NodeClass is missing gets ``Ready=False`` with a reason and a Warning
event, never a crash: the other NodePools keep working.

A Ready NodePool whose requirements (and template labels) no instance type of its EC2NodeClass can ever satisfy
(``kubernetes.io/arch DoesNotExist``, an instance family that does not exist, a zone outside every subnet) gets
a Warning event ``NoCompatibleInstanceTypes`` and a log line, as Karpenter's scheduler publishes when a
NodePool's requirements filter out every instance type; like Karpenter it stays Ready (no condition: Karpenter
v1 has none for this). "Ever" ignores offering availability (an ICE'd or unpriced offering may come back).

A NodePool using a Karpenter v1.15 capability karpy does not implement yet is never silently treated as something
else: it gets the condition ``FeaturesSupported=False`` (reason ``UnsupportedFeature``, the message names each field
and what karpy does instead; the condition is absent otherwise, as Karpenter has none) and a Warning event
``UnsupportedFeature`` whenever that message changes. Where karpy cannot honour the field at all it also sets
``ValidationSucceeded=False`` with reason ``UnsupportedFeature``, so the NodePool is not Ready and karpy does not
provision from it (:func:`unsupported_features`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

import structlog

from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json, same_conditions, set_condition
from karpy.apis.hashing import legacy_nodepool_hash, nodepool_hash
from karpy.apis.nodepool import NodePool
from karpy.apis.quantity import QuantityError, format_resource_list, parse_resource_list
from karpy.apis.resources import add
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InstanceType
from karpy.controllers import events as ev
from karpy.controllers.hash_restamp import nodepool_stamp, restamp_nodeclaims
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import NODEPOOLS
from karpy.runtime.controller import Result
from karpy.scheduling.instancetypes import labels_allow, offering_allowed, reservation_of, type_labels
from karpy.scheduling.translate import template_requirements
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.nodepool")
KNOWN_VALUES = {wk.LABEL_CAPACITY_TYPE: {"on-demand", "spot", "reserved"}}


def validate(nodepool: NodePool) -> str:
    """Runtime checks the CRD's CEL cannot express; "" when valid, else the reason message.

    A requirement on a key with known values (``karpenter.sh/capacity-type``) must keep at least one valid value,
    and the limits must be quantities: Karpenter core ``pkg/apis/v1/nodeclaim_validation.go``
    (``validateWellKnownValues``).
    """
    for req in nodepool.template.requirements:
        if req.operator == "In" and req.key in KNOWN_VALUES:
            values = set(req.values)
            if not values & KNOWN_VALUES[req.key]:
                return f"requirement {req.key} In {sorted(values)} has no valid value"
    try:
        parse_resource_list(dict(nodepool.limits))
    except QuantityError as err:
        return f"invalid limits: {err}"
    return ""


COND_FEATURES_SUPPORTED: Final = "FeaturesSupported"
UNSUPPORTED_FEATURE: Final = "UnsupportedFeature"


class Unsupported(NamedTuple):
    """A Karpenter capability a NodePool uses that karpy does not implement yet.

    ``message`` names the field and says what karpy does instead; ``blocking`` is True when karpy cannot honour it
    at all, so the NodePool is not Ready (karpy does not provision from it).
    """

    field: str
    message: str
    blocking: bool


def unsupported_features(nodepool: NodePool, *, static_capacity: bool = False) -> list[Unsupported]:
    """The Karpenter v1.15 capabilities ``nodepool`` uses that karpy does
    not implement yet, in field order. Per capability (gates from core ``pkg/operator/options/options.go``):

    * ``spec.replicas`` (static NodePool; gate ``StaticCapacity``, default off; ``static_capacity`` is the gate).
      Implemented (:mod:`karpy.controllers.static_capacity`). Whatever the gate, Karpenter never provisions for pods
      from a static NodePool nor consolidates its nodes (core ``provisioner.go`` ``NewScheduler``,
      ``disruption/types.go`` ``OwnedByStaticNodePool``); it keeps ``replicas`` nodes only with the gate on, and the
      NodePool is Ready either way. karpy does the same; with the gate off it also says so here (not blocking), so
      a NodePool that never gets its nodes is not a silent mystery.

    ``spec.disruption.consolidationPolicy: Balanced`` is implemented (:mod:`karpy.consolidation.balanced`).
    Capacity reservations (gate ``ReservedCapacity``, default on) are implemented
    (:mod:`karpy.aws.capacityreservations`); with the gate off karpy, as Karpenter, offers no ``reserved``
    capacity, so a NodePool allowing only ``reserved`` launches nothing, in both.
    NodeOverlay and node repair are no NodePool fields: with Karpenter's defaults (gates ``NodeOverlay`` and
    ``NodeRepair`` off) Karpenter ignores NodeOverlays and repairs no node, as karpy does.
    """
    spec = nodepool.raw.get("spec") or {}
    out: list[Unsupported] = []
    replicas = spec.get("replicas")
    if replicas is not None and not static_capacity:
        out.append(
            Unsupported(
                "spec.replicas",
                f"spec.replicas ({replicas}, a static NodePool) needs the StaticCapacity feature gate, which is "
                "off (FEATURE_GATES, Karpenter's default): as Karpenter, karpy keeps no nodes for this NodePool "
                "and provisions none from it for pods",
                False,
            )
        )
    return out


def _features_condition(conditions: list[Any], unsupported: list[Unsupported], generation: int | None) -> list[Any]:
    """``conditions`` with ``FeaturesSupported=False`` naming ``unsupported``, or without that condition."""
    if not unsupported:
        return [c for c in conditions if c.get("type") != COND_FEATURES_SUPPORTED]
    message = "; ".join(u.message for u in unsupported)
    return set_condition(conditions, COND_FEATURES_SUPPORTED, "False", UNSUPPORTED_FEATURE, message, generation)


def nodeclass_readiness(nodepool: NodePool, state: ClusterState) -> tuple[str, str, str]:
    """(status, reason, message) of ``NodeClassReady``."""
    ref = nodepool.template.node_class_ref
    if not ref.ec2nodeclass:
        return (
            "False",
            "NodeClassNotSupported",
            f"nodeClassRef {ref.group or None}/{ref.kind or None} is not supported",
        )
    name = ref.name
    nodeclass = state.nodeclass_view(name)
    if nodeclass is None:
        return "False", "NodeClassNotFound", f"EC2NodeClass {name!r} not found"
    if nodeclass.deleting:
        return "False", "NodeClassTerminating", f"EC2NodeClass {name!r} is terminating"
    ready = nodeclass.condition(wk.COND_READY)
    if ready is None:
        return "Unknown", "NodeClassReadinessUnknown", f"EC2NodeClass {name!r} has no Ready condition yet"
    if not ready.true:
        return "False", ready.reason or "NodeClassNotReady", ready.message
    return "True", "NodeClassReady", ""


NO_COMPATIBLE_TYPES = ev.NO_COMPATIBLE_INSTANCE_TYPES


def compatible_instance_types(nodepool: NodePool, instance_types: list[InstanceType]) -> list[str]:
    """Names of the types that can satisfy the NodePool's requirements and template labels, with at least one
    offering (zone, capacity type) they allow, available or not (Karpenter ``filterInstanceTypesByRequirements``
    on the NodeClaim template, without pods)."""
    reqs = template_requirements(nodepool.raw)  # narrowed by the template labels: what a NodeClaim requires
    return [
        it.name
        for it in instance_types
        if labels_allow(type_labels(it), reqs)
        and any(offering_allowed(o.zone, o.capacity_type, o.zone_id, reqs, reservation_of(o)) for o in it.offerings)
    ]


class NodePoolStatusReconciler:
    """Keyed by NodePool name.

    Args:
        cloud: the instance types of each EC2NodeClass, for the ``NoCompatibleInstanceTypes`` warning (None: no
            such check, as in tests that only look at conditions).
        static_capacity: the ``StaticCapacity`` feature gate (see :func:`unsupported_features`).
    """

    name = "nodepool.status"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        events: EventRecorder,
        *,
        cloud: CloudProvider | None = None,
        static_capacity: bool = False,
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.cloud = cloud
        self.static_capacity = static_capacity  # the StaticCapacity feature gate
        self._incompatible: set[str] = set()  # NodePools last found with no compatible type (log on change)

    async def reconcile(self, key: str) -> Result:
        """Recompute conditions, resources and node count; write them when they changed."""
        nodepool = self.state.nodepool_view(key)
        if nodepool is None or nodepool.deleting:
            return Result()
        await self._ensure_hash(nodepool)
        generation = nodepool.meta.generation
        stored = conditions_json(nodepool.raw)
        unsupported = unsupported_features(nodepool, static_capacity=self.static_capacity)
        validation = ("True", "ValidationSucceeded", "")
        if invalid := validate(nodepool):
            validation = ("False", "ValidationFailed", invalid)
        elif blocking := "; ".join(u.message for u in unsupported if u.blocking):
            validation = ("False", UNSUPPORTED_FEATURE, blocking)
        conditions = set_condition(stored, wk.COND_VALIDATION_SUCCEEDED, *validation, generation)
        conditions = _features_condition(conditions, unsupported, generation)
        nc_status, nc_reason, nc_message = nodeclass_readiness(nodepool, self.state)
        conditions = set_condition(conditions, wk.COND_NODECLASS_READY, nc_status, nc_reason, nc_message, generation)
        if validation[0] != "True":
            ready = validation
        elif nc_status != "True":
            ready = (nc_status, nc_reason, nc_message)
        else:
            ready = ("True", "Ready", "")
        conditions = set_condition(conditions, wk.COND_READY, *ready, generation)
        if ready[0] == "True":
            await self._check_instance_types(key, nodepool)
        resources, nodes = self._usage(key)
        if same_conditions(conditions, stored) and nodepool.resources == resources and nodepool.nodes == nodes:
            return Result()
        before = nodepool.condition(wk.COND_READY)
        was_ready = before.status if before is not None else None
        # A merge patch merges maps: a resource that dropped out of the usage must be nulled explicitly, or the
        # stored status never equals the computed one and every reconcile writes again (a patch storm).
        stale = {k: None for k in nodepool.resources if k not in resources}
        patch = {"status": {"conditions": conditions, "resources": {**stale, **resources}, "nodes": nodes}}
        try:
            updated = await self.client.merge_patch(NODEPOOLS, key, patch, subresource="status")
        except ApiError as err:
            if err.not_found:
                return Result()
            raise
        self.state.apply("NodePool", "MODIFIED", updated)
        self._report_unsupported(key, updated, nodepool, unsupported)
        if ready[0] != "True" and was_ready != ready[0]:
            log.info("nodepool not ready", nodepool=key, reason=ready[1], message=ready[2])
            self.events.publish(updated, WARNING, ready[1], f"NodePool {key} is not ready: {ready[2]}")
        elif ready[0] == "True" and was_ready != "True":
            log.info("nodepool ready", nodepool=key)
        return Result()

    def _report_unsupported(
        self, key: str, updated: Mapping[str, Any], before: NodePool, unsupported: list[Unsupported]
    ) -> None:
        """A Warning event (and a log line) when the unsupported capabilities changed and some remain."""
        previous = before.condition(COND_FEATURES_SUPPORTED)
        message = "; ".join(u.message for u in unsupported)
        if not unsupported or (previous is not None and previous.message == message):
            return
        log.warning("nodepool uses unsupported features", nodepool=key, fields=[u.field for u in unsupported])
        self.events.publish(updated, WARNING, UNSUPPORTED_FEATURE, f"NodePool {key}: {message}")

    async def _check_instance_types(self, key: str, nodepool: NodePool) -> None:
        """Warn (event + log) when no instance type of the NodePool's EC2NodeClass can satisfy it."""
        if self.cloud is None:
            return
        nodeclass = self.state.nodeclass_view(nodepool.template.node_class_ref.name)
        if nodeclass is None:
            return
        try:
            types = await self.cloud.get_instance_types(nodeclass.raw)
        except CloudProviderError as err:  # not known now: nothing to say about compatibility
            log.debug("nodepool instance types unknown", nodepool=key, error=str(err)[:300])
            return
        if not types or compatible_instance_types(nodepool, types):
            if key in self._incompatible:
                self._incompatible.discard(key)
                log.info("nodepool has compatible instance types again", nodepool=key)
            return
        if key not in self._incompatible:
            self._incompatible.add(key)
            log.warning(
                "nodepool requirements filtered out all instance types", nodepool=key, instance_types=len(types)
            )
        self.events.record(ev.no_compatible_instance_types(nodepool))

    async def _ensure_hash(self, nodepool: NodePool) -> None:
        """Stamp the NodePool's hash annotations (Karpenter core ``pkg/controllers/nodepool/hash``), first
        re-stamping its NodeClaims when only the hash algorithm changed (:mod:`karpy.controllers.hash_restamp`).

        Raises:
            ApiError: a patch was refused; the reconcile is retried.
        """
        annotations = nodepool.meta.annotations
        want = nodepool_hash(nodepool.raw)
        if (
            annotations.get(wk.ANNOTATION_NODEPOOL_HASH) == want
            and annotations.get(wk.ANNOTATION_NODEPOOL_HASH_VERSION) == wk.NODEPOOL_HASH_VERSION
        ):
            return
        stamp = nodepool_stamp(want, legacy_nodepool_hash(nodepool.raw))
        claims = self.state.nodeclaim_views_of(nodepool.name)
        await restamp_nodeclaims(self.client, self.state, claims, annotations, stamp)
        patch = {
            "metadata": {
                "annotations": {
                    wk.ANNOTATION_NODEPOOL_HASH: want,
                    wk.ANNOTATION_NODEPOOL_HASH_VERSION: wk.NODEPOOL_HASH_VERSION,
                }
            }
        }
        updated = await self.client.merge_patch(NODEPOOLS, nodepool.name, patch)
        self.state.apply("NodePool", "MODIFIED", updated)

    def _usage(self, nodepool: str) -> tuple[dict[str, str], int]:
        """Summed NodeClaim capacity (Karpenter counter controller) and the number of NodeClaims."""
        total: dict[str, int] = {}
        claims = [nc for nc in self.state.nodeclaim_views_of(nodepool) if not nc.deleting]
        for nc in claims:
            total = add(total, nc.capacity)  # an invalid capacity reads {} in the view: it adds nothing
        total.setdefault("nodes", len(claims))
        return format_resource_list(total), len(claims)
