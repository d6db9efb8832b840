"""NodeClaims opened in this solve: requirements narrowed pod by pod, candidate instance types, the heaps
of open claims, and the NodeClaim each finally becomes.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling/nodeclaim.go`` (``NodeClaim.Add``: a pod
joins when its requirements stay compatible, it tolerates the NodePool's taints, its host ports are free and
some remaining instance type still fits everything; ``FinalizeScheduling``) and
``nodeclaimtemplate.go`` (``ToNodeClaim``: at most the cheapest instance types, offerings narrowed).
NodePool limits follow ``scheduler.go`` (``subtractMax``), minValues ``pkg/scheduling/requirements.go``.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence

from karpy.apis import labels as wk
from karpy.scheduling import requirements as rq
from karpy.scheduling.explain import explain_min_values, explain_types
from karpy.scheduling.instancetypes import PoolTable, Vector, min_values_keys
from karpy.scheduling.model import IN, HostPort, NewNodeClaim, Pod, Requirement
from karpy.scheduling.queue import Group, Level, Variant
from karpy.scheduling.state import SolveState, fit_count, frontier, ports_conflict
from karpy.scheduling.taints import format_taint, untolerated
from karpy.scheduling.topologydomains import (
    allowed_domains,
    claim_domains,
    domain_universe,
    record_claim,
    rerecord_claim,
)

# Karpenter ``MaxInstanceTypes`` for NodeClaim requirements is 600; the AWS launch keeps the 60 cheapest
# (``maxInstanceTypes``). Keeping 60 here makes NodeClaim objects small and loses nothing at launch.
MAX_INSTANCE_TYPES = 60
# Set to "true" on a NodeClaim whose minValues were lowered (Karpenter ``NodeClaimMinValuesRelaxedAnnotationKey``).
ANNOTATION_MIN_VALUES_RELAXED = "karpenter.sh/nodeclaim-min-values-relaxed"


def is_restricted_node_label(key: str) -> bool:
    """A requirement key that never becomes a NodeClaim label: well-known and restricted labels come from the
    cloud (Karpenter core ``scheduling/nodeclaimtemplate.go``), and keys in a restricted domain are karpy's own.

    Karpenter v1.15 dropped ``LabelDomainExceptions`` with the kubernetes.io/k8s.io restriction: no exception
    domain lies inside karpenter.sh or karpenter.k8s.aws, so there is nothing left to except.
    """
    return key in wk.WELL_KNOWN_LABELS or key in wk.RESTRICTED_LABELS or wk.in_restricted_label_domain(key)


class Claim:
    """A NodeClaim opened in this solve: narrowed requirements, candidate types, summed pod requests.

    ``types`` are the candidates allowed by the requirements (and limits); which of them still fit ``used``
    is decided at the end, ``front`` (their Pareto frontier) answers fit questions on the way. ``members``
    and ``owner_members`` count pods whose topology domain is not decided yet (zone still open).
    """

    __slots__ = (
        "batches",
        "buckets",
        "closed",
        "front",
        "headroom",
        "hostname",
        "in_heap",
        "index",
        "limited",
        "members",
        "merged",
        "neutral",
        "owner_members",
        "pods",
        "popped",
        "ports",
        "price_pos",
        "price_sig",
        "pricey",
        "reqs",
        "sig",
        "table",
        "types",
        "used",
    )

    def __init__(self, table: PoolTable, index: int, reqs: rq.Reqs, sig: rq.Signature, used: list[int]) -> None:
        self.table = table
        self.index = index
        self.reqs = reqs
        self.sig = sig
        self.merged: set[rq.Signature] = set()
        self.types: list[int] = []
        self.front: list[int] = []
        self.limited = False
        self.used = used
        self.pods: list[Pod] = []
        # Pods' host ports only: DaemonSet ports differ per type and are kept out through the requirements.
        self.ports: list[HostPort] = []
        self.headroom: list[int] = []
        self.closed = False
        self.hostname = f"hostname-placeholder-{index:05d}"
        self.in_heap: int | None = None
        # The heap pop_claim took it from and its pod count then (see push_claims).
        self.popped: tuple[list[tuple[int, int]], int] | None = None
        # The domain heaps it belongs in, and the requirement signature they were computed for.
        self.buckets: tuple[rq.Signature, tuple[tuple[str, str | None], ...]] | None = None
        self.members: dict[int, int] = {}
        self.owner_members: dict[int, int] = {}
        self.batches: list[tuple[Group, list[Pod]]] = []
        self.neutral = True
        self.price_sig: rq.Signature | None = None
        self.price_pos = 0
        # (group fit key, variant id, pns, topology keys) found too pricey to grow since the last commit.
        self.pricey: set[tuple[object, ...]] | None = None

    def refresh(self, min_need: Sequence[int]) -> None:
        """Recompute the per-resource headroom (best over frontier types) and close a claim nothing fits."""
        avail = self.table.avail
        front = self.front
        if len(front) == 1:
            self.headroom = [a - u for a, u in zip(avail[front[0]], self.used)]  # noqa: B905 (one index)
        else:
            self.headroom = [max((avail[t][i] for t in front), default=0) - u for i, u in enumerate(self.used)]
        self.closed = any(h < m for h, m in zip(self.headroom, min_need, strict=True))


class Candidates:
    """The candidate instance types of a NodeClaim that takes a group's pods (an open claim, or a new one from
    a NodePool when ``claim`` is None): the claim's requirements narrowed by the pods' (``reqs``, signature
    ``sig``), the instance types they still allow (``types``, indices into the NodePool table) and their Pareto
    frontier (``front``), and how many of the pods it can take (``cap``). ``limited``: the types were cut to
    fit the NodePool's limits. ``fitting`` caches the types that fit one pod on an empty node."""

    __slots__ = ("cap", "claim", "fitting", "front", "limited", "reqs", "sig", "types")

    def __init__(
        self,
        claim: Claim | None,
        reqs: rq.Reqs,
        sig: rq.Signature,
        types: list[int],
        front: list[int],
        cap: int,
        limited: bool = False,
    ) -> None:
        self.claim = claim
        self.reqs = reqs
        self.sig = sig
        self.types = types
        self.front = front
        self.cap = cap
        self.limited = limited
        self.fitting: list[int] | None = None


