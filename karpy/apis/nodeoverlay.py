"""The NodeOverlay (``karpenter.sh/v1alpha1``) as a frozen view, its runtime validation and price arithmetic (pure).

Karpenter core v1.15 ``pkg/apis/v1alpha1/nodeoverlay.go`` (spec: ``requirements``, ``price``, ``priceAdjustment``,
``capacity``, ``weight``; ``OrderByWeight``), ``nodeoverlay_validation.go`` (``RuntimeValidate``),
``nodeoverlay_status.go`` (the ``ValidationSucceeded`` condition under ``Ready``) and ``labels.go`` (the
``karpenter.sh/price-overlay-applied`` / ``capacity-overlay-applied`` NodeClaim annotations); the price forms
are ``cloudprovider/types.go`` ``AdjustedPrice``.

* ``price`` (``"0.5"``) replaces an offering's price; ``priceAdjustment`` changes it: ``"+0.1"``/``"-0.1"`` add
  USD/hour, ``"+10%"``/``"-15%"`` scale it (``-100%`` at most); a result below 0 is 0.
* ``capacity`` adds extended resources (``hugepages-2Mi``, ``example.com/device``) to the matched instance types;
  ``cpu``, ``memory``, ``ephemeral-storage`` and ``pods`` are refused.
* ``weight`` (1-10000, unset = 0): higher first; equal weights in reverse alphabetical order of name.

The CRD's CEL rules and patterns already refuse most bad input at admission; :func:`validate` re-checks them (an
object read from manifests by ``karpy simulate`` never met an apiserver) and adds Karpenter's runtime checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from karpy.apis import labels as wk
from karpy.apis.conditions import Condition, ObjectView, conditions_of
from karpy.apis.meta import ObjectMeta, object_meta, text_map
from karpy.apis.nodeclaim import NodeSelectorRequirement, requirements
from karpy.apis.quantity import QuantityError, to_canonical

GROUP_VERSION: Final = "karpenter.sh/v1alpha1"
KIND: Final = "NodeOverlay"
COND_VALIDATION_SUCCEEDED: Final = "ValidationSucceeded"
REASON_RUNTIME_VALIDATION: Final = "RuntimeValidation"
REASON_CONFLICT: Final = "Conflict"
CONFLICT_MESSAGE: Final = "conflict with another overlay"
ANNOTATION_PRICE_OVERLAY_APPLIED: Final = "karpenter.sh/price-overlay-applied"
ANNOTATION_CAPACITY_OVERLAY_APPLIED: Final = "karpenter.sh/capacity-overlay-applied"
# Karpenter core ``apis/v1/labels.go`` WellKnownResources: an overlay may not add or replace these.
WELL_KNOWN_RESOURCES: Final = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
OPERATORS: Final = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"})
_BOUNDED: Final = frozenset({"Gt", "Lt", "Gte", "Lte"})
# The CRD's patterns (``nodeoverlay.go`` kubebuilder markers).
PRICE_ADJUSTMENT_PATTERN: Final = re.compile(
    r"^(([+-]{1}(\d*\.?\d+))|(\+{1}\d*\.?\d+%)|(^(-\d{1,2}(\.\d+)?%)$)|(-100%))$"
)
PRICE_PATTERN: Final = re.compile(r"^\d+(\.\d+)?$")
_QUALIFIED_NAME: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@attrs.frozen(slots=True)
class NodeOverlay(ObjectView):
    """One NodeOverlay.

    Attributes:
        requirements: the selector over instance-type, offering and NodePool labels (as written).
        price: the absolute price, USD/hour as written (``"0.5"``), or None.
        price_adjustment: the signed change as written (``"+0.1"``, ``"-10%"``), or None.
        capacity: the extended resources to add, as written (``{"hugepages-2Mi": "1Gi"}``).
        weight: ``spec.weight``; 0 when unset (Karpenter ``lo.FromPtr``).
        raw: the object's JSON, for writes.
    """

    meta: ObjectMeta
    requirements: tuple[NodeSelectorRequirement, ...] = ()
    price: str | None = None
    price_adjustment: str | None = None
    capacity: Mapping[str, str] = attrs.field(factory=dict)
    weight: int = 0
    conditions: tuple[Condition, ...] = ()
    raw: Mapping[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodeOverlay:
        """The view of a NodeOverlay's JSON (absent fields read as unset)."""
        spec = obj.get("spec") or {}
        weight = spec.get("weight")
        return cls(
            meta=object_meta(obj),
            requirements=requirements(spec.get("requirements")),
            price=_optional_text(spec.get("price")),
            price_adjustment=_optional_text(spec.get("priceAdjustment")),
            capacity=text_map(spec.get("capacity")),
            weight=weight if isinstance(weight, int) and not isinstance(weight, bool) else 0,
            conditions=conditions_of(obj),
            raw=obj,
        )

    @property
    def price_change(self) -> str | None:
        """``price`` when set, else ``priceAdjustment`` (Karpenter ``store.go`` ``updateInstanceTypeOffering``)."""
        return self.price if self.price is not None else self.price_adjustment


def _optional_text(value: Any) -> str | None:
    if value is None:
        return None
    return str(value)


def order_by_weight(overlays: Iterable[NodeOverlay]) -> list[NodeOverlay]:
    """Highest weight first; equal weights by name, later in the alphabet first (Karpenter
    ``NodeOverlayList.OrderByWeight``), so of two equal-weight overlays the one named later is evaluated first."""
    return sorted(overlays, key=lambda o: (-o.weight, _reverse_key(o.name)))


