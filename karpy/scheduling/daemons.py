"""Which pod stands for a DaemonSet in the simulation: its newest live pod, else its template.

Karpenter ``Provisioner.getDaemonSetPods`` with ``Cluster.GetDaemonSetPod``: the pod the DaemonSet controller
actually created is what will run on a new node, and it can differ from the template: a LimitRange fills in
default requests, admission webhooks add sidecars or change requests, the controller adds tolerations. Its
required node affinity is the exception: the controller rewrites it to pin the pod to its node (a
``matchFields metadata.name`` term), so the template's is used instead.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from karpy.scheduling.model import DaemonSet, Pod

DAEMONSET_OWNER = "DaemonSet/"


LiveMemo = dict[str, tuple[DaemonSet, Pod, DaemonSet]]
"""DaemonSet uid → (the DaemonSet, its live pod, the DaemonSet standing for it), for :func:`with_live_pods`."""


def with_live_pods(
    daemonsets: Iterable[DaemonSet], pods: Iterable[Pod], memo: LiveMemo | None = None
) -> list[DaemonSet]:
    """``daemonsets`` with each one's pod replaced by the newest pod it controls, where one exists.

    ``pods`` may be any pods: only those whose controller owner is a DaemonSet (``Pod.owner`` is
    ``DaemonSet/<uid>``, matched against the template pod's uid, which is the DaemonSet's) are looked at. The
    chosen pod keeps the template's identity (uid, namespace, name) and required node affinity and is unbound;
    everything else (requests, overhead, tolerations, nodeSelector, host ports) is the live pod's.

    ``memo`` (kept by the caller across passes): while a DaemonSet and its live pod are the same objects, the same
    result object is returned, so the solve's caches keyed by the DaemonSets' identity (allocatable per instance
    type) keep hitting; entries of DaemonSets not passed are dropped.
    """
    newest: dict[str, Pod] = {}
    for pod in pods:
        if not pod.owner.startswith(DAEMONSET_OWNER):
            continue
        seen = newest.get(pod.owner)
        # Karpenter keeps the pod with the latest creationTimestamp; equal times break on name for determinism.
        if seen is None or (pod.created, pod.name) > (seen.created, seen.name):
            newest[pod.owner] = pod
    if not newest:
        return list(daemonsets)
    out = []
    for ds in daemonsets:
        live = newest.get(DAEMONSET_OWNER + ds.pod.uid)
        if live is None:
            out.append(ds)
            continue
        hit = memo.get(ds.pod.uid) if memo is not None else None
        if hit is not None and hit[0] is ds and hit[1] is live:
            out.append(hit[2])
            continue
        template = ds.pod
        pod = attrs.evolve(
            live,
            uid=template.uid,
            namespace=template.namespace,
            name=template.name,
            required_terms=template.required_terms,
            node_name="",
        )
        standing = attrs.evolve(ds, pod=pod)
        if memo is not None:
            memo[ds.pod.uid] = (ds, live, standing)
        out.append(standing)
    if memo is not None:
        kept = {ds.pod.uid for ds in out}
        for uid in [u for u in memo if u not in kept]:
            del memo[uid]
    return out