def push_claim(s: SolveState, claim: Claim) -> None:
    """(Re)insert an open claim: in the main heap and, per indexed topology key, in the heap of its domain
    (or of claims whose domain is still open). Old entries in other heaps go stale via ``in_heap``."""
    claim.popped = None
    if claim.closed:
        return
    count = claim.in_heap = len(claim.pods)
    entry = (count, claim.index)
    heapq.heappush(s.heap, entry)
    for bucket in claim_buckets(s, claim):
        heap = s.domain_heaps.get(bucket)
        if heap is None:
            heap = s.domain_heaps[bucket] = []
        heapq.heappush(heap, entry)


def claim_buckets(s: SolveState, claim: Claim) -> tuple[tuple[str, str | None], ...]:
    """Per indexed topology key, the claim's domain, or None while it is still open (cached per signature)."""
    cached = claim.buckets
    if cached is not None and cached[0] == claim.sig:
        return cached[1]
    out = []
    for key in s.domain_keys:
        doms = claim_domains(s, claim, key)
        out.append((key, next(iter(doms))) if len(doms) == 1 else (key, None))
    buckets = tuple(out)
    claim.buckets = (claim.sig, buckets)
    return buckets


def push_claims(s: SolveState, claims: Sequence[Claim]) -> None:
    """:func:`push_claim` for claims a topology group's loop held out of the heaps (``never``).

    A claim that took no pod since :func:`pop_claim` still has its entries in every heap but the one it was
    popped from (nothing else pops those heaps during the loop): restoring its count makes them valid again,
    and one push puts it back where it came from. A claim that changed is pushed anew.
    """
    for claim in claims:
        popped = claim.popped
        claim.popped = None
        if claim.closed:
            continue
        if popped is not None and claim.in_heap is None and len(claim.pods) == popped[1]:
            claim.in_heap = popped[1]
            heapq.heappush(popped[0], (popped[1], claim.index))
        else:
            push_claim(s, claim)


