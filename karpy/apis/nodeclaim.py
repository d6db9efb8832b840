"""The NodeClaim (``karpenter.sh/v1``) as a frozen view, built once per watch event (pure).

Karpenter core ``pkg/apis/v1/nodeclaim.go`` (spec: requirements with ``minValues``, taints, startupTaints,
resources.requests, nodeClassRef, expireAfter, terminationGracePeriod) and ``nodeclaim_status.go`` (status:
providerID, nodeName, imageID, capacity, allocatable, conditions). The view keeps the object's JSON as ``raw``
for writes and for the code that still reads JSON. Also the parts the NodePool shares with it: the
:class:`NodeClassRef` and :class:`NodeSelectorRequirement`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis import labels as wk
from karpy.apis.conditions import Condition, ObjectView, conditions_of
from karpy.apis.meta import ObjectMeta, integer, object_meta, strings
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.apis.resources import Resources
from karpy.apis.taints import Taint, taints

DEFAULT_EXPIRE_AFTER = "720h"
"""``expireAfter`` when a NodePool leaves it out (the CRD's default; ``Never`` disables expiration)."""


@attrs.frozen(slots=True)
class NodeClassRef:
    """``nodeClassRef``: ``{group, kind, name}`` (karpy supports ``karpenter.k8s.aws``/``EC2NodeClass``)."""

    group: str = ""
    kind: str = ""
    name: str = ""

    @property
    def ec2nodeclass(self) -> bool:
        """The reference names an EC2NodeClass (the only class karpy manages, Karpenter ``IsManaged``)."""
        return self.group == wk.AWS_GROUP and self.kind == "EC2NodeClass"


def node_class_ref(value: Any) -> NodeClassRef:
    """A ``nodeClassRef`` from JSON (fields absent read "")."""
    ref = value if isinstance(value, Mapping) else {}
    return NodeClassRef(str(ref.get("group") or ""), str(ref.get("kind") or ""), str(ref.get("name") or ""))


@attrs.frozen(slots=True)
class NodeSelectorRequirement:
    """One requirement ``key operator values`` with Karpenter's ``minValues`` (None when not set), as written
    (legacy label keys are normalised by the scheduling translation, not here)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    min_values: int | None = None


def requirements(items: Any) -> tuple[NodeSelectorRequirement, ...]:
    """``requirements`` from JSON."""
    out = []
    for r in items if isinstance(items, Sequence) else ():
        if not isinstance(r, Mapping):
            continue
        min_values = r.get("minValues")
        out.append(
            NodeSelectorRequirement(
                key=str(r.get("key") or ""),
                operator=str(r.get("operator") or ""),
                values=strings(r.get("values")),
                min_values=integer(min_values) if min_values is not None else None,
            )
        )
    return tuple(out)


def resource_list(value: Any) -> Resources:
    """A ResourceList in canonical units (:mod:`karpy.apis.quantity`); an invalid quantity makes it {}."""
    try:
        return parse_resource_list(dict(value) if isinstance(value, Mapping) else None)
    except QuantityError:
        return {}


@attrs.frozen(slots=True)
class NodeClaim(ObjectView):
    """A NodeClaim as cluster state keeps it beside its JSON.

    Durations are Go duration strings as written (``expire_after`` defaults to ``720h``, ``Never`` allowed;
    ``termination_grace_period`` is "" when unset). ``requests``, ``capacity`` and ``allocatable`` are canonical
    resource maps (millicores, bytes, counts; {} when absent or invalid).
    """

    meta: ObjectMeta
    requirements: tuple[NodeSelectorRequirement, ...]
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    node_class_ref: NodeClassRef
    requests: Resources
    expire_after: str
    termination_grace_period: str
    provider_id: str
    node_name: str
    image_id: str
    capacity: Resources
    allocatable: Resources
    conditions: tuple[Condition, ...]
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodeClaim:
        """The view of a NodeClaim's JSON (``obj`` is kept as ``raw``, not copied)."""
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            meta=object_meta(obj),
            requirements=requirements(spec.get("requirements")),
            taints=taints(spec.get("taints")),
            startup_taints=taints(spec.get("startupTaints")),
            node_class_ref=node_class_ref(spec.get("nodeClassRef")),
            requests=resource_list((spec.get("resources") or {}).get("requests")),
            expire_after=str(spec.get("expireAfter") or DEFAULT_EXPIRE_AFTER),
            termination_grace_period=str(spec.get("terminationGracePeriod") or ""),
            provider_id=str(status.get("providerID") or ""),
            node_name=str(status.get("nodeName") or ""),
            image_id=str(status.get("imageID") or ""),
            capacity=resource_list(status.get("capacity")),
            allocatable=resource_list(status.get("allocatable")),
            conditions=conditions_of(obj),
            raw=obj,
        )

    @property
    def nodepool(self) -> str:
        """The owning NodePool (label ``karpenter.sh/nodepool``; "" for a standalone NodeClaim)."""
        return self.meta.labels.get(wk.LABEL_NODEPOOL, "")


__all__ = [
    "DEFAULT_EXPIRE_AFTER",
    "NodeClaim",
    "NodeClassRef",
    "NodeSelectorRequirement",
    "node_class_ref",
    "requirements",
    "resource_list",
]
