"""The NodePool (``karpenter.sh/v1``) as a frozen view, built once per watch event (pure).

Karpenter core ``pkg/apis/v1/nodepool.go``: ``spec.template`` (metadata labels/annotations; spec taints,
startupTaints, requirements, nodeClassRef, expireAfter, terminationGracePeriod), ``spec.disruption``
(consolidationPolicy, consolidateAfter, budgets), ``spec.limits`` and ``spec.weight``; status
``nodepool_status.go``. Defaults are the ones the CRD applies (``aws:pkg/apis/crds/karpenter.sh_nodepools.yaml``),
so a view of an object written without them reads as the apiserver would store it: ``expireAfter: 720h``,
``consolidationPolicy: WhenEmptyOrUnderutilized``, ``consolidateAfter: 0s``, ``budgets: [{nodes: "10%"}]``.
The view keeps the object's JSON as ``raw`` for writes and for the code that still reads JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from karpy.apis.conditions import Condition, ObjectView, conditions_of
from karpy.apis.meta import ObjectMeta, integer, object_meta, strings, text_map
from karpy.apis.nodeclaim import (
    DEFAULT_EXPIRE_AFTER,
    NodeClassRef,
    NodeSelectorRequirement,
    node_class_ref,
    requirements,
)
from karpy.apis.taints import Taint, taints

WHEN_EMPTY: Final = "WhenEmpty"
WHEN_EMPTY_OR_UNDERUTILIZED: Final = "WhenEmptyOrUnderutilized"
DEFAULT_BUDGET_NODES: Final = "10%"


@attrs.frozen(slots=True)
class Budget:
    """One disruption budget: ``nodes`` (``"N"`` or ``"P%"``), an optional cron ``schedule`` with its
    ``duration`` (a Go duration; both "" when unset) and the ``reasons`` it limits (empty: every reason). Values
    are as written: an invalid one fails closed where it is evaluated (:mod:`karpy.controllers.budgets`)."""

    nodes: str = DEFAULT_BUDGET_NODES
    schedule: str = ""
    duration: str = ""
    reasons: tuple[str, ...] = ()


DEFAULT_BUDGETS: Final = (Budget(),)
"""The budgets of a NodePool that names none (the CRD's default ``[{nodes: "10%"}]``)."""


def budgets(items: Any) -> tuple[Budget, ...]:
    """``disruption.budgets`` from JSON; none (absent or empty) is the default 10 %."""
    out = tuple(
        Budget(
            nodes=str(b.get("nodes", DEFAULT_BUDGET_NODES)).strip(),
            schedule=str(b.get("schedule") or ""),
            duration=str(b.get("duration") or ""),
            reasons=strings(b.get("reasons")),
        )
        for b in (items if isinstance(items, Sequence) else ())
        if isinstance(b, Mapping)
    )
    return out or DEFAULT_BUDGETS


@attrs.frozen(slots=True)
class Disruption:
    """``spec.disruption``; ``consolidate_after`` is a Go duration or ``Never`` (no emptiness or consolidation
    for the pool)."""

    consolidation_policy: str = WHEN_EMPTY_OR_UNDERUTILIZED
    consolidate_after: str = "0s"
    budgets: tuple[Budget, ...] = DEFAULT_BUDGETS


@attrs.frozen(slots=True)
class NodeClaimTemplate:
    """``spec.template``: what every NodeClaim of the pool gets. ``expire_after`` and
    ``termination_grace_period`` are Go durations as written (``720h`` by default, ``Never`` allowed; "" when
    no grace period is set)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    taints: tuple[Taint, ...]
    startup_taints: tuple[Taint, ...]
    requirements: tuple[NodeSelectorRequirement, ...]
    node_class_ref: NodeClassRef
    expire_after: str = DEFAULT_EXPIRE_AFTER
    termination_grace_period: str = ""


@attrs.frozen(slots=True)
class NodePool(ObjectView):
    """A NodePool as cluster state keeps it beside its JSON.

    ``limits`` is the ResourceList as written (quantities as strings; validation parses it), ``weight`` 0 when
    unset (the CRD allows 1..100). ``resources`` and ``nodes`` are the status the NodePool status controller
    last wrote.
    """

    meta: ObjectMeta
    template: NodeClaimTemplate
    disruption: Disruption
    limits: Mapping[str, str]
    weight: int
    conditions: tuple[Condition, ...]
    resources: Mapping[str, str]
    nodes: int | None
    raw: Mapping[str, Any] = attrs.field(repr=False, eq=False)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> NodePool:
        """The view of a NodePool's JSON, with the CRD's defaults (``obj`` is kept as ``raw``, not copied)."""
        spec = obj.get("spec") or {}
        template = spec.get("template") or {}
        template_meta = template.get("metadata") or {}
        template_spec = template.get("spec") or {}
        disruption = spec.get("disruption") or {}
        status = obj.get("status") or {}
        nodes = status.get("nodes")
        return cls(
            meta=object_meta(obj),
            template=NodeClaimTemplate(
                labels=text_map(template_meta.get("labels")),
                annotations=text_map(template_meta.get("annotations")),
                taints=taints(template_spec.get("taints")),
                startup_taints=taints(template_spec.get("startupTaints")),
                requirements=requirements(template_spec.get("requirements")),
                node_class_ref=node_class_ref(template_spec.get("nodeClassRef")),
                expire_after=str(template_spec.get("expireAfter") or DEFAULT_EXPIRE_AFTER),
                termination_grace_period=str(template_spec.get("terminationGracePeriod") or ""),
            ),
            disruption=Disruption(
                consolidation_policy=str(disruption.get("consolidationPolicy") or WHEN_EMPTY_OR_UNDERUTILIZED),
                consolidate_after=str(disruption.get("consolidateAfter") or "0s"),
                budgets=budgets(disruption.get("budgets")),
            ),
            limits=text_map(spec.get("limits")),
            weight=integer(spec.get("weight")),
            conditions=conditions_of(obj),
            resources=text_map(status.get("resources")),
            nodes=integer(nodes) if nodes is not None else None,
            raw=obj,
        )


__all__ = [
    "DEFAULT_BUDGETS",
    "WHEN_EMPTY",
    "WHEN_EMPTY_OR_UNDERUTILIZED",
    "Budget",
    "Disruption",
    "NodeClaimTemplate",
    "NodePool",
    "budgets",
]
