"""Validation of ``karpy simulate`` input: the checks the API server would make on the fields the simulation reads.

Every check raises :class:`ManifestError` with one line that names where the problem is (the file and document,
``path#index``, or the workload a pod comes from) and what it is, so ``karpy simulate`` can print it and exit 2.
The checks follow Kubernetes validation (``pkg/apis/core/validation``: ``ValidateNodeSelectorRequirement``,
resource quantities) and the NodePool CRD's schema (core ``pkg/apis/v1/nodepool.go``: operators with Karpenter's
``Gte``/``Lte``, ``minValues``, ``weight`` 1-100, and v1.15's restricted label domains).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.kubelet import validate_kubelet
from karpy.apis.meta import JSON
from karpy.apis.quantity import QuantityError, parse_resource_list

NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
NODEPOOL_OPERATORS = NODE_OPERATORS | {"Gte", "Lte"}


class ManifestError(Exception):
    """Invalid input: the message is one line naming where and what (``karpy simulate`` exits 2)."""


def check_type_fields(obj: Any, where: str) -> JSON:
    """``obj`` if it is a mapping with ``apiVersion`` and ``kind``.

    Raises:
        ManifestError: it is not.
    """
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected a Kubernetes object (a mapping), got {type(obj).__name__}")
    for field in ("apiVersion", "kind"):
        if not isinstance(obj.get(field), str) or not obj[field]:
            raise ManifestError(f"{where}: missing {field}")
    return obj


def check_metadata(obj: JSON, where: str) -> JSON:
    """``obj`` if it has a ``metadata.name``, mapping ``labels``/``annotations`` and a mapping ``spec``.

    Raises:
        ManifestError: it has not.
    """
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ManifestError(f"{where}: {obj['kind']} without metadata.name")
    for field in ("labels", "annotations"):
        if meta.get(field) is not None and not isinstance(meta[field], dict):
            raise ManifestError(f"{where}: metadata.{field} must be a mapping")
    if obj.get("spec") is not None and not isinstance(obj["spec"], dict):
        raise ManifestError(f"{where}: spec must be a mapping")
    return obj


def non_negative_int(value: Any, default: int, where: str) -> int:
    """``value`` as a count (``default`` when absent).

    Raises:
        ManifestError: it is not a non-negative integer (a boolean is not).
    """
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def check_requirement(expr: Any, operators: frozenset[str], where: str) -> None:
    """A node selector requirement is well formed (Kubernetes ``ValidateNodeSelectorRequirement``).

    Raises:
        ManifestError: unknown operator, values present/absent against the operator, non-integer Gt/Lt.
    """
    if not isinstance(expr, dict) or not expr.get("key"):
        raise ManifestError(f"{where}: requirement without a key")
    op, values, key = expr.get("operator"), expr.get("values") or [], expr["key"]
    if op not in operators:
        raise ManifestError(f"{where}: {key}: unknown operator {op!r} (one of {', '.join(sorted(operators))})")
    if op in ("In", "NotIn") and not values:
        raise ManifestError(f"{where}: {key} {op} needs values")
    if op in ("Exists", "DoesNotExist") and values:
        raise ManifestError(f"{where}: {key} {op} takes no values")
    if op in ("Gt", "Lt", "Gte", "Lte") and (len(values) != 1 or not str(values[0]).lstrip("-").isdigit()):
        raise ManifestError(f"{where}: {key} {op} needs exactly one integer value")
    min_values = expr.get("minValues")
    if min_values is not None and (isinstance(min_values, bool) or not isinstance(min_values, int) or min_values < 1):
        raise ManifestError(f"{where}: {key}: minValues must be a positive integer")


def check_pod_resources(spec: Mapping[str, Any], where: str) -> None:
    """Every container's (and init container's) ``resources.requests``/``limits`` and the pod's
    ``spec.overhead`` are mappings of valid quantities.

    Raises:
        ManifestError: naming the container and the field.
    """
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            resources = c.get("resources") or {}
            for part in ("requests", "limits"):
                if resources.get(part) is not None and not isinstance(resources[part], dict):
                    raise ManifestError(f"{where}: container {c.get('name')!r} resources.{part} must be a mapping")
                try:
                    parse_resource_list(resources.get(part))
                except QuantityError as err:
                    raise ManifestError(f"{where}: container {c.get('name')!r} resources.{part}: {err}") from err
    try:
        parse_resource_list(spec.get("overhead"))
    except QuantityError as err:
        raise ManifestError(f"{where}: spec.overhead: {err}") from err


def check_node_affinity(spec: Mapping[str, Any], where: str) -> None:
    """The pod's required and preferred node affinity requirements are well formed (:func:`check_requirement`).

    Raises:
        ManifestError: the first malformed requirement.
    """
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            check_requirement(expr, NODE_OPERATORS, f"{where}: node affinity")
    for pref in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        for expr in (pref.get("preference") or {}).get("matchExpressions") or []:
            check_requirement(expr, NODE_OPERATORS, f"{where}: preferred node affinity")


def check_nodepool(obj: Mapping[str, Any], origin: str) -> None:
    """A NodePool's requirements, ``spec.limits`` and ``spec.weight`` (1-100).

    Raises:
        ManifestError: naming the document and the NodePool.
    """
    name = obj["metadata"]["name"]
    spec = obj.get("spec") or {}
    tspec = (spec.get("template") or {}).get("spec") or {}
    for expr in tspec.get("requirements") or []:
        check_requirement(expr, NODEPOOL_OPERATORS, f"{origin}: NodePool {name}")
    check_nodepool_labels(spec, f"{origin}: NodePool {name}")
    try:
        parse_resource_list(spec.get("limits"))
    except QuantityError as err:
        raise ManifestError(f"{origin}: NodePool {name} spec.limits: {err}") from err
    weight = spec.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100):
        raise ManifestError(f"{origin}: NodePool {name} spec.weight must be an integer 1-100")


def check_nodepool_labels(spec: Mapping[str, Any], where: str) -> None:
    """Template labels and requirement keys stay out of Karpenter's restricted label domains, and neither names
    ``karpenter.sh/nodepool`` (Karpenter v1.15 core ``nodepool_validation.go`` and the CRD's CEL rules; the
    kubernetes.io and k8s.io domains, e.g. ``node-role.kubernetes.io/*``, are allowed since v1.15).

    Raises:
        ManifestError: the first restricted key.
    """
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    keys = [("label", str(k)) for k in labels]
    keys += [("requirement", str(e.get("key"))) for e in (template.get("spec") or {}).get("requirements") or []]
    for what, key in keys:
        reason = wk.restricted_label_error(key)
        if key == wk.LABEL_NODEPOOL:
            reason = f"label {key} is restricted: karpy sets it"
        if reason:
            raise ManifestError(f"{where}: {reason} (template {what}s)")


def check_nodeclass(obj: Mapping[str, Any], origin: str) -> None:
    """An EC2NodeClass's ``spec.kubelet`` block, free-form in the CRD, is one Karpenter v1.15 accepts
    (:func:`karpy.apis.kubelet.validate_kubelet`; Karpenter reports it as ``ValidationSucceeded=False``).

    Raises:
        ManifestError: naming the document, the EC2NodeClass and the first problem.
    """
    errors = validate_kubelet((obj.get("spec") or {}).get("kubelet"))
    if errors:
        raise ManifestError(f"{origin}: EC2NodeClass {obj['metadata']['name']}: {errors[0]}")


def check_node(obj: Mapping[str, Any], origin: str) -> None:
    """A Node's ``status.allocatable`` and ``status.capacity``: valid quantities, at least one of them present.

    Raises:
        ManifestError: naming the document and the Node.
    """
    name = obj["metadata"]["name"]
    status = obj.get("status") or {}
    for part in ("allocatable", "capacity"):
        try:
            parse_resource_list(status.get(part))
        except QuantityError as err:
            raise ManifestError(f"{origin}: Node {name} status.{part}: {err}") from err
    if not status.get("allocatable") and not status.get("capacity"):
        raise ManifestError(f"{origin}: Node {name} has neither status.allocatable nor status.capacity")
