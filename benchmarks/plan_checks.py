"""Invariants a scheduling plan must satisfy, checked independently of the solver that made it.

:func:`plan_checks` returns one message per broken invariant of a :class:`~karpy.scheduling.model.SchedulingResult`
for the pods it was asked to place:

* every pod is placed exactly once, on a new NodeClaim or an existing node, or reported unschedulable;
* no pod is unschedulable (the benchmark workloads all fit);
* every NodeClaim's requests fit its cheapest candidate instance type;
* required pod anti-affinity holds across all nodes: no pod shares a domain of the term's topology key with a
  pod its selector (``matchLabels`` and ``matchExpressions``, ``matchLabelKeys``/``mismatchLabelKeys``) selects
  in the term's namespaces (Kubernetes InterPodAffinity);
* required pod affinity holds: the pod's domain is decided and holds a selected pod (or none exists anywhere),
  and a group of pods that carry the same term and are the only pods it selects shares one domain;
* ``DoNotSchedule`` topology spread: in no domain do more of a constraint's own selected pods sit than
  ``maxSkew`` above the least loaded eligible domain (what any binding order needs; exactly "max - min <=
  maxSkew" when the selector selects only pods carrying the constraint; see :func:`spread_checks`).

A NodeClaim's domain for a key is the single value its requirements (``In``) or labels give, else the values
its candidate instance types offer; a hostname domain is the NodeClaim itself. An undecided domain (several
possible values) counts as sharing each of them for anti-affinity, and fails affinity and spread checks.

The checks read only the plan and the pods, never the solver's own state, so a solver bug cannot hide itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from karpy.scheduling.model import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    ExistingNode,
    LabelSelector,
    NewNodeClaim,
    Pod,
    PodAffinityTerm,
    Requirement,
    SchedulingResult,
    TopologySpreadConstraint,
)

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
DO_NOT_SCHEDULE = "DoNotSchedule"
NAMESPACE_NAME = "kubernetes.io/metadata.name"


class _Node:
    """A node of the plan: a new NodeClaim or an existing node, with the pods on it afterwards."""

    def __init__(
        self,
        name: str,
        pods: Sequence[Pod],
        claim: NewNodeClaim | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.pods = list(pods)
        self.claim = claim
        self.labels = dict(labels or {})
        self._domains: dict[str, frozenset[str]] = {}

    def domains(self, key: str) -> frozenset[str]:
        """The values ``key`` may take on this node (one when decided, none when the node lacks the key)."""
        hit = self._domains.get(key)
        if hit is None:
            hit = self._domains[key] = frozenset(self._values(key))
        return hit

    def _values(self, key: str) -> set[str]:
        if key == HOST:
            return {self.labels.get(HOST, self.name)}
        if key in self.labels:
            return {self.labels[key]}
        claim = self.claim
        if claim is None:
            return set()
        for req in claim.requirements:
            if req.key == key and req.operator == IN:
                return set(req.values)
        if key == ZONE:
            return {o.zone for t in claim.instance_types for o in t.offerings if o.available}
        if key == CAPACITY_TYPE:
            return {o.capacity_type for t in claim.instance_types for o in t.offerings if o.available}
        return {t.labels[key] for t in claim.instance_types if key in t.labels}

    def may_have(self, key: str, value: str) -> bool:
        """True when the node's label ``key`` may equal ``value`` (for nodeSelector eligibility)."""
        if key in self.labels:
            return self.labels[key] == value
        if self.claim is None:
            return False
        for req in self.claim.requirements:
            if req.key == key and req.operator == IN and value not in req.values:
                return False
        return True


def _expression_matches(expr: Requirement, labels: Mapping[str, str]) -> bool:
    found = labels.get(expr.key)
    if expr.operator == IN:
        return found is not None and found in expr.values
    if expr.operator == NOT_IN:
        return found is None or found not in expr.values
    if expr.operator == EXISTS:
        return found is not None
    if expr.operator == DOES_NOT_EXIST:
        return found is None
    return False


