"""Topology in the solve: which domains a pod may go to, which domain a NodeClaim gets pinned to, and the
counts every placement updates.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling/topology.go`` (``Topology``: groups for a
pod's spread constraints, affinity and anti-affinity terms, the inverse groups of pods' required
anti-affinity, ``countDomains`` over pods already bound, ``AddRequirements``, ``Record``) and
``topologygroup.go`` (``TopologyGroup.Get``: spread skew against the least loaded eligible domain, affinity
to a domain with a matching pod, anti-affinity away from them; ``TopologyNodeFilter``). The counting groups
are :class:`karpy.scheduling.topology.TopoGroup`; this module decides from their counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import PoolTable, pod_matches_labels, pod_requirement_sets
from karpy.scheduling.model import IN, Pod, Requirement
from karpy.scheduling.state import HOSTNAME, INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD, SolveState
from karpy.scheduling.taints import untolerated
from karpy.scheduling.topology import AFFINITY, ANTI, INVERSE, SCHEDULE_ANYWAY, SPREAD, TopoGroup

if TYPE_CHECKING:
    from karpy.scheduling.existingnode import Slot
    from karpy.scheduling.nodeclaim import Claim
    from karpy.scheduling.queue import Group, Level


class Spec:
    """A pod's topology constraints: hard ones, preferences in relaxation order, owned anti-affinity terms."""

    __slots__ = ("anyway", "canon", "hard", "owns", "pref_affinity", "pref_anti")

    def __init__(self) -> None:
        self.canon: Spec = self
        self.hard: list[tuple[TopoGroup, str]] = []
        self.pref_affinity: list[TopoGroup] = []
        self.pref_anti: list[TopoGroup] = []
        self.anyway: list[TopoGroup] = []
        self.owns: tuple[int, ...] = ()


EMPTY_SPEC = Spec()


def record_existing_owners(s: SolveState) -> None:
    """Required anti-affinity of pods already bound: enforced in reverse on incoming pods."""
    for slot in s.slots:
        for bound in slot.node.bound_pods:
            for term in bound.pod_anti_affinity:
                tg = s.topo.term_group(ANTI, term, bound)
                s.inverse.add(tg.id)
                domain = slot.labels.get(tg.key)
                if domain is not None:
                    tg.add_owner(domain, 1)


def pod_spec(s: SolveState, pod: Pod, cache: dict[tuple[object, ...], Spec]) -> Spec:
    """The pod's topology groups, created on first sight and shared by equal constraints."""
    if not (
        pod.topology_spread
        or pod.pod_affinity
        or pod.pod_anti_affinity
        or pod.preferred_pod_affinity
        or pod.preferred_pod_anti_affinity
    ):
        return EMPTY_SPEC
    key = (
        pod.namespace,
        pod.topology_spread,
        pod.pod_affinity,
        pod.pod_anti_affinity,
        pod.preferred_pod_affinity if s.respect else (),
        pod.preferred_pod_anti_affinity if s.respect else (),
        tuple(sorted(pod.labels.items())),
        tuple(sorted(pod.node_selector.items())) if pod.topology_spread else (),
        pod.required_terms if pod.topology_spread else (),
        pod.tolerations if pod.topology_spread else (),
    )
    hit = cache.get(key)
    if hit is not None:
        return hit
    spec = Spec()
    for tsc in pod.topology_spread:
        tg = s.topo.spread_group(tsc, pod)
        if tsc.when_unsatisfiable == SCHEDULE_ANYWAY:
            if s.respect:
                spec.anyway.append(tg)
        else:
            spec.hard.append((tg, SPREAD))
    for term in pod.pod_affinity:
        spec.hard.append((s.topo.term_group(AFFINITY, term, pod), AFFINITY))
    owns = []
    for term in pod.pod_anti_affinity:
        tg = s.topo.term_group(ANTI, term, pod)
        spec.hard.append((tg, ANTI))
        owns.append(tg.id)
        s.inverse.add(tg.id)
    spec.owns = tuple(owns)
    if s.respect:
        # Karpenter removes the heaviest preferred term first (stable sort by weight, descending).
        for term in sorted(pod.preferred_pod_affinity, key=lambda t: -t.weight):
            spec.pref_affinity.append(s.topo.term_group(AFFINITY, term, pod))
        for term in sorted(pod.preferred_pod_anti_affinity, key=lambda t: -t.weight):
            spec.pref_anti.append(s.topo.term_group(ANTI, term, pod))
    # Specs whose constraints resolve to the same groups (labels aside) name one of them as ``canon``: their
    # pods' equivalence groups stay apart, but may share a relaxation ladder.
    canon = (
        tuple((tg.id, role) for tg, role in spec.hard),
        tuple(tg.id for tg in spec.pref_affinity),
        tuple(tg.id for tg in spec.pref_anti),
        tuple(tg.id for tg in spec.anyway),
        spec.owns,
    )
    spec.canon = cache.setdefault(canon, spec)
    cache[key] = spec
    return spec


