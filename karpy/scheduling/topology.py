"""Pod affinity, pod anti-affinity and topology spread: label selectors and per-domain counts.

Follows Karpenter core ``pkg/controllers/provisioning/scheduling/topology.go`` / ``topologygroup.go`` and the
kube-scheduler ``InterPodAffinity`` and ``PodTopologySpread`` plugins. A :class:`TopoGroup` is one distinct
constraint (kind, topology key, selector, namespaces, skew, node filter); pods that carry the same constraint
share it. It counts, per domain (a value of the topology key), the pods it selects (``counts``) and, for
anti-affinity, the pods that own it as a required term (``owners``). The scheduler asks it which of a target's
possible domains a pod may use:

* spread: ``count(domain) + (1 if the pod selects itself) - global minimum <= maxSkew``; the global minimum is
  over the eligible domains (0 when fewer than ``minDomains``) and 0 for ``kubernetes.io/hostname`` (a new node
  is always possible, Karpenter ``domainMinCount``);
* affinity: domains with a selected pod, or any domain when none exists yet and the pod selects itself
  (kube-scheduler's first-pod rule);
* anti-affinity: domains without a selected pod; in reverse (``INVERSE``), domains without an owner: an
  existing or already-placed pod's required anti-affinity also keeps matching pods away (kube-scheduler
  ``satisfyExistingPodsAntiAffinity``).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from karpy.scheduling.model import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    LabelSelector,
    Pod,
    PodAffinityTerm,
    Requirement,
    Toleration,
    TopologySpreadConstraint,
)

SPREAD: Final = "spread"
AFFINITY: Final = "affinity"
ANTI: Final = "anti-affinity"
INVERSE: Final = "inverse anti-affinity"
DO_NOT_SCHEDULE: Final = "DoNotSchedule"
SCHEDULE_ANYWAY: Final = "ScheduleAnyway"
HONOR: Final = "Honor"
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"

Ident = tuple[str, tuple[tuple[str, str], ...]]


def selector_matches(sel: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes label selector matching; ``None`` matches nothing, an empty selector everything."""
    if sel is None:
        return False
    for key, value in sel.match_labels:
        if labels.get(key) != value:
            return False
    for expr in sel.match_expressions:
        found = labels.get(expr.key)
        op = expr.operator
        if op == IN:
            ok = found is not None and found in expr.values
        elif op == NOT_IN:
            ok = found is None or found not in expr.values
        elif op == EXISTS:
            ok = found is not None
        elif op == DOES_NOT_EXIST:
            ok = found is None
        else:
            ok = False
        if not ok:
            return False
    return True


def with_label_keys(
    sel: LabelSelector | None, labels: Mapping[str, str], match: tuple[str, ...], mismatch: tuple[str, ...] = ()
) -> LabelSelector | None:
    """``matchLabelKeys``/``mismatchLabelKeys`` merged into the selector (keys absent on the pod are skipped)."""
    if sel is None or not (match or mismatch):
        return sel
    extra = [Requirement(k, IN, (labels[k],)) for k in match if k in labels]
    extra += [Requirement(k, NOT_IN, (labels[k],)) for k in mismatch if k in labels]
    return LabelSelector(sel.match_labels, sel.match_expressions + tuple(extra))


class TopoGroup:
    """One distinct pod affinity / anti-affinity / spread constraint and its per-domain counts.

    Attributes:
        id, kind, key: position in the solve's list, SPREAD/AFFINITY/ANTI, topology key.
        selector: which pods it counts; ``ns_all``/``ns_names``/``ns_selector``: in which namespaces.
        max_skew, min_domains: spread parameters (unused for affinity).
        filter_pod / filter_tolerations: spread node filter (nodeAffinityPolicy Honor: the owner's nodeSelector
            and required node affinity; nodeTaintsPolicy Honor: its tolerations); None when ignored.
        counts / total: selected pods per domain; owners: pods owning it as a required anti-affinity term.
        eligible: spread domains (computed lazily by the scheduler), pools_ok: NodePools passing the filter.
    """

    __slots__ = (
        "counts",
        "eligible",
        "filter_pod",
        "filter_tolerations",
        "id",
        "key",
        "kind",
        "low",
        "max_skew",
        "min_domains",
        "ns_all",
        "ns_names",
        "ns_selector",
        "owners",
        "pools_ok",
        "selector",
        "total",
    )

    def __init__(
        self,
        gid: int,
        kind: str,
        key: str,
        selector: LabelSelector | None,
        ns_all: bool,
        ns_names: frozenset[str],
        ns_selector: LabelSelector | None,
        max_skew: int = 1,
        min_domains: int | None = None,
        filter_pod: Pod | None = None,
        filter_tolerations: tuple[Toleration, ...] | None = None,
    ) -> None:
        self.id = gid
        self.kind = kind
        self.key = key
        self.selector = selector
        self.ns_all = ns_all
        self.ns_names = ns_names
        self.ns_selector = ns_selector
        self.max_skew = max_skew
        self.min_domains = min_domains
        self.filter_pod = filter_pod
        self.filter_tolerations = filter_tolerations
        self.counts: dict[str, int] = {}
        # The spread minimum over the eligible domains, until the counts change (set by the scheduler).
        self.low: int | None = None
        self.owners: dict[str, int] = {}
        self.total = 0
        self.eligible: frozenset[str] | None = None
        self.pools_ok: frozenset[str] | None = None

    def add(self, domain: str, n: int) -> None:
        """Count ``n`` more (or fewer, when negative) selected pods in ``domain``."""
        self.counts[domain] = self.counts.get(domain, 0) + n
        self.total += n
        self.low = None

    def add_owner(self, domain: str, n: int) -> None:
        """Count ``n`` more owners of this required anti-affinity term in ``domain``."""
        self.owners[domain] = self.owners.get(domain, 0) + n

    def describe(self) -> str:
        """``topology spread on zone (maxSkew 1)``-style text for explanations."""
        if self.kind == SPREAD:
            return f"topology spread on {self.key} (maxSkew {self.max_skew})"
        return f"pod {self.kind} on {self.key}"