def pop_claim(s: SolveState, heaps: Sequence[list[tuple[int, int]]] | None = None) -> Claim | None:
    """Take the claim with fewest pods out of ``heaps`` (default: every open claim)."""
    claims = s.claims
    best: tuple[int, int] | None = None
    best_heap: list[tuple[int, int]] | None = None
    for heap in heaps if heaps is not None else (s.heap,):
        # The top of the heap, stale entries dropped, inline: this runs once per claim looked at.
        while heap:
            top = heap[0]
            claim = claims[top[1]]
            if claim.in_heap == top[0] and not claim.closed:
                if best is None or top < best:
                    best, best_heap = top, heap
                break
            heapq.heappop(heap)
    if best is None or best_heap is None:
        return None
    heapq.heappop(best_heap)  # its entry is on top there and about to go stale
    claim = claims[best[1]]
    claim.in_heap = None
    claim.popped = (best_heap, best[0])
    return claim


def candidate_heaps(s: SolveState, g: Group, level: Level) -> list[list[tuple[int, int]]] | None:
    """For a level constrained on an indexed key (zone, capacity type, ...): the heaps of claims whose
    domain the constraints currently allow, plus claims whose domain is still open; None = all claims."""
    key = next((k for k in level.keys if k in s.domain_keys), None)
    if key is None:
        return None
    universe = domain_universe(s, key)
    allowed = allowed_domains(s, g, level, {key: universe}, None, key, explain=False)
    heaps = [s.domain_heaps.setdefault((key, None), [])]
    if isinstance(allowed, dict):
        heaps += [s.domain_heaps.setdefault((key, d), []) for d in sorted(allowed.get(key, universe))]
    return heaps


