"""Pod equivalence groups in queue order, and each group's relaxation ladder.

Karpenter core ``pkg/controllers/provisioning/scheduling/queue.go`` orders pods by priority, then CPU and
memory descending (``byCPUAndMemoryDescending``); ``preferences.go`` (``Preferences.Relax``) relaxes a pod
that cannot schedule one preference at a time. Here pods that would be placed alike (equal requests,
requirements, tolerations, host ports, priority, topology constraints and topology membership) form one
:class:`Group`, queued in that order, and each group carries its ladder of :class:`Level` s up front.
"""

from __future__ import annotations

from collections.abc import Sequence

from karpy.apis import labels as wk
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import Vector, pod_requirement_sets, requests_vector
from karpy.scheduling.model import HostPort, Pod, Requirement, Toleration
from karpy.scheduling.state import HOSTNAME, SolveState
from karpy.scheduling.topology import AFFINITY, ANTI, INVERSE, SPREAD, TopoGroup
from karpy.scheduling.topologydomains import Spec, pod_spec


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

    __slots__ = (
        "cons",
        "first",
        "host_affinity",
        "host_blocks",
        "keys",
        "node_cache",
        "node_extra",
        "pns",
        "roles",
        "variants",
    )

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
        # Hostname constraints a node fails for good once it does (its counts only grow).
        self.host_blocks = [(g, role) for g, role in cons if role != AFFINITY and g.key == HOSTNAME]
        # Existing node index → why it is ruled out by labels, taints or volumes ("" when it is not).
        self.node_cache: dict[int, str] = {}


class Group:
    """Equivalent pods: same requests, requirements, tolerations, host ports, priority and topology."""

    __slots__ = (
        "fit_key",
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
        # Equal for groups whose pods fit the same claims and price the same new claim (requests,
        # tolerations, host ports): the key of a claim's memo of groups it is too pricey for.
        self.fit_key = 0


def variant_of(s: SolveState, raw: tuple[Requirement, ...]) -> Variant:
    hit = s.variants.get(raw)
    if hit is None:
        hit = s.variants[raw] = Variant(raw)
    return hit


def relaxation_levels(s: SolveState, sample: Pod, spec: Spec, inverse: tuple[int, ...]) -> list[Level]:
    """The relaxation ladder (Karpenter ``Preferences.Relax`` order; a single level under Ignore)."""
    bases = pod_requirement_sets(sample)
    volumes = [t for t in sample.volume_terms if t] or [()]
    inv = tuple((s.topo.groups[gid], INVERSE) for gid in inverse)

    def level(
        node: list[tuple[Requirement, ...]],
        aff: list[TopoGroup],
        anti: list[TopoGroup],
        anyway: list[TopoGroup],
        pns: bool,
    ) -> Level:
        extra = node[0] if node else ()
        variants = [variant_of(s, b + v + extra) for b in bases for v in volumes]
        cons = (
            tuple(spec.hard)
            + tuple((g, AFFINITY) for g in aff)
            + tuple((g, ANTI) for g in anti)
            + tuple((g, SPREAD) for g in anyway)
            + inv
        )
        return Level(variants, cons, pns, extra)

    if not s.respect:
        return [level([], [], [], [], False)]
    node = [t for _, t in sorted(sample.preferred_terms, key=lambda wt: -wt[0]) if t]
    aff, anti, anyway = list(spec.pref_affinity), list(spec.pref_anti), list(spec.anyway)
    pns = s.has_pns
    levels = [level(node, aff, anti, anyway, pns)]
    for ladder in (aff, anti, node, anyway):
        while ladder:
            ladder.pop(0)
            levels.append(level(node, aff, anti, anyway, pns))
    if pns:
        levels.append(level(node, aff, anti, anyway, False))
    return levels


def group_pods(s: SolveState, pods: Sequence[Pod]) -> list[Group]:
    """Equivalence groups in queue order: priority desc, cpu desc, memory desc, creation, name."""
    cpu = s.res_pos.get(wk.RESOURCE_CPU)
    mem = s.res_pos.get(wk.RESOURCE_MEMORY)
    ordered = sorted(pods, key=lambda p: (p.created, p.namespace, p.name, p.uid))
    cache: dict[tuple[object, ...], Spec] = {}
    specs = [pod_spec(s, p, cache) for p in ordered]
    groups: dict[tuple[object, ...], Group] = {}
    fit_keys: dict[tuple[object, ...], int] = {}
    # Groups that differ only in requests, host ports, priority or which groups select them (not in which
    # reverse anti-affinity) share their relaxation ladder: a Level depends on nothing else.
    ladders: dict[tuple[object, ...], list[Level]] = {}
    for pod, spec in zip(ordered, specs, strict=True):
        vec = requests_vector(pod, s.index)
        selects = s.topo.selecting(pod)
        inverse = tuple(gid for gid in selects if gid in s.inverse)
        key = (
            vec,
            tuple(sorted(pod.node_selector.items())),
            pod.required_terms,
            pod.preferred_terms if s.respect else (),
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
            group.fit_key = fit_keys.setdefault((vec, pod.tolerations, pod.host_ports), len(fit_keys))
            ladder_key = (*key[1:6], id(spec.canon), inverse)
            levels = ladders.get(ladder_key)
            if levels is None:
                levels = ladders[ladder_key] = relaxation_levels(s, pod, spec, inverse)
            group.levels = levels
            # Pods nothing topological refers to may be moved between equal NodeClaims (see repack.py).
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
