"""The provisioning simulation: place pending pods on existing capacity and on new NodeClaims.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling`` (``Scheduler.Solve``/``add``,
``NodeClaim.Add``, ``ExistingNode.Add``, ``Topology``, ``Preferences``): pods are queued by priority, CPU and
memory descending, then creation; each pod goes (1) to the first existing or in-flight node where it fits,
(2) to a NodeClaim already opened in this solve (fewest pods first) whose narrowed requirements stay
satisfiable and on which at least one instance type still fits everything, (3) to a new NodeClaim from the
first NodePool, in weight order, that can take it. A NodeClaim keeps absorbing pods while any instance type
fits them all, and launches the cheapest type that does, so pods pack onto few large-enough nodes.

This module is the solve loop (Karpenter ``scheduler.go``); the rest lives where a Karpenter reader looks for
it, each function taking the one :class:`~karpy.scheduling.state.SolveState` as first argument:

* :mod:`~karpy.scheduling.queue`: pod equivalence groups in queue order and their relaxation ladder
  (``queue.go``, ``preferences.go``);
* :mod:`~karpy.scheduling.existingnode`: existing and in-flight capacity, the kube-scheduler filters
  (``existingnode.go``);
* :mod:`~karpy.scheduling.nodeclaim`: NodeClaims opened in this solve, their heaps, commit and finalize
  (``nodeclaim.go``, ``NodeClaimTemplate.ToNodeClaim``);
* :mod:`~karpy.scheduling.topologydomains`: topology domains, counts and pins (``topology.go``,
  ``topologygroup.go``; the counting groups themselves are :mod:`~karpy.scheduling.topology`);
* :mod:`~karpy.scheduling.pricing`: the price-aware choices karpy adds on top of Karpenter's pod counts;
* :mod:`~karpy.scheduling.explain`: unschedulable messages; :mod:`~karpy.scheduling.repack`: re-dealing
  topology-neutral pods after placement; :mod:`~karpy.scheduling.merge`: merging NodeClaims into fewer,
  larger ones at no higher price.

Speed comes from working on *equivalence groups* instead of pods: pods with equal requests, node
requirements, tolerations, host ports, priority, topology constraints and topology membership are placed
together. Open NodeClaims live in one heap keyed by (pod count, index); a group pops only the claims it
needs, so the work per pod does not grow with the number of open NodeClaims. Each claim keeps the Pareto
frontier of its candidate instance types (no other candidate has at least as much of every resource), which
answers "does one more pod fit on some type" in a few comparisons. Groups with pod (anti-)affinity or
topology spread are placed pod by pod, deciding domains from per-domain counts
(:mod:`karpy.scheduling.topology`), never by scanning pods.

Topology, as Karpenter: domains come from the NodePools' requirements and instance-type offerings (and
existing nodes' labels); a NodeClaim that takes a pod with a zone (or other non-hostname) constraint gets the
chosen domain pinned in its requirements; every new NodeClaim is its own hostname domain. Where Karpenter and
kube-scheduler disagree, kube-scheduler wins, and the choices are:

* on existing nodes any required nodeSelectorTerm may match (Karpenter only tries the first, then relaxes);
* a pod with zone anti-affinity pins one zone instead of blocking every zone its NodeClaim might launch in;
* pods already on a NodeClaim whose zone is still open are counted once the zone gets pinned.

Prices, where Karpenter only counts pods (each choice still opens a NodeClaim only when Karpenter would, or
when a new one is cheaper):

* among the few open claims with fewest pods (``WINDOW``), a pod goes where it raises the launch price least,
  filling the slack of a claim's cheapest type before growing another;
* a pod starts a new claim when growing an open one would cost more than that new claim (two 4-GPU pods on
  two 4-GPU nodes, not one 8-GPU node), and a new claim takes the number of pods that is cheapest per pod;
* after placement, claims holding only pods no topology constraint refers to, from one NodePool with equal
  requirements, are re-dealt over the fewest claims that hold them when that is cheaper
  (:func:`karpy.scheduling.repack.repack`);
* last, NodeClaims of one NodePool with equal requirements (or a NodeClaim of free pods into one whose
  requirements are narrower) are merged into one larger NodeClaim when its cheapest type costs no more than
  theirs together: fewer nodes to launch, register and bind at the same price
  (:func:`karpy.scheduling.merge.merge`).

Preferences (``preference_policy``): ``Respect`` (Karpenter default) first treats preferred pod affinity,
preferred pod anti-affinity, the heaviest preferred node-affinity term and ``ScheduleAnyway`` spreads as
required and PreferNoSchedule taints as blocking, then relaxes in Karpenter's order (preferred pod affinity,
heaviest first, one term per step; preferred pod anti-affinity likewise; preferred node-affinity terms;
ScheduleAnyway spreads; PreferNoSchedule tolerated). ``Ignore`` drops them all at once.

Existing nodes are checked with one predicate (:func:`karpy.scheduling.existingnode.slot_refusal`: resources,
taints, node affinity, volume node affinity, host ports, pod (anti-)affinity, topology spread, each named
after its kube-scheduler filter); the binder runs the same check before each Binding
(:mod:`karpy.scheduling.predicate`).

Pure and deterministic: no I/O, no clock, no randomness; ties break on names and input order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.scheduling import gcpause
from karpy.scheduling.exchange import exchange
from karpy.scheduling.existingnode import Slot, existing_order, place_existing, topo_existing
from karpy.scheduling.explain import unschedulable_message
from karpy.scheduling.instancetypes import PoolTable, resource_index
from karpy.scheduling.merge import merge
from karpy.scheduling.model import (
    DaemonSet,
    ExistingNode,
    NewNodeClaim,
    NodePool,
    Pod,
    SchedulingResult,
)
from karpy.scheduling.nodeclaim import (
    MAX_INSTANCE_TYPES,
    Claim,
    candidate_heaps,
    candidates_on_claim,
    commit,
    finalize,
    fitting_types,
    is_restricted_node_label,
    open_claim,
    pool_candidates,
    pop_claim,
    push_claim,
    push_claims,
)
from karpy.scheduling.pricing import grows_too_much, place_open
from karpy.scheduling.queue import Group, Level, Variant, group_pods
from karpy.scheduling.rebalance import rebalance
from karpy.scheduling.repack import repack
from karpy.scheduling.state import BEST_EFFORT, HOSTNAME, IGNORE, NO_NODEPOOLS, RESPECT, STRICT, SolveState
from karpy.scheduling.taints import PREFER_NO_SCHEDULE
from karpy.scheduling.topology import INVERSE, SPREAD
from karpy.scheduling.topologydomains import (
    allowed_domains,
    claim_domains,
    count_existing_pods,
    domain_pins,
    domain_values,
    record_existing_owners,
)
from karpy.scheduling.zonemove import move_groups

# Outcomes of trying one open NodeClaim for one pod of a topology group.
PLACED, NEVER, NOT_NOW, PRICEY = 0, 1, 2, 3


def run(s: SolveState) -> SchedulingResult:
    """Place every group in queue order, retry topology failures while that helps, then finalize."""
    failed: list[tuple[Group, list[Pod], str]] = []
    for group in s.groups:
        rest, message = place_group(s, group, group.pods)
        if rest:
            failed.append((group, rest, message))
    # Karpenter re-queues failed pods until a pass makes no progress: a pod whose affinity target was
    # queued after it can schedule once the target is placed.
    while failed and s.topo.groups:
        retry: list[tuple[Group, list[Pod], str]] = []
        progress = False
        for group, pods, message in failed:
            rest, message = place_group(s, group, pods)
            progress = progress or len(rest) < len(pods)
            if rest:
                retry.append((group, rest, message))
        failed = retry
        if not progress:
            break
    for _, pods, message in failed:
        for pod in pods:
            s.errors[pod.key] = message
    return build_result(s)


def place_group(s: SolveState, g: Group, pods: list[Pod]) -> tuple[list[Pod], str]:
    """Each relaxation level in turn takes the pods the previous ones could not place."""
    todo = pods
    reasons: list[tuple[int, list[str]]] = []
    for level in g.levels:
        if not todo:
            break
        if level.cons:
            todo, reasons = place_topo(s, g, level, todo)
        else:
            todo, reasons = place_batch(s, g, level, todo)
    return todo, (unschedulable_message(s, g, reasons) if todo else "")


def place_batch(
    s: SolveState, g: Group, level: Level, todo: list[Pod]
) -> tuple[list[Pod], list[tuple[int, list[str]]]]:
    """Pods without topology constraints: existing capacity, then per alternative open and new claims."""
    todo = place_existing(s, g, level, todo)
    reasons: list[tuple[int, list[str]]] = []
    for vi, variant in enumerate(level.variants):
        if not todo:
            break
        todo = place_open(s, g, level, variant, todo)
        if todo:
            todo, why = place_new(s, g, level, variant, todo)
            if todo:
                reasons.append((vi, why))
    return todo, reasons


def place_new(s: SolveState, g: Group, level: Level, variant: Variant, todo: list[Pod]) -> tuple[list[Pod], list[str]]:
    """Open NodeClaims from the first NodePool (weight order) that can take the group's pods."""
    while todo:
        why: list[str] = []
        opened = False
        for table in s.tables:
            cands = pool_candidates(s, table, g, variant, level.pns)
            if isinstance(cands, str):
                why.append(f'incompatible with nodepool "{table.name}": {cands}')
                continue
            result = open_claim(s, table, g, variant, cands, todo)
            if isinstance(result, str):
                why.append(result)
                continue
            todo = result
            opened = True
            break
        if not opened:
            return todo, why
    return todo, []