def count_existing_pods(s: SolveState) -> None:
    """Pods already bound count toward every group that selects them (spread: nodes passing its filter)."""
    if not s.topo.groups:
        return
    for slot in s.slots:
        for bound in slot.node.bound_pods:
            for gid in s.topo.selecting(bound):
                tg = s.topo.groups[gid]
                domain = slot.labels.get(tg.key)
                if domain is None or (tg.kind == SPREAD and not slot_passes(s, tg, slot)):
                    continue
                tg.add(domain, 1)


def domain_universe(s: SolveState, key: str) -> frozenset[str]:
    """Every value ``key`` can take on any NodePool's nodes or existing node."""
    hit = s.universes.get(key)
    if hit is None:
        values: set[str] = set()
        for table in s.tables:
            values |= domain_values(s, table, table.reqs, rq.signature(table.reqs), key)
        values |= {s.labels[key] for s in s.slots if key in s.labels}
        hit = s.universes[key] = frozenset(values)
    return hit


def domain_values(
    s: SolveState,
    table: PoolTable,
    reqs: rq.Reqs,
    sig: rq.Signature,
    key: str,
    types: Sequence[int] | None = None,
    tag: object = None,
) -> frozenset[str]:
    """The values of ``key`` a node from ``table`` with ``reqs`` may get (offerings or type labels)."""
    cache_key = (table.order, sig, key, tag)
    hit = s.domain_cache.get(cache_key)
    if hit is not None:
        return hit
    cat = table.cat
    if types is None:
        hit = cat.domain_values(reqs, sig, key)
    else:
        # ``types`` are viable under ``reqs``: their values are among the viable types'.
        hit = cat.values_over(types, reqs, key, cat.domain_values(reqs, sig, key))
    s.domain_cache[cache_key] = hit
    return hit


def claim_domains(s: SolveState, claim: Claim, key: str) -> frozenset[str]:
    if key == HOSTNAME:
        return frozenset((claim.hostname,))
    return domain_values(s, claim.table, claim.reqs, claim.sig, key)


def slot_passes(s: SolveState, tg: TopoGroup, slot: Slot) -> bool:
    """Spread node filter on an existing node: nodeAffinityPolicy / nodeTaintsPolicy Honor."""
    key = (tg.id, slot.index)
    hit = s.slot_pass.get(key)
    if hit is None:
        hit = (tg.filter_pod is None or pod_matches_labels(tg.filter_pod, slot.labels)) and (
            tg.filter_tolerations is None or untolerated(tg.filter_tolerations, slot.node.taints) is None
        )
        s.slot_pass[key] = hit
    return hit


