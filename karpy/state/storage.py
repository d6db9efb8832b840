"""Namespaces, PersistentVolumes, PersistentVolumeClaims and StorageClasses reduced to what scheduling reads.

Cluster state keeps these slim JSON views instead of whole objects (a PV's status, a PVC's status details, a
StorageClass's parameters and every object's managedFields are never read), in the shapes that
:func:`karpy.scheduling.volumes.volume_topology` takes. ``metadata.resourceVersion`` is kept so cluster state
can drop a stale watch event after a newer one.

Pods keep, besides their :class:`~karpy.state.views.PodInfo`, a minimal pod JSON with only their PVC-backed
volumes (:func:`pod_volumes`), and only when they have such volumes: a pod without volumes costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from karpy.apis.meta import JSON
from karpy.scheduling.volumes import DEFAULT_CLASS_ANNOTATION

NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"


def _meta(obj: Mapping[str, Any], *, namespaced: bool = False) -> JSON:
    meta = obj.get("metadata") or {}
    out: JSON = {"name": str(meta.get("name", "")), "resourceVersion": str(meta.get("resourceVersion", ""))}
    if namespaced:
        out["namespace"] = str(meta.get("namespace", ""))
    return out


def namespace_view(obj: Mapping[str, Any]) -> JSON:
    """A Namespace's name and labels, with ``kubernetes.io/metadata.name`` (which the API server always sets;
    added here too for objects that predate it) — what ``namespaceSelector`` of pod affinity terms matches."""
    meta = _meta(obj)
    labels = dict((obj.get("metadata") or {}).get("labels") or {})
    labels.setdefault(NAMESPACE_NAME_LABEL, meta["name"])
    return {"metadata": {**meta, "labels": labels}}


def persistent_volume_view(obj: Mapping[str, Any]) -> JSON:
    """A PersistentVolume's name, required node affinity and whether it is ``local``/``hostPath`` (whose
    hostname requirement Karpenter ignores)."""
    spec = obj.get("spec") or {}
    slim: JSON = {}
    if spec.get("nodeAffinity"):
        slim["nodeAffinity"] = spec["nodeAffinity"]
    for source in ("local", "hostPath"):
        if spec.get(source):
            slim[source] = {"path": str((spec[source] or {}).get("path", ""))}
    return {"metadata": _meta(obj), "spec": slim}


def pvc_view(obj: Mapping[str, Any]) -> JSON:
    """A PersistentVolumeClaim's namespace/name, bound volume, StorageClass and phase."""
    spec = obj.get("spec") or {}
    slim = {k: spec[k] for k in ("volumeName", "storageClassName") if spec.get(k)}
    phase = str((obj.get("status") or {}).get("phase") or "")
    return {"metadata": _meta(obj, namespaced=True), "spec": slim, "status": {"phase": phase}}


def storage_class_view(obj: Mapping[str, Any]) -> JSON:
    """A StorageClass's name, default-class annotation, provisioner, binding mode and allowed topologies."""
    meta = _meta(obj)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if DEFAULT_CLASS_ANNOTATION in annotations:
        meta["annotations"] = {DEFAULT_CLASS_ANNOTATION: str(annotations[DEFAULT_CLASS_ANNOTATION])}
    out: JSON = {"metadata": meta, "provisioner": str(obj.get("provisioner", ""))}
    for field in ("volumeBindingMode", "allowedTopologies"):
        if obj.get(field):
            out[field] = obj[field]
    return out


def pod_volumes(obj: Mapping[str, Any]) -> JSON | None:
    """The pod's name, namespace and PVC-backed volumes (``persistentVolumeClaim``, and ``ephemeral`` reduced to
    its template's StorageClass), or None when it has none (the common case: nothing is kept)."""
    volumes = []
    for volume in (obj.get("spec") or {}).get("volumes") or []:
        if volume.get("persistentVolumeClaim"):
            volumes.append({"name": volume.get("name", ""), "persistentVolumeClaim": volume["persistentVolumeClaim"]})
        elif volume.get("ephemeral"):
            template = ((volume["ephemeral"] or {}).get("volumeClaimTemplate") or {}).get("spec") or {}
            slim = {"storageClassName": template["storageClassName"]} if template.get("storageClassName") else {}
            volumes.append({"name": volume.get("name", ""), "ephemeral": {"volumeClaimTemplate": {"spec": slim}}})
    if not volumes:
        return None
    meta = obj.get("metadata") or {}
    return {
        "metadata": {"name": str(meta.get("name", "")), "namespace": str(meta.get("namespace", ""))},
        "spec": {"volumes": volumes},
    }


__all__ = [
    "NAMESPACE_NAME_LABEL",
    "namespace_view",
    "persistent_volume_view",
    "pod_volumes",
    "pvc_view",
    "storage_class_view",
]
