"""NodeOverlays in ``karpy simulate``: the manifests' overlays evaluated and applied with the controller's own code
(:mod:`karpy.scheduling.nodeoverlay`), before the engine sees the NodePools' instance types.

As in a cluster with ``FEATURE_GATES=NodeOverlay=true`` (Karpenter's default is off: a cluster then ignores them;
the simulation applies overlays whenever the manifests hold some, and says so in its notes). Every usable NodePool
is evaluated at once; an overlay that is invalid or conflicts is reported with the reason its
``ValidationSucceeded`` condition would carry and is applied nowhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from karpy.apis.meta import JSON
from karpy.apis.nodeoverlay import NodeOverlay
from karpy.cloudprovider.types import InstanceType
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import labels_allow, type_labels
from karpy.scheduling.nodeoverlay import Evaluation, PoolTypes, evaluate, matched, overlay_requirements
from karpy.scheduling.translate import template_requirements


@attrs.frozen
class OverlayReport:
    """One NodeOverlay's outcome: ``applied``; ``reason``/``message`` of ``ValidationSucceeded=False`` when not;
    the NodePool → instance types it changes (names, sorted) when it is."""

    name: str
    applied: bool
    reason: str = ""
    message: str = ""
    instance_types: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)


def overlaid(
    overlays: Sequence[JSON], pools: Sequence[tuple[JSON, Sequence[InstanceType]]]
) -> tuple[dict[str, list[InstanceType]], list[OverlayReport]]:
    """Each NodePool's instance types with ``overlays`` applied (by NodePool name), and a report per overlay.

    ``pools`` are the usable NodePools' JSON with their (un-overlaid) instance types. Without overlays the types
    are returned as they are, without evaluating anything (what evaluating none would give).
    """
    if not overlays:
        return {str(np_obj["metadata"]["name"]): list(types) for np_obj, types in pools}, []
    views = [NodeOverlay.from_json(o) for o in overlays]
    inputs = [
        PoolTypes(
            str(np_obj["metadata"]["name"]),
            dict((((np_obj.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}),
            types,
        )
        for np_obj, types in pools
    ]
    evaluation = evaluate(views, inputs)
    out: dict[str, list[InstanceType]] = {}
    for pool in inputs:
        applied = evaluation.apply(pool.name, pool.instance_types)
        out[pool.name] = applied if applied is not None else list(pool.instance_types)
    allowed = [_allowed(pool, template_requirements(np_obj)) for pool, (np_obj, _) in zip(inputs, pools, strict=True)]
    return out, reports(views, allowed, evaluation)


def _allowed(pool: PoolTypes, reqs: rq.Reqs) -> PoolTypes:
    """``pool`` with only the instance types its NodePool's template requirements allow."""
    return attrs.evolve(pool, instance_types=[it for it in pool.instance_types if labels_allow(type_labels(it), reqs)])


def reports(overlays: Sequence[NodeOverlay], pools: Sequence[PoolTypes], evaluation: Evaluation) -> list[OverlayReport]:
    """What each overlay did, sorted by name (which types of which NodePool an applied overlay matched; ``pools``
    hold only the types their NodePool's requirements allow, the evaluation may have changed more)."""
    out = []
    for overlay in sorted(overlays, key=lambda o: o.name):
        status = evaluation.statuses[overlay.name]
        if not status.applied:
            out.append(OverlayReport(overlay.name, False, status.reason, status.message))
            continue
        reqs = overlay_requirements(overlay)
        changed = {pool.name: tuple(sorted(it.name for it, _ in matched(pool, reqs))) for pool in pools}
        out.append(OverlayReport(overlay.name, True, instance_types={k: v for k, v in changed.items() if v}))
    return out


def report_lines(items: Sequence[OverlayReport]) -> list[str]:
    """The text plan's ``NodeOverlays`` section."""
    lines = []
    for r in items:
        if not r.applied:
            lines.append(f"  {r.name}: not applied ({r.reason}): {r.message}")
            continue
        where = "; ".join(
            f"nodepool {pool}: {len(names)} instance type{'s' if len(names) != 1 else ''} ({_names(names)})"
            for pool, names in sorted(r.instance_types.items())
        )
        lines.append(f"  {r.name}: applied to {where or 'no instance type'}")
    return lines


def _names(names: Sequence[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def report_json(items: Sequence[OverlayReport]) -> list[JSON]:
    """The JSON plan's ``nodeOverlays`` list."""
    return [
        {
            "name": r.name,
            "applied": r.applied,
            **({"reason": r.reason, "message": r.message} if not r.applied else {}),
            **({"instanceTypes": {k: list(v) for k, v in sorted(r.instance_types.items())}} if r.applied else {}),
        }
        for r in items
    ]


OVERLAY_NOTE = (
    "NodeOverlays applied: a cluster applies them only with FEATURE_GATES NodeOverlay=true (Karpenter's default "
    "is false); instance types keep their real capacity on the node, an overlay only tells the scheduler"
)
