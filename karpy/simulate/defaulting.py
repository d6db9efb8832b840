"""Defaulting of ``karpy simulate`` input: what the API server fills in on create, before any controller looks.

Manifests are the user's *input* objects, not what a watch delivers, so the simulation applies:

* names and identity: ``metadata.namespace`` ``default`` for namespaced kinds; a name from ``generateName``
  (apiserver ``storage/names/generate.go``); a ``metadata.uid`` (and the uid of owner references) where a file
  has none. Suffixes and uids, random in Kubernetes, are derived from a hash here so a run is reproducible.
* container requests: a resource with a limit and no request gets the limit as its request (Kubernetes
  ``SetDefaults_Container``, ``pkg/apis/core/v1/defaults.go``; GPUs are usually written as limits only).
* ``spec.priority`` from ``priorityClassName`` (the Priority admission plugin,
  ``plugin/pkg/admission/priority``): the built-in classes and PriorityClass manifests, a ``globalDefault``
  class for pods that name none.
* the default StorageClass (``storageclass.kubernetes.io/is-default-class``) for claims that name none (the
  DefaultStorageClass admission plugin).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence

from karpy.apis.meta import JSON
from karpy.simulate.validation import ManifestError

SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes util/rand alphanums (no vowels, no 0/1/3)
DEFAULT_NAMESPACE = "default"
UID_NAMESPACE = uuid.UUID("5b6f5d0e-4a8e-4c1e-9f0a-6b6172707973")
# Kubernetes built-in PriorityClasses (pkg/apis/scheduling: SystemCriticalPriority = 2e9).
BUILTIN_PRIORITIES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
STORAGE_CLASS_DEFAULT = "storageclass.kubernetes.io/is-default-class"


def uid_for(kind: str, namespace: str, name: str) -> str:
    """A stable uid for an object that has none (uuid5 of kind/namespace/name)."""
    return str(uuid.uuid5(UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def safe_encode(text: str) -> str:
    """Kubernetes ``rand.SafeEncodeString``: each byte mapped onto the no-vowel alphabet."""
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in text.encode())


def suffix(seed: str, length: int = 5) -> str:
    """A reproducible stand-in for the random 5-character name suffix the API server and controllers generate."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in digest[:length])


def generate_name(obj: JSON, where: str) -> JSON:
    """``obj`` with ``metadata.name`` set from ``metadata.generateName`` when it has no name (what the API server
    does on create), with a reproducible suffix seeded by ``where``."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and not meta.get("name") and isinstance(meta.get("generateName"), str):
        meta["name"] = meta["generateName"] + suffix(where)
    return obj


def default_metadata(obj: JSON, namespaced: bool) -> None:
    """Default ``metadata.namespace`` (namespaced kinds), ``metadata.uid`` and owner references' uids, in place.

    Objects read from files usually have no uid; owner references and DaemonSet matching need one. An owner
    reference without a uid gets the uid its owner is defaulted to, so a bound pod finds its DaemonSet.
    """
    meta = obj["metadata"]
    if namespaced:
        meta["namespace"] = str(meta.get("namespace") or DEFAULT_NAMESPACE)
    namespace = str(meta.get("namespace") or "")
    meta["uid"] = str(meta.get("uid") or uid_for(str(obj.get("kind")), namespace, str(meta["name"])))
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, dict) and not ref.get("uid"):
            ref["uid"] = uid_for(str(ref.get("kind")), namespace, str(ref.get("name")))


def priorities(classes: Sequence[JSON]) -> dict[str, int]:
    """PriorityClass name → value: the built-in classes and ``classes``; key ``""`` holds the ``globalDefault``.

    Raises:
        ManifestError: a PriorityClass whose ``value`` is not an integer.
    """
    out = dict(BUILTIN_PRIORITIES)
    for pc in classes:
        value = pc.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ManifestError(f"PriorityClass {pc['metadata']['name']}: value must be an integer")
        out[pc["metadata"]["name"]] = value
        if pc.get("globalDefault"):
            out[""] = value
    return out


def default_storage_class(classes: Sequence[JSON]) -> str | None:
    """The name of the StorageClass annotated as the cluster default, if any."""
    for sc in classes:
        if (sc["metadata"].get("annotations") or {}).get(STORAGE_CLASS_DEFAULT) == "true":
            return str(sc["metadata"]["name"])
    return None


def default_requests(spec: JSON) -> None:
    """Copy each container's limits into its requests where it requests nothing for that resource, in place."""
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            resources = c.get("resources") or {}
            limits = resources.get("limits") or {}
            if limits:
                # ``requests: null`` is no requests (the apiserver drops nulls), not an error.
                requests = resources.get("requests") or {}
                resources["requests"] = requests
                for k, v in limits.items():
                    requests.setdefault(k, v)
                c["resources"] = resources


def default_priority(spec: JSON, priority_values: Mapping[str, int], where: str) -> None:
    """Set ``spec.priority`` from ``priorityClassName`` (or the global default class), unless already set.

    Raises:
        ManifestError: ``priorityClassName`` names no known class.
    """
    if spec.get("priority") is not None:
        return
    cls = str(spec.get("priorityClassName") or "")
    if cls and cls not in priority_values:
        raise ManifestError(f"{where}: priorityClassName {cls!r} not found (add its PriorityClass manifest)")
    if cls or "" in priority_values:
        spec["priority"] = priority_values[cls]
