"""Drift detection and expiration: pure functions over NodeClaim, NodePool, EC2NodeClass (Karpenter core
``pkg/controllers/nodeclaim/disruption/drift.go`` and ``pkg/controllers/nodeclaim/expiration/controller.go``).

Drift reasons, checked in Karpenter's order (core ``nodeclaim/disruption/drift.go``, AWS
``pkg/cloudprovider/drift.go``):

* ``NodePoolDrifted``: the NodeClaim's ``karpenter.sh/nodepool-hash`` differs from the NodePool's
  ``karpenter.sh/nodepool-hash`` *annotation* (behavioural fields — weight, limits, disruption — are not hashed);
* ``RequirementsDrifted``: a NodePool requirement no longer admits the NodeClaim's label for that key (or the
  NodeClaim lacks the label and the operator is neither ``NotIn`` nor ``DoesNotExist``);
* ``InstanceTypeNotFound``: the NodeClaim's ``node.kubernetes.io/instance-type`` is no longer among the NodePool's
  instance types (the EC2NodeClass's catalogue), or none of that type's offerings matches the NodeClaim's zone and
  capacity type (a ``reserved`` NodeClaim also matches ``on-demand``); core ``instanceTypeNotFound``. The
  reconciler judges it only for NodeClaims older than an hour and at most every 30 minutes after a pass, as
  Karpenter's ``instanceTypeNotFoundCheckCache``;
* ``NodeClassDrift``: the NodeClaim's ``karpenter.k8s.aws/ec2nodeclass-hash`` differs from the EC2NodeClass's
  annotation;
* ``AMIDrift``: ``status.imageID`` is not the AMI that ``status.amis`` maps the NodeClaim's instance type to (the
  first AMI, in status order, whose requirements the instance type satisfies; AWS ``isAMIDrifted`` with
  ``amifamily.MapToInstanceTypes``), so an AMI still listed but meant for other instance types drifts;
* ``SecurityGroupDrift`` / ``SubnetDrift``: the instance's security group set differs from
  ``status.securityGroups``, or its subnet is not in ``status.subnets`` (needs the cloud's view of the instance);
* ``CapacityReservationDrift``: a reserved instance's capacity reservation is no longer in
  ``status.capacityReservations`` (AWS ``isCapacityReservationDrifted``; the instance is read uncached).

* ``PlacementGroupDrift``: the NodeClaim's ``karpenter.k8s.aws/placement-group-id`` label is not the placement
  group the EC2NodeClass's selector resolves to now (asked of the cloud provider,
  ``CloudProvider.placement_group_drift``, after the instance checks; AWS ``isPlacementGroupDrifted``).

The hashes are compared as Karpenter compares them (core ``areStaticFieldsDrifted``, AWS
``areStaticFieldsDrifted``): the NodeClaim's annotation against its owner's annotation, never against a hash
recomputed from the owner's spec, and only when both carry the hash and the hash-version annotations and the
versions are equal. The owner's annotation is written by its hash stamping (the NodePool and EC2NodeClass status
reconcilers, as Karpenter's ``nodepool/hash`` and ``nodeclass/hash`` controllers, with Karpenter's own hashes
from :mod:`karpy.apis.hashing`): a spec change drifts the NodeClaims once it is stamped, and the stamps Karpenter
left on a cluster karpy adopts stand unchanged. A hash-version change re-stamps the NodeClaims instead
(:mod:`karpy.controllers.hash_restamp`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.nodeclaim import NodeClaim, NodeSelectorRequirement, requirements
from karpy.apis.nodepool import NodePool
from karpy.cloudprovider.types import CloudInstance, InstanceType
from karpy.controllers.disruption.candidates import expire_after
from karpy.scheduling import requirements as rq
from karpy.scheduling.model import Requirement

NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"
INSTANCE_TYPE_NOT_FOUND = "InstanceTypeNotFound"
NODECLASS_DRIFTED = "NodeClassDrift"
AMI_DRIFTED = "AMIDrift"
SUBNET_DRIFTED = "SubnetDrift"
SECURITY_GROUP_DRIFTED = "SecurityGroupDrift"
PLACEMENT_GROUP_DRIFTED = "PlacementGroupDrift"
CAPACITY_RESERVATION_DRIFTED = "CapacityReservationDrift"
EXPIRED = "Expired"


def requirement_admits(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether one NodePool requirement is still compatible with the NodeClaim's labels.

    Karpenter's ``areRequirementsDrifted`` (core ``nodeclaim/disruption/drift.go``): the NodeClaim's labels as
    ``In [value]`` requirements must be ``Compatible`` with the NodePool's, so a label the NodeClaim lacks
    admits only ``NotIn`` and ``DoesNotExist`` (core ``scheduling/requirements.go`` ``Compatible``: a key without
    known values is denied otherwise); ``DoesNotExist`` fails on a present label. That is Kubernetes label
    matching (:func:`karpy.scheduling.requirements.matches_requirement`, with Karpenter's inclusive Gte/Lte and
    integers read as Go's ``strconv.Atoi``): a bound that is no integer admits nothing, as Karpenter reads it
    as ``DoesNotExist``.
    """
    return rq.matches_requirement(Requirement(req.key, req.operator, req.values), labels)


