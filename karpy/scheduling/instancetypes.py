"""Per-NodePool instance-type tables: requirement/offering viability, DaemonSet overhead, allocatable vectors.

Built once per :func:`karpy.scheduling.scheduler.solve` call for each NodePool. Resources are dense integer
vectors over the solve's resource index (the resource names any pod or DaemonSet requests), so a fit test is
a handful of integer comparisons instead of dict merges. Which types a requirement set allows is cached by
the set's :func:`~karpy.scheduling.requirements.signature`: pods of one workload share requirement sets, so
each distinct set is evaluated against the catalogue once (Karpenter ``filterInstanceTypesByRequirements``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from karpy.apis import labels as wk
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling import requirements as rq
from karpy.scheduling.model import DaemonSet, HostPort, NodePool, Pod, Requirement
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
    return tuple(max(1, pod.requests.get(n, 0)) if n == wk.RESOURCE_PODS else pod.requests.get(n, 0) for n in index)


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


class PoolTable:
    """Everything the scheduler needs about one NodePool, precomputed once per solve.

    Attributes:
        pool, order: the NodePool and its position in weight order.
        reqs: the NodeClaim template requirements: NodePool requirements, ``key In [value]`` per template
            label, and ``karpenter.sh/nodepool In [name]`` (Karpenter ``NewNodeClaimTemplate``).
        types, labels: the NodePool's instance types and their effective labels.
        avail: per type, allocatable minus the DaemonSet overhead on that type, over the resource index.
        overhead: per type, the DaemonSet overhead vector.
        capacity: per type, the capacity used against NodePool limits (``nodes`` = 1).
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
        self.types = pool.instance_types
        self.labels = [type_labels(it) for it in self.types]
        self.names = [it.name for it in self.types]
        # Available offerings as (zone, capacity type, zone id, price, reservation), per type.
        self.offerings = [
            [(o.zone, o.capacity_type, o.zone_id, o.price, reservation_of(o)) for o in it.offerings if o.available]
            for it in self.types
        ]
        # Types with the same available (zone, capacity type, zone id, reservation) offerings share an
        # ``offer_shape``.
        shapes: dict[tuple[tuple[str, str, str, tuple[str, str, str]], ...], int] = {}
        self.offer_shape = [
            shapes.setdefault(tuple(sorted((z, c, zi, r) for z, c, zi, _, r in offs)), len(shapes))
            for offs in self.offerings
        ]
        self.capacity = [{**it.capacity, "nodes": 1} for it in self.types]
        daemons = [d for d in daemonsets if self._daemon_runs_here(d)]
        overhead: list[Vector] = []
        avail: list[Vector] = []
        ports: list[tuple[HostPort, ...]] = []
        zero = tuple(0 for _ in index)
        for it, labels in zip(self.types, self.labels, strict=True):
            vec = zero
            held: tuple[HostPort, ...] = ()
            for d in daemons:
                if pod_matches_type(d.pod, labels):
                    dvec = requests_vector(d.pod, index)
                    vec = tuple(a + b for a, b in zip(vec, dvec, strict=True))
                    held += d.pod.host_ports
            overhead.append(vec)
            ports.append(held)
            alloc = it.allocatable
            avail.append(tuple(alloc.get(name, 0) - o for name, o in zip(index, vec, strict=True)))
        self.overhead = overhead
        self.avail = avail
        self.daemon_ports = ports
        self._viable: dict[rq.Signature, list[int]] = {}
        self._by_price: dict[rq.Signature, list[int]] = {}

    def _daemon_runs_here(self, daemon: DaemonSet) -> bool:
        """Karpenter ``isDaemonPodCompatible``: tolerates the NodePool taints, requirements compatible."""
        if untolerated(daemon.pod.tolerations, self.pool.taints) is not None:
            return False
        return any(rq.compatible(self.reqs, rq.build(alt)) is None for alt in pod_requirement_sets(daemon.pod))

    def viable(self, reqs: rq.Reqs, sig: rq.Signature | None = None) -> list[int]:
        """Indexes of the types whose labels satisfy ``reqs`` and that have an allowed available offering."""
        key = rq.signature(reqs) if sig is None else sig
        cached = self._viable.get(key)
        if cached is None:
            cached = [
                i
                for i, labels in enumerate(self.labels)
                if labels_allow(labels, reqs)
                and any(offering_allowed(z, c, zi, reqs, r) for z, c, zi, _, r in self.offerings[i])
            ]
            self._viable[key] = cached
        return cached

    def by_price(self, reqs: rq.Reqs, sig: rq.Signature) -> list[int]:
        """Viable type indexes, cheapest allowed available offering first, ties by name (cached per set)."""
        cached = self._by_price.get(sig)
        if cached is None:
            cached = sorted(self.viable(reqs, sig), key=lambda i: (self.price(i, reqs), self.names[i]))
            self._by_price[sig] = cached
        return cached

    def label_compatible(self, reqs: rq.Reqs) -> list[int]:
        """Indexes of the types whose labels satisfy ``reqs`` (offerings ignored; for explanations)."""
        return [i for i, labels in enumerate(self.labels) if labels_allow(labels, reqs)]

    def price(self, i: int, reqs: rq.Reqs) -> float:
        """Cheapest allowed available offering of type ``i``, USD/hour (inf when none)."""
        prices = [p for z, c, zi, p, r in self.offerings[i] if offering_allowed(z, c, zi, reqs, r)]
        return min(prices) if prices else float("inf")

    def offering_values(self, i: int, key: str, reqs: rq.Reqs) -> set[str]:
        """Values of an offering key (zone, capacity type, zone id) over type ``i``'s allowed offerings."""
        allowed = [(z, c, zi, *r) for z, c, zi, _, r in self.offerings[i] if offering_allowed(z, c, zi, reqs, r)]
        pos = {wk.LABEL_ZONE: 0, wk.LABEL_CAPACITY_TYPE: 1, wk.LABEL_ZONE_ID: 2}.get(key)
        if pos is None:  # a reservation key: only reserved offerings have a value
            pos = 3 + RESERVATION_KEYS.index(key)
        return {o[pos] for o in allowed if o[pos]}

    def values_of(self, i: int, key: str, reqs: rq.Reqs) -> set[str]:
        """The values type ``i`` contributes to ``key`` (for minValues)."""
        if key in OFFERING_KEYS:
            return self.offering_values(i, key, reqs)
        value = self.labels[i].get(key)
        return {value} if value is not None else set()

    def fits_limits(self, i: int, remaining: Mapping[str, int]) -> bool:
        """True when type ``i``'s capacity stays within the NodePool's remaining limits."""
        cap = self.capacity[i]
        return all(cap.get(k, 0) <= v for k, v in remaining.items())


def pod_matches_type(pod: Pod, labels: Mapping[str, str]) -> bool:
    """True when one of the pod's requirement alternatives is compatible with a type's labels."""
    return any(labels_allow(labels, rq.build(alt)) for alt in pod_requirement_sets(pod))


def min_values_keys(reqs: rq.Reqs) -> list[tuple[str, int]]:
    """``(key, minValues)`` of the requirements that carry minValues."""
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
