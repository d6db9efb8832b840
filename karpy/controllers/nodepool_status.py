"""NodePool status: ``ValidationSucceeded``, ``NodeClassReady``, ``Ready``, ``resources``, ``nodes`` and the hash.

Karpenter core ``controllers/nodepool/{readiness,validation,counter,hash}``. Only Ready NodePools provision;
an invalid NodePool or one whose EC2NodeClass is missing gets ``Ready=False`` with a reason and a Warning
event, never a crash: the other NodePools keep working.

A Ready NodePool whose requirements (and template labels) no instance type of its EC2NodeClass can ever satisfy
(``kubernetes.io/arch DoesNotExist``, an instance family that does not exist, a zone outside every subnet) gets
a Warning event ``NoCompatibleInstanceTypes`` and a log line, as Karpenter's scheduler publishes when a
NodePool's requirements filter out every instance type; like Karpenter it stays Ready (no condition: Karpenter
v1 has none for this). "Ever" ignores offering availability (an ICE'd or unpriced offering may come back).
"""

from __future__ import annotations

from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.apis.hashing import nodepool_hash
from karpy.apis.quantity import QuantityError, format_resource_list, parse_resource_list
from karpy.apis.resources import add
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InstanceType
from karpy.controllers.conditions import same_conditions, set_condition
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import NODEPOOLS
from karpy.runtime.controller import Result
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import labels_allow, offering_allowed, type_labels
from karpy.scheduling.translate import nodeclass_name, requirement_from_json
from karpy.state.cluster import ClusterState, condition, deleting

log = structlog.get_logger("karpy.nodepool")
JSON = dict[str, Any]
KNOWN_VALUES = {wk.LABEL_CAPACITY_TYPE: {"on-demand", "spot", "reserved"}}


def validate(nodepool: JSON) -> str:
    """Runtime checks the CRD's CEL cannot express; "" when valid, else the reason message.

    Karpenter ``nodeclaim_validation.go`` (``validateWellKnownValues``) and restricted label domains.
    """
    template = (nodepool.get("spec") or {}).get("template") or {}
    for req in (template.get("spec") or {}).get("requirements") or []:
        key = req.get("key", "")
        if req.get("operator") == "In" and key in KNOWN_VALUES:
            values = set(req.get("values") or [])
            if not values & KNOWN_VALUES[key]:
                return f"requirement {key} In {sorted(values)} has no valid value"
    try:
        parse_resource_list((nodepool.get("spec") or {}).get("limits"))
    except QuantityError as err:
        return f"invalid limits: {err}"
    return ""


def nodeclass_readiness(nodepool: JSON, state: ClusterState) -> tuple[str, str, str]:
    """(status, reason, message) of ``NodeClassReady``."""
    ref = ((nodepool.get("spec") or {}).get("template") or {}).get("spec", {}).get("nodeClassRef") or {}
    if ref.get("group") != wk.AWS_GROUP or ref.get("kind") != "EC2NodeClass":
        return (
            "False",
            "NodeClassNotSupported",
            f"nodeClassRef {ref.get('group')}/{ref.get('kind')} is not supported",
        )
    name = ref.get("name", "")
    nodeclass = state.nodeclasses.get(name)
    if nodeclass is None:
        return "False", "NodeClassNotFound", f"EC2NodeClass {name!r} not found"
    if deleting(nodeclass):
        return "False", "NodeClassTerminating", f"EC2NodeClass {name!r} is terminating"
    ready = condition(nodeclass, wk.COND_READY)
    if ready is None:
        return "Unknown", "NodeClassReadinessUnknown", f"EC2NodeClass {name!r} has no Ready condition yet"
    if ready.get("status") != "True":
        return "False", str(ready.get("reason") or "NodeClassNotReady"), str(ready.get("message") or "")
    return "True", "NodeClassReady", ""


NO_COMPATIBLE_TYPES = "NodePool requirements filtered out all compatible available instance types"