def place_topo(s: SolveState, g: Group, level: Level, todo: list[Pod]) -> tuple[list[Pod], list[tuple[int, list[str]]]]:
    """Pods with topology constraints, one at a time: existing nodes, then per alternative open claims
    (fewest pods first) and new claims, each with its domains decided from the current counts."""
    skip: set[int] = set()
    todo = [pod for pod in todo if not topo_existing(s, g, level, pod, skip)]
    reasons: list[tuple[int, list[str]]] = []
    for vi, variant in enumerate(level.variants):
        if not todo:
            break
        never: list[Claim] = []
        pricey: list[Claim] = []
        failed: list[Pod] = []
        why: list[str] = []
        for pod in todo:
            if topo_open(s, g, level, variant, pod, never, pricey):
                continue
            why = topo_new(s, g, level, variant, pod)
            if why and not topo_pricey(s, g, level, variant, pod, pricey):
                failed.append(pod)
        push_claims(s, never)
        if failed:
            reasons.append((vi, why))
        todo = failed
    return todo, reasons


def topo_pricey(s: SolveState, g: Group, level: Level, variant: Variant, pod: Pod, pricey: list[Claim]) -> bool:
    """No new claim can take the pod (e.g. it must join pods whose zone is still open): accept growing one
    of the claims passed over for price after all, fewest pods first."""
    for claim in sorted(pricey, key=lambda c: (len(c.pods), c.index)):
        if not claim.closed and try_claim(s, claim, g, level, variant, pod, check_price=False) == PLACED:
            return True
    return False