def _reverse_key(name: str) -> tuple[int, ...]:
    # Descending string order as an ascending key: negate each code point, and a prefix sorts after its extensions
    # ("b" > "a", "ab" > "a": Go's string comparison).
    return (*(-ord(c) for c in name), 1)


def validate(overlay: NodeOverlay) -> list[str]:
    """Why ``overlay`` cannot be applied; empty when it can.

    Karpenter ``RuntimeValidate`` (each requirement through ``v1.ValidateRequirement`` — supported operator,
    not a restricted label, a known value for ``karpenter.sh/capacity-type``, a qualified key, valid label values,
    values present for In/NotIn, one non-negative integer for Gt/Lt/Gte/Lte — and no well-known resource in
    ``capacity``), plus the CRD's own rules for input that never met an apiserver: the ``price`` and
    ``priceAdjustment`` patterns, not both set, ``weight`` within 1-10000, ``requirements`` a list of requirements,
    ``capacity`` a map whose values are quantities.
    """
    spec = overlay.raw.get("spec") or {}
    errors = _shape_errors(spec)
    errors += [err for r in overlay.requirements for err in _requirement_errors(r)]
    for name, value in sorted(overlay.capacity.items()):
        if name in WELL_KNOWN_RESOURCES:
            errors.append(f"invalid capacity: {name} in resource, restricted")
            continue
        try:
            if to_canonical(name, value) < 0:
                errors.append(f"invalid capacity: {name} must not be negative")
        except QuantityError:
            errors.append(f"invalid capacity: {name}={value!r} is not a quantity")
    if overlay.price is not None and overlay.price_adjustment is not None:
        errors.append("cannot set both 'price' and 'priceAdjustment'")
    if overlay.price is not None and not PRICE_PATTERN.match(overlay.price):
        errors.append(f"invalid price {overlay.price!r}: must match {PRICE_PATTERN.pattern}")
    if overlay.price_adjustment is not None and not PRICE_ADJUSTMENT_PATTERN.match(overlay.price_adjustment):
        errors.append(f"invalid priceAdjustment {overlay.price_adjustment!r}: must be +/-amount or +/-percent%")
    weight = spec.get("weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 10000):
        errors.append(f"invalid weight {weight!r}: must be an integer from 1 to 10000")
    return errors


def _shape_errors(spec: Mapping[str, Any]) -> list[str]:
    """The CRD schema's types for ``requirements`` and ``capacity``: a malformed value must not read as "no
    requirement" (the view's parsing skips what it cannot read), which would select every instance type."""
    errors = []
    reqs = spec.get("requirements")
    if reqs is not None and (not isinstance(reqs, list) or not all(isinstance(r, Mapping) for r in reqs)):
        errors.append("requirements must be a list of {key, operator, values}")
    if spec.get("capacity") is not None and not isinstance(spec["capacity"], Mapping):
        errors.append("capacity must be a map of resource name to quantity")
    return errors


def _requirement_errors(req: NodeSelectorRequirement) -> list[str]:
    key = wk.NORMALIZED_LABELS.get(req.key, req.key)
    op = req.operator
    errors = []
    if op not in OPERATORS:
        errors.append(f"key {key} has an unsupported operator {op} not in {sorted(OPERATORS)}")
    if restricted := wk.restricted_label_error(key):
        errors.append(f"invalid value: {restricted} in requirements, restricted")
    if key == wk.LABEL_CAPACITY_TYPE and op == "In" and req.values:
        known = {wk.CAPACITY_TYPE_ON_DEMAND, wk.CAPACITY_TYPE_SPOT, wk.CAPACITY_TYPE_RESERVED}
        if not set(req.values) & known:
            errors.append(f"no valid values found in {list(req.values)} for {key}, expected one of: {sorted(known)}")
    if not _qualified_name(key):
        errors.append(f"key {key} is not a qualified name")
    errors.extend(f"invalid value {v} for key {key}" for v in req.values if len(v) > 63 or not _LABEL_VALUE.match(v))
    if op in ("In", "NotIn") and not req.values:
        errors.append(f"key {key} with operator {op} must have a value defined")
    if op in _BOUNDED and (len(req.values) != 1 or not req.values[0].isdigit()):
        errors.append(f"key {key} with operator {op} must have a single positive integer value")
    return errors


def _qualified_name(key: str) -> bool:
    """Kubernetes ``validation.IsQualifiedName``: ``[prefix/]name``, name ≤ 63 characters, prefix a DNS subdomain."""
    prefix, _, name = key.rpartition("/")
    if "/" in prefix or (prefix == "" and key.startswith("/")):
        return False
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def adjusted_price(price: float, change: str | None) -> float:
    """``price`` (USD/hour) after an overlay's ``price`` or ``priceAdjustment`` (Karpenter ``AdjustedPrice``).

    No sign: the new price. ``+x``/``-x``: ``price + x``. ``+p%``/``-p%``: ``price × (1 + p/100)``. Results below
    zero are 0. ``None`` or ``""`` leave the price as it is. The value must have passed :func:`validate`.
    """
    if not change:
        return price
    if change[0] not in "+-":
        return float(change)
    result = price * (1 + float(change[:-1]) / 100) if change.endswith("%") else price + float(change)
    return result if result >= 0 else 0.0


__all__ = [
    "ANNOTATION_CAPACITY_OVERLAY_APPLIED",
    "ANNOTATION_PRICE_OVERLAY_APPLIED",
    "COND_VALIDATION_SUCCEEDED",
    "CONFLICT_MESSAGE",
    "GROUP_VERSION",
    "KIND",
    "REASON_CONFLICT",
    "REASON_RUNTIME_VALIDATION",
    "WELL_KNOWN_RESOURCES",
    "NodeOverlay",
    "adjusted_price",
    "order_by_weight",
    "validate",
]
