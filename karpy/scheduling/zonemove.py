"""Moving a whole zone-affinity group to another zone after placement, when the plan gets cheaper.

The first pod of a group of pods with required pod affinity to themselves on a zone-like key (Karpenter core
``pkg/controllers/provisioning/scheduling/topologygroup.go``, ``nextDomainAffinity``: any allowed domain
while no matching pod is placed) decides the zone of every later pod of the group. The greedy takes the
zone of the first NodeClaim that has room for that pod, so groups stack on the NodeClaims of one zone and
those grow to larger types while NodeClaims of other zones keep spare room. The per-pod
:mod:`~karpy.scheduling.exchange` keeps every pod of such a group in its zone (moving one pod alone would
break the affinity of the others); this pass moves all of a group's pods together.

For each such group, in group order, and each other zone holding NodeClaims of the group's NodePool, the
group's pods (largest first) are packed into that zone's NodeClaims, each into the one whose price grows
least (the cheapest type holding its pods, as :mod:`~karpy.scheduling.exchange` prices it); the move is
applied when the sum of prices of the NodeClaims touched drops. No NodeClaim is opened.

Only groups whose every constraint is known to be kept move, and only what they touch is checked:

* each pod of the group is selected by and owns only this affinity group among all topology groups (no
  spread, anti-affinity or hostname constraint selects or belongs to it), no pod outside the group has
  affinity or a preference toward it, no pod of it has a node selector, node affinity, host port or volume,
  and every pod the group counts sits on a NodeClaim of one NodePool pinned to one domain (none on existing
  nodes, none with the domain still open);
* the NodeClaims touched are of that NodePool, pinned to one domain, neither cut by NodePool limits nor with
  minValues (a NodeClaim not cut by limits counted its largest candidate type against them when it
  opened, as :mod:`~karpy.scheduling.exchange` relies on too).

The work is bounded: at most ``BUDGET_PER_CLAIM`` units per NodeClaim of the plan in all (a unit: one
price look-up, or one destination looked at for one pod), so the pass stays linear in NodeClaims; once
spent, the remaining groups stay where they are. Deterministic: groups in id order, zones by name,
NodeClaims by index.

Like :mod:`~karpy.scheduling.exchange`, the pass leaves the hostname groups' ``counts``, ``Claim.members``,
``front``, ``headroom`` and ``price_pos`` stale (finalizing reads none of them): it must run last in
:func:`~karpy.scheduling.scheduler.build_result`, after every placement.
"""

from __future__ import annotations

from collections.abc import Sequence

from karpy.scheduling.instancetypes import PoolTable
from karpy.scheduling.nodeclaim import Claim, claim_fit, movable_claim, move_pod, within
from karpy.scheduling.queue import Group
from karpy.scheduling.state import HOSTNAME, SolveState
from karpy.scheduling.topology import AFFINITY
from karpy.scheduling.topologydomains import claim_domains

# Work units (price look-ups, destinations looked at) per NodeClaim of the plan, over the whole pass.
BUDGET_PER_CLAIM = 20


def _group_only(s: SolveState, g: Group, tid: int) -> bool:
    """The pods of ``g`` are selected by and own exactly the topology group ``tid`` and may go to any
    NodeClaim of their NodePool."""
    pod = g.sample
    if pod.host_ports or pod.volume_claims or pod.volume_terms:
        return False
    if pod.node_selector or pod.required_terms or pod.preferred_terms:
        return False
    if tuple(g.selects) != (tid,):
        return False
    cons = g.levels[0].cons if g.levels else ()
    return len(cons) == 1 and cons[0][0].id == tid and cons[0][1] == AFFINITY and len(g.levels) == 1