def hash_drifted(owner: Mapping[str, str], claim: Mapping[str, str], hash_key: str, version_key: str) -> bool:
    """Whether a NodeClaim's hash annotation (``claim``: its annotations) differs from its owner's (``owner``:
    the NodePool's or EC2NodeClass's annotations), Karpenter's ``areStaticFieldsDrifted``: False when either
    lacks the hash or the hash-version annotation, or when the two versions differ (a new hash algorithm is
    re-stamped, never drift)."""
    if any(key not in notes for key in (hash_key, version_key) for notes in (owner, claim)):
        return False
    if owner[version_key] != claim[version_key]:
        return False
    return owner[hash_key] != claim[hash_key]


def nodepool_drift(claim: NodeClaim, nodepool: NodePool) -> str:
    """The NodePool's drift reason ("" when none): its hash annotation (:func:`hash_drifted`), then its
    requirements against the NodeClaim's labels (core ``areStaticFieldsDrifted``, ``areRequirementsDrifted``)."""
    notes = claim.meta.annotations
    if hash_drifted(nodepool.meta.annotations, notes, wk.ANNOTATION_NODEPOOL_HASH, wk.ANNOTATION_NODEPOOL_HASH_VERSION):
        return NODEPOOL_DRIFTED
    labels = claim.meta.labels
    if not all(requirement_admits(r, labels) for r in nodepool.template.requirements):
        return REQUIREMENTS_DRIFTED
    return ""


def find_instance_type(types: Sequence[InstanceType], claim: NodeClaim) -> InstanceType | None:
    """The NodeClaim's instance type (its ``node.kubernetes.io/instance-type`` label) in ``types``, else None."""
    name = claim.meta.labels.get(wk.LABEL_INSTANCE_TYPE)
    return next((it for it in types if it.name == name), None)


def instance_type_not_found(types: Sequence[InstanceType], claim: NodeClaim) -> bool:
    """Core ``instanceTypeNotFound``: the NodeClaim's instance type is not in ``types`` (the NodePool's instance
    types, unavailable ones included), or no offering of it is compatible with the NodeClaim's zone, zone id and
    capacity type labels (a label the NodeClaim lacks admits any value; ``reserved`` also admits ``on-demand``,
    since a reserved NodeClaim can be demoted). An offering's availability does not count."""
    it = find_instance_type(types, claim)
    if it is None:
        return True
    labels = claim.meta.labels
    capacity = labels.get(wk.LABEL_CAPACITY_TYPE)
    capacities = {capacity, "on-demand"} if capacity == "reserved" else {capacity}

    def compatible(zone: str, zone_id: str, capacity_type: str) -> bool:
        return (
            labels.get(wk.LABEL_ZONE, zone) == zone
            and (not zone_id or labels.get(wk.LABEL_ZONE_ID, zone_id) == zone_id)
            and (capacity is None or capacity_type in capacities)
        )

    return not any(compatible(o.zone, o.zone_id, o.capacity_type) for o in it.offerings)


