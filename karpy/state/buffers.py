"""CapacityBuffers and what they reference, as cluster state keeps them (only with the ``CapacityBuffer`` gate on).

Karpenter's capacity-buffer controller reads CapacityBuffers, PodTemplates, Deployments, StatefulSets and
ReplicaSets through controller-runtime's cache (core ``pkg/controllers/capacitybuffer/controller.go`` watches all
five); karpy's informers feed them into :class:`~karpy.state.cluster.ClusterState`. CapacityBuffers are kept
whole (their status is written back); the others as slim views with only what resolution reads — name,
namespace, resourceVersion (for stale-event checks), generation, ``spec.replicas`` and the pod template (status,
managedFields and the rest dropped). Every workload's template is kept, referenced or not (a buffer created later
may name any of them), so memory grows with the cluster's Deployments, StatefulSets and ReplicaSets, old revisions
included — less than Karpenter's cache of the whole objects.

:func:`virtual_pods` turns the buffers that are ready for provisioning into the virtual pods the provisioner plans
(:mod:`karpy.scheduling.buffers`); Karpenter keeps the same pods in its ``virtualpods.Cache``, refreshed by each
buffer reconcile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from karpy.apis.meta import JSON
from karpy.scheduling import buffers as cb
from karpy.scheduling.model import Pod

# The kinds the CapacityBuffer gate adds to cluster state (their informers run only with the gate on).
BUFFER_KINDS: Final = ("CapacityBuffer", "PodTemplate", "Deployment", "StatefulSet", "ReplicaSet")
SCALABLE_KINDS: Final = ("Deployment", "StatefulSet", "ReplicaSet")


def _meta(obj: Mapping[str, Any]) -> JSON:
    meta = obj.get("metadata") or {}
    out: JSON = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "generation") if k in meta}
    return out


def pod_template_view(obj: Mapping[str, Any]) -> JSON:
    """A PodTemplate's metadata (with ``generation``) and ``template``."""
    return {"metadata": _meta(obj), "template": obj.get("template") or {}}


def workload_view(obj: Mapping[str, Any]) -> JSON:
    """A Deployment's, StatefulSet's or ReplicaSet's metadata (with ``generation``), ``spec.replicas`` (absent when
    unset) and ``spec.template``."""
    spec = obj.get("spec") or {}
    slim: JSON = {"template": spec.get("template") or {}}
    if spec.get("replicas") is not None:
        slim["replicas"] = spec["replicas"]
    return {"metadata": _meta(obj), "spec": slim}


def virtual_pods(
    buffers: Mapping[str, JSON], pod_templates: Mapping[str, JSON], workloads: Mapping[str, Mapping[str, JSON]]
) -> list[Pod]:
    """Every virtual pod of the buffers ready for provisioning, with the template their spec names now (a buffer
    whose template is gone plans nothing until its controller marks it again)."""
    out: list[Pod] = []
    for buffer in buffers.values():
        if not cb.ready_for_provisioning(buffer):
            continue
        resolution = cb.resolve(buffer, pod_templates, workloads)
        if isinstance(resolution, cb.Resolution):
            out.extend(cb.virtual_pods(buffer, resolution.template))
    return out


__all__ = ["BUFFER_KINDS", "SCALABLE_KINDS", "pod_template_view", "virtual_pods", "workload_view"]
