"""The objects a cluster would hold for ``karpy simulate``'s manifests: sorted by kind, defaulted, validated, with
the workloads expanded into their pods.

What the API server and the workload controllers would do before karpy ever sees a pod is reproduced, because
the manifests are the user's *input* objects, not what a watch delivers. The steps live in their own modules:
:mod:`~karpy.simulate.reading` (files and YAML documents), :mod:`~karpy.simulate.defaulting` (what the API
server fills in), :mod:`~karpy.simulate.validation` (what it would reject, as one-line
:class:`~karpy.simulate.validation.ManifestError`) and :mod:`~karpy.simulate.workloads` (what the workload
controllers create); :func:`collect` runs them in the API server's order.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

import attrs

from karpy.apis.meta import JSON
from karpy.scheduling.gcpause import pausing_gc
from karpy.simulate.buffers import check_capacity_buffer
from karpy.simulate.defaulting import (
    default_metadata,
    default_priority,
    default_requests,
    default_storage_class,
    priorities,
)
from karpy.simulate.reading import Document
from karpy.simulate.validation import (
    ManifestError,
    check_node,
    check_node_affinity,
    check_nodeclass,
    check_nodepool,
    check_pod_resources,
)
from karpy.simulate.workloads import WORKLOAD_KINDS, Workload, expand, pod_count

# (API group, kind) → the Manifests field that keeps the objects; other kinds are counted as ignored.
KINDS: Mapping[tuple[str, str], str] = {
    ("karpenter.sh", "NodePool"): "nodepools",
    ("karpenter.k8s.aws", "EC2NodeClass"): "nodeclasses",
    ("karpenter.sh", "NodeOverlay"): "nodeoverlays",
    ("", "Pod"): "pods",
    ("", "Node"): "nodes",
    ("", "PersistentVolume"): "persistent_volumes",
    ("", "PersistentVolumeClaim"): "claims",
    ("storage.k8s.io", "StorageClass"): "storage_classes",
    ("scheduling.k8s.io", "PriorityClass"): "priority_classes",
    ("", "Namespace"): "namespaces",
    ("apps", "Deployment"): "workloads",
    ("apps", "ReplicaSet"): "workloads",
    ("apps", "StatefulSet"): "workloads",
    ("batch", "Job"): "workloads",
    ("apps", "DaemonSet"): "daemonsets",
    # CapacityBuffers and the PodTemplates they may reference (karpy.simulate.buffers).
    ("autoscaling.x-k8s.io", "CapacityBuffer"): "capacity_buffers",
    ("", "PodTemplate"): "pod_templates",
}
CLUSTER_SCOPED = frozenset(
    {
        "NodePool",
        "EC2NodeClass",
        "NodeOverlay",
        "Node",
        "PersistentVolume",
        "StorageClass",
        "PriorityClass",
        "Namespace",
    }
)


@attrs.define
class Manifests:
    """Everything read, by kind; ``pods`` includes the workloads' expanded pods (JSON, defaulted)."""

    nodepools: list[JSON] = attrs.Factory(list)
    nodeclasses: list[JSON] = attrs.Factory(list)
    nodeoverlays: list[JSON] = attrs.Factory(list)
    pods: list[JSON] = attrs.Factory(list)
    nodes: list[JSON] = attrs.Factory(list)
    daemonsets: list[JSON] = attrs.Factory(list)
    persistent_volumes: list[JSON] = attrs.Factory(list)
    claims: list[JSON] = attrs.Factory(list)
    storage_classes: list[JSON] = attrs.Factory(list)
    priority_classes: list[JSON] = attrs.Factory(list)
    namespaces: list[JSON] = attrs.Factory(list)
    workloads: list[Workload] = attrs.Factory(list)
    ignored: dict[str, int] = attrs.Factory(dict)
    capacity_buffers: list[JSON] = attrs.Factory(list)
    pod_templates: list[JSON] = attrs.Factory(list)
    # Deployments, StatefulSets and ReplicaSets a CapacityBuffer's scalableRef may name: kind → namespace/name →
    # {"spec": {"template", "replicas"}} (replicas after --scale).
    scalables: dict[str, dict[str, JSON]] = attrs.Factory(dict)


