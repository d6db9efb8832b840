"""Label requirements as value sets: intersection, compatibility and label matching.

Karpenter core ``pkg/scheduling/requirement.go`` / ``requirements.go`` represent every node selector
requirement as a set of allowed values over one label key, possibly a complement (``NotIn``/``Exists``) and
possibly bounded by inclusive integer bounds. Sets intersect, which is how a NodePool's requirements narrow
with every pod added to a NodeClaim. karpy follows the same model (Karpenter v1.15):

=================  ==========  ==========  ==============
operator           complement  values      bounds
=================  ==========  ==========  ==============
``In [a b]``       False       {a, b}
``NotIn [a b]``    True        {a, b}
``Exists``         True        {}
``DoesNotExist``   False       {}
``Gt n``           True        {}          ``gte`` n+1 (``Gt`` 2^63-1 reads ``DoesNotExist``)
``Lt n``           True        {}          ``lte`` n-1
``Gte n``          True        {}          ``gte`` n (Karpenter's operator; NodePools and NodeClaims only)
``Lte n``          True        {}          ``lte`` n
=================  ==========  ==========  ==============

Bounds read back the way Karpenter writes them on a NodeClaim (``Requirement.NodeSelectorRequirement`` and
``BoundedNodeSelectorRequirements``): ``Gte n``, ``Lte n``, or both (each with the minValues), so a NodePool's
``Gt 4`` becomes the NodeClaim requirement ``Gte 5``. A bounded complement reads as ``Exists``, or ``NotIn`` when
it still excludes values inside its bounds (:meth:`Req.operator`).

A requirement set (:data:`Reqs`) is a plain ``dict`` from label key to :class:`Req`; the hot path of the
scheduler keys its caches by :func:`signature`. Label matching against a concrete node (:func:`matches`)
uses the Kubernetes ``NodeSelectorRequirement`` semantics on the raw requirements instead, because an
intersection loses the difference between ``NotIn [a]`` (absent label allowed) and ``NotIn [a]`` AND
``Exists`` (absent label rejected).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from karpy.apis import labels as wk
from karpy.apis.selectors import parse_int, value_matches
from karpy.scheduling.model import DOES_NOT_EXIST, EXISTS, GT, GTE, IN, LT, LTE, NOT_IN, Requirement

Signature = tuple[tuple[str, bool, frozenset[str], int | None, int | None, int | None], ...]


class Req:
    """The allowed values of one label key (Karpenter ``Requirement``); immutable by convention.

    ``gte``/``lte`` are inclusive integer bounds (Karpenter's ``gte``/``lte``) that only a complement carries:
    they apply to every allowed value (values that are not integers are then excluded). ``min_values`` is
    Karpenter's minimum number of distinct values the NodeClaim's instance types must cover (None when unset).
    """

    __slots__ = ("complement", "gte", "key", "lte", "min_values", "values")

    def __init__(
        self,
        key: str,
        complement: bool,
        values: frozenset[str] = frozenset(),
        gte: int | None = None,
        lte: int | None = None,
        min_values: int | None = None,
    ) -> None:
        self.key = key
        self.complement = complement
        self.values = values
        self.gte = gte
        self.lte = lte
        self.min_values = min_values

    @property
    def sig(self) -> tuple[str, bool, frozenset[str], int | None, int | None, int | None]:
        """Hashable identity (cache key)."""
        return (self.key, self.complement, self.values, self.gte, self.lte, self.min_values)

    def has(self, value: str) -> bool:
        """True when ``value`` is allowed (Karpenter ``Requirement.Has``)."""
        if self.complement:
            return value not in self.values and within_bounds(value, self.gte, self.lte)
        return value in self.values

    def empty(self) -> bool:
        """True when no value is allowed (Karpenter ``Len() == 0``; crossed bounds never survive an
        intersection, which reads them as ``DoesNotExist``)."""
        if self.complement:
            return self.gte is not None and self.lte is not None and self.gte > self.lte
        return not self.values

    def allows_absent(self) -> bool:
        """True when a node without this label satisfies it: operator NotIn or DoesNotExist."""
        return self.operator() in (NOT_IN, DOES_NOT_EXIST)

    def operator(self) -> str:
        """The Kubernetes operator this set reads as (Karpenter ``Requirement.Operator``): bounds do not change
        it, so ``Gte 4`` reads ``Exists`` and ``NotIn [5]`` with ``Gte 4`` reads ``NotIn``."""
        if self.complement:
            return NOT_IN if self.values else EXISTS
        return IN if self.values else DOES_NOT_EXIST

    def to_model(self) -> list[Requirement]:
        """The NodeClaim requirements Karpenter writes for this set (core ``Requirement.NodeSelectorRequirement``
        and ``BoundedNodeSelectorRequirements``): a bounded set is written as its bounds only, ``Gte`` then
        ``Lte``, each with the minValues (the values a bounded ``NotIn`` excludes are not written, as in Karpenter;
        the NodeClaim's instance-type list already leaves them out)."""
        if self.gte is not None or self.lte is not None:
            out = []
            if self.gte is not None:
                out.append(Requirement(self.key, GTE, (str(self.gte),), self.min_values))
            if self.lte is not None:
                out.append(Requirement(self.key, LTE, (str(self.lte),), self.min_values))
            return out
        op = self.operator()
        values = tuple(sorted(self.values)) if op in (IN, NOT_IN) else ()
        return [Requirement(self.key, op, values, self.min_values)]

    def __str__(self) -> str:
        return " and ".join(_format(r) for r in self.to_model())

    def __repr__(self) -> str:
        return f"Req({self})"


def within_bounds(value: str, gte: int | None, lte: int | None) -> bool:
    """``value`` is an integer inside the inclusive bounds, or there are none (Karpenter ``withinBounds``)."""
    if gte is None and lte is None:
        return True
    number = parse_int(value)
    if number is None:
        return False
    return (gte is None or number >= gte) and (lte is None or number <= lte)


def bounded_value(req: Req) -> str | None:
    """The value a NodeClaim's custom label takes from a Gte/Lte-bounded requirement, None when ``req`` has no
    bound or no value fits.

    Karpenter ``NodeClaimTemplate.resolveCustomLabelsFromRequirements`` labels the NodeClaim with
    ``Requirement.Any()``, a random integer within the bounds (from 0 when only ``Lte`` is set); karpy takes the
    lowest one the set allows, so a plan is reproducible and the label satisfies the requirement.
    """
    if not req.complement or (req.gte is None and req.lte is None):
        return None
    value = req.gte if req.gte is not None else 0
    high = req.lte if req.lte is not None else MAX_INT
    while value <= high:  # at most len(req.values) + 1 rounds
        if str(value) not in req.values:
            return str(value)
        value += 1
    return None


def _format(req: Requirement) -> str:
    if req.operator in (IN, NOT_IN):
        return f"{req.key} {req.operator} [{', '.join(req.values)}]"
    if req.operator in (GT, LT, GTE, LTE):
        return f"{req.key} {req.operator} {req.values[0] if req.values else ''}"
    return f"{req.key} {req.operator}"


def format_requirement(req: Requirement) -> str:
    """``key Op [v1, v2]`` as used in explanations."""
    return _format(req)


# Go's math.MaxInt on 64-bit platforms: Karpenter reads ``Gt`` MaxInt as ``DoesNotExist``.
MAX_INT: Final = 2**63 - 1


def _int(values: Sequence[str]) -> int | None:
    return parse_int(values[0]) if values else None


def from_requirement(req: Requirement) -> Req:
    """A :class:`Req` from a node selector requirement; legacy keys normalised.

    Gt/Lt become inclusive bounds (Karpenter ``NewRequirementWithFlexibility``: ``Gt n`` is ``Gte n+1``,
    ``Lt n`` is ``Lte n-1``, ``Gt`` MaxInt is ``DoesNotExist``). An unparsable Gt/Lt/Gte/Lte bound allows nothing
    (Kubernetes: the requirement never matches; the CRDs admit only non-negative integers).
    """
    key = wk.NORMALIZED_LABELS.get(req.key, req.key)
    op = req.operator
    mv = req.min_values
    if op == IN:
        return Req(key, False, frozenset(req.values), min_values=mv)
    if op == NOT_IN:
        return Req(key, True, frozenset(req.values), min_values=mv)
    if op == EXISTS:
        return Req(key, True, min_values=mv)
    if op in (GT, GTE, LT, LTE):
        bound = _int(req.values)
        if bound is None:
            return Req(key, False, min_values=mv)
        if op == GT:
            # Karpenter returns a plain DoesNotExist here, without the minValues.
            return Req(key, False) if bound >= MAX_INT else Req(key, True, gte=bound + 1, min_values=mv)
        if op == GTE:
            return Req(key, True, gte=bound, min_values=mv)
        if op == LT:
            return Req(key, True, lte=bound - 1, min_values=mv)
        return Req(key, True, lte=bound, min_values=mv)
    # DoesNotExist, and any unknown operator, allows no value.
    return Req(key, False, min_values=mv)


def _max_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _min_opt(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)


def intersect(a: Req, b: Req) -> Req:
    """The values both allow (Karpenter ``Requirement.Intersection``); minValues is the larger one.

    Crossed bounds give ``DoesNotExist``; values outside the bounds are dropped (from a complement too, so
    ``NotIn [1]`` with ``Gte 3`` reads ``Exists``); a concrete (``In``) result keeps no bounds.
    """
    gte = _max_opt(a.gte, b.gte)
    lte = _min_opt(a.lte, b.lte)
    mv = _max_opt(a.min_values, b.min_values)
    if gte is not None and lte is not None and gte > lte:
        return Req(a.key, False, min_values=mv)
    complement = a.complement and b.complement
    if complement:
        values = a.values | b.values
    elif a.complement:
        values = b.values - a.values
    elif b.complement:
        values = a.values - b.values
    else:
        values = a.values & b.values
    if gte is not None or lte is not None:
        values = frozenset(v for v in values if within_bounds(v, gte, lte))
    if not complement:
        gte = lte = None
    return Req(a.key, complement, values, gte, lte, mv)


Reqs = dict[str, Req]


def build(requirements: Iterable[Requirement]) -> Reqs:
    """A requirement set; repeated keys intersect (Karpenter ``Requirements.Add``)."""
    out: Reqs = {}
    for r in requirements:
        add(out, from_requirement(r))
    return out


def add(reqs: Reqs, req: Req) -> None:
    """Intersect ``req`` into ``reqs`` in place."""
    prev = reqs.get(req.key)
    reqs[req.key] = req if prev is None else intersect(prev, req)


def from_labels(labels: Mapping[str, str]) -> Reqs:
    """``key In [value]`` per label (Karpenter ``NewLabelRequirements``)."""
    return {k: Req(k, False, frozenset((v,))) for k, v in labels.items()}


def intersect_all(a: Reqs, b: Reqs) -> Reqs:
    """Key-wise intersection; keys present on one side only are kept as they are."""
    out = dict(a)
    for key, req in b.items():
        prev = out.get(key)
        out[key] = req if prev is None else intersect(prev, req)
    return out


def signature(reqs: Reqs) -> Signature:
    """Hashable, order-independent identity of a requirement set (cache key)."""
    return tuple(sorted(r.sig for r in reqs.values()))


def intersects(existing: Reqs, incoming: Reqs) -> str | None:
    """Why two sets share no value on a common key, or None (Karpenter ``Requirements.Intersects``).

    An empty intersection is tolerated when both sides read NotIn/DoesNotExist: a node without the
    label satisfies both.
    """
    small, large = (existing, incoming) if len(existing) <= len(incoming) else (incoming, existing)
    for key in small:
        if key not in large:
            continue
        old, new = existing[key], incoming[key]
        if intersect(old, new).empty():
            if new.allows_absent() and old.allows_absent():
                continue
            return f"requirement {new} is not compatible with {old}"
    return None


def compatible(template: Reqs, pod: Reqs, allow_undefined: frozenset[str] = wk.WELL_KNOWN_LABELS) -> str | None:
    """Why ``pod`` cannot be satisfied by a node made from ``template``, or None (Karpenter ``Compatible``).

    A pod key the template does not define is allowed when it is well-known (its values come from the
    instance types and offerings) or when the pod only excludes it (NotIn/DoesNotExist); a custom label
    the NodePool neither requires nor sets can never appear on the node, so it is incompatible.
    """
    for key, req in pod.items():
        if key in template or key in allow_undefined or req.allows_absent():
            continue
        return f'label "{key}" does not have known values (requirement {req})'
    return intersects(template, pod)


def matches_requirement(req: Requirement, labels: Mapping[str, str]) -> bool:
    """Kubernetes ``NodeSelectorRequirement`` matching against a node's labels, plus Karpenter's inclusive
    ``Gte``/``Lte`` (only NodePool and NodeClaim requirements carry them: pod node affinity never does, see
    :func:`karpy.scheduling.translate.node_selector_terms`)."""
    return value_matches(req.operator, req.values, labels.get(wk.NORMALIZED_LABELS.get(req.key, req.key)))


def matches(requirements: Iterable[Requirement], labels: Mapping[str, str]) -> bool:
    """True when every requirement matches ``labels`` (requirements in a term are ANDed)."""
    # value_matches directly (not matches_requirement): one call per requirement on the scheduler's hot path.
    normalized = wk.NORMALIZED_LABELS
    return all(value_matches(r.operator, r.values, labels.get(normalized.get(r.key, r.key))) for r in requirements)


def format_set(reqs: Reqs, keys: Iterable[str] | None = None) -> str:
    """``k1 In [a], k2 Exists`` over ``keys`` (all keys when None), sorted by key."""
    chosen = sorted(reqs if keys is None else (k for k in keys if k in reqs))
    return ", ".join(str(reqs[k]) for k in chosen)
