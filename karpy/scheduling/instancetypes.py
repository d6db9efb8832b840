"""Per-NodePool instance-type tables: requirement/offering viability, DaemonSet overhead, allocatable vectors.

Built once per :func:`karpy.scheduling.scheduler.solve` call for each NodePool. Resources are dense integer
vectors over the solve's resource index (the resource names any pod or DaemonSet requests), so a fit test is
a handful of integer comparisons instead of dict merges. Which types a requirement set allows is cached by
the set's :func:`~karpy.scheduling.requirements.signature`: pods of one workload share requirement sets, so
each distinct set is evaluated against the catalogue once (Karpenter ``filterInstanceTypesByRequirements``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from karpy.apis import labels as wk
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling import requirements as rq
from karpy.scheduling.model import IN, DaemonSet, HostPort, NodePool, Pod, Requirement
from karpy.scheduling.taints import untolerated

# A reserved offering's capacity reservation (Karpenter ``ReservedCapacityLabels``): its id, type and
# interruptible flag; every other offering has none of them (DoesNotExist).
RESERVATION_KEYS = (
    wk.LABEL_CAPACITY_RESERVATION_ID,
    wk.LABEL_CAPACITY_RESERVATION_TYPE,
    wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
)
NO_RESERVATION: tuple[str, str, str] = ("", "", "")
# Keys whose values come from a type's offerings rather than its labels.
OFFERING_KEYS = frozenset({wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE_ID, *RESERVATION_KEYS})
# AWS defines every ``karpenter.k8s.aws/instance-*`` key on every type, as DoesNotExist when the type lacks
# the feature (no GPU, no local NVMe): a type without such a label satisfies only NotIn/DoesNotExist.
TYPE_LABEL_PREFIX = "karpenter.k8s.aws/instance-"

Vector = tuple[int, ...]


def pod_requirement_sets(pod: Pod) -> list[tuple[Requirement, ...]]:
    """The pod's alternatives: nodeSelector AND one required nodeSelectorTerm each (terms are ORed).

    Without required affinity there is one alternative, the nodeSelector alone. An empty term matches no
    node (Kubernetes), so it yields no alternative.
    """
    selector = tuple(Requirement(k, "In", (v,)) for k, v in sorted(pod.node_selector.items()))
    if not pod.required_terms:
        return [selector]
    return [selector + term for term in pod.required_terms if term]


def pod_matches_labels(pod: Pod, labels: Mapping[str, str]) -> bool:
    """Kubernetes NodeAffinity filter: nodeSelector matches and at least one required term matches."""
    if not rq.matches((Requirement(k, "In", (v,)) for k, v in pod.node_selector.items()), labels):
        return False
    return not pod.required_terms or any(term and rq.matches(term, labels) for term in pod.required_terms)


def requests_vector(pod: Pod, index: Sequence[str]) -> Vector:
    """A pod's requests over ``index``; every pod takes one ``pods`` slot even if its requests omit it."""
    requests = pod.requests
    out = [requests.get(n, 0) for n in index]
    for i, n in enumerate(index):
        if n == wk.RESOURCE_PODS and out[i] < 1:
            out[i] = 1
    return tuple(out)


def type_labels(it: InstanceType) -> dict[str, str]:
    """The type's labels, with ``node.kubernetes.io/instance-type`` filled from its name when absent."""
    if wk.LABEL_INSTANCE_TYPE in it.labels:
        return dict(it.labels)
    return {**it.labels, wk.LABEL_INSTANCE_TYPE: it.name}


def labels_allow(labels: Mapping[str, str], reqs: rq.Reqs) -> bool:
    """Type-level label compatibility (Karpenter ``InstanceType.Requirements.Intersects``).

    Offering keys are checked against offerings instead; keys the type does not define are allowed, except
    ``karpenter.k8s.aws/instance-*`` keys, which AWS defines on every type (DoesNotExist when absent).
    """
    for key, req in reqs.items():
        if key in OFFERING_KEYS:
            continue
        value = labels.get(key)
        if value is not None:
            if not req.has(value):
                return False
        elif key.startswith(TYPE_LABEL_PREFIX) and not req.allows_absent():
            return False
    return True