def try_claim(
    s: SolveState, claim: Claim, g: Group, level: Level, variant: Variant, pod: Pod, check_price: bool = True
) -> int:
    """Place one pod of the group on ``claim`` if it can take it: PLACED, or why not (NEVER for this group
    and level, NOT_NOW, PRICEY when growing it costs more than a new claim).

    A claim found too pricey with its domains already decided stays so for equal groups (requests,
    tolerations, host ports, alternative, keys) until it takes more pods: later tries answer PRICEY at
    once. Where the full check would have said NOT_NOW or NEVER instead, nothing changes: the claim
    could not take a pod of this group before it changes either way (see ``topo_open``).
    """
    memo = (g.fit_key, id(variant), level.pns, level.keys) if check_price else None
    if memo is not None and claim.pricey is not None and memo in claim.pricey:
        return PRICEY
    if level.host_blocks and host_blocked(g, level, claim.hostname):
        return NEVER
    cands = candidates_on_claim(s, claim, g, variant, level.pns)
    if cands is None:
        return NEVER
    dom = {k: claim_domains(s, claim, k) for k in level.keys}
    allowed = allowed_domains(s, g, level, dom, claim.members, explain=False)
    if isinstance(allowed, tuple):
        return NEVER if allowed[1] else NOT_NOW
    pins = domain_pins(s, level, dom, allowed)
    if pins:
        variant = variant.pinned(pins)
        pinned = candidates_on_claim(s, claim, g, variant, level.pns)
        if pinned is None:
            return NOT_NOW
        cands = pinned
    if check_price and grows_too_much(s, claim, cands, g, level, variant):
        if memo is not None and all(len(d) == 1 for d in dom.values()):
            if claim.pricey is None:
                claim.pricey = set()
            claim.pricey.add(memo)
        return PRICEY
    commit(s, claim, cands, g, variant, [pod])
    return PLACED


