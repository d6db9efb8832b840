"""Workload expansion for ``karpy simulate``: the pods (and PVCs) the workload controllers would create.

* A Deployment creates a ReplicaSet ``<name>-<pod-template-hash>`` whose pods are ``<replicaset>-<5 chars>``
  (Kubernetes ``pkg/controller/deployment/sync.go``); a ReplicaSet's pods are ``<name>-<5 chars>``.
* A StatefulSet's pods are ``<name>-<ordinal>``, with one PVC ``<template>-<name>-<ordinal>`` per
  ``volumeClaimTemplates`` entry (``pkg/controller/statefulset/stateful_set_utils.go``).
* A Job runs ``min(parallelism, completions)`` pods ``<name>-<5 chars>`` (``<name>-<index>-<5 chars>`` when
  Indexed), none when suspended (``pkg/controller/job``).

The 5-character suffixes, random in Kubernetes, are derived from a hash so a run is reproducible; the
pod-template-hash follows Kubernetes ``ComputeHash`` in spirit (FNV-32a of the template, digits encoded with
``SafeEncodeString``) but is not byte-identical to it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from karpy.apis.meta import JSON
from karpy.simulate.defaulting import safe_encode, suffix, uid_for
from karpy.simulate.reading import Document
from karpy.simulate.validation import ManifestError, non_negative_int

WORKLOAD_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "Job"})


@attrs.define
class Workload:
    """A workload controller and the number of pods it creates (after ``--scale``)."""

    kind: str
    namespace: str
    name: str
    pods: int


def pod_count(doc: Document) -> int:
    """Pods a workload runs: ``replicas`` (default 1); for a Job ``min(parallelism, completions)`` (defaults 1
    and unset), 0 when ``suspend`` (Kubernetes Job controller).

    Raises:
        ManifestError: a count is not a non-negative integer.
    """
    spec = doc.obj.get("spec") or {}
    if doc.kind != "Job":
        return non_negative_int(spec.get("replicas"), 1, f"{doc.origin}: spec.replicas")
    if spec.get("suspend"):
        return 0
    parallelism = non_negative_int(spec.get("parallelism"), 1, f"{doc.origin}: spec.parallelism")
    completions = spec.get("completions")
    if completions is None:
        return parallelism
    return min(parallelism, non_negative_int(completions, 1, f"{doc.origin}: spec.completions"))


def template_hash(template: Mapping[str, Any]) -> str:
    """The ``pod-template-hash`` of a pod template: FNV-32a of its canonical JSON, decimal, safe-encoded."""
    h = 0x811C9DC5
    for b in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return safe_encode(str(h))


def unique_suffixes(seed: str, count: int) -> list[str]:
    """``count`` distinct suffixes for one owner (a clash is re-drawn, as a controller retries a taken name)."""
    out: list[str] = []
    taken: set[str] = set()
    for i in range(count):
        attempt = 0
        value = suffix(f"{seed}/{i}")
        while value in taken:
            attempt += 1
            value = suffix(f"{seed}/{i}/{attempt}")
        taken.add(value)
        out.append(value)
    return out


def expand(
    doc: Document,
    count: int,
    default_storage_class: str | None,
    admit: Callable[[JSON], None] | None = None,
) -> list[tuple[JSON, list[JSON]]]:
    """The pods (and, for StatefulSets, the PVCs) a workload controller creates for ``count`` replicas.

    The replicas share one copy of the template's ``spec`` (the workload's own template is left as written):
    what the API server does on create (``admit``, called once with ``{"spec": <that copy>}`` when ``count`` > 0:
    validation and defaulting, which read and write only the spec) is the same for every replica, so it is done
    once, and nothing later writes a pod's spec (the engine works on the frozen
    :class:`~karpy.scheduling.model.Pod`). Each pod has its own ``metadata``; a StatefulSet's pods have their
    own spec mapping and ``volumes`` list (their claims differ), the rest shared.

    Raises:
        ManifestError: the workload has no pod template, or what ``admit`` raises.
    """
    spec = doc.obj.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise ManifestError(f"{doc.origin}: {doc.kind} {doc.ref} has no spec.template.spec")
    if count <= 0:
        return []
    shared = copy.deepcopy(template["spec"])
    if admit is not None:
        admit({"spec": shared})
    ns, name = doc.namespace, doc.name
    uid = str(doc.obj["metadata"].get("uid") or uid_for(doc.kind, ns, name))
    tmeta = template.get("metadata") or {}
    tlabels = dict(tmeta.get("labels") or {})
    annotations = tmeta.get("annotations") or {}
    out: list[tuple[JSON, list[JSON]]] = []
    if doc.kind in ("Deployment", "ReplicaSet"):
        owner_kind, owner_name, owner_uid, labels = "ReplicaSet", name, uid, dict(tlabels)
        if doc.kind == "Deployment":
            phash = template_hash(template)
            owner_name = f"{name}-{phash}"
            owner_uid = uid_for("ReplicaSet", ns, owner_name)
            labels["pod-template-hash"] = phash
        owner = ("apps/v1", owner_kind, owner_name, owner_uid)
        for tail in unique_suffixes(f"{ns}/{owner_name}", count):
            out.append((_pod(shared, annotations, ns, f"{owner_name}-{tail}", labels, owner), []))
    elif doc.kind == "StatefulSet":
        revision = f"{name}-{template_hash(template)}"
        for i in range(count):
            pod_name = f"{name}-{i}"
            labels = {
                **tlabels,
                "controller-revision-hash": revision,
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(i),
            }
            pod = _pod(dict(shared), annotations, ns, pod_name, labels, ("apps/v1", "StatefulSet", name, uid))
            claims = _statefulset_claims(doc, pod, i, default_storage_class)
            out.append((pod, claims))
    else:  # Job
        indexed = spec.get("completionMode") == "Indexed"
        for i, tail in enumerate(unique_suffixes(f"{ns}/{name}", count)):
            labels = {
                **tlabels,
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
            stem = f"{name}-{i}" if indexed else name
            if indexed:
                labels["batch.kubernetes.io/job-completion-index"] = str(i)
            pod_name = f"{stem}-{tail}"
            out.append((_pod(shared, annotations, ns, pod_name, labels, ("batch/v1", "Job", name, uid)), []))
    return out


def _pod(
    spec: JSON,
    annotations: Mapping[str, Any],
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    owner: tuple[str, str, str, str],
) -> JSON:
    """A replica: its own metadata around ``spec`` (shared with the other replicas, see :func:`expand`)."""
    api, kind, owner_name, owner_uid = owner
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid_for("Pod", namespace, name),
            "labels": dict(labels),
            "annotations": dict(annotations),
            "ownerReferences": [
                {"apiVersion": api, "kind": kind, "name": owner_name, "uid": owner_uid, "controller": True}
            ],
        },
        "spec": spec,
    }


def _statefulset_claims(doc: Document, pod: JSON, ordinal: int, default_class: str | None) -> list[JSON]:
    """One PVC per ``volumeClaimTemplates`` entry, mounted into the pod (StatefulSet controller); a claim that
    names no StorageClass gets the default one, as the DefaultStorageClass admission plugin would."""
    claims = []
    volumes = pod["spec"].setdefault("volumes", [])
    if isinstance(volumes, list):  # the template's list is shared with the other replicas: this pod's own copy
        volumes = pod["spec"]["volumes"] = list(volumes)
    for template in (doc.obj.get("spec") or {}).get("volumeClaimTemplates") or []:
        tname = str((template.get("metadata") or {}).get("name") or "")
        if not tname:
            raise ManifestError(f"{doc.origin}: volumeClaimTemplates entry without metadata.name")
        claim_name = f"{tname}-{doc.name}-{ordinal}"
        spec = copy.deepcopy(template.get("spec") or {})
        if spec.get("storageClassName") is None and default_class is not None:
            spec["storageClassName"] = default_class
        claims.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": claim_name, "namespace": doc.namespace, "labels": dict(pod["metadata"]["labels"])},
                "spec": spec,
            }
        )
        volumes[:] = [v for v in volumes if v.get("name") != tname]
        volumes.append({"name": tname, "persistentVolumeClaim": {"claimName": claim_name}})
    return claims