def eligible_domains(s: SolveState, tg: TopoGroup) -> frozenset[str]:
    """A spread group's domains: NodePools and existing nodes passing its node filter (Karpenter
    ``TopologyDomainGroup`` × ``TopologyNodeFilter``)."""
    if tg.eligible is not None:
        return tg.eligible
    values: set[str] = set()
    pools: set[str] = set()
    alts = [rq.build(a) for a in pod_requirement_sets(tg.filter_pod)] if tg.filter_pod is not None else [{}]
    for table in s.tables:
        if tg.filter_tolerations is not None and untolerated(tg.filter_tolerations, table.pool.taints):
            continue
        for alt in alts:
            if rq.compatible(table.reqs, alt) is not None:
                continue
            pools.add(table.name)
            if tg.key != HOSTNAME:
                reqs = rq.intersect_all(table.reqs, alt)
                values |= domain_values(s, table, reqs, rq.signature(reqs), tg.key)
    for slot in s.slots:
        if tg.key in slot.labels and slot_passes(s, tg, slot):
            values.add(slot.labels[tg.key])
    tg.eligible, tg.pools_ok = frozenset(values), frozenset(pools)
    return tg.eligible


def spread_min(s: SolveState, tg: TopoGroup, eligible: frozenset[str]) -> int:
    """The least count over a spread's eligible domains (``eligible_domains``; 0 below minDomains), kept
    on the group until its counts change."""
    if tg.min_domains is not None and len(eligible) < tg.min_domains:
        return 0
    low = tg.low
    if low is None:
        counts = tg.counts
        low = tg.low = min((counts.get(d, 0) for d in eligible), default=0)
    return low


def allowed_domains(
    s: SolveState,
    g: Group,
    level: Level,
    dom: Mapping[str, frozenset[str]],
    members: Mapping[int, int] | None,
    only: str | None = None,
    explain: bool = True,
) -> dict[str, frozenset[str]] | tuple[str, bool, str]:
    """Per topology key, the target's domains every constraint allows; or (reason, permanent, the
    kube-scheduler filter it corresponds to).

    ``dom`` holds the target's possible domains per key; ``members`` the pods already on the target
    whose domain is still open (counted against a spread as if they landed where this pod does).
    A failure is permanent (for this group and level) when counts only grow against it: hostname spread
    and anti-affinity. ``only`` restricts the check to one key. ``explain=False`` leaves the reason
    empty (for callers that only look at the flag).
    """
    out: dict[str, frozenset[str]] = {}
    for tg, role in level.cons:
        key = tg.key
        if only is not None and key != only:
            continue
        full = dom[key]
        have = out.get(key, full)
        counts = tg.counts
        if role == SPREAD:
            self_count = 1 if tg.id in g.selset else 0
            if key == HOSTNAME:
                ok = frozenset(d for d in have if counts.get(d, 0) + self_count <= tg.max_skew)
            else:
                eligible = eligible_domains(s, tg)
                low = spread_min(s, tg, eligible)
                extra = members.get(tg.id, 0) if members and len(full) > 1 else 0
                limit = tg.max_skew + low - self_count - extra
                ok = frozenset(d for d in have if d in eligible and counts.get(d, 0) <= limit)
        elif role == AFFINITY:
            if members and members.get(tg.id) and len(full) > 1:
                ok = have  # matching pods on this claim: wherever it gets pinned, they are there too
            elif tg.total > 0:
                ok = frozenset(d for d in have if counts.get(d, 0) > 0)
            else:
                ok = have if tg.id in g.selset else frozenset()
        elif role == ANTI:
            ok = frozenset(d for d in have if counts.get(d, 0) <= 0)
        else:
            owners = tg.owners
            ok = frozenset(d for d in have if owners.get(d, 0) <= 0)
        if not ok:
            if role in (ANTI, INVERSE) and not full:
                continue  # a node without the topology key is outside every anti-affinity domain
            plugin = POD_TOPOLOGY_SPREAD if role == SPREAD else INTER_POD_AFFINITY
            why = topology_why(s, tg, role, full) if explain else ""
            return why, key == HOSTNAME and role != AFFINITY, plugin
        out[key] = ok
    return out


def topology_why(s: SolveState, tg: TopoGroup, role: str, full: frozenset[str]) -> str:
    where = ", ".join(sorted(full)[:6]) or f"no {tg.key} domain"
    if role == SPREAD:
        return f"{tg.describe()} allows none of [{where}]"
    if role == AFFINITY:
        return f"pod affinity on {tg.key}: no matching pod in [{where}]"
    if role == ANTI:
        return f"pod anti-affinity on {tg.key}: matching pods already in [{where}]"
    return f"anti-affinity of existing pods on {tg.key} excludes [{where}]"