def host_blocked(g: Group, level: Level, hostname: str) -> bool:
    """True when a hostname spread or (reverse) anti-affinity of the level rules the node out: the answer
    :func:`allowed_domains` would give as permanent, found before the costlier checks."""
    for tg, role in level.host_blocks:
        if role == SPREAD:
            if tg.counts.get(hostname, 0) + (1 if tg.id in g.selset else 0) > tg.max_skew:
                return True
        elif (tg.owners if role == INVERSE else tg.counts).get(hostname, 0) > 0:
            return True
    return False


def topo_open(
    s: SolveState, g: Group, level: Level, variant: Variant, pod: Pod, never: list[Claim], pricey: list[Claim]
) -> bool:
    """The first open claim, fewest pods first, that takes the pod; ``never`` collects claims that can
    never take a pod of this group at this level (restored to the heap by the caller)."""
    for tg in level.host_affinity:
        if tg.total > 0:
            # Only nodes with a matching pod qualify: look them up instead of walking the heap.
            hosts = [s.claim_by_host[h] for h, n in tg.counts.items() if n > 0 and h in s.claim_by_host]
            for claim in sorted(hosts, key=lambda c: (len(c.pods), c.index)):
                if claim.closed:
                    continue
                outcome = try_claim(s, claim, g, level, variant, pod)
                if outcome == PLACED:
                    if claim.in_heap is not None:
                        push_claim(s, claim)
                    return True
                if outcome == PRICEY and claim not in pricey:
                    pricey.append(claim)
            return False
    later: list[Claim] = []
    placed = False
    heaps = candidate_heaps(s, g, level)
    while True:
        popped = pop_claim(s, heaps)
        if popped is None:
            break
        outcome = try_claim(s, popped, g, level, variant, pod)
        if outcome == PLACED:
            push_claim(s, popped)
            placed = True
            break
        (later if outcome == NOT_NOW else never).append(popped)
        if outcome == PRICEY:
            pricey.append(popped)
    for claim in later:
        push_claim(s, claim)
    return placed


def topo_new(s: SolveState, g: Group, level: Level, variant: Variant, pod: Pod) -> list[str]:
    """Open a claim for one pod from the first NodePool that can take it; the reasons when none can."""
    why: list[str] = []
    for table in s.tables:
        base = pool_candidates(s, table, g, variant, level.pns)
        if isinstance(base, str):
            why.append(f'incompatible with nodepool "{table.name}": {base}')
            continue
        fitting = fitting_types(s, table, g, base)
        dom = {
            k: (
                frozenset((f"hostname-placeholder-{len(s.claims):05d}",))
                if k == HOSTNAME
                else domain_values(s, table, base.reqs, base.sig, k, fitting, g.vec)
            )
            for k in level.keys
        }
        allowed = allowed_domains(s, g, level, dom, None)
        if isinstance(allowed, tuple):
            why.append(f'incompatible with nodepool "{table.name}": {allowed[0]}')
            continue
        pins = domain_pins(s, level, dom, allowed)
        chosen = variant.pinned(pins) if pins else variant
        cands = pool_candidates(s, table, g, chosen, level.pns) if pins else base
        if isinstance(cands, str):
            why.append(f'incompatible with nodepool "{table.name}": {cands}')
            continue
        result = open_claim(s, table, g, chosen, cands, [pod])
        if isinstance(result, str):
            why.append(result)
            continue
        return []
    return why or [NO_NODEPOOLS]


def build_result(s: SolveState) -> SchedulingResult:
    rebalance(s)
    repack(s)
    move_groups(s)
    exchange(s)
    merge(s)
    new: list[NewNodeClaim] = []
    for claim in s.claims:
        if not claim.pods:
            continue
        out = finalize(s, claim)
        if isinstance(out, str):
            for pod in claim.pods:
                s.errors[pod.key] = f'incompatible with nodepool "{claim.table.name}": {out}'
        else:
            new.append(out)
    existing = {s.node.name: tuple(s.placed) for s in s.slots if s.placed}
    return SchedulingResult(new_nodeclaims=tuple(new), existing=existing, errors=s.errors)