class Topology:
    """The solve's topology groups, deduplicated, and which groups select which pods.

    ``namespace_labels`` maps a namespace name to its labels, for ``namespaceSelector`` (a namespace missing
    from it has only ``kubernetes.io/metadata.name``, which the API server always sets).
    """

    def __init__(self, namespace_labels: Mapping[str, Mapping[str, str]]) -> None:
        self.namespace_labels = namespace_labels
        self.groups: list[TopoGroup] = []
        self._by_key: dict[tuple[object, ...], TopoGroup] = {}
        self._selecting: dict[Ident, tuple[int, ...]] = {}
        self._ns_match: dict[tuple[int, str], bool] = {}

    def _namespaces(self, term: PodAffinityTerm, namespace: str) -> tuple[bool, frozenset[str], LabelSelector | None]:
        """Kubernetes ``GetNamespacesFromPodAffinityTerm`` plus the namespace selector (empty = all)."""
        names = frozenset(term.namespaces)
        sel = term.namespace_selector
        if sel is not None and not sel.match_labels and not sel.match_expressions:
            return True, frozenset(), None
        if sel is None and not names:
            names = frozenset((namespace,))
        return False, names, sel

    def _get(self, key: tuple[object, ...], make: TopoGroup) -> TopoGroup:
        found = self._by_key.get(key)
        if found is not None:
            return found
        self._by_key[key] = make
        self.groups.append(make)
        self._selecting.clear()
        return make

    def term_group(self, kind: str, term: PodAffinityTerm, pod: Pod) -> TopoGroup:
        """The AFFINITY/ANTI group for a pod (anti-)affinity term of ``pod``."""
        sel = with_label_keys(term.selector, pod.labels, term.match_label_keys, term.mismatch_label_keys)
        ns_all, names, ns_sel = self._namespaces(term, pod.namespace)
        key = (
            kind,
            term.topology_key,
            sel,
            ns_all,
            tuple(sorted(names)),
            ns_sel,
        )
        return self._get(key, TopoGroup(len(self.groups), kind, term.topology_key, sel, ns_all, names, ns_sel))

    def spread_group(self, tsc: TopologySpreadConstraint, pod: Pod) -> TopoGroup:
        """The SPREAD group for a topology spread constraint of ``pod`` (selector within its namespace)."""
        sel = with_label_keys(tsc.selector, pod.labels, tsc.match_label_keys)
        honor_affinity = tsc.node_affinity_policy != "Ignore"
        honor_taints = tsc.node_taints_policy == HONOR
        filter_pod = pod if honor_affinity and (pod.node_selector or pod.required_terms) else None
        tolerations = pod.tolerations if honor_taints else None
        key = (
            SPREAD,
            tsc.topology_key,
            sel,
            pod.namespace,
            tsc.max_skew,
            tsc.min_domains,
            None if filter_pod is None else (tuple(sorted(pod.node_selector.items())), pod.required_terms),
            tolerations,
        )
        make = TopoGroup(
            len(self.groups),
            SPREAD,
            tsc.topology_key,
            sel,
            False,
            frozenset((pod.namespace,)),
            None,
            max(1, tsc.max_skew),
            tsc.min_domains,
            filter_pod,
            tolerations,
        )
        return self._get(key, make)

    def _in_namespaces(self, g: TopoGroup, namespace: str) -> bool:
        if g.ns_all or namespace in g.ns_names:
            return True
        if g.ns_selector is None:
            return False
        key = (g.id, namespace)
        hit = self._ns_match.get(key)
        if hit is None:
            labels = {**self.namespace_labels.get(namespace, {}), NAMESPACE_NAME_LABEL: namespace}
            hit = self._ns_match[key] = selector_matches(g.ns_selector, labels)
        return hit

    def selecting(self, pod: Pod) -> tuple[int, ...]:
        """Ids of the groups whose selector and namespaces select ``pod`` (cached per namespace and labels)."""
        if not self.groups:
            return ()
        ident: Ident = (pod.namespace, tuple(sorted(pod.labels.items())))
        hit = self._selecting.get(ident)
        if hit is None:
            hit = self._selecting[ident] = tuple(
                g.id
                for g in self.groups
                if selector_matches(g.selector, pod.labels) and self._in_namespaces(g, pod.namespace)
            )
        return hit


__all__ = [
    "AFFINITY",
    "ANTI",
    "DO_NOT_SCHEDULE",
    "INVERSE",
    "SCHEDULE_ANYWAY",
    "SPREAD",
    "TopoGroup",
    "Topology",
    "selector_matches",
    "with_label_keys",
]
