"""Why pods could not be placed: the messages of unschedulable pods (Karpenter logs and events them as
``could not schedule pod``; core ``pkg/controllers/provisioning/scheduling/scheduler.go`` and
``nodeclaimtemplate.go``/``instance_types`` filtering, which names the filter that emptied a NodePool's
instance types: requirements, resources or offerings).
"""

from __future__ import annotations

from karpy.apis import labels as wk
from karpy.apis.quantity import format_canonical
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import OFFERING_KEYS, PoolTable, min_values_keys
from karpy.scheduling.queue import Group
from karpy.scheduling.state import NO_NODEPOOLS, SolveState, fit_count


def describe_requests(s: SolveState, g: Group) -> str:
    """The requests an explanation names: extended resources when present, else cpu and memory."""
    parts = {n: g.vec[i] for i, n in enumerate(s.index) if g.vec[i] > 0 and n != wk.RESOURCE_PODS}
    extended = {n: v for n, v in parts.items() if n not in (wk.RESOURCE_CPU, wk.RESOURCE_MEMORY)}
    chosen = extended or parts
    return ", ".join(f"{n}={format_canonical(n, v)}" for n, v in chosen.items()) or "pods=1"


def explain_types(s: SolveState, table: PoolTable, g: Group, reqs: rq.Reqs) -> str:
    """Which instance-type filter emptied the NodePool: labels, resources or offerings. Karpenter keeps a type
    when its requirements are compatible, pod and DaemonSet requests fit its allocatable, and it has an
    available compatible offering, and its error names which of the three failed (core
    ``pkg/controllers/provisioning/scheduling/nodeclaim.go``, ``filterInstanceTypesByRequirements``,
    ``InstanceTypeFilterError``)."""
    if not table.types:
        return "no instance types"
    labelled = table.label_compatible(reqs)
    if not labelled:
        keys = [k for k in reqs if k not in OFFERING_KEYS and k != wk.LABEL_NODEPOOL]
        return f"no instance type satisfies {rq.format_set(reqs, keys) or 'the requirements'}"
    zero = [0] * len(s.index)
    fitting = [t for t in labelled if fit_count(table.avail[t], zero, g.need) >= 1]
    if not fitting:
        overhead = " plus daemonset overhead" if any(any(table.overhead[t]) for t in labelled) else ""
        return f"no instance type has enough allocatable for {describe_requests(s, g)}{overhead}"
    zones = sorted({o[0] for t in fitting for o in table.offerings[t] if _allows(reqs.get(wk.LABEL_ZONE), o[0])})
    where = f" in {', '.join(zones)}" if zones else ""
    ct = reqs.get(wk.LABEL_CAPACITY_TYPE)
    zone = reqs.get(wk.LABEL_ZONE)
    if ct is not None:
        ct_free = set(table.viable({k: v for k, v in reqs.items() if k != wk.LABEL_CAPACITY_TYPE}))
    if ct is not None and not ct_free.isdisjoint(fitting):
        return f"requirement {ct} has no offering for {describe_requests(s, g)}{where}"
    if zone is not None:
        return f"requirement {zone} has no offering for {describe_requests(s, g)}"
    return f"no available offering for {describe_requests(s, g)}{where}"


def explain_min_values(s: SolveState, table: PoolTable, reqs: rq.Reqs, types: list[int]) -> str:
    parts = []
    for key, n in min_values_keys(reqs):
        values: set[str] = set()
        for t in types:
            values |= table.values_of(t, key, reqs)
        if len(values) < n:
            parts.append(f"minValues {n} for {key} not met: {len(values)} distinct values fit")
    return "; ".join(parts) or "minValues not met"


def unschedulable_message(s: SolveState, g: Group, reasons: list[tuple[int, list[str]]]) -> str:
    if not s.tables:
        return NO_NODEPOOLS
    variants = g.levels[-1].variants
    if not variants:
        return "every required nodeSelectorTerm is empty and matches no node"
    if len(variants) == 1:
        return "; ".join(reasons[0][1]) if reasons else "no capacity"
    return "; ".join(f"nodeSelectorTerm {vi}: " + "; ".join(why) for vi, why in reasons)


def _allows(req: rq.Req | None, value: str) -> bool:
    return req is None or req.has(value)
