"""The working state one solve shares across its modules, and the small helpers they all use.

:class:`SolveState` holds what one call of :func:`karpy.scheduling.scheduler.solve` works on: the NodePool
tables, the existing capacity, the pod groups, the open NodeClaims and their heaps, the topology counts, the
NodePool limits still free, and the caches that make repeated questions cheap. The functions of
:mod:`~karpy.scheduling.scheduler`, :mod:`~karpy.scheduling.existingnode`, :mod:`~karpy.scheduling.nodeclaim`,
:mod:`~karpy.scheduling.topologydomains`, :mod:`~karpy.scheduling.queue`, :mod:`~karpy.scheduling.pricing`,
:mod:`~karpy.scheduling.explain` and :mod:`~karpy.scheduling.repack` take it as their first argument (``s``),
the way Karpenter's ``Scheduler`` struct (core ``pkg/controllers/provisioning/scheduling/scheduler.go``) is
the receiver its helpers share.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from karpy.apis import labels as wk
from karpy.scheduling import requirements as rq
from karpy.scheduling.instancetypes import PoolTable, Vector, pareto_frontier
from karpy.scheduling.model import HostPort, NewNodeClaim, Requirement
from karpy.scheduling.topology import Topology

if TYPE_CHECKING:
    from karpy.scheduling.existingnode import Slot
    from karpy.scheduling.nodeclaim import Candidates, Claim
    from karpy.scheduling.queue import Group, Variant

RESPECT: Final = "Respect"
IGNORE: Final = "Ignore"
# ``MIN_VALUES_POLICY``: Strict fails a NodeClaim whose minValues its instance types cannot meet; BestEffort
# lowers minValues to what they give (Karpenter ``options.MinValuesPolicy``).
STRICT: Final = "Strict"
BEST_EFFORT: Final = "BestEffort"
HOSTNAME = wk.LABEL_HOSTNAME
NO_NODEPOOLS = "no nodepools"
WILDCARD_IPS = frozenset({"", "0.0.0.0", "::"})
# The kube-scheduler Filter plugins an existing node's refusal of a pod is named after
# (:func:`karpy.scheduling.existingnode.slot_refusal`).
NODE_RESOURCES_FIT: Final = "NodeResourcesFit"
TAINT_TOLERATION: Final = "TaintToleration"
NODE_AFFINITY: Final = "NodeAffinity"
VOLUME_BINDING: Final = "VolumeBinding"
NODE_PORTS: Final = "NodePorts"
INTER_POD_AFFINITY: Final = "InterPodAffinity"
POD_TOPOLOGY_SPREAD: Final = "PodTopologySpread"
PORTS_IN_USE: Final = (f"{NODE_PORTS}: a requested host port is already in use on the node", True)


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


def frontier(avail: Sequence[Vector], types: Sequence[int]) -> list[int]:
    """The Pareto-maximal types (:func:`karpy.scheduling.instancetypes.pareto_frontier`)."""
    return pareto_frontier(avail, types)


class SolveState:
    """One solve's working state (what Karpenter keeps on its ``Scheduler``).

    Built by :func:`karpy.scheduling.scheduler.new_state`; every attribute is read and updated in place by
    the placement functions. ``index`` names the resource dimensions of every vector (see
    :func:`karpy.scheduling.instancetypes.resource_index`); ``tables`` are the NodePools in weight order;
    ``slots`` the existing nodes and in-flight NodeClaims in the order they are tried; ``claims`` the
    NodeClaims opened in this solve, ``heap`` and ``domain_heaps`` their (pod count, index) heaps;
    ``remaining`` the NodePool limits still free per resource; ``errors`` pod key → why it was placed nowhere;
    ``relax_min_values`` is ``MIN_VALUES_POLICY=BestEffort``.
    The remaining attributes are caches keyed by NodePool order and requirement signature.
    """

    __slots__ = (
        "claim_by_host",
        "claim_labels",
        "claims",
        "domain_cache",
        "domain_heaps",
        "domain_keys",
        "errors",
        "finalized",
        "fresh",
        "frontiers",
        "group_of",
        "groups",
        "has_pns",
        "heap",
        "index",
        "inverse",
        "merge_cache",
        "min_need",
        "no_room",
        "offered",
        "pool_candidates_cache",
        "pool_reqs",
        "port_types",
        "price_lists",
        "relax_min_values",
        "remaining",
        "req_models",
        "res_pos",
        "respect",
        "slot_pass",
        "slots",
        "tables",
        "topo",
        "universes",
        "variants",
        "viable_sets",
    )

    def __init__(
        self,
        respect: bool,
        index: list[str],
        tables: list[PoolTable],
        slots: list[Slot],
        has_pns: bool,
        namespace_labels: Mapping[str, Mapping[str, str]],
        relax_min_values: bool = False,
    ) -> None:
        self.respect = respect
        self.relax_min_values = relax_min_values
        self.index = index
        self.res_pos = {n: i for i, n in enumerate(index)}
        self.tables = tables
        self.slots = slots
        self.has_pns = has_pns
        self.topo = Topology(namespace_labels)
        self.inverse: set[int] = set()
        self.variants: dict[tuple[Requirement, ...], Variant] = {}
        self.domain_cache: dict[tuple[object, ...], frozenset[str]] = {}
        self.slot_pass: dict[tuple[int, int], bool] = {}
        self.frontiers: dict[tuple[int, rq.Signature], list[int]] = {}
        self.no_room = [(f"{NODE_RESOURCES_FIT}: insufficient {n}", True) for n in index]
        self.group_of: dict[str, Group] | None = None
        self.groups: list[Group] = []
        self.min_need: list[int] = [0] * len(index)
        self.claims: list[Claim] = []
        self.heap: list[tuple[int, int]] = []
        # Non-hostname topology keys: open claims are also indexed by their domain for these keys.
        self.domain_keys: tuple[str, ...] = ()
        self.domain_heaps: dict[tuple[str, str | None], list[tuple[int, int]]] = {}
        self.universes: dict[str, frozenset[str]] = {}
        self.claim_by_host: dict[str, Claim] = {}
        self.remaining: dict[str, dict[str, int]] = {
            t.name: {k: v - t.pool.usage.get(k, 0) for k, v in t.pool.limits.items()} for t in tables
        }
        self.errors: dict[str, str] = {}
        self.merge_cache: dict[tuple[rq.Signature, rq.Signature], tuple[rq.Reqs, rq.Signature] | None] = {}
        self.viable_sets: dict[tuple[int, rq.Signature], frozenset[int]] = {}
        self.pool_candidates_cache: dict[tuple[object, ...], Candidates | str] = {}
        self.pool_reqs: dict[tuple[int, rq.Signature], tuple[rq.Reqs, rq.Signature] | str] = {}
        self.offered: dict[tuple[object, ...], frozenset[str]] = {}
        self.price_lists: dict[tuple[int, rq.Signature], tuple[list[int], list[float]]] = {}
        self.claim_labels: dict[tuple[int, rq.Signature], dict[str, str]] = {}
        self.req_models: dict[tuple[object, ...], tuple[Requirement, ...]] = {}
        self.finalized: dict[tuple[int, rq.Signature, tuple[int, ...]], NewNodeClaim | str] = {}
        self.fresh: dict[tuple[int, bool, rq.Signature], float] = {}
        self.port_types: dict[tuple[int, tuple[HostPort, ...]], tuple[str, ...]] = {}