def domain_pins(
    s: SolveState, level: Level, dom: Mapping[str, frozenset[str]], allowed: Mapping[str, frozenset[str]]
) -> tuple[Requirement, ...]:
    """Requirements narrowing a NodeClaim to the chosen domains: one domain for keys this pod's own
    constraints count on (spread: least loaded; affinity: most matching pods), the allowed set for keys
    only other pods' anti-affinity constrains."""
    pins: list[Requirement] = []
    for key, values in allowed.items():
        if key == HOSTNAME:
            continue
        full = dom[key]
        roles = level.roles[key]
        if roles & {SPREAD, AFFINITY, ANTI}:
            if len(full) <= 1:
                continue
            spread = level.first.get((key, SPREAD))
            affinity = level.first.get((key, AFFINITY))
            if spread is not None:
                counts = spread.counts
                best = min(values, key=lambda d: (counts.get(d, 0), d))
            elif affinity is not None:
                counts = affinity.counts
                best = min(values, key=lambda d: (-counts.get(d, 0), d))
            else:
                best = min(values)
            pins.append(Requirement(key, IN, (best,)))
        elif values != full:
            pins.append(Requirement(key, IN, tuple(sorted(values))))
    return tuple(pins)


def record_claim(s: SolveState, claim: Claim, g: Group, k: int) -> None:
    """Count ``k`` pods of ``g`` placed on ``claim`` in every group that selects or is owned by them."""
    groups = s.topo.groups
    for gid in g.selects:
        tg = groups[gid]
        if tg.kind == SPREAD:
            eligible_domains(s, tg)
            if tg.pools_ok is not None and claim.table.name not in tg.pools_ok:
                continue
        doms = claim_domains(s, claim, tg.key)
        if len(doms) == 1:
            tg.add(next(iter(doms)), k)
        elif doms:
            if tg.kind == ANTI:
                # Not decided yet: block every domain the claim may launch in (Karpenter), until pinned.
                for d in doms:
                    tg.add(d, k)
            claim.members[gid] = claim.members.get(gid, 0) + k
    for gid in g.owns:
        tg = groups[gid]
        doms = claim_domains(s, claim, tg.key)
        for d in doms:
            tg.add_owner(d, k)
        if len(doms) > 1:
            claim.owner_members[gid] = claim.owner_members.get(gid, 0) + k


def rerecord_claim(s: SolveState, claim: Claim, old_reqs: rq.Reqs, old_sig: rq.Signature) -> None:
    """The claim's domains narrowed: settle the counts of pods whose domain was still open."""
    groups = s.topo.groups
    for gid, m in list(claim.members.items()):
        tg = groups[gid]
        old = domain_values(s, claim.table, old_reqs, old_sig, tg.key)
        new = claim_domains(s, claim, tg.key)
        if new == old:
            continue
        if tg.kind == ANTI:
            for d in old - new:
                tg.add(d, -m)
        elif len(new) == 1:
            tg.add(next(iter(new)), m)
        if len(new) <= 1:
            del claim.members[gid]
    for gid, m in list(claim.owner_members.items()):
        tg = groups[gid]
        old = domain_values(s, claim.table, old_reqs, old_sig, tg.key)
        new = claim_domains(s, claim, tg.key)
        for d in old - new:
            tg.add_owner(d, -m)
        if len(new) <= 1:
            del claim.owner_members[gid]


def record_slot(s: SolveState, slot: Slot, g: Group, k: int) -> None:
    groups = s.topo.groups
    for gid in g.selects:
        tg = groups[gid]
        domain = slot.labels.get(tg.key)
        if domain is None or (tg.kind == SPREAD and not slot_passes(s, tg, slot)):
            continue
        tg.add(domain, k)
    for gid in g.owns:
        tg = groups[gid]
        domain = slot.labels.get(tg.key)
        if domain is not None:
            tg.add_owner(domain, k)
