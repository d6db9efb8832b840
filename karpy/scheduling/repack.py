"""Re-dealing topology-neutral pods over fewer or cheaper NodeClaims after placement.

Karpenter's greedy (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, pods queued by
``queue.go`` largest CPU first) fills one NodeClaim with the largest pods first, so a big claim ends full of
cpu with memory to spare while a later one is the opposite, and both launch the largest type. karpy re-deals
such pods when that is cheaper; Karpenter has no counterpart.
"""

from __future__ import annotations

from collections.abc import Sequence

from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import Vector
from karpy.scheduling.model import Pod
from karpy.scheduling.nodeclaim import Claim, claim_fit, frontier_of, movable_claim
from karpy.scheduling.queue import Group
from karpy.scheduling.state import SolveState


def repack(s: SolveState) -> None:
    """Re-deal topology-neutral pods among NodeClaims with identical requirements when that is cheaper.

    Karpenter's greedy fills one NodeClaim with the largest pods first (the queue is sorted by cpu), so a
    big claim ends full of cpu with memory to spare while a later one is the opposite; both launch the
    largest type. Here claims that hold only pods no topology constraint refers to, from one NodePool
    with equal requirements (no limits, no minValues), are re-dealt: the fewest claims their total fits
    in (then one more, …), each pod, largest first, to the claim whose dominant share grows least. The
    new plan replaces the old one only when its cheapest launchable types cost less.
    """
    pools: dict[tuple[int, rq.Signature], list[Claim]] = {}
    for claim in s.claims:
        if claim.neutral and movable_claim(claim):
            pools.setdefault((claim.table.order, claim.sig), []).append(claim)
    for claims in pools.values():
        if len(claims) > 1:
            repack_pool(s, claims)


def repack_pool(s: SolveState, claims: list[Claim]) -> None:
    first = claims[0]
    table = first.table
    front = frontier_of(s, table, first.reqs, first.sig)
    avail = table.avail
    dims = range(len(s.index))
    biggest = [max((avail[t][i] for t in front), default=0) for i in dims]
    items = [(g, pod) for c in claims for g, pods in c.batches for pod in pods]
    total = [sum(g.vec[i] for g, _ in items) for i in dims]
    if any(total[i] > 0 and biggest[i] <= 0 for i in dims):
        return
    scale = [1.0 / b if b > 0 else 0.0 for b in biggest]

    def share(g: Group) -> float:
        return max(g.vec[i] * scale[i] for i in dims)

    items.sort(key=lambda item: -share(item[0]))
    old_cost = sum(claim_fit(c, c.used)[0] for c in claims)
    least = max(1, max(-(-total[i] // biggest[i]) for i in dims if biggest[i] > 0))
    for n in range(least, len(claims) + 1):
        plan = deal_bins(s, items, n, front, avail, scale)
        if plan is None:
            continue
        bins, members = plan
        cost = sum(claim_fit(first, used)[0] for used in bins)
        if cost < old_cost * (1 - 1e-9):
            apply_repack(s, claims, bins, members)
        return


def deal_bins(
    s: SolveState,
    items: list[tuple[Group, Pod]],
    n: int,
    front: list[int],
    avail: Sequence[Vector],
    scale: list[float],
) -> tuple[list[list[int]], list[list[tuple[Group, Pod]]]] | None:
    """Deal items to ``n`` bins, each to the bin whose dominant share grows least (ties: the smaller share
    after, then the lower bin); None if one fits none.

    A bin's rank for an item depends only on the bin and the item's requests, and only the bin that took the
    previous item changed: consecutive items with equal requests (a group's pods, sorted together) re-rank
    that bin alone instead of all ``n``.
    """
    dims = range(len(s.index))
    bins = [[0] * len(s.index) for _ in range(n)]
    shares = [0.0] * n
    members: list[list[tuple[Group, Pod]]] = [[] for _ in range(n)]
    # Per bin: (share growth, share after, bin) for the current requests, or None when they do not fit.
    ranks: list[tuple[float, float, int] | None] = [None] * n
    last: Vector | None = None
    changed = -1

    def rank(b: int, vec: Vector) -> tuple[float, float, int] | None:
        used = bins[b]
        grown = max((used[i] + vec[i]) * scale[i] for i in dims)
        if grown > 1.0 or not any(all(avail[t][i] >= used[i] + vec[i] for i in dims) for t in front):
            return None
        return (grown - shares[b], grown, b)

    for g, pod in items:
        vec = g.vec
        if vec != last:
            ranks = [rank(b, vec) for b in range(n)]
            last = vec
        elif changed >= 0:
            ranks[changed] = rank(changed, vec)
        feasible = [r for r in ranks if r is not None]
        if not feasible:
            return None
        best = min(feasible)
        b = best[2]
        for i in dims:
            bins[b][i] += vec[i]
        shares[b] = best[1]
        members[b].append((g, pod))
        changed = b
    return bins, members


def apply_repack(
    s: SolveState, claims: list[Claim], bins: list[list[int]], members: list[list[tuple[Group, Pod]]]
) -> None:
    for j, claim in enumerate(claims):
        if j < len(bins):
            claim.used = bins[j]
            claim.pods = [pod for _, pod in members[j]]
            claim.batches = []
        else:
            claim.pods, claim.batches = [], []
