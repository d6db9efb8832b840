"""Drift detection and expiration: pure functions over NodeClaim, NodePool, EC2NodeClass (Karpenter core
``pkg/controllers/nodeclaim/disruption/drift.go`` and ``pkg/controllers/nodeclaim/expiration/controller.go``).

Drift reasons, checked in Karpenter's order (core ``nodeclaim/disruption/drift.go``, AWS
``pkg/cloudprovider/drift.go``):

* ``NodePoolDrifted``: the NodeClaim's ``karpenter.sh/nodepool-hash`` differs from the NodePool's template hash
  (same hash version; behavioural fields — weight, limits, disruption — are not hashed);
* ``RequirementsDrifted``: a NodePool requirement no longer admits the NodeClaim's label for that key;
* ``NodeClassDrift``: the NodeClaim's ``karpenter.k8s.aws/ec2nodeclass-hash`` differs from the EC2NodeClass's;
* ``AMIDrift``: ``status.imageID`` is not among the EC2NodeClass's resolved ``status.amis``;
* ``SubnetDrift`` / ``SecurityGroupDrift``: the instance's subnet is not in ``status.subnets``, or its security
  group set differs from ``status.securityGroups`` (needs the cloud's view of the instance).

A NodeClaim without a hash annotation never drifts on that hash (Karpenter does the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.apis import labels as wk
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.hashing import legacy_nodeclass_hash, legacy_nodepool_hash, nodeclass_hash, nodepool_hash
from karpy.apis.nodeclaim import NodeClaim, NodeSelectorRequirement
from karpy.apis.nodepool import NodePool
from karpy.cloudprovider.types import CloudInstance
from karpy.controllers.disruption.candidates import expire_after
from karpy.scheduling.requirements import parse_int

NODEPOOL_DRIFTED = "NodePoolDrifted"
REQUIREMENTS_DRIFTED = "RequirementsDrifted"
NODECLASS_DRIFTED = "NodeClassDrift"
AMI_DRIFTED = "AMIDrift"
SUBNET_DRIFTED = "SubnetDrift"
SECURITY_GROUP_DRIFTED = "SecurityGroupDrift"
EXPIRED = "Expired"


def _number(value: str) -> int | None:
    """``value`` as an integer the way Karpenter's ``withinBounds`` reads it (Go ``strconv.Atoi``), else None:
    a Gt/Lt/Gte/Lte requirement never admits a non-integer label such as ``4.5``."""
    return parse_int(value)


def requirement_admits(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    """Whether one NodePool requirement is still compatible with the NodeClaim's labels.

    Only keys the NodeClaim carries are judged (an absent label is undecided, as Karpenter's
    ``Compatible`` treats it); ``DoesNotExist`` fails on a present label.
    """
    key = wk.NORMALIZED_LABELS.get(req.key, req.key)
    if key not in labels:
        return True
    value, op, values = labels[key], req.operator, req.values
    if op == "In":
        return value in values
    if op == "NotIn":
        return value not in values
    if op == "DoesNotExist":
        return False
    if op in ("Gt", "Lt", "Gte", "Lte") and values:
        have, bound = _number(value), _number(values[0])
        if have is None or bound is None:
            return False
        return {"Gt": have > bound, "Lt": have < bound, "Gte": have >= bound, "Lte": have <= bound}[op]
    return True


def static_drift(
    claim: NodeClaim, nodepool: NodePool, nodeclass: EC2NodeClass | None, ca_bundle: str | None = None
) -> str:
    """The first drift reason found from the objects alone ("" when none), in Karpenter's order. The hashes are
    computed from the NodePool's and EC2NodeClass's JSON (``raw``), as Karpenter hashes the written spec
    (the EC2NodeClass's with the cluster CA bundle ``ca_bundle``). A NodeClaim still carrying the hash karpy
    computed for the same spec before it computed Karpenter's (same version) has not drifted: its owner's
    status reconciler re-stamps it (:mod:`karpy.controllers.hash_restamp`)."""
    notes = claim.meta.annotations
    if (
        notes.get(wk.ANNOTATION_NODEPOOL_HASH)
        and notes.get(wk.ANNOTATION_NODEPOOL_HASH_VERSION) == wk.NODEPOOL_HASH_VERSION
        and notes[wk.ANNOTATION_NODEPOOL_HASH] not in (nodepool_hash(nodepool.raw), legacy_nodepool_hash(nodepool.raw))
    ):
        return NODEPOOL_DRIFTED
    labels = claim.meta.labels
    if not all(requirement_admits(r, labels) for r in nodepool.template.requirements):
        return REQUIREMENTS_DRIFTED
    if nodeclass is None:
        return ""
    if (
        notes.get(wk.ANNOTATION_NODECLASS_HASH)
        and notes.get(wk.ANNOTATION_NODECLASS_HASH_VERSION, wk.NODECLASS_HASH_VERSION) == wk.NODECLASS_HASH_VERSION
        and notes[wk.ANNOTATION_NODECLASS_HASH]
        not in (nodeclass_hash(nodeclass.raw, ca_bundle), legacy_nodeclass_hash(nodeclass.raw))
    ):
        return NODECLASS_DRIFTED
    amis = {a.id for a in nodeclass.amis}
    image = claim.image_id
    if amis and image and image not in amis:
        return AMI_DRIFTED
    return ""


def instance_drift(nodeclass: EC2NodeClass, instance: CloudInstance) -> str:
    """Subnet or security-group drift of a running instance against the EC2NodeClass status ("" when none)."""
    subnets = {s.id for s in nodeclass.subnets}
    if subnets and instance.subnet_id and instance.subnet_id not in subnets:
        return SUBNET_DRIFTED
    groups = {g.id for g in nodeclass.security_groups}
    if groups and instance.security_group_ids and set(instance.security_group_ids) != groups:
        return SECURITY_GROUP_DRIFTED
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
