"""Reading manifests for ``karpy simulate``: files, directories or stdin → the objects a cluster would hold.

What the API server and the workload controllers would do before karpy ever sees a pod is reproduced here,
because the manifests are the user's *input* objects, not what a watch delivers:

* API-server defaulting: ``metadata.namespace`` ``default``; a container resource with a limit and no request
  gets the limit as its request (Kubernetes ``SetDefaults_Container``: GPUs are usually written as limits only);
  ``spec.priority`` from ``priorityClassName`` (the Priority admission plugin; built-in classes and
  PriorityClass manifests, a ``globalDefault`` class for pods that name none).
* Controllers: a Deployment creates a ReplicaSet ``<name>-<pod-template-hash>`` whose pods are
  ``<replicaset>-<5 chars>``; a ReplicaSet's pods ``<name>-<5 chars>``; a StatefulSet's ``<name>-<ordinal>``
  with one PVC ``<template>-<name>-<ordinal>`` per ``volumeClaimTemplates`` entry; a Job runs
  ``min(parallelism, completions)`` pods ``<name>-<5 chars>`` (``<name>-<index>-<5 chars>`` when Indexed), none
  when suspended. The 5-character suffixes, random in Kubernetes, are derived from a hash here so a run is
  reproducible; the pod-template-hash follows Kubernetes ``ComputeHash`` in spirit (FNV-32a of the template,
  digits encoded with ``SafeEncodeString``) but is not byte-identical to it.

Invalid input raises :class:`ManifestError` with one line naming the file, the document and the problem.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import yaml

from karpy.apis.quantity import QuantityError, parse_resource_list

JSON = dict[str, Any]
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes util/rand alphanums (no vowels, no 0/1/3)
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_NAMESPACE = "default"
UID_NAMESPACE = uuid.UUID("5b6f5d0e-4a8e-4c1e-9f0a-6b6172707973")
# Kubernetes built-in PriorityClasses (pkg/apis/scheduling: SystemCriticalPriority = 2e9).
BUILTIN_PRIORITIES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
NODE_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
NODEPOOL_OPERATORS = NODE_OPERATORS | {"Gte", "Lte"}
STORAGE_CLASS_DEFAULT = "storageclass.kubernetes.io/is-default-class"

# (API group, kind) → the Manifests field that keeps the objects; other kinds are counted as ignored.
KINDS: Mapping[tuple[str, str], str] = {
    ("karpenter.sh", "NodePool"): "nodepools",
    ("karpenter.k8s.aws", "EC2NodeClass"): "nodeclasses",
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
}
CLUSTER_SCOPED = frozenset(
    {"NodePool", "EC2NodeClass", "Node", "PersistentVolume", "StorageClass", "PriorityClass", "Namespace"}
)


class ManifestError(Exception):
    """Invalid input: the message is one line naming where and what (``karpy simulate`` exits 2)."""


@attrs.define
class Document:
    """One object read from a manifest, with where it came from (``path#index`` or ``<stdin>#index``)."""

    origin: str
    obj: JSON

    @property
    def kind(self) -> str:
        """``kind``."""
        return str(self.obj.get("kind"))

    @property
    def group(self) -> str:
        """The API group of ``apiVersion`` ("" for core)."""
        api = str(self.obj.get("apiVersion"))
        return api.split("/", 1)[0] if "/" in api else ""

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        """``metadata.namespace`` (defaulted for namespaced kinds, "" for cluster-scoped ones)."""
        return str(self.obj["metadata"].get("namespace") or "")


@attrs.define
class Workload:
    """A workload controller and the number of pods it creates (after ``--scale``)."""

    kind: str
    namespace: str
    name: str
    pods: int


@attrs.define
class Manifests:
    """Everything read, by kind; ``pods`` includes the workloads' expanded pods (JSON, defaulted)."""

    nodepools: list[JSON] = attrs.Factory(list)
    nodeclasses: list[JSON] = attrs.Factory(list)
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


# ---------------------------------------------------------------------------------------------------------
# Reading


def manifest_files(source: str) -> list[Path]:
    """The files of one ``-f`` argument: the file itself, or a directory's ``*.yaml|*.yml|*.json`` (recursive,
    sorted, as ``kubectl apply -R -f`` reads them).

    Raises:
        ManifestError: the path does not exist, or a directory holds no manifest file.
    """
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        if not files:
            raise ManifestError(f"{source}: no *.yaml, *.yml or *.json files in this directory")
        return files
    if not path.exists():
        raise ManifestError(f"{source}: no such file or directory")
    return [path]


def parse_documents(text: str, origin: str) -> list[Document]:
    """Every object of a multi-document YAML (or JSON) text; ``kind: List`` objects are flattened.

    Raises:
        ManifestError: invalid YAML, or a document that is not a Kubernetes object.
    """
    try:
        raw = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ManifestError(f"{origin}: invalid YAML{where}: {problem}") from err
    docs: list[Document] = []
    for i, obj in enumerate(raw, start=1):
        items = obj.get("items") if isinstance(obj, dict) and str(obj.get("kind", "")).endswith("List") else None
        for j, item in enumerate(items if isinstance(items, list) else [obj], start=1):
            where = f"{origin}#{i}" + (f".items[{j - 1}]" if items is not None else "")
            docs.append(Document(where, check_object(item, where)))
    return docs


def check_object(obj: Any, where: str) -> JSON:
    """``obj`` if it is a Kubernetes object (mapping with apiVersion, kind and metadata.name).

    Raises:
        ManifestError: it is not.
    """
    if not isinstance(obj, dict):
        raise ManifestError(f"{where}: expected a Kubernetes object (a mapping), got {type(obj).__name__}")
    for field in ("apiVersion", "kind"):
        if not isinstance(obj.get(field), str) or not obj[field]:
            raise ManifestError(f"{where}: missing {field}")
    meta = obj.get("metadata")
    if isinstance(meta, dict) and not meta.get("name") and isinstance(meta.get("generateName"), str):
        # What the API server does on create, with a reproducible suffix.
        meta["name"] = meta["generateName"] + suffix(where)
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ManifestError(f"{where}: {obj['kind']} without metadata.name")
    for field in ("labels", "annotations"):
        if meta.get(field) is not None and not isinstance(meta[field], dict):
            raise ManifestError(f"{where}: metadata.{field} must be a mapping")
    if obj.get("spec") is not None and not isinstance(obj["spec"], dict):
        raise ManifestError(f"{where}: spec must be a mapping")
    return obj


def read_sources(sources: Sequence[str], stdin: TextIO | None = None) -> list[Document]:
    """All objects of the ``-f`` arguments in order (``-`` reads stdin once).

    Raises:
        ManifestError: a path is missing or unreadable, or a document is invalid.
    """
    docs: list[Document] = []
    for source in sources:
        if source == "-":
            docs.extend(parse_documents((stdin or sys.stdin).read(), "<stdin>"))
            continue
        for path in manifest_files(source):
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as err:
                raise ManifestError(f"{path}: cannot read: {err}") from err
            docs.extend(parse_documents(text, str(path)))
    return docs


# ---------------------------------------------------------------------------------------------------------
# Collecting and expanding


def collect(docs: Iterable[Document], scale: Mapping[str, int] | None = None) -> Manifests:
    """Sort objects by kind, default them, and expand workloads into pods.

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
        meta = doc.obj["metadata"]
        if doc.kind not in CLUSTER_SCOPED:
            meta["namespace"] = str(meta.get("namespace") or DEFAULT_NAMESPACE)
        # Objects read from files usually have no uid; owner references and DaemonSet matching need one.
        meta["uid"] = str(meta.get("uid") or uid_for(doc.kind, doc.namespace, doc.name))
        for ref in meta.get("ownerReferences") or []:
            # The owner's uid as it is defaulted above, so a bound pod finds its DaemonSet by reference.
            if isinstance(ref, dict) and not ref.get("uid"):
                ref["uid"] = uid_for(str(ref.get("kind")), doc.namespace, str(ref.get("name")))
        key = (doc.group, doc.kind, doc.namespace, doc.name)
        if key in seen:
            raise ManifestError(f"{doc.origin}: duplicate {doc.kind} {_ref(doc)} (first in {seen[key]})")
        seen[key] = doc.origin
        if field == "workloads":
            workloads.append(doc)
        else:
            getattr(out, field).append(doc.obj)
        _validate(doc)
    priorities = _priorities(out.priority_classes)
    default_class = _default_storage_class(out.storage_classes)
    scale = dict(scale or {})
    used: set[str] = set()
    for pod in out.pods:
        _default_pod(pod, priorities, str(pod["metadata"].get("name")))
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in out.claims}
    for doc in workloads:
        count = _scaled_count(doc, scale, used)
        out.workloads.append(Workload(doc.kind, doc.namespace, doc.name, count))
        for pod, new_claims in expand(doc, count, default_class):
            _default_pod(pod, priorities, f"{doc.origin} ({doc.kind} {_ref(doc)})")
            out.pods.append(pod)
            for claim in new_claims:
                ref = (claim["metadata"]["namespace"], claim["metadata"]["name"])
                if ref not in claims:
                    claims.add(ref)
                    out.claims.append(claim)
    for ds in out.daemonsets:
        template = (ds.get("spec") or {}).get("template") or {}
        _default_pod(
            {"metadata": template.setdefault("metadata", {}), "spec": template.setdefault("spec", {})},
            priorities,
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


def _ref(doc: Document) -> str:
    return f"{doc.namespace}/{doc.name}" if doc.namespace else doc.name


def _scaled_count(doc: Document, scale: Mapping[str, int], used: set[str]) -> int:
    """The ``--scale`` count for a workload (``namespace/name`` before ``name``), else its own count."""
    for key in (f"{doc.namespace}/{doc.name}", doc.name):
        if key in scale:
            used.add(key)
            return scale[key]
    return pod_count(doc)


def _int_field(value: Any, default: int, where: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(f"{where} must be a non-negative integer, got {value!r}")
    return value


def pod_count(doc: Document) -> int:
    """Pods a workload runs: ``replicas`` (default 1); for a Job ``min(parallelism, completions)`` (defaults 1
    and unset), 0 when ``suspend`` (Kubernetes Job controller).

    Raises:
        ManifestError: a count is not a non-negative integer.
    """
    spec = doc.obj.get("spec") or {}
    if doc.kind != "Job":
        return _int_field(spec.get("replicas"), 1, f"{doc.origin}: spec.replicas")
    if spec.get("suspend"):
        return 0
    parallelism = _int_field(spec.get("parallelism"), 1, f"{doc.origin}: spec.parallelism")
    completions = spec.get("completions")
    if completions is None:
        return parallelism
    return min(parallelism, _int_field(completions, 1, f"{doc.origin}: spec.completions"))


def uid_for(kind: str, namespace: str, name: str) -> str:
    """A stable uid for an object that has none (uuid5 of kind/namespace/name)."""
    return str(uuid.uuid5(UID_NAMESPACE, f"{kind}/{namespace}/{name}"))


def safe_encode(text: str) -> str:
    """Kubernetes ``rand.SafeEncodeString``: each byte mapped onto the no-vowel alphabet."""
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in text.encode())


def template_hash(template: Mapping[str, Any]) -> str:
    """The ``pod-template-hash`` of a pod template: FNV-32a of its canonical JSON, decimal, safe-encoded."""
    h = 0x811C9DC5
    for b in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return safe_encode(str(h))


def suffix(seed: str, length: int = 5) -> str:
    """A reproducible stand-in for the random 5-character name suffix controllers generate."""
    digest = hashlib.sha256(seed.encode()).digest()
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in digest[:length])


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


def expand(doc: Document, count: int, default_storage_class: str | None) -> list[tuple[JSON, list[JSON]]]:
    """The pods (and, for StatefulSets, the PVCs) a workload controller creates for ``count`` replicas.

    Raises:
        ManifestError: the workload has no pod template.
    """
    spec = doc.obj.get("spec") or {}
    template = spec.get("template")
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise ManifestError(f"{doc.origin}: {doc.kind} {_ref(doc)} has no spec.template.spec")
    ns, name = doc.namespace, doc.name
    uid = str(doc.obj["metadata"].get("uid") or uid_for(doc.kind, ns, name))
    tlabels = dict((template.get("metadata") or {}).get("labels") or {})
    out: list[tuple[JSON, list[JSON]]] = []
    if doc.kind in ("Deployment", "ReplicaSet"):
        owner_kind, owner_name, owner_uid, labels = "ReplicaSet", name, uid, dict(tlabels)
        if doc.kind == "Deployment":
            phash = template_hash(template)
            owner_name = f"{name}-{phash}"
            owner_uid = uid_for("ReplicaSet", ns, owner_name)
            labels["pod-template-hash"] = phash
        for tail in unique_suffixes(f"{ns}/{owner_name}", count):
            pod_name = f"{owner_name}-{tail}"
            out.append((_pod(template, ns, pod_name, labels, ("apps/v1", owner_kind, owner_name, owner_uid)), []))
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
            pod = _pod(template, ns, pod_name, labels, ("apps/v1", "StatefulSet", name, uid))
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
            out.append((_pod(template, ns, pod_name, labels, ("batch/v1", "Job", name, uid)), []))
    return out


def _pod(
    template: Mapping[str, Any], namespace: str, name: str, labels: Mapping[str, str], owner: tuple[str, str, str, str]
) -> JSON:
    api, kind, owner_name, owner_uid = owner
    tmeta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid_for("Pod", namespace, name),
            "labels": dict(labels),
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [
                {"apiVersion": api, "kind": kind, "name": owner_name, "uid": owner_uid, "controller": True}
            ],
        },
        "spec": copy.deepcopy(template["spec"]),
    }


def _statefulset_claims(doc: Document, pod: JSON, ordinal: int, default_class: str | None) -> list[JSON]:
    """One PVC per ``volumeClaimTemplates`` entry, mounted into the pod (StatefulSet controller)."""
    claims = []
    volumes = pod["spec"].setdefault("volumes", [])
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


def _priorities(classes: Sequence[JSON]) -> dict[str, int]:
    out = dict(BUILTIN_PRIORITIES)
    for pc in classes:
        value = pc.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise ManifestError(f"PriorityClass {pc['metadata']['name']}: value must be an integer")
        out[pc["metadata"]["name"]] = value
        if pc.get("globalDefault"):
            out[""] = value
    return out


def _default_storage_class(classes: Sequence[JSON]) -> str | None:
    for sc in classes:
        if (sc["metadata"].get("annotations") or {}).get(STORAGE_CLASS_DEFAULT) == "true":
            return str(sc["metadata"]["name"])
    return None


def _default_pod(pod: JSON, priorities: Mapping[str, int], where: str) -> None:
    """API-server defaulting and admission: requests from limits, priority from the PriorityClass.

    Raises:
        ManifestError: invalid quantities, an unknown priorityClassName, or an invalid node affinity.
    """
    spec = pod.setdefault("spec", {})
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            resources = c.get("resources") or {}
            for part in ("requests", "limits"):
                if resources.get(part) is not None and not isinstance(resources[part], dict):
                    raise ManifestError(f"{where}: container {c.get('name')!r} resources.{part} must be a mapping")
                try:
                    parse_resource_list(resources.get(part))
                except QuantityError as err:
                    raise ManifestError(f"{where}: container {c.get('name')!r} resources.{part}: {err}") from err
            limits = resources.get("limits") or {}
            if limits:
                requests = resources.setdefault("requests", {})
                for k, v in limits.items():
                    requests.setdefault(k, v)
                c["resources"] = resources
    try:
        parse_resource_list(spec.get("overhead"))
    except QuantityError as err:
        raise ManifestError(f"{where}: spec.overhead: {err}") from err
    if spec.get("priority") is None:
        cls = str(spec.get("priorityClassName") or "")
        if cls and cls not in priorities:
            raise ManifestError(f"{where}: priorityClassName {cls!r} not found (add its PriorityClass manifest)")
        if cls or "" in priorities:
            spec["priority"] = priorities[cls]
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for term in required.get("nodeSelectorTerms") or []:
        for expr in term.get("matchExpressions") or []:
            check_requirement(expr, NODE_OPERATORS, f"{where}: node affinity")
    for pref in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        for expr in (pref.get("preference") or {}).get("matchExpressions") or []:
            check_requirement(expr, NODE_OPERATORS, f"{where}: preferred node affinity")


def check_requirement(expr: Any, operators: frozenset[str], where: str) -> None:
    """A node selector requirement is well formed (Kubernetes ``ValidateNodeSelectorRequirement``).

    Raises:
        ManifestError: unknown operator, values present/absent against the operator, non-integer Gt/Lt.
    """
    if not isinstance(expr, dict) or not expr.get("key"):
        raise ManifestError(f"{where}: requirement without a key")
    op, values, key = expr.get("operator"), expr.get("values") or [], expr["key"]
    if op not in operators:
        raise ManifestError(f"{where}: {key}: unknown operator {op!r} (one of {', '.join(sorted(operators))})")
    if op in ("In", "NotIn") and not values:
        raise ManifestError(f"{where}: {key} {op} needs values")
    if op in ("Exists", "DoesNotExist") and values:
        raise ManifestError(f"{where}: {key} {op} takes no values")
    if op in ("Gt", "Lt", "Gte", "Lte") and (len(values) != 1 or not str(values[0]).lstrip("-").isdigit()):
        raise ManifestError(f"{where}: {key} {op} needs exactly one integer value")
    min_values = expr.get("minValues")
    if min_values is not None and (isinstance(min_values, bool) or not isinstance(min_values, int) or min_values < 1):
        raise ManifestError(f"{where}: {key}: minValues must be a positive integer")


def _validate(doc: Document) -> None:
    """Kind-specific checks of the fields the simulation reads."""
    spec = doc.obj.get("spec") or {}
    if doc.kind == "NodePool":
        tspec = (spec.get("template") or {}).get("spec") or {}
        for expr in tspec.get("requirements") or []:
            check_requirement(expr, NODEPOOL_OPERATORS, f"{doc.origin}: NodePool {doc.name}")
        try:
            parse_resource_list(spec.get("limits"))
        except QuantityError as err:
            raise ManifestError(f"{doc.origin}: NodePool {doc.name} spec.limits: {err}") from err
        weight = spec.get("weight")
        if weight is not None and (isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100):
            raise ManifestError(f"{doc.origin}: NodePool {doc.name} spec.weight must be an integer 1-100")
    elif doc.kind == "Node":
        status = doc.obj.get("status") or {}
        for part in ("allocatable", "capacity"):
            try:
                parse_resource_list(status.get(part))
            except QuantityError as err:
                raise ManifestError(f"{doc.origin}: Node {doc.name} status.{part}: {err}") from err
        if not status.get("allocatable") and not status.get("capacity"):
            raise ManifestError(f"{doc.origin}: Node {doc.name} has neither status.allocatable nor status.capacity")
    elif doc.kind in ("Deployment", "ReplicaSet", "StatefulSet", "Job"):
        pod_count(doc)
