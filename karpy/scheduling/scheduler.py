"""The provisioning simulation: place pending pods on existing capacity and on new NodeClaims.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling`` (``Scheduler.Solve``/``add``,
``NodeClaim.Add``, ``ExistingNode.Add``): pods are queued by priority, CPU and memory descending, then
creation; each pod goes (1) to the first existing or in-flight node where it fits, (2) to a NodeClaim already
opened in this solve (fewest pods first) whose narrowed requirements stay satisfiable and on which at least
one instance type still fits everything, (3) to a new NodeClaim from the first NodePool, in weight order, that
can take it. A NodeClaim keeps absorbing pods while any instance type fits them all, and launches the
cheapest type that does, so pods pack onto few large-enough nodes instead of one small node each.

Speed comes from working on *equivalence groups* instead of pods: pods with equal requests, nodeSelector,
required affinity, tolerations, host ports and priority are placed together. One decision per group and
candidate (how many of these pods fit on this node or NodeClaim) replaces one decision per pod, and the
per-(group, NodePool) instance-type filtering is done once. Within a group the pods are dealt to open
NodeClaims exactly as the pod-by-pod loop would (a heap keyed by pod count reproduces "fewest pods first").

Where Karpenter and kube-scheduler disagree, kube-scheduler wins: on existing nodes any required
nodeSelectorTerm may match (Karpenter only tries the first term, then relaxes); for new NodeClaims the terms
are tried in order, as Karpenter's relaxation does.

Pure and deterministic: no I/O, no clock, no randomness; ties break on names and input order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from karpy.apis import labels as wk
from karpy.apis.quantity import format_canonical
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import (
    OFFERING_KEYS,
    PoolTable,
    Vector,
    min_values_keys,
    pod_matches_labels,
    pod_requirement_sets,
    requests_vector,
    resource_index,
)
from karpy.scheduling.model import (
    IN,
    DaemonSet,
    ExistingNode,
    HostPort,
    NewNodeClaim,
    NodePool,
    Pod,
    Requirement,
    SchedulingResult,
    Toleration,
)
from karpy.scheduling.taints import format_taint, untolerated

# Karpenter ``MaxInstanceTypes`` for NodeClaim requirements is 600; the AWS launch keeps the 60 cheapest
# (``maxInstanceTypes``). Keeping 60 here makes NodeClaim objects small and loses nothing at launch.
MAX_INSTANCE_TYPES = 60
# Label domains a NodeClaim may still carry although they are in a restricted domain (Karpenter
# ``LabelDomainExceptions``).
LABEL_DOMAIN_EXCEPTIONS = frozenset({"kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"})
WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})
NO_NODEPOOLS = "no nodepools"


def by_weight(nodepools: Sequence[NodePool]) -> list[NodePool]:
    """NodePools by weight descending, ties by name descending (Karpenter ``OrderByWeight``)."""
    return sorted(sorted(nodepools, key=lambda p: p.name, reverse=True), key=lambda p: -p.weight)


def is_restricted_node_label(key: str) -> bool:
    """Karpenter ``IsRestrictedNodeLabel``: well-known labels and restricted domains come from the cloud."""
    if key in wk.WELL_KNOWN_LABELS or key == wk.LABEL_HOSTNAME:
        return True
    domain = key.split("/", 1)[0] if "/" in key else ""
    if any(domain == d or domain.endswith("." + d) for d in LABEL_DOMAIN_EXCEPTIONS):
        return False
    return any(domain == d or domain.endswith("." + d) for d in wk.RESTRICTED_LABEL_DOMAINS)


def ports_conflict(a: Sequence[HostPort], b: Sequence[HostPort]) -> bool:
    """Kubernetes NodePorts: equal port and protocol, and equal IPs or either a wildcard IP."""
    for x in a:
        for y in b:
            if (
                x.port == y.port
                and x.protocol == y.protocol
                and (x.ip in WILDCARD_IPS or y.ip in WILDCARD_IPS or x.ip == y.ip)
            ):
                return True
    return False


def fit_count(avail: Vector, used: Sequence[int], need: Sequence[tuple[int, int]]) -> int:
    """How many more pods needing ``need`` (``(resource index, amount)``, amounts > 0) fit; may be ≤ 0."""
    best = 1 << 62
    for i, amount in need:
        k = (avail[i] - used[i]) // amount
        if k < best:
            best = k
    return best


class Variant:
    """One requirement alternative of a group: nodeSelector AND one required nodeSelectorTerm."""

    __slots__ = ("raw", "reqs", "sig")

    def __init__(self, raw: tuple[Requirement, ...]) -> None:
        self.raw = raw
        self.reqs = rq.build(raw)
        self.sig = rq.signature(self.reqs)


class Group:
    """Equivalent pods: same requests, selector, required terms, tolerations, host ports and priority."""

    __slots__ = ("need", "pods", "ports", "sample", "tolerations", "variants", "vec")

    def __init__(self, sample: Pod, vec: Vector) -> None:
        self.sample = sample
        self.vec = vec
        self.need = tuple((i, v) for i, v in enumerate(vec) if v > 0)
        self.pods: list[Pod] = []
        self.tolerations: tuple[Toleration, ...] = sample.tolerations
        self.ports: tuple[HostPort, ...] = sample.host_ports
        self.variants = [Variant(alt) for alt in pod_requirement_sets(sample)]


class Slot:
    """Mutable free capacity of one existing node or in-flight NodeClaim during the solve."""

    __slots__ = ("closed", "free", "node", "placed", "ports")

    def __init__(self, node: ExistingNode, index: Sequence[str]) -> None:
        self.node = node
        requested = dict(node.requested)
        requested[wk.RESOURCE_PODS] = max(requested.get(wk.RESOURCE_PODS, 0), node.pods)
        self.free = [node.allocatable.get(n, 0) - requested.get(n, 0) for n in index]
        self.ports = list(node.host_ports)
        self.placed: list[Pod] = []
        self.closed = False


class Claim:
    """A NodeClaim opened in this solve: narrowed requirements, candidate types, summed pod requests."""

    __slots__ = ("closed", "headroom", "index", "merged", "pods", "ports", "reqs", "sig", "table", "types", "used")

    def __init__(self, table: PoolTable, index: int, reqs: rq.Reqs, sig: rq.Signature, used: list[int]) -> None:
        self.table = table
        self.index = index
        self.reqs = reqs
        self.sig = sig
        self.merged: set[rq.Signature] = set()
        self.types: list[int] = []
        self.used = used
        self.pods: list[Pod] = []
        self.ports: list[HostPort] = list(table.daemon_ports)
        self.headroom: list[int] = []
        self.closed = False

    def refresh(self, min_need: Sequence[int]) -> None:
        """Recompute the per-resource headroom (best over candidate types) and close a claim nothing fits."""
        avail = self.table.avail
        self.headroom = [max((avail[t][i] for t in self.types), default=0) - u for i, u in enumerate(self.used)]
        self.closed = any(h < m for h, m in zip(self.headroom, min_need, strict=True))


class Offer:
    """What adding a group to a candidate NodeClaim would give: requirements, types, per-type fit, cap."""

    __slots__ = ("cap", "claim", "fits", "reqs", "sig", "types")

    def __init__(
        self, claim: Claim | None, reqs: rq.Reqs, sig: rq.Signature, types: list[int], fits: list[int], cap: int
    ) -> None:
        self.claim = claim
        self.reqs = reqs
        self.sig = sig
        self.types = types
        self.fits = fits
        self.cap = cap


class Solver:
    """One solve's working state (see :func:`solve`)."""

    def __init__(
        self,
        pods: Sequence[Pod],
        nodepools: Sequence[NodePool],
        existing: Sequence[ExistingNode],
        daemonsets: Sequence[DaemonSet],
    ) -> None:
        self.index = resource_index(pods, daemonsets)
        self.res_pos = {n: i for i, n in enumerate(self.index)}
        self.tables = [PoolTable(p, i, self.index, daemonsets) for i, p in enumerate(by_weight(nodepools))]
        self.slots = [Slot(n, self.index) for n in existing]
        self.groups = self._group(pods)
        self.min_need = [min((g.vec[i] for g in self.groups), default=0) for i in range(len(self.index))]
        self.claims: list[Claim] = []
        self.remaining: dict[str, dict[str, int]] = {
            t.name: {k: v - t.pool.usage.get(k, 0) for k, v in t.pool.limits.items()} for t in self.tables
        }
        self.errors: dict[str, str] = {}
        self._merge_cache: dict[tuple[rq.Signature, rq.Signature], tuple[rq.Reqs, rq.Signature] | None] = {}
        self._viable_sets: dict[tuple[int, rq.Signature], frozenset[int]] = {}

    # -- queue -------------------------------------------------------------------------------------------

    def _group(self, pods: Sequence[Pod]) -> list[Group]:
        """Equivalence groups in queue order: priority desc, cpu desc, memory desc, creation, name."""
        cpu = self.res_pos.get(wk.RESOURCE_CPU)
        mem = self.res_pos.get(wk.RESOURCE_MEMORY)
        ordered = sorted(pods, key=lambda p: (p.created, p.namespace, p.name, p.uid))
        groups: dict[tuple[object, ...], Group] = {}
        for pod in ordered:
            vec = requests_vector(pod, self.index)
            key = (
                vec,
                tuple(sorted(pod.node_selector.items())),
                pod.required_terms,
                pod.tolerations,
                pod.host_ports,
                pod.priority,
            )
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(pod, vec)
            group.pods.append(pod)

        def order(g: Group) -> tuple[int, int, int, float, str]:
            first = g.pods[0]
            return (
                -first.priority,
                -(g.vec[cpu] if cpu is not None else 0),
                -(g.vec[mem] if mem is not None else 0),
                first.created,
                first.key,
            )

        return sorted(groups.values(), key=order)

    # -- placement ---------------------------------------------------------------------------------------

    def run(self) -> SchedulingResult:
        """Place every group in queue order, then finalize the opened NodeClaims."""
        for group in self.groups:
            self._place(group)
        return self._result()

    def _place(self, g: Group) -> None:
        """Existing capacity first; then, per requirement alternative in order, open and new NodeClaims."""
        todo = g.pods
        todo = self._place_existing(g, todo)
        reasons: list[tuple[int, list[str]]] = []
        for vi, variant in enumerate(g.variants):
            if not todo:
                break
            todo = self._place_open(g, variant, todo)
            if todo:
                todo, why = self._place_new(g, variant, todo)
                if todo:
                    reasons.append((vi, why))
        if todo:
            message = self._message(g, reasons)
            for pod in todo:
                self.errors[pod.key] = message

    def _place_existing(self, g: Group, todo: list[Pod]) -> list[Pod]:
        """First fit over existing and in-flight capacity (Karpenter ``ExistingNode.Add``)."""
        need = g.need
        for slot in self.slots:
            if not todo:
                break
            if slot.closed:
                continue
            free = slot.free
            k = min((free[i] // amount for i, amount in need), default=len(todo))
            if k <= 0:
                continue
            node = slot.node
            if untolerated(g.tolerations, node.taints) is not None or not pod_matches_labels(g.sample, node.labels):
                continue
            if g.ports:
                if ports_conflict(g.ports, slot.ports):
                    continue
                k = 1
            take = min(k, len(todo))
            placed, todo = todo[:take], todo[take:]
            slot.placed.extend(placed)
            slot.ports.extend(g.ports)
            for i, amount in need:
                free[i] -= amount * take
            slot.closed = any(f < m for f, m in zip(free, self.min_need, strict=True))
        return todo

    def _viable_set(self, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> frozenset[int]:
        key = (table.order, sig)
        cached = self._viable_sets.get(key)
        if cached is None:
            cached = self._viable_sets[key] = frozenset(table.viable(reqs, sig))
        return cached

    def _merge(self, claim: Claim, variant: Variant) -> tuple[rq.Reqs, rq.Signature] | None:
        """The claim's requirements narrowed by a pod alternative, or None when incompatible (cached)."""
        key = (claim.sig, variant.sig)
        if key in self._merge_cache:
            return self._merge_cache[key]
        out: tuple[rq.Reqs, rq.Signature] | None = None
        if rq.compatible(claim.reqs, variant.reqs) is None:
            merged = rq.intersect_all(claim.reqs, variant.reqs)
            out = (merged, rq.signature(merged))
        self._merge_cache[key] = out
        return out

    def _offer_open(self, claim: Claim, g: Group, variant: Variant) -> Offer | None:
        """How many of the group's pods an open NodeClaim can take (Karpenter ``NodeClaim.Add``)."""
        headroom = claim.headroom
        for i, amount in g.need:
            if headroom[i] < amount:
                return None
        table = claim.table
        if untolerated(g.tolerations, table.pool.taints) is not None:
            return None
        if g.ports and ports_conflict(g.ports, claim.ports):
            return None
        if variant.sig in claim.merged:
            reqs, sig, types = claim.reqs, claim.sig, claim.types
        else:
            merged = self._merge(claim, variant)
            if merged is None:
                return None
            reqs, sig = merged
            allowed = self._viable_set(table, reqs, sig)
            types = [t for t in claim.types if t in allowed]
        avail, used, need = table.avail, claim.used, g.need
        fits = [fit_count(avail[t], used, need) for t in types]
        cap = self._cap(table, reqs, types, fits)
        if cap <= 0:
            return None
        return Offer(claim, reqs, sig, types, fits, 1 if g.ports else cap)

    def _place_open(self, g: Group, variant: Variant, todo: list[Pod]) -> list[Pod]:
        """Deal pods to open NodeClaims, fewest pods first, each up to what it can take."""
        offers = [o for c in self.claims if not c.closed and (o := self._offer_open(c, g, variant)) is not None]
        if not offers:
            return todo
        heap = [(len(o.claim.pods), o.claim.index, n) for n, o in enumerate(offers) if o.claim is not None]
        heapq.heapify(heap)
        taken: list[list[Pod]] = [[] for _ in offers]
        pos = 0
        while pos < len(todo) and heap:
            count, idx, n = heapq.heappop(heap)
            taken[n].append(todo[pos])
            pos += 1
            if len(taken[n]) < offers[n].cap:
                heapq.heappush(heap, (count + 1, idx, n))
        for offer, pods in zip(offers, taken, strict=True):
            if pods and offer.claim is not None:
                self._commit(offer.claim, offer, g, variant, pods)
        return todo[pos:]

    def _commit(self, claim: Claim, offer: Offer, g: Group, variant: Variant, pods: list[Pod]) -> None:
        k = len(pods)
        claim.reqs, claim.sig = offer.reqs, offer.sig
        claim.merged.add(variant.sig)
        claim.types = [t for t, f in zip(offer.types, offer.fits, strict=True) if f >= k]
        for i, amount in g.need:
            claim.used[i] += amount * k
        claim.pods.extend(pods)
        claim.ports.extend(g.ports)
        claim.refresh(self.min_need)

    def _pool_offer(self, table: PoolTable, g: Group, variant: Variant) -> Offer | str:
        """A fresh NodeClaim from ``table`` for this group alternative, or why there is none."""
        pool = table.pool
        taint = untolerated(g.tolerations, pool.taints)
        if taint is not None:
            return f"did not tolerate taint {format_taint(taint)}"
        if g.ports and ports_conflict(g.ports, table.daemon_ports):
            return "host ports conflict with a daemonset's host ports"
        why = rq.compatible(table.reqs, variant.reqs)
        if why is not None:
            return why
        reqs = rq.intersect_all(table.reqs, variant.reqs)
        sig = rq.signature(reqs)
        viable = table.viable(reqs, sig)
        zero = [0] * len(self.index)
        types, fits = [], []
        for t in viable:
            k = fit_count(table.avail[t], zero, g.need)
            if k >= 1:
                types.append(t)
                fits.append(k)
        if not types:
            return self._explain_types(table, g, reqs)
        return Offer(None, reqs, sig, types, fits, 0)

    def _place_new(self, g: Group, variant: Variant, todo: list[Pod]) -> tuple[list[Pod], list[str]]:
        """Open NodeClaims from the first NodePool (weight order) that can take the group's pods."""
        base: dict[int, Offer | str] = {}
        while todo:
            why: list[str] = []
            opened = False
            for table in self.tables:
                if table.order not in base:
                    base[table.order] = self._pool_offer(table, g, variant)
                offer = base[table.order]
                if isinstance(offer, str):
                    why.append(f'incompatible with nodepool "{table.name}": {offer}')
                    continue
                result = self._open(table, g, variant, offer, todo)
                if isinstance(result, str):
                    why.append(result)
                    continue
                todo = result
                opened = True
                break
            if not opened:
                return todo, why
        return todo, []

    def _open(self, table: PoolTable, g: Group, variant: Variant, offer: Offer, todo: list[Pod]) -> list[Pod] | str:
        """Open one NodeClaim from ``offer`` holding as many pods as its largest fitting type allows."""
        types, fits = offer.types, offer.fits
        remaining = self.remaining[table.name]
        if remaining:
            kept = [(t, f) for t, f in zip(types, fits, strict=True) if table.fits_limits(t, remaining)]
            if not kept:
                over = sorted(k for k, v in remaining.items() if min(table.capacity[t].get(k, 0) for t in types) > v)
                # No single resource rules every type out: name each one that rules some out.
                over = over or sorted(
                    k for k, v in remaining.items() if any(table.capacity[t].get(k, 0) > v for t in types)
                )
                return f'nodepool "{table.name}" limits exceeded: {", ".join(over)}'
            types, fits = [t for t, _ in kept], [f for _, f in kept]
        cap = self._cap(table, offer.reqs, types, fits)
        if cap <= 0:
            return f'incompatible with nodepool "{table.name}": {self._explain_min_values(table, offer.reqs, types)}'
        if g.ports:
            cap = 1
        claim = Claim(table, len(self.claims), offer.reqs, offer.sig, [0] * len(self.index))
        claim.types = types
        take = min(cap, len(todo))
        self._commit(claim, Offer(claim, offer.reqs, offer.sig, types, fits, cap), g, variant, todo[:take])
        self.claims.append(claim)
        if remaining:
            # Count the largest candidate against the limits: any of them may be launched (Karpenter
            # ``subtractMax``); later pods only narrow the candidates, so this stays an upper bound.
            for key in remaining:
                remaining[key] -= max(table.capacity[t].get(key, 0) for t in claim.types)
        return todo[take:]

    def _cap(self, table: PoolTable, reqs: rq.Reqs, types: list[int], fits: list[int]) -> int:
        """Most pods one NodeClaim can take while its remaining types still satisfy every minValues."""
        mv = min_values_keys(reqs)
        if not mv:
            return max(max(fits, default=0), 0)
        seen: dict[str, set[str]] = {k: set() for k, _ in mv}
        for j in sorted(range(len(types)), key=lambda j: -fits[j]):
            if fits[j] <= 0:
                break
            for key, _ in mv:
                seen[key] |= table.values_of(types[j], key, reqs)
            if all(len(seen[k]) >= n for k, n in mv):
                return fits[j]
        return 0

    # -- explanations ------------------------------------------------------------------------------------

    def _describe(self, g: Group) -> str:
        """The requests an explanation names: extended resources when present, else cpu and memory."""
        parts = {n: g.vec[i] for i, n in enumerate(self.index) if g.vec[i] > 0 and n != wk.RESOURCE_PODS}
        extended = {n: v for n, v in parts.items() if n not in (wk.RESOURCE_CPU, wk.RESOURCE_MEMORY)}
        chosen = extended or parts
        return ", ".join(f"{n}={format_canonical(n, v)}" for n, v in chosen.items()) or "pods=1"

    def _explain_types(self, table: PoolTable, g: Group, reqs: rq.Reqs) -> str:
        """Which instance-type filter emptied the NodePool: labels, resources or offerings (Karpenter B14)."""
        if not table.types:
            return "no instance types"
        labelled = table.label_compatible(reqs)
        if not labelled:
            keys = [k for k in reqs if k not in OFFERING_KEYS and k != wk.LABEL_NODEPOOL]
            return f"no instance type satisfies {rq.format_set(reqs, keys) or 'the requirements'}"
        zero = [0] * len(self.index)
        fitting = [t for t in labelled if fit_count(table.avail[t], zero, g.need) >= 1]
        if not fitting:
            overhead = " plus daemonset overhead" if any(any(table.overhead[t]) for t in labelled) else ""
            return f"no instance type has enough allocatable for {self._describe(g)}{overhead}"
        zones = sorted({o[0] for t in fitting for o in table.offerings[t] if _allows(reqs.get(wk.LABEL_ZONE), o[0])})
        where = f" in {', '.join(zones)}" if zones else ""
        ct = reqs.get(wk.LABEL_CAPACITY_TYPE)
        zone = reqs.get(wk.LABEL_ZONE)
        if ct is not None:
            ct_free = set(table.viable({k: v for k, v in reqs.items() if k != wk.LABEL_CAPACITY_TYPE}))
        if ct is not None and not ct_free.isdisjoint(fitting):
            return f"requirement {ct} has no offering for {self._describe(g)}{where}"
        if zone is not None:
            return f"requirement {zone} has no offering for {self._describe(g)}"
        return f"no available offering for {self._describe(g)}{where}"

    def _explain_min_values(self, table: PoolTable, reqs: rq.Reqs, types: list[int]) -> str:
        parts = []
        for key, n in min_values_keys(reqs):
            values: set[str] = set()
            for t in types:
                values |= table.values_of(t, key, reqs)
            if len(values) < n:
                parts.append(f"minValues {n} for {key} not met: {len(values)} distinct values fit")
        return "; ".join(parts) or "minValues not met"

    def _message(self, g: Group, reasons: list[tuple[int, list[str]]]) -> str:
        if not self.tables:
            return NO_NODEPOOLS
        if not g.variants:
            return "every required nodeSelectorTerm is empty and matches no node"
        if len(g.variants) == 1:
            return "; ".join(reasons[0][1]) if reasons else "no capacity"
        return "; ".join(f"nodeSelectorTerm {vi}: " + "; ".join(why) for vi, why in reasons)

    # -- result ------------------------------------------------------------------------------------------

    def _result(self) -> SchedulingResult:
        new: list[NewNodeClaim] = []
        for claim in self.claims:
            out = self._finalize(claim)
            if isinstance(out, str):
                for pod in claim.pods:
                    self.errors[pod.key] = f'incompatible with nodepool "{claim.table.name}": {out}'
            else:
                new.append(out)
        existing = {s.node.name: tuple(s.placed) for s in self.slots if s.placed}
        return SchedulingResult(new_nodeclaims=tuple(new), existing=existing, errors=self.errors)

    def _finalize(self, claim: Claim) -> NewNodeClaim | str:
        """The NodeClaim Karpenter would create (``FinalizeScheduling`` + ``ToNodeClaim``)."""
        table, reqs = claim.table, claim.reqs
        members = set(claim.types)
        priced = [t for t in table.by_price(reqs, claim.sig) if t in members][:MAX_INSTANCE_TYPES]
        for key, n in min_values_keys(reqs):
            values: set[str] = set()
            for t in priced:
                values |= table.values_of(t, key, reqs)
            if len(values) < n:
                return f"minValues {n} for {key} not met within the {MAX_INSTANCE_TYPES} cheapest instance types"
        out = dict(reqs)
        names = tuple(table.names[t] for t in priced)
        out.pop(wk.LABEL_INSTANCE_TYPE, None)
        for key in (wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE):
            offered: set[str] = set()
            for t in priced:
                offered |= table.offering_values(t, key, reqs)
            out[key] = _narrowed(reqs, key, offered)
        prev = reqs.get(wk.LABEL_INSTANCE_TYPE)
        # The instance-type list keeps price order (cheapest first), as Karpenter writes it.
        type_req = Requirement(wk.LABEL_INSTANCE_TYPE, IN, names, prev.min_values if prev else None)
        requirements = tuple(
            r
            for key in sorted([*out, wk.LABEL_INSTANCE_TYPE])
            for r in ([type_req] if key == wk.LABEL_INSTANCE_TYPE else out[key].to_model())
        )
        overhead = [min(table.overhead[t][i] for t in priced) for i in range(len(self.index))]
        requests = {n: claim.used[i] + overhead[i] for i, n in enumerate(self.index) if claim.used[i] + overhead[i] > 0}
        labels = {**table.pool.labels, wk.LABEL_NODEPOOL: table.name}
        for key, req in sorted(reqs.items()):
            if req.operator() == IN and len(req.values) == 1 and not is_restricted_node_label(key):
                labels[key] = next(iter(req.values))
        return NewNodeClaim(
            nodepool=table.name,
            requirements=requirements,
            instance_types=tuple(table.types[t] for t in priced),
            pods=tuple(claim.pods),
            requests=requests,
            labels=labels,
            taints=table.pool.taints,
            startup_taints=table.pool.startup_taints,
        )


def _allows(req: rq.Req | None, value: str) -> bool:
    return req is None or req.has(value)


def _narrowed(reqs: rq.Reqs, key: str, values: set[str]) -> rq.Req:
    prev = reqs.get(key)
    return rq.Req(key, False, frozenset(values), min_values=prev.min_values if prev else None)


def solve(
    pods: Sequence[Pod],
    nodepools: Sequence[NodePool],
    existing: Sequence[ExistingNode],
    daemonsets: Sequence[DaemonSet],
) -> SchedulingResult:
    """Plan ``pods`` onto existing capacity and new NodeClaims (Karpenter ``Scheduler.Solve``).

    Args:
        pods: pending pods (effective requests in canonical units; a missing ``pods`` request counts as 1).
        nodepools: Ready NodePools with their instance types (ordered here by weight, then name).
        existing: registered nodes and in-flight NodeClaims with what is already bound or planned on them.
        daemonsets: DaemonSet templates; those that would run on a NodePool's nodes add their requests to
            every NodeClaim of that NodePool, per instance type.

    Returns:
        The new NodeClaims (instance types cheapest first, at most 60), the pods placed per existing node
        name, and for every pod placed nowhere a message naming, per NodePool, the constraint that failed.

    Never raises for unschedulable input; it is pure and deterministic.
    """
    return Solver(pods, nodepools, existing, daemonsets).run()


__all__ = ["MAX_INSTANCE_TYPES", "by_weight", "is_restricted_node_label", "solve"]