@pausing_gc
def collect(docs: Iterable[Document], scale: Mapping[str, int] | None = None) -> Manifests:
    """Sort objects by kind, default and validate them, and expand workloads into pods.

    ``scale`` maps ``name`` or ``namespace/name`` of a Deployment, ReplicaSet, StatefulSet or Job to the
    number of pods it should run (overriding ``replicas``/``parallelism``), like ``kubectl scale``.

    Raises:
        ManifestError: duplicate objects, invalid fields, or a ``scale`` entry matching no workload.
    """
    out = Manifests()
    seen: dict[tuple[str, str, str, str], str] = {}
    workloads: list[Document] = []
    for doc in docs:
        field = KINDS.get((doc.group, doc.kind))
        if field is None:
            out.ignored[doc.kind] = out.ignored.get(doc.kind, 0) + 1
            continue
        default_metadata(doc.obj, namespaced=doc.kind not in CLUSTER_SCOPED)
        key = (doc.group, doc.kind, doc.namespace, doc.name)
        if key in seen:
            raise ManifestError(f"{doc.origin}: duplicate {doc.kind} {doc.ref} (first in {seen[key]})")
        seen[key] = doc.origin
        if field == "workloads":
            workloads.append(doc)
        else:
            getattr(out, field).append(doc.obj)
        _validate(doc)
    priority_values = priorities(out.priority_classes)
    storage_class = default_storage_class(out.storage_classes)
    scale = dict(scale or {})
    used: set[str] = set()
    for pod in out.pods:
        admit_pod(pod, priority_values, str(pod["metadata"].get("name")))
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in out.claims}
    for doc in workloads:
        count = _scaled_count(doc, scale, used)
        out.workloads.append(Workload(doc.kind, doc.namespace, doc.name, count))
        if doc.kind != "Job":
            template = (doc.obj.get("spec") or {}).get("template") or {}
            out.scalables.setdefault(doc.kind, {})[f"{doc.namespace}/{doc.name}"] = {
                "spec": {"template": template, "replicas": count}
            }
        admit = functools.partial(
            admit_pod, priority_values=priority_values, where=f"{doc.origin} ({doc.kind} {doc.ref})"
        )
        for pod, new_claims in expand(doc, count, storage_class, admit):
            out.pods.append(pod)
            for claim in new_claims:
                ref = (claim["metadata"]["namespace"], claim["metadata"]["name"])
                if ref not in claims:
                    claims.add(ref)
                    out.claims.append(claim)
    for ds in out.daemonsets:
        template = (ds.get("spec") or {}).get("template") or {}
        admit_pod(
            {"metadata": template.setdefault("metadata", {}), "spec": template.setdefault("spec", {})},
            priority_values,
            f"DaemonSet {ds['metadata']['namespace']}/{ds['metadata']['name']}",
        )
    unused = sorted(set(scale) - used)
    if unused:
        raise ManifestError(
            f"--scale {', '.join(unused)}: no Deployment, ReplicaSet, StatefulSet or Job with that name"
        )
    names: set[tuple[str, str]] = set()
    for pod in out.pods:
        ref = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if ref in names:
            raise ManifestError(f"two pods named {ref[0]}/{ref[1]} (a Pod manifest and a workload's pod?)")
        names.add(ref)
    return out


def admit_pod(pod: JSON, priority_values: Mapping[str, int], where: str) -> None:
    """What the API server does with a pod (or pod template) on create, in its order, in place: validate the
    resource quantities, default requests from limits, set the priority from the PriorityClass (admission),
    validate the node affinity.

    Raises:
        ManifestError: invalid quantities, an unknown priorityClassName, or an invalid node affinity.
    """
    spec = pod.setdefault("spec", {})
    check_pod_resources(spec, where)
    default_requests(spec)
    default_priority(spec, priority_values, where)
    check_node_affinity(spec, where)


def _scaled_count(doc: Document, scale: Mapping[str, int], used: set[str]) -> int:
    """The ``--scale`` count for a workload (``namespace/name`` before ``name``), else its own count."""
    for key in (f"{doc.namespace}/{doc.name}", doc.name):
        if key in scale:
            used.add(key)
            return scale[key]
    return pod_count(doc)


def _validate(doc: Document) -> None:
    """Kind-specific checks of the fields the simulation reads (a workload's counts, even when ``--scale``d)."""
    if doc.kind == "NodePool":
        check_nodepool(doc.obj, doc.origin)
    elif doc.kind == "Node":
        check_node(doc.obj, doc.origin)
    elif doc.kind == "EC2NodeClass":
        check_nodeclass(doc.obj, doc.origin)
    elif doc.kind in WORKLOAD_KINDS:
        pod_count(doc)
    elif doc.kind == "CapacityBuffer":
        check_capacity_buffer(doc.obj, doc.origin)