def new_state(
    pods: Sequence[Pod],
    nodepools: Sequence[NodePool],
    existing: Sequence[ExistingNode],
    daemonsets: Sequence[DaemonSet],
    preference_policy: str = RESPECT,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    min_values_policy: str = STRICT,
) -> SolveState:
    """A solve's state before placement (Karpenter ``NewScheduler``): NodePools in weight order, existing
    capacity in the order it is tried, pods grouped and queued, pods already bound counted in the topology."""
    respect = preference_policy != IGNORE
    index = resource_index(pods, daemonsets)
    tables = [PoolTable(p, i, index, daemonsets) for i, p in enumerate(by_weight(nodepools))]
    slots = [Slot(n, index, i) for i, n in enumerate(sorted(existing, key=existing_order))]
    has_pns = respect and (
        any(t.effect == PREFER_NO_SCHEDULE for p in nodepools for t in p.taints)
        or any(t.effect == PREFER_NO_SCHEDULE for n in existing for t in n.taints)
    )
    s = SolveState(respect, index, tables, slots, has_pns, namespace_labels or {}, min_values_policy == BEST_EFFORT)
    record_existing_owners(s)
    s.groups = group_pods(s, pods)
    count_existing_pods(s)
    s.min_need = [min((g.vec[i] for g in s.groups), default=0) for i in range(len(index))]
    for slot in slots:
        # A node without room for the smallest pending request is never looked at again.
        slot.closed = any(f < m for f, m in zip(slot.free, s.min_need, strict=True))
    s.domain_keys = tuple(sorted({tg.key for tg in s.topo.groups if tg.key != HOSTNAME}))
    return s


def by_weight(nodepools: Sequence[NodePool]) -> list[NodePool]:
    """NodePools by weight descending, ties by name descending (Karpenter ``OrderByWeight``)."""
    return sorted(sorted(nodepools, key=lambda p: p.name, reverse=True), key=lambda p: -p.weight)


def solve(
    pods: Sequence[Pod],
    nodepools: Sequence[NodePool],
    existing: Sequence[ExistingNode],
    daemonsets: Sequence[DaemonSet],
    *,
    preference_policy: str = RESPECT,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    min_values_policy: str = STRICT,
) -> SchedulingResult:
    """Plan ``pods`` onto existing capacity and new NodeClaims (Karpenter ``Scheduler.Solve``).

    Args:
        pods: pending pods (effective requests in canonical units; a missing ``pods`` request counts as 1).
        nodepools: Ready NodePools with their instance types (ordered here by weight, then name).
        existing: registered nodes and in-flight NodeClaims with what is already bound or planned on them.
        daemonsets: DaemonSet templates; those that would run on a NodePool's nodes add their requests to
            every NodeClaim of that NodePool, per instance type.
        preference_policy: ``Respect`` (treat preferences as required, then relax in Karpenter's order) or
            ``Ignore`` (drop preferred affinities, ScheduleAnyway spreads; PreferNoSchedule never blocks).
        namespace_labels: namespace name → labels, for affinity terms' ``namespaceSelector``; namespaces
            missing here only have ``kubernetes.io/metadata.name``.
        min_values_policy: ``Strict`` (a NodeClaim whose instance types cannot meet a requirement's minValues
            is not created; its pods stay pending with the reason) or ``BestEffort`` (minValues is lowered to
            the distinct values the NodeClaim's instance types give, and the NodeClaim is annotated
            ``karpenter.sh/nodeclaim-min-values-relaxed: "true"``), as Karpenter's ``MIN_VALUES_POLICY``.

    Returns:
        The new NodeClaims (instance types cheapest first, at most 60), the pods placed per existing node
        name, and for every pod placed nowhere a message naming, per NodePool, the constraint that failed.

    Never raises for unschedulable input; it is pure and deterministic. The cyclic garbage collector is
    paused while it runs: a solve allocates many short-lived objects and frees them by reference count, so
    collections during it only rescan the caller's heap (a sixth of a 4,000-claim solve).
    """
    with gcpause.paused():
        s = new_state(pods, nodepools, existing, daemonsets, preference_policy, namespace_labels, min_values_policy)
        return run(s)


__all__ = [
    "BEST_EFFORT",
    "IGNORE",
    "MAX_INSTANCE_TYPES",
    "RESPECT",
    "STRICT",
    "by_weight",
    "is_restricted_node_label",
    "new_state",
    "run",
    "solve",
]