def selects(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector matching: ``matchLabels`` AND ``matchExpressions``; None selects nothing."""
    if selector is None:
        return False
    return all(labels.get(k) == v for k, v in selector.match_labels) and all(
        _expression_matches(e, labels) for e in selector.match_expressions
    )


def term_matcher(owner: Pod, term: PodAffinityTerm) -> Callable[[Pod], bool]:
    """Whether a pod is selected by ``owner``'s term: selector, match/mismatch label keys, namespaces."""
    extra = tuple(Requirement(k, IN, (owner.labels[k],)) for k in term.match_label_keys if k in owner.labels)
    extra += tuple(Requirement(k, NOT_IN, (owner.labels[k],)) for k in term.mismatch_label_keys if k in owner.labels)
    selector = term.selector

    def in_scope(ns: str) -> bool:
        if not term.namespaces and term.namespace_selector is None:
            return ns == owner.namespace
        if ns in term.namespaces:
            return True
        return term.namespace_selector is not None and selects(term.namespace_selector, {NAMESPACE_NAME: ns})

    def matches(pod: Pod) -> bool:
        return (
            selects(selector, pod.labels)
            and all(_expression_matches(e, pod.labels) for e in extra)
            and in_scope(pod.namespace)
        )

    return matches


def _nodes(result: SchedulingResult, existing: Sequence[ExistingNode]) -> list[_Node]:
    nodes = [_Node(f"nodeclaim-{i}", c.pods, claim=c) for i, c in enumerate(result.new_nodeclaims)]
    known = {n.name for n in existing}
    for node in existing:
        nodes.append(_Node(node.name, [*node.bound_pods, *result.existing.get(node.name, ())], labels=node.labels))
    nodes += [_Node(name, pods) for name, pods in result.existing.items() if name not in known]
    return nodes


def placement_checks(result: SchedulingResult, pods: Sequence[Pod]) -> list[str]:
    """Every pod placed exactly once or reported unschedulable, and nothing placed that was not asked for."""
    failed: list[str] = []
    seen: dict[str, int] = {}
    placed = [p for c in result.new_nodeclaims for p in c.pods] + [p for ps in result.existing.values() for p in ps]
    for pod in placed:
        seen[pod.key] = seen.get(pod.key, 0) + 1
    wanted = {p.key for p in pods}
    twice = sorted(k for k, n in seen.items() if n > 1)
    if twice:
        failed.append(f"{len(twice)} pods placed more than once, e.g. {twice[0]}")
    missing = sorted(k for k in wanted if k not in seen and k not in result.errors)
    if missing:
        failed.append(f"{len(missing)} pods neither placed nor reported unschedulable, e.g. {missing[0]}")
    both = sorted(k for k in seen if k in result.errors)
    if both:
        failed.append(f"{len(both)} pods both placed and reported unschedulable, e.g. {both[0]}")
    unknown = sorted(k for k in seen if k not in wanted)
    if unknown:
        failed.append(f"{len(unknown)} placed pods were not asked for, e.g. {unknown[0]}")
    if result.errors:
        failed.append(f"{len(result.errors)} unschedulable, e.g. {next(iter(result.errors.values()))}")
    return failed


def fit_checks(result: SchedulingResult) -> list[str]:
    """Every NodeClaim's requests fit the allocatable of its cheapest candidate type."""
    failed = []
    for claim in result.new_nodeclaims:
        if not claim.instance_types:
            failed.append(f"a {claim.nodepool} NodeClaim has no instance type")
            continue
        alloc = claim.instance_types[0].allocatable
        if any(v > alloc.get(k, 0) for k, v in claim.requests.items()):
            failed.append(f"requests exceed {claim.instance_types[0].name}")
    return failed


class _Index:
    """Placed pods per (topology key, domain value), and how many of them a term selects (cached)."""

    def __init__(self, nodes: Sequence[_Node]) -> None:
        self.nodes = nodes
        self.where = {id(p): n for n in nodes for p in n.pods}
        self.placed = [p for n in nodes for p in n.pods]
        self._by_key: dict[str, dict[str, list[Pod]]] = {}
        self._counts: dict[tuple[object, ...], int] = {}

    def pods_in(self, key: str, value: str | None) -> list[Pod]:
        """The pods on nodes that may be in ``value`` of ``key``; every placed pod for None."""
        if value is None:
            return self.placed
        table = self._by_key.get(key)
        if table is None:
            table = self._by_key[key] = {}
            for node in self.nodes:
                for v in node.domains(key):
                    table.setdefault(v, []).extend(node.pods)
        return table.get(value, [])

    def selected(self, owner: Pod, term: PodAffinityTerm, value: str | None) -> int:
        """How many pods in ``value`` of the term's key (anywhere for None) ``owner``'s term selects."""
        label_keys = (*term.match_label_keys, *term.mismatch_label_keys)
        key = (owner.namespace, term, tuple(owner.labels.get(k) for k in label_keys), value)
        hit = self._counts.get(key)
        if hit is None:
            matches = term_matcher(owner, term)
            hit = self._counts[key] = sum(1 for q in self.pods_in(term.topology_key, value) if matches(q))
        return hit


def anti_affinity_checks(nodes: Sequence[_Node], index: _Index) -> list[str]:
    """Required anti-affinity: no selected pod (other than the pod itself) in any domain the pod may be in."""
    failed: list[str] = []
    for node in nodes:
        for pod in node.pods:
            for term in pod.pod_anti_affinity:
                matches = term_matcher(pod, term)
                itself = 1 if matches(pod) else 0
                for value in sorted(node.domains(term.topology_key)):
                    if index.selected(pod, term, value) > itself:
                        other = next(q for q in index.pods_in(term.topology_key, value) if q is not pod and matches(q))
                        where = f"{term.topology_key}: {other.key} is also in {value}"
                        failed.append(f"required anti-affinity of {pod.key} on {where}")
                        break
    return failed


def affinity_checks(nodes: Sequence[_Node], index: _Index) -> list[str]:
    """Required affinity: a decided domain holding a selected pod; closed self-affine groups share a domain."""
    failed: list[str] = []
    groups: dict[tuple[str, PodAffinityTerm], list[Pod]] = {}
    for node in nodes:
        for pod in node.pods:
            for term in pod.pod_affinity:
                key = term.topology_key
                doms = node.domains(key)
                if len(doms) != 1:
                    failed.append(f"required affinity of {pod.key} on {key}: domain not decided ({sorted(doms)})")
                    continue
                value = next(iter(doms))
                itself = 1 if term_matcher(pod, term)(pod) else 0
                if index.selected(pod, term, value) <= itself < index.selected(pod, term, None):
                    failed.append(f"required affinity of {pod.key} on {key}: no selected pod in {value}")
                if itself:
                    groups.setdefault((pod.namespace, term), []).append(pod)
    for (_, term), members in groups.items():
        if index.selected(members[0], term, None) > len(members):
            continue  # other pods are selected too: members may follow them to several domains
        values = {v for p in members for v in index.where[id(p)].domains(term.topology_key)}
        if len(values) > 1:
            failed.append(f"affinity group {term.selector} on {term.topology_key} spans {sorted(values)}")
    return failed


def spread_checks(nodes: Sequence[_Node]) -> list[str]:
    """``DoNotSchedule`` spread: what every binding order of the plan would need.

    kube-scheduler checks a constraint when it binds a pod: the selected pods already in the target domain,
    plus the pod itself when selected, may exceed the least loaded eligible domain (0 below ``minDomains``
    domains) by at most ``maxSkew``. Of the k pods in domain d that carry the constraint and are selected by
    it, the last one bound finds the other k-1 there, and the minimum then is at most the final one; so any
    valid order needs ``k <= maxSkew + final minimum`` in every domain. That is checked, per constraint (equal
    constraint, namespace and nodeSelector). When every pod the selector selects carries the constraint, it
    is exactly "max - min <= maxSkew"; pods that carry a constraint not selecting themselves can only be
    checked against the order the pods were bound in, which a plan does not record.

    Eligible domains: the decided domains of the nodes the owners' nodeSelector may match
    (nodeAffinityPolicy Honor). Pods on a node whose domain is not decided are not counted, as Karpenter
    does not count them (core ``pkg/controllers/provisioning/scheduling/topology.go``, ``Topology.Record``);
    a constrained pod on such a node fails.
    """
    failed: list[str] = []
    owners: dict[tuple[object, ...], list[tuple[Pod, _Node]]] = {}
    for node in nodes:
        for pod in node.pods:
            for tsc in pod.topology_spread:
                if tsc.when_unsatisfiable == DO_NOT_SCHEDULE:
                    ident = (
                        pod.namespace,
                        tsc,
                        tuple(pod.labels.get(k) for k in tsc.match_label_keys),
                        tuple(sorted(pod.node_selector.items())) if tsc.node_affinity_policy != "Ignore" else (),
                    )
                    owners.setdefault(ident, []).append((pod, node))
    for (namespace, tsc, _, node_selector), members in owners.items():
        first = members[0][0]
        key = tsc.topology_key
        extra = tuple(Requirement(k, IN, (first.labels[k],)) for k in tsc.match_label_keys if k in first.labels)

        def selected(
            pod: Pod,
            tsc: TopologySpreadConstraint = tsc,
            extra: tuple[Requirement, ...] = extra,
            namespace: object = namespace,
        ) -> bool:
            return (
                pod.namespace == namespace
                and selects(tsc.selector, pod.labels)
                and all(_expression_matches(e, pod.labels) for e in extra)
            )

        counts: dict[str, int] = {}
        for node in nodes:
            doms = node.domains(key)
            if len(doms) == 1 and all(node.may_have(k, v) for k, v in node_selector):
                d = next(iter(doms))
                counts[d] = counts.get(d, 0) + sum(1 for p in node.pods if selected(p))
        low = 0 if tsc.min_domains is not None and len(counts) < tsc.min_domains else min(counts.values(), default=0)
        owned: dict[str, int] = {}
        for pod, node in members:
            doms = node.domains(key)
            if len(doms) != 1:
                failed.append(f"spread {tsc.selector} on {key}: {pod.key} is on a node whose {key} is not decided")
            elif selected(pod):
                d = next(iter(doms))
                owned[d] = owned.get(d, 0) + 1
        for d, k in sorted(owned.items()):
            if k > tsc.max_skew + low:
                failed.append(
                    f"spread {tsc.selector} on {key}: {k} of its pods in {d}, more than maxSkew {tsc.max_skew} "
                    f"above the least loaded domain ({low})"
                )
    return failed


def plan_checks(
    result: SchedulingResult, pods: Sequence[Pod], existing: Sequence[ExistingNode] = ()
) -> tuple[str, ...]:
    """Every broken invariant of ``result`` for ``pods`` (placed on ``existing`` and new NodeClaims), once
    each; empty when the plan is sound."""
    nodes = _nodes(result, existing)
    index = _Index(nodes)
    failed = placement_checks(result, pods)
    failed += fit_checks(result)
    failed += anti_affinity_checks(nodes, index)
    failed += affinity_checks(nodes, index)
    failed += spread_checks(nodes)
    return tuple(dict.fromkeys(failed))


__all__ = ["plan_checks", "selects"]