def reservation_of(offering: Offering) -> tuple[str, str, str]:
    """The values of :data:`RESERVATION_KEYS` on ``offering`` (:data:`NO_RESERVATION` unless reserved)."""
    if offering.capacity_type != wk.CAPACITY_TYPE_RESERVED or not offering.reservation_id:
        return NO_RESERVATION
    interruptible = "true" if offering.reservation_interruptible else "false"
    return (offering.reservation_id, offering.reservation_type or "default", interruptible)


def offering_allowed(
    zone: str, capacity_type: str, zone_id: str, reqs: rq.Reqs, reservation: tuple[str, str, str] = NO_RESERVATION
) -> bool:
    """True when an offering's zone, capacity type, zone id and capacity reservation (id, type, interruptible;
    absent unless reserved) satisfy ``reqs``."""
    z = reqs.get(wk.LABEL_ZONE)
    if z is not None and not z.has(zone):
        return False
    c = reqs.get(wk.LABEL_CAPACITY_TYPE)
    if c is not None and not c.has(capacity_type):
        return False
    zi = reqs.get(wk.LABEL_ZONE_ID)
    if zi is not None and not zi.has(zone_id):
        return False
    for key, value in zip(RESERVATION_KEYS, reservation, strict=True):
        r = reqs.get(key)
        if r is not None and not (r.has(value) if value else r.allows_absent()):
            return False
    return True


# Catalogues and resource views kept across solves (least recently used dropped beyond these counts), and how
# many requirement signatures one catalogue remembers before its per-signature caches are cleared.
MAX_CATALOGUES = 32
MAX_VIEWS = 8
MAX_SIGNATURES = 8192
# The keys an offering is filtered on, in the order of :func:`offer_key`.
OFFER_FILTER_KEYS = (wk.LABEL_ZONE, wk.LABEL_CAPACITY_TYPE, wk.LABEL_ZONE_ID, *RESERVATION_KEYS)
OfferKey = tuple[object, ...]
Offer = tuple[str, str, str, float, tuple[str, str, str]]


def offer_key(reqs: rq.Reqs) -> OfferKey:
    """Hashable identity of the part of ``reqs`` that filters offerings (:data:`OFFER_FILTER_KEYS`)."""
    return tuple(None if (r := reqs.get(k)) is None else r.sig for k in OFFER_FILTER_KEYS)