def compatible_instance_types(nodepool: JSON, instance_types: list[InstanceType]) -> list[str]:
    """Names of the types that can satisfy the NodePool's requirements and template labels, with at least one
    offering (zone, capacity type) they allow, available or not (Karpenter ``filterInstanceTypesByRequirements``
    on the NodeClaim template, without pods)."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    reqs = rq.build(requirement_from_json(r) for r in (template.get("spec") or {}).get("requirements") or [])
    for req in rq.from_labels((template.get("metadata") or {}).get("labels") or {}).values():
        rq.add(reqs, req)
    return [
        it.name
        for it in instance_types
        if labels_allow(type_labels(it), reqs)
        and any(offering_allowed(o.zone, o.capacity_type, o.zone_id, reqs) for o in it.offerings)
    ]


class NodePoolStatusReconciler:
    """Keyed by NodePool name.

    Args:
        cloud: the instance types of each EC2NodeClass, for the ``NoCompatibleInstanceTypes`` warning (None: no
            such check, as in tests that only look at conditions).
    """

    name = "nodepool.status"

    def __init__(
        self, client: KubeClient, state: ClusterState, events: EventRecorder, *, cloud: CloudProvider | None = None
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.cloud = cloud
        self._incompatible: set[str] = set()  # NodePools last found with no compatible type (log on change)

    async def reconcile(self, key: str) -> Result:
        """Recompute conditions, resources and node count; write them when they changed."""
        nodepool = self.state.nodepools.get(key)
        if nodepool is None or deleting(nodepool):
            return Result()
        await self._ensure_hash(nodepool)
        status = dict(nodepool.get("status") or {})
        generation = (nodepool.get("metadata") or {}).get("generation")
        conditions = list(status.get("conditions") or [])
        invalid = validate(nodepool)
        conditions = set_condition(
            conditions,
            wk.COND_VALIDATION_SUCCEEDED,
            "False" if invalid else "True",
            "ValidationFailed" if invalid else "ValidationSucceeded",
            invalid,
            generation,
        )
        nc_status, nc_reason, nc_message = nodeclass_readiness(nodepool, self.state)
        conditions = set_condition(conditions, wk.COND_NODECLASS_READY, nc_status, nc_reason, nc_message, generation)
        if invalid:
            ready = ("False", "ValidationFailed", invalid)
        elif nc_status != "True":
            ready = (nc_status, nc_reason, nc_message)
        else:
            ready = ("True", "Ready", "")
        conditions = set_condition(conditions, wk.COND_READY, *ready, generation)
        if ready[0] == "True":
            await self._check_instance_types(key, nodepool)
        resources, nodes = self._usage(key)
        if (
            same_conditions(conditions, status.get("conditions") or [])
            and status.get("resources") == resources
            and status.get("nodes") == nodes
        ):
            return Result()
        was_ready = (condition(nodepool, wk.COND_READY) or {}).get("status")
        # A merge patch merges maps: a resource that dropped out of the usage must be nulled explicitly, or the
        # stored status never equals the computed one and every reconcile writes again (a patch storm).
        stale = {k: None for k in status.get("resources") or {} if k not in resources}
        patch = {"status": {"conditions": conditions, "resources": {**stale, **resources}, "nodes": nodes}}
        try:
            updated = await self.client.merge_patch(NODEPOOLS, key, patch, subresource="status")
        except ApiError as err:
            if err.not_found:
                return Result()
            raise
        self.state.apply("NodePool", "MODIFIED", updated)
        if ready[0] != "True" and was_ready != ready[0]:
            log.info("nodepool not ready", nodepool=key, reason=ready[1], message=ready[2])
            self.events.publish(updated, WARNING, ready[1], f"NodePool {key} is not ready: {ready[2]}")
        elif ready[0] == "True" and was_ready != "True":
            log.info("nodepool ready", nodepool=key)
        return Result()

    async def _check_instance_types(self, key: str, nodepool: JSON) -> None:
        """Warn (event + log) when no instance type of the NodePool's EC2NodeClass can satisfy it."""
        if self.cloud is None:
            return
        nodeclass = self.state.nodeclasses.get(nodeclass_name(nodepool))
        if nodeclass is None:
            return
        try:
            types = await self.cloud.get_instance_types(nodeclass)
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
        ref = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": nodepool["metadata"]}
        self.events.publish(ref, WARNING, "NoCompatibleInstanceTypes", NO_COMPATIBLE_TYPES)

    async def _ensure_hash(self, nodepool: JSON) -> None:
        meta = nodepool.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        want = nodepool_hash(nodepool)
        if (
            annotations.get(wk.ANNOTATION_NODEPOOL_HASH) == want
            and annotations.get(wk.ANNOTATION_NODEPOOL_HASH_VERSION) == wk.NODEPOOL_HASH_VERSION
        ):
            return
        patch = {
            "metadata": {
                "annotations": {
                    wk.ANNOTATION_NODEPOOL_HASH: want,
                    wk.ANNOTATION_NODEPOOL_HASH_VERSION: wk.NODEPOOL_HASH_VERSION,
                }
            }
        }
        updated = await self.client.merge_patch(NODEPOOLS, str(meta.get("name")), patch)
        self.state.apply("NodePool", "MODIFIED", updated)

    def _usage(self, nodepool: str) -> tuple[dict[str, str], int]:
        """Summed NodeClaim capacity (Karpenter counter controller) and the number of NodeClaims."""
        total: dict[str, int] = {}
        claims = [nc for nc in self.state.nodeclaims_of(nodepool) if not deleting(nc)]
        for nc in claims:
            try:
                total = add(total, parse_resource_list((nc.get("status") or {}).get("capacity")))
            except QuantityError:
                continue
        total.setdefault("nodes", len(claims))
        return format_resource_list(total), len(claims)