def viable_set(s: SolveState, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> frozenset[int]:
    key = (table.order, sig)
    cached = s.viable_sets.get(key)
    if cached is None:
        cached = s.viable_sets[key] = frozenset(table.viable(reqs, sig))
    return cached


def frontier_of(s: SolveState, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
    key = (table.order, sig)
    cached = s.frontiers.get(key)
    if cached is None:
        cached = s.frontiers[key] = table.frontier(reqs, sig)
    return cached


def merge_reqs(s: SolveState, claim: Claim, variant: Variant) -> tuple[rq.Reqs, rq.Signature] | None:
    """The claim's requirements narrowed by a pod alternative, or None when incompatible (cached)."""
    key = (claim.sig, variant.sig)
    if key in s.merge_cache:
        return s.merge_cache[key]
    out: tuple[rq.Reqs, rq.Signature] | None = None
    if rq.compatible(claim.reqs, variant.reqs) is None:
        merged = rq.intersect_all(claim.reqs, variant.reqs)
        out = (merged, rq.signature(merged))
    s.merge_cache[key] = out
    return out


def candidates_on_claim(s: SolveState, claim: Claim, g: Group, variant: Variant, pns: bool) -> Candidates | None:
    """The candidate types of an open NodeClaim once it takes the group's pods, and how many it can take
    (Karpenter ``NodeClaim.Add``); None when it can take none."""
    headroom = claim.headroom
    for i, amount in g.need:
        if headroom[i] < amount:
            return None
    table = claim.table
    if untolerated(g.tolerations, table.pool.taints, pns) is not None:
        return None
    if g.ports and ports_conflict(g.ports, claim.ports):
        return None
    if variant.sig in claim.merged:
        reqs, sig, types, front = claim.reqs, claim.sig, claim.types, claim.front
    else:
        merged = merge_reqs(s, claim, variant)
        if merged is None:
            return None
        reqs, sig = merged
        if sig == claim.sig:
            types, front = claim.types, claim.front
        elif claim.limited:
            allowed = viable_set(s, table, reqs, sig)
            types = [t for t in claim.types if t in allowed]
            front = frontier(table.avail, types)
        else:
            types, front = table.viable(reqs, sig), frontier_of(s, table, reqs, sig)
    if g.ports:
        free = without_port_types(s, table, g.ports, reqs)
        if free is not reqs:
            reqs, sig = free, rq.signature(free)
            allowed = viable_set(s, table, reqs, sig)
            types = [t for t in types if t in allowed]
            front = frontier(table.avail, types)
    cap = pod_cap(s, table, reqs, types, front, claim.used, g.need)
    if cap <= 0:
        return None
    return Candidates(claim, reqs, sig, types, front, 1 if g.ports else cap, claim.limited)


def price_list(s: SolveState, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> tuple[list[int], list[float]]:
    """Viable types cheapest first and their prices (cached per requirement set)."""
    key = (table.order, sig)
    hit = s.price_lists.get(key)
    if hit is None:
        hit = s.price_lists[key] = table.price_list(reqs, sig)
    return hit


def first_step(
    order: Sequence[int], steps: Sequence[int], avail: Sequence[Vector], used: Sequence[int], start: int
) -> int:
    """:func:`first_fit` looking only at ``steps`` (:meth:`PoolTable.price_steps` of ``order``): the same answer
    provided no type before ``start`` fits ``used`` (``start`` is 0 or a first fit of fewer requests)."""
    for q in range(bisect.bisect_left(steps, start), len(steps)):
        j = steps[q]
        for x, u in zip(avail[order[j]], used):  # noqa: B905 (equal lengths: one resource index)
            if x < u:
                break
        else:
            return j
    return len(order)


def first_fit(order: Sequence[int], avail: Sequence[Vector], used: Sequence[int], start: int) -> int:
    # for/else instead of all(generator): this runs for every pod tried on a claim.
    for j in range(start, len(order)):
        for x, u in zip(avail[order[j]], used):  # noqa: B905 (equal lengths: one resource index)
            if x < u:
                break
        else:
            return j
    return len(order)


def claim_fit(claim: Claim, used: Sequence[int], start: int = 0) -> tuple[float, Sequence[int], int]:
    """USD/hour, allocatable and position in price order of the cheapest type of ``claim`` that holds
    ``used`` ((inf, (), end) when none); types before ``start`` are known not to hold it."""
    order, prices = claim.table.price_list(claim.reqs, claim.sig)
    j = first_fit(order, claim.table.avail, used, start)
    return (prices[j], claim.table.avail[order[j]], j) if j < len(order) else (float("inf"), (), j)


def movable_claim(claim: Claim) -> bool:
    """Whether the passes after placement may move pods off or onto ``claim``: it holds pods, was not cut
    by NodePool limits (so it counted its largest candidate type against them) and has no minValues."""
    return bool(claim.pods) and not claim.limited and not min_values_keys(claim.reqs)


def within(used: Sequence[int], plus: Sequence[int], minus: Sequence[int] | None, cap: Sequence[int]) -> bool:
    """``used + plus - minus <= cap`` in every resource (loops, not ``all``: this is the hot path)."""
    if minus is None:
        for u, p, c in zip(used, plus, cap, strict=True):  # noqa: SIM110 (hot path: faster than all())
            if u + p > c:
                return False
        return True
    for u, p, m, c in zip(used, plus, minus, cap, strict=True):  # noqa: SIM110
        if u + p - m > c:
            return False
    return True


def _take_pod(claim: Claim, g: Group) -> Pod:
    """Remove the last pod of ``g`` from ``claim``'s pods and batches (not from ``used``).

    Raises:
        ValueError: no pod of ``g`` on ``claim``."""
    for k, (group, pods) in enumerate(claim.batches):
        if group is g:
            pod = pods[-1]
            if len(pods) == 1:
                del claim.batches[k]
            else:
                claim.batches[k] = (group, pods[:-1])
            claim.pods = [p for p in claim.pods if p is not pod]
            return pod
    raise ValueError("group not on claim")


def _put_pod(claim: Claim, g: Group, pod: Pod) -> None:
    """Add ``pod`` of ``g`` to ``claim``'s pods and batches (not to ``used``)."""
    claim.batches.append((g, [pod]))
    claim.pods.append(pod)
    if not g.neutral:
        claim.neutral = False


def move_pod(x: Claim, y: Claim, g: Group) -> None:
    """Move one pod of ``g`` from ``x`` to ``y`` (pods, batches and summed requests; no constraint check)."""
    _put_pod(y, g, _take_pod(x, g))
    x.used = [u - v for u, v in zip(x.used, g.vec, strict=True)]
    y.used = [u + v for u, v in zip(y.used, g.vec, strict=True)]


def commit(s: SolveState, claim: Claim, cands: Candidates, g: Group, variant: Variant, pods: list[Pod]) -> None:
    k = len(pods)
    old_reqs, old_sig = claim.reqs, claim.sig
    claim.reqs, claim.sig = cands.reqs, cands.sig
    claim.merged.add(variant.sig)
    claim.pricey = None
    claim.types, claim.front = cands.types, cands.front
    for i, amount in g.need:
        claim.used[i] += amount * k
    claim.pods.extend(pods)
    claim.ports.extend(g.ports)
    claim.batches.append((g, pods))
    claim.neutral = claim.neutral and g.neutral
    claim.refresh(s.min_need)
    if old_sig != claim.sig and (claim.members or claim.owner_members):
        rerecord_claim(s, claim, old_reqs, old_sig)
    record_claim(s, claim, g, k)


def pool_candidates(s: SolveState, table: PoolTable, g: Group, variant: Variant, pns: bool) -> Candidates | str:
    """The candidate types of a new NodeClaim from ``table`` for this group alternative, or why there is none
    (cached)."""
    key = (table.order, variant.sig, pns, g.fit_key)
    hit = s.pool_candidates_cache.get(key)
    if hit is None:
        hit = s.pool_candidates_cache[key] = new_pool_candidates(s, table, g, variant, pns)
    return hit


def pool_reqs(s: SolveState, table: PoolTable, variant: Variant) -> tuple[rq.Reqs, rq.Signature] | str:
    """The NodePool's requirements narrowed by a pod alternative and their signature, or why they are
    incompatible (cached: groups of every size share it)."""
    key = (table.order, variant.sig)
    hit = s.pool_reqs.get(key)
    if hit is None:
        why = rq.compatible(table.reqs, variant.reqs)
        if why is not None:
            hit = why
        else:
            reqs = rq.intersect_all(table.reqs, variant.reqs)
            hit = (reqs, rq.signature(reqs))
        s.pool_reqs[key] = hit
    return hit


def new_pool_candidates(s: SolveState, table: PoolTable, g: Group, variant: Variant, pns: bool) -> Candidates | str:
    pool = table.pool
    taint = untolerated(g.tolerations, pool.taints, pns)
    if taint is not None:
        return f"did not tolerate taint {format_taint(taint)}"
    merged = pool_reqs(s, table, variant)
    if isinstance(merged, str):
        return merged
    reqs, sig = merged
    if g.ports:
        free = without_port_types(s, table, g.ports, reqs)
        if free is not reqs:
            if table.viable(reqs, rq.signature(reqs)) and not table.viable(free, rq.signature(free)):
                return "host ports conflict with a daemonset's host ports"
            reqs = free
            sig = rq.signature(reqs)
    front = frontier_of(s, table, reqs, sig)
    zero = [0] * len(s.index)
    if max((fit_count(table.avail[t], zero, g.need) for t in front), default=0) < 1:
        return explain_types(s, table, g, reqs)
    return Candidates(None, reqs, sig, table.viable(reqs, sig), front, 0)


def without_port_types(s: SolveState, table: PoolTable, ports: tuple[HostPort, ...], reqs: rq.Reqs) -> rq.Reqs:
    """``reqs`` narrowed to the types on which no DaemonSet pod holds one of ``ports`` (``reqs`` itself when
    none does). Karpenter skips the DaemonSet overhead groups whose host ports conflict with the pod's; as an
    ``instance-type NotIn`` requirement the exclusion stays with the NodeClaim through later merges."""
    key = (table.order, ports)
    names = s.port_types.get(key)
    if names is None:
        names = s.port_types[key] = tuple(
            sorted({table.names[t] for t, held in enumerate(table.daemon_ports) if ports_conflict(ports, held)})
        )
    if not names:
        return reqs
    out = dict(reqs)
    rq.add(out, rq.Req(wk.LABEL_INSTANCE_TYPE, True, frozenset(names)))
    return out


def open_claim(
    s: SolveState, table: PoolTable, g: Group, variant: Variant, cands: Candidates, todo: list[Pod]
) -> list[Pod] | str:
    """Open one NodeClaim with the candidate types ``cands`` holding as many pods as its largest fitting type allows."""
    types, front, limited = cands.types, cands.front, False
    remaining = s.remaining[table.name]
    zero = [0] * len(s.index)
    if remaining and not within_limits(s, table, cands, remaining):
        kept = [t for t in types if table.fits_limits(t, remaining)]
        if len(kept) < len(types):
            limited = True
            types, front = kept, frontier(table.avail, kept)
        if max((fit_count(table.avail[t], zero, g.need) for t in front), default=0) < 1:
            fitting = [t for t in cands.types if fit_count(table.avail[t], zero, g.need) >= 1]
            over = sorted(k for k, v in remaining.items() if min(table.capacity[t].get(k, 0) for t in fitting) > v)
            # No single resource rules every type out: name each one that rules some out.
            over = over or sorted(
                k for k, v in remaining.items() if any(table.capacity[t].get(k, 0) > v for t in fitting)
            )
            return f'nodepool "{table.name}" limits exceeded: {", ".join(over)}'
    cap = pod_cap(s, table, cands.reqs, types, front, zero, g.need)
    if cap <= 0:
        fitting = [t for t in types if fit_count(table.avail[t], zero, g.need) >= 1]
        why = explain_min_values(s, table, cands.reqs, fitting)
        return f'incompatible with nodepool "{table.name}": {why}'
    if g.ports:
        cap = 1
    claim = Claim(table, len(s.claims), cands.reqs, cands.sig, [0] * len(s.index))
    claim.types, claim.front, claim.limited = types, front, limited
    s.claims.append(claim)
    s.claim_by_host[claim.hostname] = claim
    take = min(cap, len(todo))
    if take > 1 and not limited and not min_values_keys(cands.reqs):
        take = cheapest_per_pod(s, table, cands, g, take)
    commit(s, claim, Candidates(claim, cands.reqs, cands.sig, types, front, cap, limited), g, variant, todo[:take])
    if remaining:
        # Count the largest candidate against the limits: any of them may be launched (Karpenter
        # ``subtractMax``); later pods only narrow the candidates, so this stays an upper bound.
        biggest = max_capacity(s, table, claim.sig, claim.types) if not limited else None
        for key in remaining:
            remaining[key] -= (
                biggest.get(key, 0) if biggest is not None else max(table.capacity[t].get(key, 0) for t in types)
            )
    push_claim(s, claim)
    return todo[take:]


def cheapest_per_pod(s: SolveState, table: PoolTable, cands: Candidates, g: Group, most: int) -> int:
    """How many of the group's pods a new claim should take: the count whose cheapest fitting type costs
    least per pod (ties to more pods). Karpenter always takes as many as fit; that can launch one big
    type where two small ones are cheaper."""
    order, prices = price_list(s, table, cands.reqs, cands.sig)
    zero = [0] * len(s.index)
    best = (float("inf"), most)
    seen = 0
    for j, t in enumerate(order):
        k = min(fit_count(table.avail[t], zero, g.need), most)
        if k <= seen:
            continue  # a cheaper type already holds as many pods
        seen = k
        ratio = prices[j] / k
        if ratio < best[0] * (1 - 1e-9) or (ratio <= best[0] * (1 + 1e-9) and k > best[1]):
            best = (ratio, k)
        if k == most:
            break
    return best[1]


def max_capacity(s: SolveState, table: PoolTable, sig: rq.Signature, types: Sequence[int]) -> dict[str, int]:
    """Per resource, the largest capacity among ``types`` (the viable set of ``sig``; cached with the
    catalogue, which the capacities come from)."""
    hit = table.cat.max_caps.get(sig)
    if hit is None:
        hit = {}
        for t in types:
            for name, value in table.capacity[t].items():
                if value > hit.get(name, 0):
                    hit[name] = value
        table.cat.max_caps[sig] = hit
    return hit


def within_limits(s: SolveState, table: PoolTable, cands: Candidates, remaining: Mapping[str, int]) -> bool:
    """True when even the largest candidate type stays within the NodePool's remaining limits."""
    if cands.limited:
        return False
    biggest = max_capacity(s, table, cands.sig, cands.types)
    return all(biggest.get(k, 0) <= v for k, v in remaining.items())


def pod_cap(
    s: SolveState,
    table: PoolTable,
    reqs: rq.Reqs,
    types: list[int],
    front: list[int],
    used: Sequence[int],
    need: Sequence[tuple[int, int]],
) -> int:
    """Most pods one NodeClaim can take while its remaining types still satisfy every minValues (under
    ``BestEffort``, while any type fits: minValues is lowered in :func:`finalize` instead)."""
    mv = min_values_keys(reqs)
    avail = table.avail
    if not mv or s.relax_min_values:
        best = 0
        for t in front:
            k = fit_count(avail[t], used, need)
            if k > best:
                best = k
        return best
    fits = [fit_count(avail[t], used, need) for t in types]
    seen: dict[str, set[str]] = {k: set() for k, _ in mv}
    for j in sorted(range(len(types)), key=lambda j: -fits[j]):
        if fits[j] <= 0:
            break
        for key, _ in mv:
            seen[key] |= table.values_of(types[j], key, reqs)
        if all(len(seen[k]) >= n for k, n in mv):
            return fits[j]
    return 0


def fitting_types(s: SolveState, table: PoolTable, g: Group, cands: Candidates) -> list[int]:
    """The candidate types that fit one pod of the group on an empty node (domains must have one)."""
    if cands.fitting is None:
        if cands.claim is None and not cands.limited:
            # A new claim's candidates are the viable types of its requirement set: shared across solves.
            cands.fitting = table.fitting(cands.reqs, cands.sig, g.need)
        else:
            zero = [0] * len(s.index)
            cands.fitting = [t for t in cands.types if fit_count(table.avail[t], zero, g.need) >= 1]
    return cands.fitting


def finalize(s: SolveState, claim: Claim) -> NewNodeClaim | str:
    """The NodeClaim Karpenter would create (``FinalizeScheduling`` + ``ToNodeClaim``), or why there is none.

    minValues is checked over the (at most ``MAX_INSTANCE_TYPES``) cheapest fitting types; when they do not
    give enough distinct values, Strict fails the NodeClaim, BestEffort lowers minValues to the values they
    give and annotates it (Karpenter ``InstanceTypes.Truncate`` and ``Scheduler.addToNewNodeClaim``, core
    ``pkg/cloudprovider/types.go`` and ``pkg/controllers/provisioning/scheduling/scheduler.go``).

    Everything but the pods follows from the NodePool, the requirements and the summed requests, so claims
    equal in those (one pod per node of one Deployment, say) are finalized once.
    """
    if claim.limited:
        return _finalize(s, claim)
    key = (claim.table.order, claim.sig, tuple(claim.used))
    hit = s.finalized.get(key)
    if hit is None:
        hit = s.finalized[key] = _finalize(s, claim)
    if isinstance(hit, str):
        return hit
    return NewNodeClaim(
        nodepool=hit.nodepool,
        requirements=hit.requirements,
        instance_types=hit.instance_types,
        pods=tuple(claim.pods),
        requests=dict(hit.requests),
        labels=dict(hit.labels),
        taints=hit.taints,
        startup_taints=hit.startup_taints,
        annotations=dict(hit.annotations),
    )


def _finalize(s: SolveState, claim: Claim) -> NewNodeClaim | str:
    table, reqs, used, avail = claim.table, claim.reqs, claim.used, claim.table.avail
    members = set(claim.types) if claim.limited else None
    priced: list[int] = []
    for t in table.by_price(reqs, claim.sig):
        if members is not None and t not in members:
            continue
        for a, u in zip(avail[t], used):  # noqa: B905 (equal lengths: one resource index)
            if a < u:
                break
        else:
            priced.append(t)
            if len(priced) == MAX_INSTANCE_TYPES:
                break
    relaxed: dict[str, int | None] = {}
    for key, n in min_values_keys(reqs):
        values: set[str] = set()
        for t in priced:
            values |= table.values_of(t, key, reqs)
        if len(values) < n:
            if not s.relax_min_values:
                return f"minValues {n} for {key} not met within the {MAX_INSTANCE_TYPES} cheapest instance types"
            relaxed[key] = len(values) or None
    out = dict(reqs)
    for key, lowered in relaxed.items():
        r = out[key]
        out[key] = rq.Req(key, r.complement, r.values, r.gte, r.lte, min_values=lowered)
    names = tuple([table.names[t] for t in priced])
    out.pop(wk.LABEL_INSTANCE_TYPE, None)
    shapes = {table.offer_shape[t]: t for t in priced}
    for key in (wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE):
        offered: set[str] = set()
        for shape, t in shapes.items():
            cache_key = (table.order, shape, claim.sig, key)
            found = s.offered.get(cache_key)
            if found is None:
                found = s.offered[cache_key] = table.offering_values(t, key, reqs)
            offered |= found
        out[key] = _narrowed(out, key, offered)
    prev = reqs.get(wk.LABEL_INSTANCE_TYPE)
    # The instance-type list keeps price order (cheapest first), as Karpenter writes it.
    type_mv = relaxed.get(wk.LABEL_INSTANCE_TYPE, prev.min_values) if prev else None
    type_req = Requirement(wk.LABEL_INSTANCE_TYPE, IN, names, type_mv)
    requirements = tuple(
        r
        for key in sorted([*out, wk.LABEL_INSTANCE_TYPE])
        for r in ((type_req,) if key == wk.LABEL_INSTANCE_TYPE else req_model(s, out[key]))
    )
    uniform = table.uniform_overhead
    overhead = (
        uniform if uniform is not None else [min(table.overhead[t][i] for t in priced) for i in range(len(s.index))]
    )
    requests = {n: claim.used[i] + overhead[i] for i, n in enumerate(s.index) if claim.used[i] + overhead[i] > 0}
    return NewNodeClaim(
        nodepool=table.name,
        requirements=requirements,
        instance_types=tuple([table.types[t] for t in priced]),
        pods=tuple(claim.pods),
        requests=requests,
        labels=claim_labels(s, table, reqs, claim.sig),
        taints=table.pool.taints,
        startup_taints=table.pool.startup_taints,
        annotations={ANNOTATION_MIN_VALUES_RELAXED: "true"} if relaxed else {},
    )


def claim_labels(s: SolveState, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> dict[str, str]:
    """A NodeClaim's labels: the NodePool template's, ``karpenter.sh/nodepool``, and each unrestricted
    requirement with a single value (cached per requirement set; every NodeClaim gets its own copy)."""
    key = (table.order, sig)
    hit = s.claim_labels.get(key)
    if hit is None:
        hit = {**table.pool.labels, wk.LABEL_NODEPOOL: table.name}
        for name, req in sorted(reqs.items()):
            if is_restricted_node_label(name):
                continue
            if req.operator() == IN and len(req.values) == 1:
                hit[name] = next(iter(req.values))
            elif (value := rq.bounded_value(req)) is not None:
                hit[name] = value
        s.claim_labels[key] = hit
    return dict(hit)


def req_model(s: SolveState, req: rq.Req) -> tuple[Requirement, ...]:
    """``req.to_model()``, cached per requirement (the model objects are immutable and shared)."""
    key = req.sig
    hit = s.req_models.get(key)
    if hit is None:
        hit = s.req_models[key] = tuple(req.to_model())
    return hit


def _narrowed(reqs: rq.Reqs, key: str, values: set[str]) -> rq.Req:
    prev = reqs.get(key)
    return rq.Req(key, False, frozenset(values), min_values=prev.min_values if prev else None)