class Catalogue:
    """What a solve needs about a list of instance types that depends on nothing else, shared across solves.

    One catalogue exists per list of :class:`~karpy.cloudprovider.types.InstanceType` objects (by identity,
    see :func:`catalogue_for`): NodePools with the same types share it, and a new list (a NodeOverlay
    applied, an offering marked unavailable, a new price) is a new catalogue, because instance types are
    immutable and every change builds new objects (``attrs.evolve``). Which types a requirement set allows
    and their prices depend only on the types and the set, so they are remembered per requirement
    :func:`~karpy.scheduling.requirements.signature` for every later solve (Karpenter recomputes
    ``filterInstanceTypesByRequirements`` per NodeClaim; a controller's solves see the same catalogue over
    and over).

    Attributes:
        types, labels, names: the instance types, their effective labels and names.
        offerings: per type, its available offerings as ``(zone, capacity type, zone id, price, reservation)``.
        offer_shape: per type, an id shared by types with the same available offerings (prices aside).
        capacity: per type, the capacity used against NodePool limits (``nodes`` = 1).
    """

    __slots__ = (
        "_by_price",
        "_domains",
        "_offered",
        "_prices",
        "_viable",
        "capacity",
        "labels",
        "max_caps",
        "names",
        "offer_shape",
        "offerings",
        "types",
        "views",
    )

    def __init__(self, types: Sequence[InstanceType]) -> None:
        self.types = tuple(types)
        self.labels = [type_labels(it) for it in self.types]
        self.names = [it.name for it in self.types]
        self.max_caps: dict[rq.Signature, dict[str, int]] = {}
        self.offerings: list[list[Offer]] = [
            [(o.zone, o.capacity_type, o.zone_id, o.price, reservation_of(o)) for o in it.offerings if o.available]
            for it in self.types
        ]
        shapes: dict[tuple[tuple[str, str, str, tuple[str, str, str]], ...], int] = {}
        self.offer_shape = [
            shapes.setdefault(tuple(sorted((z, c, zi, r) for z, c, zi, _, r in offs)), len(shapes))
            for offs in self.offerings
        ]
        self.capacity = [{**it.capacity, "nodes": 1} for it in self.types]
        self.views: dict[tuple[object, ...], ResourceView] = {}
        self._viable: dict[rq.Signature, list[int]] = {}
        self._by_price: dict[rq.Signature, tuple[list[int], list[float]]] = {}
        self._prices: dict[OfferKey, dict[int, float]] = {}
        self._offered: dict[tuple[OfferKey, int, str], frozenset[str]] = {}
        self._domains: dict[tuple[rq.Signature, str], frozenset[str]] = {}

    def _bound(self) -> None:
        """Forget the per-signature answers once there are too many (a long-running controller)."""
        if len(self._viable) > MAX_SIGNATURES or len(self._offered) > 8 * MAX_SIGNATURES:
            self._viable.clear()
            self._by_price.clear()
            self._prices.clear()
            self._offered.clear()
            self._domains.clear()
            for view in self.views.values():
                view.frontiers.clear()
                view.fitting.clear()

    def viable(self, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
        """Indexes of the types whose labels satisfy ``reqs`` and that have an allowed available offering."""
        cached = self._viable.get(sig)
        if cached is None:
            self._bound()
            cached = [
                i
                for i, labels in enumerate(self.labels)
                if labels_allow(labels, reqs)
                and any(offering_allowed(z, c, zi, reqs, r) for z, c, zi, _, r in self.offerings[i])
            ]
            self._viable[sig] = cached
        return cached

    def price_list(self, reqs: rq.Reqs, sig: rq.Signature) -> tuple[list[int], list[float]]:
        """Viable type indexes cheapest allowed available offering first, ties by name, and those prices."""
        cached = self._by_price.get(sig)
        if cached is None:
            prices = self.prices(reqs)
            order = sorted(self.viable(reqs, sig), key=lambda i: (prices(i), self.names[i]))
            cached = self._by_price[sig] = (order, [prices(i) for i in order])
        return cached

    def prices(self, reqs: rq.Reqs) -> Callable[[int], float]:
        """Type index → cheapest offering ``reqs`` allows, USD/hour (inf when none); memoised per offer key."""
        okey = offer_key(reqs)
        memo = self._prices.get(okey)
        if memo is None:
            memo = self._prices[okey] = {}
        offerings = self.offerings

        def price(i: int) -> float:
            hit = memo.get(i)
            if hit is None:
                allowed = [p for z, c, zi, p, r in offerings[i] if offering_allowed(z, c, zi, reqs, r)]
                hit = memo[i] = min(allowed) if allowed else float("inf")
            return hit

        return price

    def offering_values(self, i: int, key: str, reqs: rq.Reqs) -> frozenset[str]:
        """Values of an offering key (zone, capacity type, zone id, reservation) over type ``i``'s allowed
        offerings (memoised per offer key)."""
        cache_key = (offer_key(reqs), i, key)
        hit = self._offered.get(cache_key)
        if hit is None:
            pos = {wk.LABEL_ZONE: 0, wk.LABEL_CAPACITY_TYPE: 1, wk.LABEL_ZONE_ID: 2}.get(key)
            allowed = [(z, c, zi, *r) for z, c, zi, _, r in self.offerings[i] if offering_allowed(z, c, zi, reqs, r)]
            if pos is None:  # a reservation key: only reserved offerings have a value
                pos = 3 + RESERVATION_KEYS.index(key)
            hit = self._offered[cache_key] = frozenset(o[pos] for o in allowed if o[pos])
        return hit

    def domain_values(self, reqs: rq.Reqs, sig: rq.Signature, key: str) -> frozenset[str]:
        """The values of ``key`` a node of a viable type may get under ``reqs`` (offerings or type labels)."""
        hit = self._domains.get((sig, key))
        if hit is None:
            hit = self._domains[(sig, key)] = self.values_over(self.viable(reqs, sig), reqs, key)
        return hit

    def values_over(
        self, types: Iterable[int], reqs: rq.Reqs, key: str, most: frozenset[str] | None = None
    ) -> frozenset[str]:
        """The values of ``key`` nodes of ``types`` may get under ``reqs``; ``most``, when given, holds every
        value they could give (the viable types' values): the search stops once it has them all."""
        values: set[str] = set()
        if key in OFFERING_KEYS:
            for t in types:
                values |= self.offering_values(t, key, reqs)
                if most is not None and len(values) >= len(most):
                    return most
            return frozenset(values)
        req = reqs.get(key)
        values = {self.labels[t][key] for t in types if key in self.labels[t]}
        if req is not None and req.operator() == IN:
            values = (values & req.values) if values else set(req.values)
        elif req is not None:
            values = {v for v in values if req.has(v)}
        return frozenset(values)

    def view(self, index: Sequence[str], daemons: Sequence[DaemonSet]) -> ResourceView:
        """The allocatable vectors over ``index`` net of ``daemons`` (those that run on the NodePool), shared
        across solves with the same resource index and the same DaemonSet objects."""
        key = (tuple(index), tuple(id(d) for d in daemons))
        hit = self.views.pop(key, None)
        if hit is None:
            hit = ResourceView(self, index, daemons)
            while len(self.views) >= MAX_VIEWS:
                del self.views[next(iter(self.views))]
        self.views[key] = hit  # most recently used last
        return hit


class ResourceView:
    """Per type of a :class:`Catalogue`: the DaemonSet overhead, allocatable minus it, and the DaemonSets'
    host ports, over one resource index; and the Pareto frontiers of viable types per signature.

    Holds the DaemonSet objects it was built from, so their ids (its cache key) stay theirs while it lives.
    """

    __slots__ = (
        "avail",
        "cheapest",
        "daemon_ports",
        "daemons",
        "fitting",
        "frontiers",
        "overhead",
        "steps",
        "uniform_overhead",
    )

    def __init__(self, cat: Catalogue, index: Sequence[str], daemons: Sequence[DaemonSet]) -> None:
        self.daemons = tuple(daemons)
        overhead: list[Vector] = []
        avail: list[Vector] = []
        ports: list[tuple[HostPort, ...]] = []
        zero = tuple(0 for _ in index)
        for it, labels in zip(cat.types, cat.labels, strict=True):
            vec = zero
            held: tuple[HostPort, ...] = ()
            for d in self.daemons:
                if pod_matches_type(d.pod, labels):
                    dvec = requests_vector(d.pod, index)
                    vec = tuple(a + b for a, b in zip(vec, dvec, strict=True))
                    held += d.pod.host_ports
            overhead.append(vec)
            ports.append(held)
            alloc = it.allocatable
            avail.append(tuple(alloc.get(name, 0) - o for name, o in zip(index, vec, strict=True)))
        self.overhead = overhead
        self.uniform_overhead = overhead[0] if overhead and all(o == overhead[0] for o in overhead) else None
        self.avail = avail
        self.daemon_ports = ports
        self.frontiers: dict[rq.Signature, list[int]] = {}
        self.fitting: dict[tuple[rq.Signature, tuple[tuple[int, int], ...]], list[int]] = {}
        self.steps: dict[rq.Signature, list[int]] = {}
        self.cheapest: dict[tuple[rq.Signature, tuple[tuple[int, int], ...]], float | None] = {}


_CATALOGUES: dict[tuple[int, ...], Catalogue] = {}


def catalogue_for(types: Sequence[InstanceType]) -> Catalogue:
    """The shared :class:`Catalogue` of exactly these instance type objects (in this order).

    Keyed by the objects' ids: the catalogue holds the objects, so an id in its key cannot be reused by
    another object while it is cached. Instance types are immutable (a changed type is a new object), so a
    hit is always up to date; at most :data:`MAX_CATALOGUES` are kept, least recently used dropped first.
    """
    key = tuple(map(id, types))
    hit = _CATALOGUES.pop(key, None)
    if hit is None:
        hit = Catalogue(types)
        while len(_CATALOGUES) >= MAX_CATALOGUES:
            del _CATALOGUES[next(iter(_CATALOGUES))]
    _CATALOGUES[key] = hit  # most recently used last
    return hit


def clear_caches() -> None:
    """Forget every shared catalogue (tests; memory)."""
    _CATALOGUES.clear()


class PoolTable:
    """Everything the scheduler needs about one NodePool in one solve.

    The instance-type tables come from the shared :class:`Catalogue` of the NodePool's types and its
    :class:`ResourceView` for the solve's resource index and DaemonSets, so a solve on an unchanged catalogue
    builds nothing per type.

    Attributes:
        pool, order: the NodePool and its position in weight order.
        reqs: the NodeClaim template requirements: NodePool requirements, ``key In [value]`` per template
            label, and ``karpenter.sh/nodepool In [name]`` (Karpenter ``NewNodeClaimTemplate``).
        cat: the shared catalogue; ``types``, ``labels``, ``names``, ``offerings``, ``offer_shape`` and
            ``capacity`` are its tables (read only).
        avail: per type, allocatable minus the DaemonSet overhead on that type, over the resource index.
        overhead: per type, the DaemonSet overhead vector.
        daemon_ports: per type, the host ports of the DaemonSet pods that run on that type (Karpenter
            ``DaemonOverheadGroup.HostPortUsage``: a DaemonSet limited to some types, by architecture for
            example, holds its ports on those types only).
    """

    def __init__(self, pool: NodePool, order: int, index: Sequence[str], daemonsets: Sequence[DaemonSet]) -> None:
        self.pool = pool
        self.order = order
        self.name = pool.name
        reqs = rq.build(pool.requirements)
        for req in rq.from_labels(pool.labels).values():
            rq.add(reqs, req)
        rq.add(reqs, rq.Req(wk.LABEL_NODEPOOL, False, frozenset((pool.name,))))
        self.reqs = reqs
        cat = self.cat = catalogue_for(pool.instance_types)
        self.types = cat.types
        self.labels = cat.labels
        self.names = cat.names
        self.offerings = cat.offerings
        self.offer_shape = cat.offer_shape
        self.capacity = cat.capacity
        view = self.view = cat.view(index, [d for d in daemonsets if self._daemon_runs_here(d)])
        self.overhead = view.overhead
        # The DaemonSet overhead when it is the same on every type (no DaemonSet, or one that runs everywhere).
        self.uniform_overhead: Vector | None = view.uniform_overhead
        self.avail = view.avail
        self.daemon_ports = view.daemon_ports

    def _daemon_runs_here(self, daemon: DaemonSet) -> bool:
        """Karpenter ``isDaemonPodCompatible``: tolerates the NodePool taints, requirements compatible."""
        if untolerated(daemon.pod.tolerations, self.pool.taints) is not None:
            return False
        return any(rq.compatible(self.reqs, rq.build(alt)) is None for alt in pod_requirement_sets(daemon.pod))

    def viable(self, reqs: rq.Reqs, sig: rq.Signature | None = None) -> list[int]:
        """Indexes of the types whose labels satisfy ``reqs`` and that have an allowed available offering."""
        return self.cat.viable(reqs, rq.signature(reqs) if sig is None else sig)

    def by_price(self, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
        """Viable type indexes, cheapest allowed available offering first, ties by name (cached per set)."""
        return self.cat.price_list(reqs, sig)[0]

    def price_list(self, reqs: rq.Reqs, sig: rq.Signature) -> tuple[list[int], list[float]]:
        """:meth:`by_price` and the price of each (USD/hour)."""
        return self.cat.price_list(reqs, sig)

    def price_steps(self, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
        """Positions in :meth:`by_price` of the types no cheaper (earlier) type has at least as much of every
        resource as (:func:`price_steps`; cached with the resource view)."""
        cached = self.view.steps.get(sig)
        if cached is None:
            cached = self.view.steps[sig] = price_steps(self.avail, self.by_price(reqs, sig))
        return cached

    def cheapest_fit(self, reqs: rq.Reqs, sig: rq.Signature, need: tuple[tuple[int, int], ...]) -> float | None:
        """USD/hour of the cheapest viable type whose allocatable holds ``need`` (``(resource index, amount)``
        pairs) on an empty node, None when none does; cached with the resource view."""
        key = (sig, need)
        if key in self.view.cheapest:
            return self.view.cheapest[key]
        order, prices = self.price_list(reqs, sig)
        avail = self.avail
        found: float | None = None
        for j, t in enumerate(order):
            a = avail[t]
            if all(a[i] >= amount for i, amount in need):
                found = prices[j]
                break
        self.view.cheapest[key] = found
        return found

    def frontier(self, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
        """The Pareto-maximal viable types by allocatable (see :func:`karpy.scheduling.state.frontier`)."""
        cached = self.view.frontiers.get(sig)
        if cached is None:
            cached = self.view.frontiers[sig] = pareto_frontier(self.avail, self.viable(reqs, sig))
        return cached

    def fitting(self, reqs: rq.Reqs, sig: rq.Signature, need: Sequence[tuple[int, int]]) -> list[int]:
        """The viable types (in :meth:`viable` order) whose allocatable holds ``need`` (``(resource index,
        amount)`` pairs) on an empty node; cached with the resource view."""
        key = (sig, tuple(need))
        cached = self.view.fitting.get(key)
        if cached is None:
            avail = self.avail
            cached = self.view.fitting[key] = [
                t for t in self.viable(reqs, sig) if all(avail[t][i] >= amount for i, amount in need)
            ]
        return cached

    def label_compatible(self, reqs: rq.Reqs) -> list[int]:
        """Indexes of the types whose labels satisfy ``reqs`` (offerings ignored; for explanations)."""
        return [i for i, labels in enumerate(self.labels) if labels_allow(labels, reqs)]

    def price(self, i: int, reqs: rq.Reqs) -> float:
        """Cheapest allowed available offering of type ``i``, USD/hour (inf when none)."""
        return self.cat.prices(reqs)(i)

    def offering_values(self, i: int, key: str, reqs: rq.Reqs) -> frozenset[str]:
        """Values of an offering key (zone, capacity type, zone id) over type ``i``'s allowed offerings."""
        return self.cat.offering_values(i, key, reqs)

    def values_of(self, i: int, key: str, reqs: rq.Reqs) -> frozenset[str]:
        """The values type ``i`` contributes to ``key`` (for minValues)."""
        if key in OFFERING_KEYS:
            return self.offering_values(i, key, reqs)
        value = self.labels[i].get(key)
        return frozenset((value,)) if value is not None else frozenset()

    def fits_limits(self, i: int, remaining: Mapping[str, int]) -> bool:
        """True when type ``i``'s capacity stays within the NodePool's remaining limits."""
        cap = self.capacity[i]
        return all(cap.get(k, 0) <= v for k, v in remaining.items())


def pareto_frontier(avail: Sequence[Vector], types: Sequence[int]) -> list[int]:
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


def price_steps(avail: Sequence[Vector], order: Sequence[int]) -> list[int]:
    """Positions in ``order`` (types cheapest first) of the types that no earlier type dominates (has at
    least as much of every resource).

    A dominated type is never the first in ``order`` to fit some requests: the type dominating it fits them
    too and comes earlier. So a first-fit search only needs these positions (the cheapest of each shape: a
    few dozen of the hundreds of EC2 types).
    """
    front: list[Vector] = []  # the Pareto-maximal types seen so far: they dominate whatever came before
    out: list[int] = []
    for j, t in enumerate(order):
        a = avail[t]
        if any(covers(k, a) for k in front):
            continue
        front = [k for k in front if not covers(a, k)]
        front.append(a)
        out.append(j)
    return out


def covers(a: Sequence[int], b: Sequence[int]) -> bool:
    """At least as much of every resource in ``a`` as in ``b``."""
    for x, y in zip(a, b):  # noqa: B905, SIM110 (equal lengths; a loop is faster than all() here)
        if x < y:
            return False
    return True


def pod_matches_type(pod: Pod, labels: Mapping[str, str]) -> bool:
    """True when one of the pod's requirement alternatives is compatible with a type's labels."""
    return any(labels_allow(labels, rq.build(alt)) for alt in pod_requirement_sets(pod))


def min_values_keys(reqs: rq.Reqs) -> list[tuple[str, int]]:
    """``(key, minValues)`` of the requirements that carry minValues."""
    for r in reqs.values():
        if r.min_values:
            break
    else:
        return []
    return [(k, r.min_values) for k, r in sorted(reqs.items()) if r.min_values]


def resource_index(pods: Iterable[Pod], daemonsets: Iterable[DaemonSet]) -> list[str]:
    """The resource names that matter in a solve: everything requested, always ``pods``; cpu/memory first."""
    names = {"pods"}
    for p in pods:
        names.update(p.requests)
    for d in daemonsets:
        names.update(d.pod.requests)
    head = [n for n in (wk.RESOURCE_CPU, wk.RESOURCE_MEMORY, wk.RESOURCE_PODS) if n in names]
    return head + sorted(names - set(head))
