"""The price-aware choices karpy adds where Karpenter only counts pods.

Karpenter (core ``pkg/controllers/provisioning/scheduling/scheduler.go``, ``addToInflightNodeClaim``) gives
a pod to the in-flight NodeClaim with fewest pods that can take it. Here, among the ``WINDOW`` open claims
with fewest pods, a pod goes where it raises the launch price (USD/hour of the claim's cheapest fitting
instance type) least, and it starts a new NodeClaim instead when growing an open one would cost more than
that new claim. Each choice still opens a NodeClaim only when Karpenter would, or when a new one is cheaper.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from karpy.scheduling.model import Pod
from karpy.scheduling.nodeclaim import (
    Candidates,
    Claim,
    candidates_on_claim,
    commit,
    first_step,
    pool_candidates,
    pop_claim,
    price_list,
    push_claim,
)
from karpy.scheduling.queue import Group, Level, Variant
from karpy.scheduling.state import SolveState

# Open NodeClaims (fewest pods first) among which a group's pods are dealt by price.
WINDOW = 8


class _DealtClaim:
    """One open claim while a group's pods are dealt: its candidate types, the pods given, the price so far."""

    __slots__ = ("base", "cands", "claim", "marginal", "next_pos", "pos", "taken", "used")

    def __init__(self, claim: Claim, cands: Candidates) -> None:
        self.claim = claim
        self.cands = cands
        self.taken: list[Pod] = []
        self.used = list(claim.used)
        self.pos = -1
        self.next_pos = -1
        self.base = 0.0
        self.marginal = 0.0

    def rank(self) -> tuple[float, int, int]:
        return (self.marginal, len(self.claim.pods) + len(self.taken), self.claim.index)


def place_open(s: SolveState, g: Group, level: Level, variant: Variant, todo: list[Pod]) -> list[Pod]:
    """Deal pods to open NodeClaims: among the ``WINDOW`` claims with fewest pods that can take them,
    each pod goes where it raises the launch price least (free slack first), ties to fewest pods.

    Karpenter gives every pod to the claim with fewest pods; pricing the choice keeps its spread while
    filling each claim's cheapest type before growing another one. Claims are popped from the shared
    heap only as far as needed, so the work per pod does not grow with the number of open claims.
    """
    active: dict[int, _DealtClaim] = {}
    popped: list[Claim] = []
    need = g.need

    def refill() -> None:
        while len(active) < WINDOW:
            claim = pop_claim(s)
            if claim is None:
                return
            popped.append(claim)
            cands = candidates_on_claim(s, claim, g, variant, level.pns)
            if cands is not None:
                deal = _DealtClaim(claim, cands)
                deal.marginal = marginal_price(s, deal, need)
                active[claim.index] = deal

    refill()
    dealt: list[_DealtClaim] = []
    fresh: float | None = None
    pos = 0
    while pos < len(todo) and active:
        deal = min(active.values(), key=_DealtClaim.rank)
        if deal.marginal > 0:
            # Growing a claim can cost more than a new node of its own (two 4-GPU pods on an 8-GPU type).
            if fresh is None:
                fresh = fresh_price(s, g, level, variant)
            if deal.marginal > fresh * (1 + 1e-9):
                break
        if not deal.taken:
            dealt.append(deal)
        deal.taken.append(todo[pos])
        pos += 1
        for i, amount in need:
            deal.used[i] += amount
        deal.base = deal.base + deal.marginal
        deal.pos = deal.next_pos
        if len(deal.taken) >= deal.cands.cap:
            del active[deal.claim.index]
            refill()
        else:
            deal.marginal = marginal_price(s, deal, need)
    for deal in dealt:
        commit(s, deal.claim, deal.cands, g, variant, deal.taken)
    for claim in popped:
        push_claim(s, claim)
    return todo[pos:]


def fresh_price(s: SolveState, g: Group, level: Level, variant: Variant) -> float:
    """USD/hour of a new NodeClaim for one pod of the group from the NodePool
    :func:`karpy.scheduling.scheduler.place_new` would use."""
    for table in s.tables:
        cands = pool_candidates(s, table, g, variant, level.pns)
        if isinstance(cands, str):
            continue
        price = table.cheapest_fit(cands.reqs, cands.sig, g.need)
        if price is not None:
            return price
    return float("inf")


def marginal_price(s: SolveState, deal: _DealtClaim, need: Sequence[tuple[int, int]]) -> float:
    """How much one more pod raises the price of the claim's cheapest fitting type (USD/hour)."""
    cands = deal.cands
    if cands.limited:
        return 0.0
    table = deal.claim.table
    order, prices = price_list(s, table, cands.reqs, cands.sig)
    steps = table.price_steps(cands.reqs, cands.sig)
    avail = table.avail
    used = deal.used
    start = deal.pos
    if start < 0:
        # The claim's own first fit for these candidates (grows_too_much keeps it) is a valid start.
        claim = deal.claim
        start = first_step(order, steps, avail, used, claim.price_pos if claim.price_sig == cands.sig else 0)
        claim.price_sig, claim.price_pos = cands.sig, start
        deal.pos = start
        deal.base = prices[start] if start < len(order) else float("inf")
    grown = list(used)
    for i, amount in need:
        grown[i] += amount
    nxt = first_step(order, steps, avail, grown, start)
    if nxt >= len(order):
        return float("inf")
    deal.next_pos = nxt
    return prices[nxt] - deal.base


def grows_too_much(s: SolveState, claim: Claim, cands: Candidates, g: Group, level: Level, variant: Variant) -> bool:
    """True when one more pod would raise the claim's launch price by more than a new claim costs.

    The launch price is that of the cheapest type (price order) fitting the claim's pods; one more pod
    moves it to the cheapest type fitting them all. Only types within ``fresh`` of the current price are
    scanned: when none of them fits, the pod is too expensive here whatever fits further on.
    """
    if cands.limited:
        return False
    table = claim.table
    order, prices = price_list(s, table, cands.reqs, cands.sig)
    steps = table.price_steps(cands.reqs, cands.sig)
    avail = table.avail
    used = claim.used
    start = first_step(order, steps, avail, used, claim.price_pos if cands.sig == claim.price_sig else 0)
    claim.price_sig, claim.price_pos = cands.sig, start
    if start >= len(order):
        return True
    key = (g.fit_key, level.pns, variant.sig)
    fresh = s.fresh.get(key)
    if fresh is None:
        fresh = s.fresh[key] = fresh_price(s, g, level, variant)
    slack = fresh * (1 + 1e-9)
    base = prices[start]
    grown = list(used)
    for i, amount in g.need:
        grown[i] += amount
    for q in range(bisect.bisect_left(steps, start), len(steps)):
        j = steps[q]
        if prices[j] - base > slack:
            return True
        for x, u in zip(avail[order[j]], grown):  # noqa: B905 (equal lengths: one resource index)
            if x < u:
                break
        else:
            return False
    return True
