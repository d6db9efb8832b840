"""The binding predicate: may a pod be bound to this node now, as kube-scheduler's filters would decide?

karpy binds the pods it planned onto a NodeClaim itself (:mod:`karpy.controllers.binder`). A Binding skips
kube-scheduler, so before each one the binder asks this predicate what kube-scheduler's Filter plugins would
answer for the pod and the node, with the pods now on the nodes: NodeResourcesFit, TaintToleration (NoSchedule
and NoExecute; PreferNoSchedule is a score, not a filter), NodeAffinity (nodeSelector, required node affinity),
VolumeBinding (the node affinity of the pod's bound volumes, from ``Pod.volume_terms``), NodePorts,
InterPodAffinity (the pod's required (anti-)affinity and existing pods' required anti-affinity) and
PodTopologySpread (``DoNotSchedule`` constraints, domains from the nodes passing the constraint's node filter).

There is no second copy of those checks: the predicate is the scheduling engine's own existing-node check
(:func:`karpy.scheduling.existingnode.node_refusal`), run with ``preference_policy=Ignore`` (preferences are
kube-scheduler scores, never filters) over the target node and the rest of the cluster. The engine places pods
on existing nodes with exactly that check, so a pod the engine would place on a node passes here, and a pod
refused here is one the engine would not place there.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from karpy.scheduling.existingnode import assume_bound, node_refusal
from karpy.scheduling.model import ExistingNode, Pod
from karpy.scheduling.scheduler import new_state
from karpy.scheduling.state import IGNORE


class BindingCheck:
    """Binding ``pods`` one after another onto any of ``targets``: each is checked against the cluster as it is
    after the earlier ones were bound onto theirs (:meth:`assume`), as kube-scheduler's cache assumes a pod once
    it is bound. Several targets let the binder admit a batch's pods over its nodes in one pass (a spread over
    their domains is only valid once every domain has its share).

    Args:
        targets: the nodes, each with exactly the pods bound (or being bound) to it now (their requests, host
            ports and labels), its scheduling taints and allocatable.
        cluster: every other node with the pods bound to it (labels and taints for topology domains and spread
            node filters, the pods for (anti-)affinity and spread counts). Entries named like a target are
            ignored. Only needed when a pod to bind, or a pod already bound, has topology constraints.
        pods: the pods that may be checked, with ``volume_terms`` filled from their volumes.
        namespace_labels: namespace name → labels, for affinity terms' ``namespaceSelector``.
    """

    def __init__(
        self,
        targets: Sequence[ExistingNode],
        cluster: Sequence[ExistingNode],
        pods: Sequence[Pod],
        namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        names = {t.name for t in targets}
        nodes = [*targets, *(n for n in cluster if n.name not in names)]
        self._state = new_state(pods, (), nodes, (), IGNORE, namespace_labels)

    def refusal(self, pod: Pod, node: str) -> str | None:
        """Why ``pod`` (one of ``pods``) may not be bound to the target named ``node`` now, named after the
        kube-scheduler filter that would refuse it (``"VolumeBinding: ..."``); None when every filter passes."""
        return node_refusal(self._state, pod, node)

    def assume(self, pod: Pod, node: str) -> None:
        """``pod`` was bound to the target named ``node``: later checks count it."""
        assume_bound(self._state, pod, node)


def binding_refusal(
    pod: Pod,
    target: ExistingNode,
    cluster: Sequence[ExistingNode] = (),
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
) -> str | None:
    """One pod, one target: why it may not be bound to ``target`` now (see :class:`BindingCheck`), None when it
    may."""
    return BindingCheck([target], cluster, [pod], namespace_labels).refusal(pod, target.name)


def has_topology(pod: Pod) -> bool:
    """True when the pod's required placement depends on other pods (pod (anti-)affinity or spread)."""
    return bool(pod.pod_affinity or pod.pod_anti_affinity or pod.topology_spread)


__all__ = ["BindingCheck", "binding_refusal", "has_topology"]
