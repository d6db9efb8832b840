"""Pure JSON → scheduling-model conversions shared by the provisioner and ``karpy simulate``.

The controller (:mod:`karpy.controllers.provisioner`) and the simulation must hand the engine identical
inputs for identical objects, so the NodePool and requirement conversions live here, free of any client or
cluster-state dependency, and the provisioner imports them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.apis.taints import taints
from karpy.cloudprovider.types import InstanceType
from karpy.scheduling import model

JSON = dict[str, Any]

# Taints a node carries while it boots; ignored on uninitialized managed nodes (Karpenter C11).
EPHEMERAL_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        wk.TAINT_UNREGISTERED_KEY,
    }
)


def requirement_from_json(req: Mapping[str, Any]) -> model.Requirement:
    """A NodeSelectorRequirement (+minValues) from JSON; legacy keys normalised."""
    key = str(req.get("key", ""))
    return model.Requirement(
        key=wk.NORMALIZED_LABELS.get(key, key),
        operator=str(req.get("operator", "")),
        values=tuple(str(v) for v in req.get("values") or ()),
        min_values=req.get("minValues"),
    )


def requirement_to_json(req: model.Requirement) -> JSON:
    """A requirement back to NodeClaim JSON."""
    out: JSON = {"key": req.key, "operator": req.operator}
    if req.values or req.operator in (model.IN, model.NOT_IN):
        out["values"] = list(req.values)
    if req.min_values is not None:
        out["minValues"] = req.min_values
    return out


def nodeclass_name(obj: Mapping[str, Any]) -> str:
    """``nodeClassRef.name`` of a NodePool (under the template) or a NodeClaim."""
    spec = obj.get("spec") or {}
    ref = spec.get("nodeClassRef") or ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    return str(ref.get("name", ""))


def scheduling_nodepool(
    nodepool: JSON, usage: Mapping[str, int], instance_types: Sequence[InstanceType]
) -> model.NodePool:
    """The scheduling view of a NodePool JSON object (unparseable ``spec.limits`` mean no limits)."""
    spec = nodepool.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    try:
        limits = parse_resource_list(spec.get("limits"))
    except QuantityError:
        limits = {}
    return model.NodePool(
        name=str(nodepool["metadata"]["name"]),
        weight=int(spec.get("weight") or 0),
        requirements=tuple(requirement_from_json(r) for r in tspec.get("requirements") or []),
        labels=dict((template.get("metadata") or {}).get("labels") or {}),
        taints=taints(tspec.get("taints")),
        startup_taints=taints(tspec.get("startupTaints")),
        limits=limits,
        usage=usage,
        instance_types=tuple(instance_types),
    )