def ami_for_instance_type(nodeclass: EC2NodeClass, instance_type: InstanceType) -> str | None:
    """The id of the first AMI of ``status.amis`` (status order) whose requirements ``instance_type``'s labels
    satisfy (AWS ``amifamily.MapToInstanceTypes``), None when none does."""
    for ami in nodeclass.amis:
        if all(requirement_admits(r, instance_type.labels) for r in requirements(list(ami.requirements))):
            return ami.id
    return None


def ami_drift(claim: NodeClaim, nodeclass: EC2NodeClass, instance_type: InstanceType | None) -> str | None:
    """AWS ``isAMIDrifted``: ``AMIDrift`` when ``status.imageID`` is not the AMI ``status.amis`` maps the
    NodeClaim's instance type to, "" when it is; None when it cannot be judged (Karpenter returns an error and
    leaves the condition as it was): the instance type is not in the catalogue, ``status.amis`` is empty, or the
    NodeClaim has no ``status.imageID``."""
    if instance_type is None or not nodeclass.amis or not claim.image_id:
        return None
    return "" if ami_for_instance_type(nodeclass, instance_type) == claim.image_id else AMI_DRIFTED


def nodeclass_drift(claim: NodeClaim, nodeclass: EC2NodeClass, instance_type: InstanceType | None) -> str | None:
    """The EC2NodeClass's object drift reason: its hash annotation, then :func:`ami_drift` (None: not judged)."""
    notes = claim.meta.annotations
    if hash_drifted(
        nodeclass.meta.annotations, notes, wk.ANNOTATION_NODECLASS_HASH, wk.ANNOTATION_NODECLASS_HASH_VERSION
    ):
        return NODECLASS_DRIFTED
    return ami_drift(claim, nodeclass, instance_type)


def static_drift(
    claim: NodeClaim, nodepool: NodePool, nodeclass: EC2NodeClass | None, instance_type: InstanceType | None = None
) -> str:
    """The first drift reason found from the objects alone ("" when none or not judged), in Karpenter's order:
    NodePool hash, requirements, EC2NodeClass hash, AMI (judged only with the NodeClaim's ``instance_type``)."""
    reason = nodepool_drift(claim, nodepool)
    if reason or nodeclass is None:
        return reason
    return nodeclass_drift(claim, nodeclass, instance_type) or ""


def instance_drift(nodeclass: EC2NodeClass, instance: CloudInstance) -> str:
    """Security-group, subnet or capacity-reservation drift of a running instance against the EC2NodeClass status
    ("" when none), in AWS ``pkg/cloudprovider/drift.go``'s order (security groups first)."""
    groups = {g.id for g in nodeclass.security_groups}
    if groups and instance.security_group_ids and set(instance.security_group_ids) != groups:
        return SECURITY_GROUP_DRIFTED
    subnets = {s.id for s in nodeclass.subnets}
    if subnets and instance.subnet_id and instance.subnet_id not in subnets:
        return SUBNET_DRIFTED
    if instance.capacity_reservation_id:
        entries = (nodeclass.raw.get("status") or {}).get("capacityReservations") or []
        if instance.capacity_reservation_id not in {e.get("id") for e in entries}:
            return CAPACITY_RESERVATION_DRIFTED
    return ""


def expires_at(claim: NodeClaim) -> float | None:
    """``creationTimestamp + spec.expireAfter`` (seconds since the epoch); None when it never expires."""
    expire = expire_after(claim)
    if expire is None:
        return None
    created = claim.meta.creation_timestamp
    return created + expire if created > 0 else None


def expired(claim: NodeClaim, now: float) -> bool:
    """``creationTimestamp + spec.expireAfter`` has passed (Karpenter core ``pkg/controllers/nodeclaim/expiration``)."""
    at = expires_at(claim)
    return at is not None and now >= at


def drift_order(items: Sequence[tuple[float, int, str]]) -> list[str]:
    """Drift candidates as (Drifted transition time, pod count, name): empty ones first, then oldest drift."""
    return [name for _, _, name in sorted(items, key=lambda t: (t[1] > 0, t[0], t[2]))]
