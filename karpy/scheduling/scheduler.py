"""The provisioning simulation: place pending pods on existing capacity and on new NodeClaims.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling`` (``Scheduler.Solve``/``add``,
``NodeClaim.Add``, ``ExistingNode.Add``, ``Topology``, ``Preferences``): pods are queued by priority, CPU and
memory descending, then creation; each pod goes (1) to the first existing or in-flight node where it fits,
(2) to a NodeClaim already opened in this solve (fewest pods first) whose narrowed requirements stay
satisfiable and on which at least one instance type still fits everything, (3) to a new NodeClaim from the
first NodePool, in weight order, that can take it. A NodeClaim keeps absorbing pods while any instance type
fits them all, and launches the cheapest type that does, so pods pack onto few large-enough nodes.

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
  requirements, are re-dealt over the fewest claims that hold them when that is cheaper (``_repack``).

Preferences (``preference_policy``): ``Respect`` (Karpenter default) first treats preferred pod affinity,
preferred pod anti-affinity, the heaviest preferred node-affinity term and ``ScheduleAnyway`` spreads as
required and PreferNoSchedule taints as blocking, then relaxes in Karpenter's order (preferred pod affinity,
heaviest first, one term per step; preferred pod anti-affinity likewise; preferred node-affinity terms;
ScheduleAnyway spreads; PreferNoSchedule tolerated). ``Ignore`` drops them all at once.

Existing nodes are checked with one predicate (``Solver._refusal``: resources, taints, node affinity, volume node
affinity, host ports, pod (anti-)affinity, topology spread, each named after its kube-scheduler filter); the
binder runs the same check before each Binding (:mod:`karpy.scheduling.predicate`).

Pure and deterministic: no I/O, no clock, no randomness; ties break on names and input order.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Final

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
from karpy.scheduling.taints import PREFER_NO_SCHEDULE, format_taint, untolerated
from karpy.scheduling.topology import (
    AFFINITY,
    ANTI,
    INVERSE,
    SCHEDULE_ANYWAY,
    SPREAD,
    TopoGroup,
    Topology,
)

# Karpenter ``MaxInstanceTypes`` for NodeClaim requirements is 600; the AWS launch keeps the 60 cheapest
# (``maxInstanceTypes``). Keeping 60 here makes NodeClaim objects small and loses nothing at launch.
MAX_INSTANCE_TYPES = 60
# Label domains a NodeClaim may still carry although they are in a restricted domain (Karpenter
# ``LabelDomainExceptions``).
LABEL_DOMAIN_EXCEPTIONS = frozenset({"kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"})
WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})
NO_NODEPOOLS = "no nodepools"
RESPECT: Final = "Respect"
IGNORE: Final = "Ignore"
HOSTNAME = wk.LABEL_HOSTNAME
# Open NodeClaims (fewest pods first) among which a group's pods are dealt by price.
WINDOW = 8
# Outcomes of trying one open NodeClaim for one pod of a topology group.
PLACED, NEVER, NOT_NOW, PRICEY = 0, 1, 2, 3
# The kube-scheduler Filter plugins an existing node's refusal of a pod is named after (``Solver.refusal``).
NODE_RESOURCES_FIT: Final = "NodeResourcesFit"
TAINT_TOLERATION: Final = "TaintToleration"
NODE_AFFINITY: Final = "NodeAffinity"
VOLUME_BINDING: Final = "VolumeBinding"
NODE_PORTS: Final = "NodePorts"
INTER_POD_AFFINITY: Final = "InterPodAffinity"
POD_TOPOLOGY_SPREAD: Final = "PodTopologySpread"
PORTS_IN_USE: Final = (f"{NODE_PORTS}: a requested host port is already in use on the node", True)


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


def existing_order(node: ExistingNode) -> tuple[bool, str]:
    """The order existing capacity is tried in (Karpenter ``sortExistingNodes``): initialized nodes first, then by
    name, an in-flight NodeClaim by its own name. Uninitialized nodes may still fail to come up, so a pod only
    waits on one when no ready node can take it (this matters most to consolidation)."""
    name = node.nodeclaim if node.nodeclaim and node.name == f"nodeclaim/{node.nodeclaim}" else node.name
    return (not node.initialized, name)


def fit_count(avail: Vector, used: Sequence[int], need: Sequence[tuple[int, int]]) -> int:
    """How many more pods needing ``need`` (``(resource index, amount)``, amounts > 0) fit; may be ≤ 0."""
    best = 1 << 62
    for i, amount in need:
        k = (avail[i] - used[i]) // amount
        if k < best:
            best = k
    return best


def frontier(avail: Sequence[Vector], types: Sequence[int]) -> list[int]:
    """The Pareto-maximal types: no other type has at least as much of every resource.

    Some type fits a set of requests iff a frontier type does, so fit questions only look at these (one type
    for a catalogue where bigger is bigger in every resource, a few dozen for EC2).
    """
    out: list[int] = []
    for t in sorted(types, key=lambda i: avail[i], reverse=True):
        a = avail[t]
        if not any(all(x >= y for x, y in zip(avail[f], a, strict=True)) for f in out):
            out.append(t)
    return out


class Variant:
    """One requirement alternative of a group: nodeSelector AND one required nodeSelectorTerm (AND the
    volumes' topology and, while respected, the heaviest preferred node-affinity term)."""

    __slots__ = ("_pinned", "raw", "reqs", "sig")

    def __init__(self, raw: tuple[Requirement, ...]) -> None:
        self.raw = raw
        self.reqs = rq.build(raw)
        self.sig = rq.signature(self.reqs)
        self._pinned: dict[tuple[Requirement, ...], Variant] = {}

    def pinned(self, extra: tuple[Requirement, ...]) -> Variant:
        """This alternative narrowed to topology domains (``key In [domain]``), cached."""
        hit = self._pinned.get(extra)
        if hit is None:
            hit = self._pinned[extra] = Variant(self.raw + extra)
        return hit


class Level:
    """One relaxation step of a group: requirement alternatives, topology constraints, taint strictness.

    ``cons`` pairs a topology group with the role it plays for these pods (SPREAD, AFFINITY, ANTI, or
    INVERSE when another pod's required anti-affinity selects them). ``pns`` makes PreferNoSchedule taints
    block. ``node_extra`` is the preferred node-affinity term still respected (checked on existing nodes).
    """

    __slots__ = ("cons", "first", "host_affinity", "keys", "node_cache", "node_extra", "pns", "roles", "variants")

    def __init__(
        self,
        variants: list[Variant],
        cons: tuple[tuple[TopoGroup, str], ...],
        pns: bool,
        node_extra: tuple[Requirement, ...],
    ) -> None:
        self.variants = variants
        self.cons = cons
        self.pns = pns
        self.node_extra = node_extra
        self.keys = tuple(dict.fromkeys(g.key for g, _ in cons))
        self.roles: dict[str, set[str]] = {}
        self.first: dict[tuple[str, str], TopoGroup] = {}
        for g, role in cons:
            self.roles.setdefault(g.key, set()).add(role)
            self.first.setdefault((g.key, role), g)
        self.host_affinity = [g for g, role in cons if role == AFFINITY and g.key == HOSTNAME]
        # Existing node index → why it is ruled out by labels, taints or volumes ("" when it is not).
        self.node_cache: dict[int, str] = {}


class Spec:
    """A pod's topology constraints: hard ones, preferences in relaxation order, owned anti-affinity terms."""

    __slots__ = ("anyway", "hard", "owns", "pref_affinity", "pref_anti")

    def __init__(self) -> None:
        self.hard: list[tuple[TopoGroup, str]] = []
        self.pref_affinity: list[TopoGroup] = []
        self.pref_anti: list[TopoGroup] = []
        self.anyway: list[TopoGroup] = []
        self.owns: tuple[int, ...] = ()


EMPTY_SPEC = Spec()


class Group:
    """Equivalent pods: same requests, requirements, tolerations, host ports, priority and topology."""

    __slots__ = (
        "levels",
        "need",
        "neutral",
        "owns",
        "pods",
        "ports",
        "sample",
        "selects",
        "selset",
        "tolerations",
        "vec",
    )

    def __init__(self, sample: Pod, vec: Vector, selects: tuple[int, ...], owns: tuple[int, ...]) -> None:
        self.sample = sample
        self.vec = vec
        self.need = tuple((i, v) for i, v in enumerate(vec) if v > 0)
        self.pods: list[Pod] = []
        self.tolerations: tuple[Toleration, ...] = sample.tolerations
        self.ports: tuple[HostPort, ...] = sample.host_ports
        self.selects = selects
        self.selset = frozenset(selects)
        self.owns = owns
        self.levels: list[Level] = []
        self.neutral = False


class Slot:
    """Mutable free capacity of one existing node or in-flight NodeClaim during the solve."""

    __slots__ = ("closed", "free", "index", "labels", "node", "placed", "ports")

    def __init__(self, node: ExistingNode, index: Sequence[str], position: int) -> None:
        self.node = node
        self.index = position
        self.labels = {HOSTNAME: node.name, **node.labels}
        requested = dict(node.requested)
        requested[wk.RESOURCE_PODS] = max(requested.get(wk.RESOURCE_PODS, 0), node.pods)
        self.free = [node.allocatable.get(n, 0) - requested.get(n, 0) for n in index]
        self.ports = list(node.host_ports)
        self.placed: list[Pod] = []
        self.closed = False


class Claim:
    """A NodeClaim opened in this solve: narrowed requirements, candidate types, summed pod requests.

    ``types`` are the candidates allowed by the requirements (and limits); which of them still fit ``used``
    is decided at the end, ``front`` (their Pareto frontier) answers fit questions on the way. ``members``
    and ``owner_members`` count pods whose topology domain is not decided yet (zone still open).
    """

    __slots__ = (
        "batches",
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
        "ports",
        "price_pos",
        "price_sig",
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
        self.members: dict[int, int] = {}
        self.owner_members: dict[int, int] = {}
        self.batches: list[tuple[Group, list[Pod]]] = []
        self.neutral = True
        self.price_sig: rq.Signature | None = None
        self.price_pos = 0

    def refresh(self, min_need: Sequence[int]) -> None:
        """Recompute the per-resource headroom (best over frontier types) and close a claim nothing fits."""
        avail = self.table.avail
        self.headroom = [max((avail[t][i] for t in self.front), default=0) - u for i, u in enumerate(self.used)]
        self.closed = any(h < m for h, m in zip(self.headroom, min_need, strict=True))


class Offer:
    """What adding a group to a candidate NodeClaim would give: requirements, types, frontier, pod cap."""

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


class _Deal:
    """One open claim while a group's pods are dealt: its offer, the pods given, the price so far."""

    __slots__ = ("base", "claim", "marginal", "next_pos", "offer", "pos", "taken", "used")

    def __init__(self, claim: Claim, offer: Offer) -> None:
        self.claim = claim
        self.offer = offer
        self.taken: list[Pod] = []
        self.used = list(claim.used)
        self.pos = -1
        self.next_pos = -1
        self.base = 0.0
        self.marginal = 0.0

    def rank(self) -> tuple[float, int, int]:
        return (self.marginal, len(self.claim.pods) + len(self.taken), self.claim.index)


class Solver:
    """One solve's working state (see :func:`solve`)."""

    def __init__(
        self,
        pods: Sequence[Pod],
        nodepools: Sequence[NodePool],
        existing: Sequence[ExistingNode],
        daemonsets: Sequence[DaemonSet],
        preference_policy: str = RESPECT,
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.respect = preference_policy != IGNORE
        self.index = resource_index(pods, daemonsets)
        self.res_pos = {n: i for i, n in enumerate(self.index)}
        ordered_pools = by_weight(nodepools)
        self.tables = [PoolTable(p, i, self.index, daemonsets) for i, p in enumerate(ordered_pools)]
        self.slots = [Slot(n, self.index, i) for i, n in enumerate(sorted(existing, key=existing_order))]
        self.has_pns = self.respect and (
            any(t.effect == PREFER_NO_SCHEDULE for p in nodepools for t in p.taints)
            or any(t.effect == PREFER_NO_SCHEDULE for n in existing for t in n.taints)
        )
        self.topo = Topology(namespace_labels or {})
        self.inverse: set[int] = set()
        self._variants: dict[tuple[Requirement, ...], Variant] = {}
        self._domain_cache: dict[tuple[object, ...], frozenset[str]] = {}
        self._slot_pass: dict[tuple[int, int], bool] = {}
        self._frontiers: dict[tuple[int, rq.Signature], list[int]] = {}
        self._no_room = [(f"{NODE_RESOURCES_FIT}: insufficient {n}", True) for n in self.index]
        self._group_of: dict[str, Group] | None = None
        self._existing_owners()
        self.groups = self._group(pods)
        self._count_existing()
        self.min_need = [min((g.vec[i] for g in self.groups), default=0) for i in range(len(self.index))]
        for slot in self.slots:
            # A node without room for the smallest pending request is never looked at again.
            slot.closed = any(f < m for f, m in zip(slot.free, self.min_need, strict=True))
        self.claims: list[Claim] = []
        self.heap: list[tuple[int, int]] = []
        # Non-hostname topology keys: open claims are also indexed by their domain for these keys.
        self.domain_keys = tuple(sorted({tg.key for tg in self.topo.groups if tg.key != HOSTNAME}))
        self.domain_heaps: dict[tuple[str, str | None], list[tuple[int, int]]] = {}
        self._universes: dict[str, frozenset[str]] = {}
        self.claim_by_host: dict[str, Claim] = {}
        self.remaining: dict[str, dict[str, int]] = {
            t.name: {k: v - t.pool.usage.get(k, 0) for k, v in t.pool.limits.items()} for t in self.tables
        }
        self.errors: dict[str, str] = {}
        self._merge_cache: dict[tuple[rq.Signature, rq.Signature], tuple[rq.Reqs, rq.Signature] | None] = {}
        self._viable_sets: dict[tuple[int, rq.Signature], frozenset[int]] = {}
        self._pool_offers: dict[tuple[object, ...], Offer | str] = {}
        self._max_caps: dict[tuple[int, rq.Signature], dict[str, int]] = {}
        self._offered: dict[tuple[object, ...], set[str]] = {}
        self._price_lists: dict[tuple[int, rq.Signature], tuple[list[int], list[float]]] = {}
        self._fresh: dict[tuple[int, int, rq.Signature], float] = {}
        self._port_types: dict[tuple[int, tuple[HostPort, ...]], tuple[str, ...]] = {}

    # -- topology set-up ---------------------------------------------------------------------------------

    def _existing_owners(self) -> None:
        """Required anti-affinity of pods already bound: enforced in reverse on incoming pods."""
        for slot in self.slots:
            for bound in slot.node.bound_pods:
                for term in bound.pod_anti_affinity:
                    tg = self.topo.term_group(ANTI, term, bound)
                    self.inverse.add(tg.id)
                    domain = slot.labels.get(tg.key)
                    if domain is not None:
                        tg.add_owner(domain, 1)

    def _spec(self, pod: Pod, cache: dict[tuple[object, ...], Spec]) -> Spec:
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
            pod.preferred_pod_affinity if self.respect else (),
            pod.preferred_pod_anti_affinity if self.respect else (),
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
            tg = self.topo.spread_group(tsc, pod)
            if tsc.when_unsatisfiable == SCHEDULE_ANYWAY:
                if self.respect:
                    spec.anyway.append(tg)
            else:
                spec.hard.append((tg, SPREAD))
        for term in pod.pod_affinity:
            spec.hard.append((self.topo.term_group(AFFINITY, term, pod), AFFINITY))
        owns = []
        for term in pod.pod_anti_affinity:
            tg = self.topo.term_group(ANTI, term, pod)
            spec.hard.append((tg, ANTI))
            owns.append(tg.id)
            self.inverse.add(tg.id)
        spec.owns = tuple(owns)
        if self.respect:
            # Karpenter removes the heaviest preferred term first (stable sort by weight, descending).
            for term in sorted(pod.preferred_pod_affinity, key=lambda t: -t.weight):
                spec.pref_affinity.append(self.topo.term_group(AFFINITY, term, pod))
            for term in sorted(pod.preferred_pod_anti_affinity, key=lambda t: -t.weight):
                spec.pref_anti.append(self.topo.term_group(ANTI, term, pod))
        cache[key] = spec
        return spec

    def _count_existing(self) -> None:
        """Pods already bound count toward every group that selects them (spread: nodes passing its filter)."""
        if not self.topo.groups:
            return
        for slot in self.slots:
            for bound in slot.node.bound_pods:
                for gid in self.topo.selecting(bound):
                    tg = self.topo.groups[gid]
                    domain = slot.labels.get(tg.key)
                    if domain is None or (tg.kind == SPREAD and not self._slot_passes(tg, slot)):
                        continue
                    tg.add(domain, 1)

    def _variant(self, raw: tuple[Requirement, ...]) -> Variant:
        hit = self._variants.get(raw)
        if hit is None:
            hit = self._variants[raw] = Variant(raw)
        return hit

    def _levels(self, sample: Pod, spec: Spec, inverse: tuple[int, ...]) -> list[Level]:
        """The relaxation ladder (Karpenter ``Preferences.Relax`` order; a single level under Ignore)."""
        bases = pod_requirement_sets(sample)
        volumes = [t for t in sample.volume_terms if t] or [()]
        inv = tuple((self.topo.groups[gid], INVERSE) for gid in inverse)

        def level(
            node: list[tuple[Requirement, ...]],
            aff: list[TopoGroup],
            anti: list[TopoGroup],
            anyway: list[TopoGroup],
            pns: bool,
        ) -> Level:
            extra = node[0] if node else ()
            variants = [self._variant(b + v + extra) for b in bases for v in volumes]
            cons = (
                tuple(spec.hard)
                + tuple((g, AFFINITY) for g in aff)
                + tuple((g, ANTI) for g in anti)
                + tuple((g, SPREAD) for g in anyway)
                + inv
            )
            return Level(variants, cons, pns, extra)

        if not self.respect:
            return [level([], [], [], [], False)]
        node = [t for _, t in sorted(sample.preferred_terms, key=lambda wt: -wt[0]) if t]
        aff, anti, anyway = list(spec.pref_affinity), list(spec.pref_anti), list(spec.anyway)
        pns = self.has_pns
        levels = [level(node, aff, anti, anyway, pns)]
        for ladder in (aff, anti, node, anyway):
            while ladder:
                ladder.pop(0)
                levels.append(level(node, aff, anti, anyway, pns))
        if pns:
            levels.append(level(node, aff, anti, anyway, False))
        return levels

    # -- queue -------------------------------------------------------------------------------------------

    def _group(self, pods: Sequence[Pod]) -> list[Group]:
        """Equivalence groups in queue order: priority desc, cpu desc, memory desc, creation, name."""
        cpu = self.res_pos.get(wk.RESOURCE_CPU)
        mem = self.res_pos.get(wk.RESOURCE_MEMORY)
        ordered = sorted(pods, key=lambda p: (p.created, p.namespace, p.name, p.uid))
        cache: dict[tuple[object, ...], Spec] = {}
        specs = [self._spec(p, cache) for p in ordered]
        groups: dict[tuple[object, ...], Group] = {}
        for pod, spec in zip(ordered, specs, strict=True):
            vec = requests_vector(pod, self.index)
            selects = self.topo.selecting(pod)
            inverse = tuple(gid for gid in selects if gid in self.inverse)
            key = (
                vec,
                tuple(sorted(pod.node_selector.items())),
                pod.required_terms,
                pod.preferred_terms if self.respect else (),
                pod.volume_terms,
                pod.tolerations,
                pod.host_ports,
                pod.priority,
                id(spec),
                selects,
                inverse,
            )
            group = groups.get(key)
            if group is None:
                group = groups[key] = Group(pod, vec, selects, spec.owns)
                group.levels = self._levels(pod, spec, inverse)
                # Pods nothing topological refers to may be moved between equal NodeClaims (see _repack).
                group.neutral = not (selects or spec.owns or group.ports or any(lv.cons for lv in group.levels))
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
        """Place every group in queue order, retry topology failures while that helps, then finalize."""
        failed: list[tuple[Group, list[Pod], str]] = []
        for group in self.groups:
            rest, message = self._place(group, group.pods)
            if rest:
                failed.append((group, rest, message))
        # Karpenter re-queues failed pods until a pass makes no progress: a pod whose affinity target was
        # queued after it can schedule once the target is placed.
        while failed and self.topo.groups:
            retry: list[tuple[Group, list[Pod], str]] = []
            progress = False
            for group, pods, message in failed:
                rest, message = self._place(group, pods)
                progress = progress or len(rest) < len(pods)
                if rest:
                    retry.append((group, rest, message))
            failed = retry
            if not progress:
                break
        for _, pods, message in failed:
            for pod in pods:
                self.errors[pod.key] = message
        return self._result()

    def _place(self, g: Group, pods: list[Pod]) -> tuple[list[Pod], str]:
        """Each relaxation level in turn takes the pods the previous ones could not place."""
        todo = pods
        reasons: list[tuple[int, list[str]]] = []
        for level in g.levels:
            if not todo:
                break
            if level.cons:
                todo, reasons = self._place_topo(g, level, todo)
            else:
                todo, reasons = self._place_batch(g, level, todo)
        return todo, (self._message(g, reasons) if todo else "")

    def _place_batch(self, g: Group, level: Level, todo: list[Pod]) -> tuple[list[Pod], list[tuple[int, list[str]]]]:
        """Pods without topology constraints: existing capacity, then per alternative open and new claims."""
        todo = self._place_existing(g, level, todo)
        reasons: list[tuple[int, list[str]]] = []
        for vi, variant in enumerate(level.variants):
            if not todo:
                break
            todo = self._place_open(g, level, variant, todo)
            if todo:
                todo, why = self._place_new(g, level, variant, todo)
                if todo:
                    reasons.append((vi, why))
        return todo, reasons

    def _node_why(self, g: Group, level: Level, slot: Slot) -> str:
        """Why the node's taints or labels rule it out for the group at this level, "" when they do not (cached
        per level and node): kube-scheduler TaintToleration, NodeAffinity (nodeSelector, any required term, and
        the preferred term still respected) and VolumeBinding (the node affinity of the pod's volumes)."""
        hit = level.node_cache.get(slot.index)
        if hit is None:
            labels = slot.labels
            taint = untolerated(g.tolerations, slot.node.taints, level.pns)
            if taint is not None:
                hit = f"{TAINT_TOLERATION}: untolerated taint {format_taint(taint)}"
            elif not pod_matches_labels(g.sample, labels):
                hit = f"{NODE_AFFINITY}: node does not match the pod's nodeSelector or required node affinity"
            elif not rq.matches(level.node_extra, labels):
                hit = f"{NODE_AFFINITY}: node does not match the preferred node affinity term still respected"
            elif g.sample.volume_terms and not any(rq.matches(t, labels) for t in g.sample.volume_terms):
                hit = f"{VOLUME_BINDING}: node is outside the node affinity of the pod's volumes"
            else:
                hit = ""
            level.node_cache[slot.index] = hit
        return hit

    def _refusal(self, g: Group, level: Level, slot: Slot) -> tuple[str, bool] | None:
        """Why one more pod of the group cannot go on this existing node now, or None when it can: the one
        existing-node predicate (kube-scheduler's filters) that placement and the binder's check share.

        The reason names the filter (NodeResourcesFit, TaintToleration, NodeAffinity, VolumeBinding, NodePorts,
        InterPodAffinity, PodTopologySpread); the flag says it is permanent for this group and level (counts and
        usage only grow), so callers may stop looking at the node.
        """
        free = slot.free
        for i, amount in g.need:
            if free[i] < amount:
                return self._no_room[i]
        why = self._node_why(g, level, slot)
        if why:
            return why, True
        if g.ports and ports_conflict(g.ports, slot.ports):
            return PORTS_IN_USE
        if level.cons:
            labels = slot.labels
            dom = {k: (frozenset((labels[k],)) if k in labels else frozenset()) for k in level.keys}
            allowed = self._allowed(g, level, dom, None)
            if isinstance(allowed, tuple):
                return f"{allowed[2]}: {allowed[0]}", allowed[1]
        return None

    def _place_existing(self, g: Group, level: Level, todo: list[Pod]) -> list[Pod]:
        """First fit over existing and in-flight capacity (Karpenter ``ExistingNode.Add``)."""
        need = g.need
        for slot in self.slots:
            if not todo:
                break
            if slot.closed or self._refusal(g, level, slot) is not None:
                continue
            free = slot.free
            k = 1 if g.ports else min((free[i] // amount for i, amount in need), default=len(todo))
            take = min(k, len(todo))
            placed, todo = todo[:take], todo[take:]
            self._put_on_slot(slot, g, placed)
        return todo

    def _group_level(self, pod: Pod) -> tuple[Group, Level]:
        """The pod's group and its strictest level (the only one under ``Ignore``)."""
        if self._group_of is None:
            self._group_of = {p.key: g for g in self.groups for p in g.pods}
        g = self._group_of[pod.key]
        return g, g.levels[0]

    def _slot_named(self, name: str) -> Slot:
        return next(slot for slot in self.slots if slot.node.name == name)

    def refusal(self, pod: Pod, node: str) -> str | None:
        """Why the existing node named ``node`` cannot take ``pod`` (one of this solve's pods) now, with what is
        bound and assumed on every node counted; None when it can. See ``_refusal``."""
        g, level = self._group_level(pod)
        out = self._refusal(g, level, self._slot_named(node))
        return None if out is None else out[0]

    def assume(self, pod: Pod, node: str) -> None:
        """Count ``pod`` as placed on the existing node named ``node`` (its resources, ports and topology)."""
        g, _ = self._group_level(pod)
        self._put_on_slot(self._slot_named(node), g, [pod])

    def _put_on_slot(self, slot: Slot, g: Group, pods: list[Pod]) -> None:
        take = len(pods)
        slot.placed.extend(pods)
        slot.ports.extend(g.ports)
        for i, amount in g.need:
            slot.free[i] -= amount * take
        slot.closed = any(f < m for f, m in zip(slot.free, self.min_need, strict=True))
        self._record_slot(slot, g, take)

    # -- the open-claim heap -----------------------------------------------------------------------------

    def _push(self, claim: Claim) -> None:
        """(Re)insert an open claim: in the main heap and, per indexed topology key, in the heap of its domain
        (or of claims whose domain is still open). Old entries in other heaps go stale via ``in_heap``."""
        if claim.closed:
            return
        count = claim.in_heap = len(claim.pods)
        entry = (count, claim.index)
        heapq.heappush(self.heap, entry)
        for key in self.domain_keys:
            doms = self._claim_domains(claim, key)
            bucket = (key, next(iter(doms))) if len(doms) == 1 else (key, None)
            heap = self.domain_heaps.get(bucket)
            if heap is None:
                heap = self.domain_heaps[bucket] = []
            heapq.heappush(heap, entry)

    def _top(self, heap: list[tuple[int, int]] | None = None) -> tuple[int, int] | None:
        """The (pod count, index) of the open claim with fewest pods in ``heap``, dropping stale entries."""
        heap = self.heap if heap is None else heap
        while heap:
            count, idx = heap[0]
            claim = self.claims[idx]
            if claim.in_heap == count and not claim.closed:
                return count, idx
            heapq.heappop(heap)
        return None

    def _pop(self, heaps: Sequence[list[tuple[int, int]]] | None = None) -> Claim | None:
        """Take the claim with fewest pods out of ``heaps`` (default: every open claim)."""
        best: tuple[int, int] | None = None
        for heap in heaps if heaps is not None else (self.heap,):
            top = self._top(heap)
            if top is not None and (best is None or top < best):
                best = top
        if best is None:
            return None
        claim = self.claims[best[1]]
        claim.in_heap = None
        return claim

    def _candidate_heaps(self, g: Group, level: Level) -> list[list[tuple[int, int]]] | None:
        """For a level constrained on an indexed key (zone, capacity type, ...): the heaps of claims whose
        domain the constraints currently allow, plus claims whose domain is still open; None = all claims."""
        key = next((k for k in level.keys if k in self.domain_keys), None)
        if key is None:
            return None
        universe = self._universe(key)
        allowed = self._allowed(g, level, {key: universe}, None, key)
        heaps = [self.domain_heaps.setdefault((key, None), [])]
        if isinstance(allowed, dict):
            heaps += [self.domain_heaps.setdefault((key, d), []) for d in sorted(allowed.get(key, universe))]
        return heaps

    def _universe(self, key: str) -> frozenset[str]:
        """Every value ``key`` can take on any NodePool's nodes or existing node."""
        hit = self._universes.get(key)
        if hit is None:
            values: set[str] = set()
            for table in self.tables:
                values |= self._domain_values(table, table.reqs, rq.signature(table.reqs), key)
            values |= {s.labels[key] for s in self.slots if key in s.labels}
            hit = self._universes[key] = frozenset(values)
        return hit

    # -- claims ------------------------------------------------------------------------------------------

    def _viable_set(self, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> frozenset[int]:
        key = (table.order, sig)
        cached = self._viable_sets.get(key)
        if cached is None:
            cached = self._viable_sets[key] = frozenset(table.viable(reqs, sig))
        return cached

    def _frontier(self, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
        key = (table.order, sig)
        cached = self._frontiers.get(key)
        if cached is None:
            cached = self._frontiers[key] = frontier(table.avail, table.viable(reqs, sig))
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

    def _offer_open(self, claim: Claim, g: Group, variant: Variant, pns: bool) -> Offer | None:
        """How many of the group's pods an open NodeClaim can take (Karpenter ``NodeClaim.Add``)."""
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
            merged = self._merge(claim, variant)
            if merged is None:
                return None
            reqs, sig = merged
            if sig == claim.sig:
                types, front = claim.types, claim.front
            elif claim.limited:
                allowed = self._viable_set(table, reqs, sig)
                types = [t for t in claim.types if t in allowed]
                front = frontier(table.avail, types)
            else:
                types, front = table.viable(reqs, sig), self._frontier(table, reqs, sig)
        if g.ports:
            free = self._without_port_types(table, g.ports, reqs)
            if free is not reqs:
                reqs, sig = free, rq.signature(free)
                allowed = self._viable_set(table, reqs, sig)
                types = [t for t in types if t in allowed]
                front = frontier(table.avail, types)
        cap = self._cap(table, reqs, types, front, claim.used, g.need)
        if cap <= 0:
            return None
        return Offer(claim, reqs, sig, types, front, 1 if g.ports else cap, claim.limited)

    def _place_open(self, g: Group, level: Level, variant: Variant, todo: list[Pod]) -> list[Pod]:
        """Deal pods to open NodeClaims: among the ``WINDOW`` claims with fewest pods that can take them,
        each pod goes where it raises the launch price least (free slack first), ties to fewest pods.

        Karpenter gives every pod to the claim with fewest pods; pricing the choice keeps its spread while
        filling each claim's cheapest type before growing another one. Claims are popped from the shared
        heap only as far as needed, so the work per pod does not grow with the number of open claims.
        """
        active: dict[int, _Deal] = {}
        popped: list[Claim] = []
        need = g.need

        def refill() -> None:
            while len(active) < WINDOW:
                claim = self._pop()
                if claim is None:
                    return
                popped.append(claim)
                offer = self._offer_open(claim, g, variant, level.pns)
                if offer is not None:
                    deal = _Deal(claim, offer)
                    deal.marginal = self._marginal(deal, need)
                    active[claim.index] = deal

        refill()
        dealt: list[_Deal] = []
        fresh: float | None = None
        pos = 0
        while pos < len(todo) and active:
            deal = min(active.values(), key=_Deal.rank)
            if deal.marginal > 0:
                # Growing a claim can cost more than a new node of its own (two 4-GPU pods on an 8-GPU type).
                if fresh is None:
                    fresh = self._fresh_price(g, level, variant)
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
            if len(deal.taken) >= deal.offer.cap:
                del active[deal.claim.index]
                refill()
            else:
                deal.marginal = self._marginal(deal, need)
        for deal in dealt:
            self._commit(deal.claim, deal.offer, g, variant, deal.taken)
        for claim in popped:
            self._push(claim)
        return todo[pos:]

    def _fresh_price(self, g: Group, level: Level, variant: Variant) -> float:
        """USD/hour of a new NodeClaim for one pod of the group from the NodePool ``_place_new`` would use."""
        zero = [0] * len(self.index)
        for table in self.tables:
            offer = self._pool_offer(table, g, variant, level.pns)
            if isinstance(offer, str):
                continue
            order, prices = self._prices(table, offer.reqs, offer.sig)
            for j, t in enumerate(order):
                if fit_count(table.avail[t], zero, g.need) >= 1:
                    return prices[j]
        return float("inf")

    def _prices(self, table: PoolTable, reqs: rq.Reqs, sig: rq.Signature) -> tuple[list[int], list[float]]:
        """Viable types cheapest first and their prices (cached per requirement set)."""
        key = (table.order, sig)
        hit = self._price_lists.get(key)
        if hit is None:
            order = table.by_price(reqs, sig)
            hit = self._price_lists[key] = (order, [table.price(t, reqs) for t in order])
        return hit

    def _marginal(self, deal: _Deal, need: Sequence[tuple[int, int]]) -> float:
        """How much one more pod raises the price of the claim's cheapest fitting type (USD/hour)."""
        offer = deal.offer
        if offer.limited:
            return 0.0
        order, prices = self._prices(deal.claim.table, offer.reqs, offer.sig)
        avail = deal.claim.table.avail
        used = deal.used
        start = deal.pos
        if start < 0:
            start = self._first_fit(order, avail, used, 0)
            deal.pos = start
            deal.base = prices[start] if start < len(order) else float("inf")
        grown = list(used)
        for i, amount in need:
            grown[i] += amount
        nxt = self._first_fit(order, avail, grown, start)
        if nxt >= len(order):
            return float("inf")
        deal.next_pos = nxt
        return prices[nxt] - deal.base

    @staticmethod
    def _first_fit(order: Sequence[int], avail: Sequence[Vector], used: Sequence[int], start: int) -> int:
        for j in range(start, len(order)):
            a = avail[order[j]]
            if all(x >= u for x, u in zip(a, used, strict=True)):
                return j
        return len(order)

    def _commit(self, claim: Claim, offer: Offer, g: Group, variant: Variant, pods: list[Pod]) -> None:
        k = len(pods)
        old_reqs, old_sig = claim.reqs, claim.sig
        claim.reqs, claim.sig = offer.reqs, offer.sig
        claim.merged.add(variant.sig)
        claim.types, claim.front = offer.types, offer.front
        for i, amount in g.need:
            claim.used[i] += amount * k
        claim.pods.extend(pods)
        claim.ports.extend(g.ports)
        claim.batches.append((g, pods))
        claim.neutral = claim.neutral and g.neutral
        claim.refresh(self.min_need)
        if old_sig != claim.sig and (claim.members or claim.owner_members):
            self._rerecord(claim, old_reqs, old_sig)
        self._record_claim(claim, g, k)

    def _pool_offer(self, table: PoolTable, g: Group, variant: Variant, pns: bool) -> Offer | str:
        """A fresh NodeClaim from ``table`` for this group alternative, or why there is none (cached)."""
        key = (table.order, variant.sig, pns, g.vec, g.tolerations, g.ports)
        hit = self._pool_offers.get(key)
        if hit is None:
            hit = self._pool_offers[key] = self._make_pool_offer(table, g, variant, pns)
        return hit

    def _make_pool_offer(self, table: PoolTable, g: Group, variant: Variant, pns: bool) -> Offer | str:
        pool = table.pool
        taint = untolerated(g.tolerations, pool.taints, pns)
        if taint is not None:
            return f"did not tolerate taint {format_taint(taint)}"
        why = rq.compatible(table.reqs, variant.reqs)
        if why is not None:
            return why
        reqs = rq.intersect_all(table.reqs, variant.reqs)
        if g.ports:
            free = self._without_port_types(table, g.ports, reqs)
            if free is not reqs:
                if table.viable(reqs, rq.signature(reqs)) and not table.viable(free, rq.signature(free)):
                    return "host ports conflict with a daemonset's host ports"
                reqs = free
        sig = rq.signature(reqs)
        front = self._frontier(table, reqs, sig)
        zero = [0] * len(self.index)
        if max((fit_count(table.avail[t], zero, g.need) for t in front), default=0) < 1:
            return self._explain_types(table, g, reqs)
        return Offer(None, reqs, sig, table.viable(reqs, sig), front, 0)

    def _without_port_types(self, table: PoolTable, ports: tuple[HostPort, ...], reqs: rq.Reqs) -> rq.Reqs:
        """``reqs`` narrowed to the types on which no DaemonSet pod holds one of ``ports`` (``reqs`` itself when
        none does). Karpenter skips the DaemonSet overhead groups whose host ports conflict with the pod's; as an
        ``instance-type NotIn`` requirement the exclusion stays with the NodeClaim through later merges."""
        key = (table.order, ports)
        names = self._port_types.get(key)
        if names is None:
            names = self._port_types[key] = tuple(
                sorted({table.names[t] for t, held in enumerate(table.daemon_ports) if ports_conflict(ports, held)})
            )
        if not names:
            return reqs
        out = dict(reqs)
        rq.add(out, rq.Req(wk.LABEL_INSTANCE_TYPE, True, frozenset(names)))
        return out

    def _place_new(self, g: Group, level: Level, variant: Variant, todo: list[Pod]) -> tuple[list[Pod], list[str]]:
        """Open NodeClaims from the first NodePool (weight order) that can take the group's pods."""
        while todo:
            why: list[str] = []
            opened = False
            for table in self.tables:
                offer = self._pool_offer(table, g, variant, level.pns)
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
        types, front, limited = offer.types, offer.front, False
        remaining = self.remaining[table.name]
        zero = [0] * len(self.index)
        if remaining and not self._within_limits(table, offer, remaining):
            kept = [t for t in types if table.fits_limits(t, remaining)]
            if len(kept) < len(types):
                limited = True
                types, front = kept, frontier(table.avail, kept)
            if max((fit_count(table.avail[t], zero, g.need) for t in front), default=0) < 1:
                fitting = [t for t in offer.types if fit_count(table.avail[t], zero, g.need) >= 1]
                over = sorted(k for k, v in remaining.items() if min(table.capacity[t].get(k, 0) for t in fitting) > v)
                # No single resource rules every type out: name each one that rules some out.
                over = over or sorted(
                    k for k, v in remaining.items() if any(table.capacity[t].get(k, 0) > v for t in fitting)
                )
                return f'nodepool "{table.name}" limits exceeded: {", ".join(over)}'
        cap = self._cap(table, offer.reqs, types, front, zero, g.need)
        if cap <= 0:
            fitting = [t for t in types if fit_count(table.avail[t], zero, g.need) >= 1]
            why = self._explain_min_values(table, offer.reqs, fitting)
            return f'incompatible with nodepool "{table.name}": {why}'
        if g.ports:
            cap = 1
        claim = Claim(table, len(self.claims), offer.reqs, offer.sig, [0] * len(self.index))
        claim.types, claim.front, claim.limited = types, front, limited
        self.claims.append(claim)
        self.claim_by_host[claim.hostname] = claim
        take = min(cap, len(todo))
        if take > 1 and not limited and not min_values_keys(offer.reqs):
            take = self._cheapest_per_pod(table, offer, g, take)
        self._commit(claim, Offer(claim, offer.reqs, offer.sig, types, front, cap, limited), g, variant, todo[:take])
        if remaining:
            # Count the largest candidate against the limits: any of them may be launched (Karpenter
            # ``subtractMax``); later pods only narrow the candidates, so this stays an upper bound.
            biggest = self._max_capacity(table, claim.sig, claim.types) if not limited else None
            for key in remaining:
                remaining[key] -= (
                    biggest.get(key, 0) if biggest is not None else max(table.capacity[t].get(key, 0) for t in types)
                )
        self._push(claim)
        return todo[take:]

    def _cheapest_per_pod(self, table: PoolTable, offer: Offer, g: Group, most: int) -> int:
        """How many of the group's pods a new claim should take: the count whose cheapest fitting type costs
        least per pod (ties to more pods). Karpenter always takes as many as fit; that can launch one big
        type where two small ones are cheaper."""
        order, prices = self._prices(table, offer.reqs, offer.sig)
        zero = [0] * len(self.index)
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

    def _max_capacity(self, table: PoolTable, sig: rq.Signature, types: Sequence[int]) -> dict[str, int]:
        """Per resource, the largest capacity among ``types`` (the viable set of ``sig``; cached)."""
        key = (table.order, sig)
        hit = self._max_caps.get(key)
        if hit is None:
            hit = {}
            for t in types:
                for name, value in table.capacity[t].items():
                    if value > hit.get(name, 0):
                        hit[name] = value
            self._max_caps[key] = hit
        return hit

    def _within_limits(self, table: PoolTable, offer: Offer, remaining: Mapping[str, int]) -> bool:
        """True when even the largest candidate type stays within the NodePool's remaining limits."""
        if offer.limited:
            return False
        biggest = self._max_capacity(table, offer.sig, offer.types)
        return all(biggest.get(k, 0) <= v for k, v in remaining.items())

    def _cap(
        self,
        table: PoolTable,
        reqs: rq.Reqs,
        types: list[int],
        front: list[int],
        used: Sequence[int],
        need: Sequence[tuple[int, int]],
    ) -> int:
        """Most pods one NodeClaim can take while its remaining types still satisfy every minValues."""
        mv = min_values_keys(reqs)
        avail = table.avail
        if not mv:
            return max(max((fit_count(avail[t], used, need) for t in front), default=0), 0)
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

    # -- topology ----------------------------------------------------------------------------------------

    def _domain_values(
        self,
        table: PoolTable,
        reqs: rq.Reqs,
        sig: rq.Signature,
        key: str,
        types: Sequence[int] | None = None,
        tag: object = None,
    ) -> frozenset[str]:
        """The values of ``key`` a node from ``table`` with ``reqs`` may get (offerings or type labels)."""
        cache_key = (table.order, sig, key, tag)
        hit = self._domain_cache.get(cache_key)
        if hit is not None:
            return hit
        candidates = table.viable(reqs, sig) if types is None else types
        values: set[str] = set()
        if key in OFFERING_KEYS:
            for t in candidates:
                values |= table.offering_values(t, key, reqs)
        else:
            req = reqs.get(key)
            values = {table.labels[t][key] for t in candidates if key in table.labels[t]}
            if req is not None and req.operator() == IN:
                values = (values & req.values) if values else set(req.values)
            elif req is not None:
                values = {v for v in values if req.has(v)}
        hit = self._domain_cache[cache_key] = frozenset(values)
        return hit

    def _claim_domains(self, claim: Claim, key: str) -> frozenset[str]:
        if key == HOSTNAME:
            return frozenset((claim.hostname,))
        return self._domain_values(claim.table, claim.reqs, claim.sig, key)

    def _slot_passes(self, tg: TopoGroup, slot: Slot) -> bool:
        """Spread node filter on an existing node: nodeAffinityPolicy / nodeTaintsPolicy Honor."""
        key = (tg.id, slot.index)
        hit = self._slot_pass.get(key)
        if hit is None:
            hit = (tg.filter_pod is None or pod_matches_labels(tg.filter_pod, slot.labels)) and (
                tg.filter_tolerations is None or untolerated(tg.filter_tolerations, slot.node.taints) is None
            )
            self._slot_pass[key] = hit
        return hit

    def _eligible(self, tg: TopoGroup) -> frozenset[str]:
        """A spread group's domains: NodePools and existing nodes passing its node filter (Karpenter
        ``TopologyDomainGroup`` × ``TopologyNodeFilter``)."""
        if tg.eligible is not None:
            return tg.eligible
        values: set[str] = set()
        pools: set[str] = set()
        alts = [rq.build(a) for a in pod_requirement_sets(tg.filter_pod)] if tg.filter_pod is not None else [{}]
        for table in self.tables:
            if tg.filter_tolerations is not None and untolerated(tg.filter_tolerations, table.pool.taints):
                continue
            for alt in alts:
                if rq.compatible(table.reqs, alt) is not None:
                    continue
                pools.add(table.name)
                if tg.key != HOSTNAME:
                    reqs = rq.intersect_all(table.reqs, alt)
                    values |= self._domain_values(table, reqs, rq.signature(reqs), tg.key)
        for slot in self.slots:
            if tg.key in slot.labels and self._slot_passes(tg, slot):
                values.add(slot.labels[tg.key])
        tg.eligible, tg.pools_ok = frozenset(values), frozenset(pools)
        return tg.eligible

    def _spread_min(self, tg: TopoGroup, eligible: frozenset[str]) -> int:
        if tg.min_domains is not None and len(eligible) < tg.min_domains:
            return 0
        counts = tg.counts
        return min((counts.get(d, 0) for d in eligible), default=0)

    def _allowed(
        self,
        g: Group,
        level: Level,
        dom: Mapping[str, frozenset[str]],
        members: Mapping[int, int] | None,
        only: str | None = None,
    ) -> dict[str, frozenset[str]] | tuple[str, bool, str]:
        """Per topology key, the target's domains every constraint allows; or (reason, permanent, the
        kube-scheduler filter it corresponds to).

        ``dom`` holds the target's possible domains per key; ``members`` the pods already on the target
        whose domain is still open (counted against a spread as if they landed where this pod does).
        A failure is permanent (for this group and level) when counts only grow against it: hostname spread
        and anti-affinity. ``only`` restricts the check to one key.
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
                    eligible = self._eligible(tg)
                    low = self._spread_min(tg, eligible)
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
                return self._why(tg, role, full), key == HOSTNAME and role != AFFINITY, plugin
            out[key] = ok
        return out

    def _why(self, tg: TopoGroup, role: str, full: frozenset[str]) -> str:
        where = ", ".join(sorted(full)[:6]) or f"no {tg.key} domain"
        if role == SPREAD:
            return f"{tg.describe()} allows none of [{where}]"
        if role == AFFINITY:
            return f"pod affinity on {tg.key}: no matching pod in [{where}]"
        if role == ANTI:
            return f"pod anti-affinity on {tg.key}: matching pods already in [{where}]"
        return f"anti-affinity of existing pods on {tg.key} excludes [{where}]"

    def _pins(
        self, level: Level, dom: Mapping[str, frozenset[str]], allowed: Mapping[str, frozenset[str]]
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

    def _record_claim(self, claim: Claim, g: Group, k: int) -> None:
        """Count ``k`` pods of ``g`` placed on ``claim`` in every group that selects or is owned by them."""
        groups = self.topo.groups
        for gid in g.selects:
            tg = groups[gid]
            if tg.kind == SPREAD:
                self._eligible(tg)
                if tg.pools_ok is not None and claim.table.name not in tg.pools_ok:
                    continue
            doms = self._claim_domains(claim, tg.key)
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
            doms = self._claim_domains(claim, tg.key)
            for d in doms:
                tg.add_owner(d, k)
            if len(doms) > 1:
                claim.owner_members[gid] = claim.owner_members.get(gid, 0) + k

    def _rerecord(self, claim: Claim, old_reqs: rq.Reqs, old_sig: rq.Signature) -> None:
        """The claim's domains narrowed: settle the counts of pods whose domain was still open."""
        groups = self.topo.groups
        for gid, m in list(claim.members.items()):
            tg = groups[gid]
            old = self._domain_values(claim.table, old_reqs, old_sig, tg.key)
            new = self._claim_domains(claim, tg.key)
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
            old = self._domain_values(claim.table, old_reqs, old_sig, tg.key)
            new = self._claim_domains(claim, tg.key)
            for d in old - new:
                tg.add_owner(d, -m)
            if len(new) <= 1:
                del claim.owner_members[gid]

    def _record_slot(self, slot: Slot, g: Group, k: int) -> None:
        groups = self.topo.groups
        for gid in g.selects:
            tg = groups[gid]
            domain = slot.labels.get(tg.key)
            if domain is None or (tg.kind == SPREAD and not self._slot_passes(tg, slot)):
                continue
            tg.add(domain, k)
        for gid in g.owns:
            tg = groups[gid]
            domain = slot.labels.get(tg.key)
            if domain is not None:
                tg.add_owner(domain, k)

    def _place_topo(self, g: Group, level: Level, todo: list[Pod]) -> tuple[list[Pod], list[tuple[int, list[str]]]]:
        """Pods with topology constraints, one at a time: existing nodes, then per alternative open claims
        (fewest pods first) and new claims, each with its domains decided from the current counts."""
        skip: set[int] = set()
        todo = [pod for pod in todo if not self._topo_existing(g, level, pod, skip)]
        reasons: list[tuple[int, list[str]]] = []
        for vi, variant in enumerate(level.variants):
            if not todo:
                break
            never: list[Claim] = []
            pricey: list[Claim] = []
            failed: list[Pod] = []
            why: list[str] = []
            for pod in todo:
                if self._topo_open(g, level, variant, pod, never, pricey):
                    continue
                why = self._topo_new(g, level, variant, pod)
                if why and not self._topo_pricey(g, level, variant, pod, pricey):
                    failed.append(pod)
            for claim in never:
                self._push(claim)
            if failed:
                reasons.append((vi, why))
            todo = failed
        return todo, reasons

    def _topo_pricey(self, g: Group, level: Level, variant: Variant, pod: Pod, pricey: list[Claim]) -> bool:
        """No new claim can take the pod (e.g. it must join pods whose zone is still open): accept growing one
        of the claims passed over for price after all, fewest pods first."""
        for claim in sorted(pricey, key=lambda c: (len(c.pods), c.index)):
            if not claim.closed and self._try_claim(claim, g, level, variant, pod, check_price=False) == PLACED:
                return True
        return False

    def _topo_existing(self, g: Group, level: Level, pod: Pod, skip: set[int]) -> bool:
        """First fit on existing capacity; ``skip`` collects nodes that can never take a pod of this group at
        this level (no room, labels, taints, ports, hostname constraints: all only get worse)."""
        for slot in self.slots:
            if slot.closed or slot.index in skip:
                continue
            refusal = self._refusal(g, level, slot)
            if refusal is not None:
                if refusal[1]:
                    skip.add(slot.index)
                continue
            self._put_on_slot(slot, g, [pod])
            return True
        return False

    def _try_claim(
        self, claim: Claim, g: Group, level: Level, variant: Variant, pod: Pod, check_price: bool = True
    ) -> int:
        """Place one pod of the group on ``claim`` if it can take it: PLACED, or why not (NEVER for this group
        and level, NOT_NOW, PRICEY when growing it costs more than a new claim)."""
        offer = self._offer_open(claim, g, variant, level.pns)
        if offer is None:
            return NEVER
        dom = {k: self._claim_domains(claim, k) for k in level.keys}
        allowed = self._allowed(g, level, dom, claim.members)
        if isinstance(allowed, tuple):
            return NEVER if allowed[1] else NOT_NOW
        pins = self._pins(level, dom, allowed)
        if pins:
            variant = variant.pinned(pins)
            pinned = self._offer_open(claim, g, variant, level.pns)
            if pinned is None:
                return NOT_NOW
            offer = pinned
        if check_price and self._grows_too_much(claim, offer, g, level, variant):
            return PRICEY
        self._commit(claim, offer, g, variant, [pod])
        return PLACED

    def _grows_too_much(self, claim: Claim, offer: Offer, g: Group, level: Level, variant: Variant) -> bool:
        """True when one more pod would raise the claim's launch price by more than a new claim costs."""
        if offer.limited:
            return False
        table = claim.table
        order, prices = self._prices(table, offer.reqs, offer.sig)
        avail = table.avail
        start = self._first_fit(order, avail, claim.used, 0) if offer.sig != claim.price_sig else claim.price_pos
        start = self._first_fit(order, avail, claim.used, start)
        claim.price_sig, claim.price_pos = offer.sig, start
        grown = list(claim.used)
        for i, amount in g.need:
            grown[i] += amount
        nxt = self._first_fit(order, avail, grown, start)
        if nxt >= len(order) or start >= len(order) or prices[nxt] == prices[start]:
            return nxt >= len(order)
        key = (id(g), id(level), variant.sig)
        fresh = self._fresh.get(key)
        if fresh is None:
            fresh = self._fresh[key] = self._fresh_price(g, level, variant)
        return prices[nxt] - prices[start] > fresh * (1 + 1e-9)

    def _topo_open(
        self, g: Group, level: Level, variant: Variant, pod: Pod, never: list[Claim], pricey: list[Claim]
    ) -> bool:
        """The first open claim, fewest pods first, that takes the pod; ``never`` collects claims that can
        never take a pod of this group at this level (restored to the heap by the caller)."""
        for tg in level.host_affinity:
            if tg.total > 0:
                # Only nodes with a matching pod qualify: look them up instead of walking the heap.
                hosts = [self.claim_by_host[h] for h, n in tg.counts.items() if n > 0 and h in self.claim_by_host]
                for claim in sorted(hosts, key=lambda c: (len(c.pods), c.index)):
                    if claim.closed:
                        continue
                    outcome = self._try_claim(claim, g, level, variant, pod)
                    if outcome == PLACED:
                        if claim.in_heap is not None:
                            self._push(claim)
                        return True
                    if outcome == PRICEY and claim not in pricey:
                        pricey.append(claim)
                return False
        later: list[Claim] = []
        placed = False
        heaps = self._candidate_heaps(g, level)
        while True:
            popped = self._pop(heaps)
            if popped is None:
                break
            outcome = self._try_claim(popped, g, level, variant, pod)
            if outcome == PLACED:
                self._push(popped)
                placed = True
                break
            (later if outcome == NOT_NOW else never).append(popped)
            if outcome == PRICEY:
                pricey.append(popped)
        for claim in later:
            self._push(claim)
        return placed

    def _topo_new(self, g: Group, level: Level, variant: Variant, pod: Pod) -> list[str]:
        """Open a claim for one pod from the first NodePool that can take it; the reasons when none can."""
        why: list[str] = []
        for table in self.tables:
            base = self._pool_offer(table, g, variant, level.pns)
            if isinstance(base, str):
                why.append(f'incompatible with nodepool "{table.name}": {base}')
                continue
            fitting = self._fitting(table, g, base)
            dom = {
                k: (
                    frozenset((f"hostname-placeholder-{len(self.claims):05d}",))
                    if k == HOSTNAME
                    else self._domain_values(table, base.reqs, base.sig, k, fitting, g.vec)
                )
                for k in level.keys
            }
            allowed = self._allowed(g, level, dom, None)
            if isinstance(allowed, tuple):
                why.append(f'incompatible with nodepool "{table.name}": {allowed[0]}')
                continue
            pins = self._pins(level, dom, allowed)
            chosen = variant.pinned(pins) if pins else variant
            offer = self._pool_offer(table, g, chosen, level.pns) if pins else base
            if isinstance(offer, str):
                why.append(f'incompatible with nodepool "{table.name}": {offer}')
                continue
            result = self._open(table, g, chosen, offer, [pod])
            if isinstance(result, str):
                why.append(result)
                continue
            return []
        return why or [NO_NODEPOOLS]

    def _fitting(self, table: PoolTable, g: Group, offer: Offer) -> list[int]:
        """The offer's types that fit one pod of the group on an empty node (domains must have one)."""
        if offer.fitting is None:
            zero = [0] * len(self.index)
            offer.fitting = [t for t in offer.types if fit_count(table.avail[t], zero, g.need) >= 1]
        return offer.fitting

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
        variants = g.levels[-1].variants
        if not variants:
            return "every required nodeSelectorTerm is empty and matches no node"
        if len(variants) == 1:
            return "; ".join(reasons[0][1]) if reasons else "no capacity"
        return "; ".join(f"nodeSelectorTerm {vi}: " + "; ".join(why) for vi, why in reasons)

    # -- result ------------------------------------------------------------------------------------------

    # -- repacking ---------------------------------------------------------------------------------------

    def _repack(self) -> None:
        """Re-deal topology-neutral pods among NodeClaims with identical requirements when that is cheaper.

        Karpenter's greedy fills one NodeClaim with the largest pods first (the queue is sorted by cpu), so a
        big claim ends full of cpu with memory to spare while a later one is the opposite; both launch the
        largest type. Here claims that hold only pods no topology constraint refers to, from one NodePool
        with equal requirements (no limits, no minValues), are re-dealt: the fewest claims their total fits
        in (then one more, …), each pod, largest first, to the claim whose dominant share grows least. The
        new plan replaces the old one only when its cheapest launchable types cost less.
        """
        pools: dict[tuple[int, rq.Signature], list[Claim]] = {}
        for claim in self.claims:
            if claim.neutral and claim.pods and not claim.limited and not min_values_keys(claim.reqs):
                pools.setdefault((claim.table.order, claim.sig), []).append(claim)
        for claims in pools.values():
            if len(claims) > 1:
                self._repack_pool(claims)

    def _price_of(self, claim: Claim, used: Sequence[int]) -> float:
        """USD/hour of the cheapest candidate type whose allocatable fits ``used`` (inf when none)."""
        table = claim.table
        for t in table.by_price(claim.reqs, claim.sig):
            if all(a >= u for a, u in zip(table.avail[t], used, strict=True)):
                return table.price(t, claim.reqs)
        return float("inf")

    def _repack_pool(self, claims: list[Claim]) -> None:
        first = claims[0]
        table = first.table
        front = self._frontier(table, first.reqs, first.sig)
        avail = table.avail
        dims = range(len(self.index))
        biggest = [max((avail[t][i] for t in front), default=0) for i in dims]
        items = [(g, pod) for c in claims for g, pods in c.batches for pod in pods]
        total = [sum(g.vec[i] for g, _ in items) for i in dims]
        if any(total[i] > 0 and biggest[i] <= 0 for i in dims):
            return
        scale = [1.0 / b if b > 0 else 0.0 for b in biggest]

        def share(g: Group) -> float:
            return max(g.vec[i] * scale[i] for i in dims)

        items.sort(key=lambda item: -share(item[0]))
        old_cost = sum(self._price_of(c, c.used) for c in claims)
        least = max(1, max(-(-total[i] // biggest[i]) for i in dims if biggest[i] > 0))
        for n in range(least, len(claims) + 1):
            plan = self._deal(items, n, front, avail, scale)
            if plan is None:
                continue
            bins, members = plan
            cost = sum(self._price_of(first, used) for used in bins)
            if cost < old_cost * (1 - 1e-9):
                self._apply_repack(claims, bins, members)
            return

    def _deal(
        self,
        items: list[tuple[Group, Pod]],
        n: int,
        front: list[int],
        avail: Sequence[Vector],
        scale: list[float],
    ) -> tuple[list[list[int]], list[list[tuple[Group, Pod]]]] | None:
        """Deal items to ``n`` bins, each to the bin whose dominant share grows least; None if one fits none."""
        dims = range(len(self.index))
        bins = [[0] * len(self.index) for _ in range(n)]
        shares = [0.0] * n
        members: list[list[tuple[Group, Pod]]] = [[] for _ in range(n)]
        for g, pod in items:
            vec = g.vec
            best: tuple[float, float, int] | None = None
            for b in range(n):
                used = bins[b]
                grown = max((used[i] + vec[i]) * scale[i] for i in dims)
                if grown > 1.0 or (best is not None and (grown - shares[b], grown) >= best[:2]):
                    continue
                if any(all(avail[t][i] >= used[i] + vec[i] for i in dims) for t in front):
                    best = (grown - shares[b], grown, b)
            if best is None:
                return None
            b = best[2]
            for i in dims:
                bins[b][i] += vec[i]
            shares[b] = best[1]
            members[b].append((g, pod))
        return bins, members

    def _apply_repack(self, claims: list[Claim], bins: list[list[int]], members: list[list[tuple[Group, Pod]]]) -> None:
        for j, claim in enumerate(claims):
            if j < len(bins):
                claim.used = bins[j]
                claim.pods = [pod for _, pod in members[j]]
                claim.batches = []
            else:
                claim.pods, claim.batches = [], []

    def _result(self) -> SchedulingResult:
        self._repack()
        new: list[NewNodeClaim] = []
        for claim in self.claims:
            if not claim.pods:
                continue
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
        table, reqs, used, avail = claim.table, claim.reqs, claim.used, claim.table.avail
        members = set(claim.types) if claim.limited else None
        priced: list[int] = []
        for t in table.by_price(reqs, claim.sig):
            if (members is None or t in members) and all(a >= u for a, u in zip(avail[t], used, strict=True)):
                priced.append(t)
                if len(priced) == MAX_INSTANCE_TYPES:
                    break
        for key, n in min_values_keys(reqs):
            values: set[str] = set()
            for t in priced:
                values |= table.values_of(t, key, reqs)
            if len(values) < n:
                return f"minValues {n} for {key} not met within the {MAX_INSTANCE_TYPES} cheapest instance types"
        out = dict(reqs)
        names = tuple(table.names[t] for t in priced)
        out.pop(wk.LABEL_INSTANCE_TYPE, None)
        shapes = {table.offer_shape[t]: t for t in priced}
        for key in (wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE):
            offered: set[str] = set()
            for shape, t in shapes.items():
                cache_key = (table.order, shape, claim.sig, key)
                found = self._offered.get(cache_key)
                if found is None:
                    found = self._offered[cache_key] = table.offering_values(t, key, reqs)
                offered |= found
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
    *,
    preference_policy: str = RESPECT,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
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

    Returns:
        The new NodeClaims (instance types cheapest first, at most 60), the pods placed per existing node
        name, and for every pod placed nowhere a message naming, per NodePool, the constraint that failed.

    Never raises for unschedulable input; it is pure and deterministic.
    """
    return Solver(pods, nodepools, existing, daemonsets, preference_policy, namespace_labels).run()


__all__ = ["IGNORE", "MAX_INSTANCE_TYPES", "RESPECT", "by_weight", "is_restricted_node_label", "solve"]