class _Mover:
    def __init__(self, s: SolveState) -> None:
        self.s = s
        self.budget = BUDGET_PER_CLAIM * max(1, len(s.claims))
        self.fits: dict[int, tuple[float, Sequence[int], int]] = {}
        self.by_zone: dict[tuple[int, str], dict[str, list[Claim]]] = {}

    def fit(self, claim: Claim, used: Sequence[int], start: int = 0) -> tuple[float, Sequence[int], int]:
        """:func:`~karpy.scheduling.nodeclaim.claim_fit` (one budget unit)."""
        self.budget -= 1
        return claim_fit(claim, used, start)

    def step(self, claim: Claim, at: tuple[float, Sequence[int], int]) -> float:
        """The least a pod more can add to ``claim`` priced ``at`` once it no longer fits its type: the
        price of the next type in price order minus the current one (0 when they cost the same)."""
        if not at[1]:
            return 0.0
        _, prices = claim.table.price_list(claim.reqs, claim.sig)
        j = at[2] + 1
        return prices[j] - at[0] if j < len(prices) else float("inf")

    def spare(self, cap: Sequence[int], used: Sequence[int], vec: Sequence[int]) -> float:
        """Room left at allocatable ``cap`` once ``vec`` joins ``used``, summed as fractions of each resource."""
        return sum((x - u - v) / x for x, u, v in zip(cap, used, vec, strict=True) if x > 0)

    def zones(self, table: PoolTable, key: str) -> dict[str, list[Claim]]:
        """The NodeClaims of ``table`` a group may go to, by their one domain of ``key`` (moves keep
        NodeClaims eligible: pods only move between eligible ones)."""
        hit = self.by_zone.get((table.order, key))
        if hit is None:
            hit = self.by_zone[(table.order, key)] = {}
            for c in self.s.claims:
                if c.table is table and movable_claim(c):
                    doms = claim_domains(self.s, c, key)
                    if len(doms) == 1:
                        hit.setdefault(next(iter(doms)), []).append(c)
        return hit

    def fit_of(self, claim: Claim) -> tuple[float, Sequence[int], int]:
        """:meth:`fit` of the NodeClaim as it is, kept until it changes."""
        hit = self.fits.get(claim.index)
        if hit is None:
            hit = self.fits[claim.index] = self.fit(claim, claim.used)
        return hit

    def price_of(self, claim: Claim) -> float:
        return self.fit_of(claim)[0]

    def groups(self) -> dict[int, list[tuple[Claim, Group]]]:
        """Zone-affinity topology group id -> (NodeClaim, pod group) pairs holding its pods; groups that
        a pod they do not select refers to (its affinity or preference would follow the move) left out."""
        s = self.s
        out: dict[int, list[tuple[Claim, Group]]] = {}
        # Every pod group owning a constraint, wherever its pods went (existing nodes included): a pod
        # on an existing node with affinity toward a group would be stranded by the group's move.
        owners: dict[int, set[int]] = {}
        for g in s.groups:
            for level in g.levels:
                for tg, _role in level.cons:
                    owners.setdefault(tg.id, set()).add(id(g))
        seen: set[tuple[int, int]] = set()
        for claim in s.claims:
            for g, _ in claim.batches:
                if (claim.index, id(g)) in seen:
                    continue
                seen.add((claim.index, id(g)))
                for tid in g.selects:
                    tg = s.topo.groups[tid]
                    if tg.kind == AFFINITY and tg.key != HOSTNAME:
                        out.setdefault(tid, []).append((claim, g))
        for tid, pairs in list(out.items()):
            if not owners.get(tid, set()) <= {id(g) for _, g in pairs}:
                del out[tid]
        return out

    def try_group(self, tid: int, pairs: list[tuple[Claim, Group]]) -> bool:
        s = self.s
        tg = s.topo.groups[tid]
        if any(not _group_only(s, g, tid) or not movable_claim(c) for c, g in pairs):
            return False
        table = pairs[0][0].table
        if any(c.table is not table for c, _ in pairs):
            return False
        homes = {claim_domains(s, c, tg.key) for c, _ in pairs}
        if len(homes) != 1:
            return False
        home = next(iter(homes))
        if len(home) != 1:
            return False
        src_zone = next(iter(home))
        moving: list[tuple[Claim, Group]] = []
        for c, g in pairs:
            for bg, pods in c.batches:
                if bg is g:
                    moving.extend((c, g) for _ in pods)
        if len(moving) != tg.total or tg.counts.get(src_zone, 0) != tg.total:
            return False  # pods it counts elsewhere (existing nodes): they cannot move
        moving.sort(key=lambda cg: (tuple(-v for v in cg[1].vec), cg[0].index))
        # The NodeClaims the group leaves, with their requests once it is gone.
        src_used: dict[int, list[int]] = {}
        src: dict[int, Claim] = {}
        for c, g in moving:
            u = src_used.setdefault(c.index, list(c.used))
            src[c.index] = c
            for i, v in enumerate(g.vec):
                u[i] -= v
        left = {i: self.fit(c, src_used[i]) if any(src_used[i]) else (0.0, (), 0) for i, c in src.items()}
        # What the group's NodeClaims save without it bounds what any move saves: the rest only adds.
        bound = sum(self.price_of(c) for c in src.values()) - sum(f[0] for f in left.values())
        if bound <= 1e-9:
            return False
        by_zone = self.zones(table, tg.key)
        best: tuple[float, str, list[tuple[Claim, Group, Claim]]] | None = None
        for zone in sorted(z for z in by_zone if z != src_zone):
            if len(moving) * len(by_zone[zone]) > self.budget:
                continue  # the budget would run out before the last pod: the work would be wasted
            plan = self.pack(moving, by_zone[zone], bound - (best[0] if best else 0.0))
            if plan is not None:
                best = (bound - plan[0], zone, plan[1])
        if best is None:
            return False
        _, zone, moves = best
        for c, g, dest in moves:  # every destination is in another zone than its source
            move_pod(c, dest, g)
            self.fits.pop(c.index, None)
            self.fits.pop(dest.index, None)
        tg.add(src_zone, -tg.total)
        tg.add(zone, len(moves))
        return True

    def pack(
        self,
        moving: list[tuple[Claim, Group]],
        dests: list[Claim],
        limit: float,
    ) -> tuple[float, list[tuple[Claim, Group, Claim]]] | None:
        """Each pod into the destination (all in another zone than the group's) whose price grows least, the
        tightest fit on a tie: (USD/hour added, moves); None
        once the added price reaches ``limit``, when a pod fits nowhere, or when the budget runs out. A
        destination with room at its current type costs nothing more, so those are looked for first with
        vector comparisons only."""
        # A NodeClaim an earlier move emptied is gone: reviving it would cost its whole price.
        dests = [d for d in dests if d.pods]
        used: dict[int, list[int]] = {d.index: list(d.used) for d in dests}
        fit: dict[int, tuple[float, Sequence[int], int]] = {d.index: self.fit_of(d) for d in dests}
        moves: list[tuple[Claim, Group, Claim]] = []
        added_total = 0.0
        for c, g in moving:
            if self.budget <= 0:
                return None
            vec = g.vec
            self.budget -= len(dests)
            best: tuple[float, float, Claim, tuple[float, Sequence[int], int]] | None = None
            for d in dests:
                cap = fit[d.index][1]
                if cap and within(used[d.index], vec, None, cap):
                    spare = self.spare(cap, used[d.index], vec)
                    if best is None or spare < best[1]:
                        best = (0.0, spare, d, fit[d.index])
            if best is None:
                for d in dests:
                    if best is not None and best[0] < self.step(d, fit[d.index]) - 1e-12:
                        continue  # its next dearer type already costs more than the best so far
                    after = [a + b for a, b in zip(used[d.index], vec, strict=True)]
                    p, cap, j = self.fit(d, after, fit[d.index][2])
                    added = p - fit[d.index][0]
                    if best is None or added < best[0] - 1e-12:
                        best = (added, self.spare(cap, used[d.index], vec), d, (p, cap, j))
                    elif added <= best[0] + 1e-12 and (spare := self.spare(cap, used[d.index], vec)) < best[1]:
                        best = (added, spare, d, (p, cap, j))
            if best is None:
                return None
            added_total += best[0]
            if added_total >= limit - 1e-9:
                return None
            _, _, d, fit[d.index] = best
            used[d.index] = [a + b for a, b in zip(used[d.index], vec, strict=True)]
            moves.append((c, g, d))
        return added_total, moves


def move_groups(s: SolveState) -> None:
    """Move whole zone-affinity groups to the zone where the plan is cheapest (see module)."""
    if not s.topo.groups:
        return
    mover = _Mover(s)
    for tid, pairs in sorted(mover.groups().items()):
        if mover.budget <= 0:
            break
        mover.try_group(tid, pairs)
