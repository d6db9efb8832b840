"""CapacityBuffers (``autoscaling.x-k8s.io/v1beta1``) as scheduling input: headroom the provisioner plans for as
virtual pods, so that real pods start on nodes that already exist (pure, no I/O).

Karpenter v1.15 behind the ``CapacityBuffer`` gate (off by default), followed file by file:

* **Status resolution** (core ``pkg/controllers/capacitybuffer/controller.go`` ``resolveAndUpdateStatus``,
  ``helpers.go``, ``constants.go``; ``pkg/utils/apps/resolve.go``): the pod shape comes from ``podTemplateRef`` (a
  PodTemplate in the buffer's namespace) or ``scalableRef`` (a Deployment, StatefulSet or ReplicaSet of group
  ``apps``; its ``spec.template`` and ``spec.replicas``, 1 when unset). The buffer's size is the larger of
  ``replicas`` and ``ceil(percentage × workload replicas / 100)`` (at least 1 when both are positive; percentage only
  with a scalableRef), capped by ``limits`` (``floor(limit / request)`` over every resource both name, the smallest
  wins); with neither replicas nor percentage, ``limits`` alone give the size. ``status.replicas``,
  ``status.podTemplateRef``/``podTemplateGeneration`` (podTemplateRef only) and ``status.provisioningStrategy`` are
  written with ``ReadyForProvisioning=True/Resolved``; a missing object gives ``False`` with
  ``PodTemplateNotFound``/``ScalableRefNotFound``, anything else ``ResolutionFailed`` (other status fields kept).
* **Virtual pods** (``pkg/state/virtualpods/utilities.go`` ``BuildVirtualPods``): a buffer that is
  ``ReadyForProvisioning`` with ``status.replicas > 0`` and a ref in its spec becomes ``status.replicas`` identical
  pods named ``capacity-buffer-<buffer>-<i>`` (uid ``<buffer uid>-<i>``, i from 1) with the template's labels (so
  affinity and spread see them), the annotations ``karpenter.sh/capacity-buffer-fake-pod: "true"``,
  ``…-name``, ``…-namespace``, priority ``MinInt32``, no ``nodeName`` and without PVC-backed or ephemeral volumes.
  karpy marks them in the scheduling model by their controller owner ``CapacityBuffer/<buffer uid>``
  (:func:`is_virtual`); the lowest priority queues them after every real pod, so real pods take free room first.
* **Provisioning condition** (``pkg/controllers/provisioning/buffers.go``): after each provisioning pass, per
  buffer, ``Provisioning=True/FitsExistingCapacity`` when all its virtual pods fit existing or in-flight capacity,
  ``False/RequiresNewCapacity`` when some needed a new NodeClaim or fit nowhere, ``False/NotReadyForProvisioning``
  and ``False/BufferEmpty`` for buffers that plan nothing; and the existing nodes that host virtual pods
  (``bufferPodCountsFromResults``), which emptiness does not delete (``disruption/emptiness.go``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from karpy.apis.conditions import condition_true, set_condition
from karpy.apis.meta import JSON
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.scheduling.model import Pod, SchedulingResult
from karpy.scheduling.translate import pod_requests, scheduling_pod

GROUP: Final = "autoscaling.x-k8s.io"
VERSION: Final = "v1beta1"
KIND: Final = "CapacityBuffer"
API_VERSION: Final = f"{GROUP}/{VERSION}"
ACTIVE_CAPACITY: Final = "buffer.x-k8s.io/active-capacity"

COND_READY_FOR_PROVISIONING: Final = "ReadyForProvisioning"
COND_PROVISIONING: Final = "Provisioning"
# ReadyForProvisioning reasons (capacitybuffer/constants.go).
REASON_RESOLVED: Final = "Resolved"
REASON_SCALABLE_REF_NOT_FOUND: Final = "ScalableRefNotFound"
REASON_POD_TEMPLATE_NOT_FOUND: Final = "PodTemplateNotFound"
REASON_RESOLUTION_FAILED: Final = "ResolutionFailed"
# Provisioning reasons (provisioning/buffers.go).
REASON_FITS_EXISTING: Final = "FitsExistingCapacity"
REASON_REQUIRES_NEW: Final = "RequiresNewCapacity"
REASON_NOT_READY: Final = "NotReadyForProvisioning"
REASON_BUFFER_EMPTY: Final = "BufferEmpty"

FAKE_POD_ANNOTATION: Final = "karpenter.sh/capacity-buffer-fake-pod"
BUFFER_NAME_ANNOTATION: Final = "karpenter.sh/capacity-buffer-name"
BUFFER_NAMESPACE_ANNOTATION: Final = "karpenter.sh/capacity-buffer-namespace"
VIRTUAL_POD_PRIORITY: Final = -(2**31)
OWNER_PREFIX: Final = f"{KIND}/"
SCALABLE_KINDS: Final = {"Deployment": "deployments", "StatefulSet": "statefulsets", "ReplicaSet": "replicasets"}
MAX_INT32: Final = 2**31 - 1


@attrs.frozen(slots=True)
class Resolution:
    """A buffer's resolved pod shape. ``template``: the PodTemplateSpec JSON (``metadata``, ``spec``);
    ``pod_template``: the PodTemplate's name and generation (podTemplateRef only, else None); ``scalable_replicas``:
    the workload's ``spec.replicas`` (scalableRef only, else 0)."""

    template: Mapping[str, Any]
    pod_template: tuple[str, int] | None = None
    scalable_replicas: int = 0


@attrs.frozen(slots=True)
class ResolveError:
    """Why a buffer did not resolve: the ``ReadyForProvisioning=False`` reason and message."""

    reason: str
    message: str


def buffer_key(buffer: Mapping[str, Any]) -> str:
    """``namespace/name`` of a buffer (or any namespaced object)."""
    meta = buffer.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _spec(buffer: Mapping[str, Any]) -> Mapping[str, Any]:
    return buffer.get("spec") or {}


def resolve(
    buffer: Mapping[str, Any], pod_templates: Mapping[str, Any], workloads: Mapping[str, Mapping[str, Any]]
) -> Resolution | ResolveError:
    """The buffer's pod shape (Karpenter ``apps.ResolveCapacityBuffer``).

    Args:
        buffer: the CapacityBuffer JSON.
        pod_templates: PodTemplates (JSON with ``metadata`` and ``template``) by ``namespace/name``.
        workloads: kind (``Deployment``, ``StatefulSet``, ``ReplicaSet``) → ``namespace/name`` → the workload's
            JSON (``spec.template``, ``spec.replicas``).
    """
    spec = _spec(buffer)
    namespace = str((buffer.get("metadata") or {}).get("namespace") or "")
    pt_ref: Mapping[str, Any] = spec.get("podTemplateRef") or {}
    scalable: Mapping[str, Any] = spec.get("scalableRef") or {}
    if not pt_ref and not scalable:
        return ResolveError(REASON_RESOLUTION_FAILED, "Neither podTemplateRef nor scalableRef is set")
    if pt_ref:
        name = str(pt_ref.get("name") or "")
        pt = pod_templates.get(f"{namespace}/{name}")
        if pt is None:
            return ResolveError(REASON_POD_TEMPLATE_NOT_FOUND, f'podtemplates "{name}" not found')
        generation = int((pt.get("metadata") or {}).get("generation") or 0)
        return Resolution(template=pt.get("template") or {}, pod_template=(name, generation))
    group = str(scalable.get("apiGroup") or "apps")
    kind, name = str(scalable.get("kind") or ""), str(scalable.get("name") or "")
    if group != "apps":
        return ResolveError(REASON_RESOLUTION_FAILED, f'unsupported scalableRef API group "{scalable.get("apiGroup")}"')
    if kind not in SCALABLE_KINDS:
        return ResolveError(REASON_RESOLUTION_FAILED, f'unsupported kind "{kind}"')
    workload = (workloads.get(kind) or {}).get(f"{namespace}/{name}")
    if workload is None:
        return ResolveError(REASON_SCALABLE_REF_NOT_FOUND, f'{SCALABLE_KINDS[kind]}.apps "{name}" not found')
    wspec = workload.get("spec") or {}
    replicas = wspec.get("replicas")
    return Resolution(template=wspec.get("template") or {}, scalable_replicas=1 if replicas is None else int(replicas))


def percentage_replicas(scalable_replicas: int, percentage: int) -> int:
    """``ceil(scalable_replicas × percentage / 100)``, at least 1 when both are positive (``helpers.go``)."""
    replicas = math.ceil(scalable_replicas * percentage / 100)
    if replicas < 1 and percentage > 0 and scalable_replicas > 0:
        return 1
    return replicas


def limit_replicas(limits: Mapping[str, int], requests: Mapping[str, int]) -> int | None:
    """How many pods of ``requests`` fit in ``limits`` (both canonical units): the smallest ``floor(limit / request)``
    over the resources both name with a non-zero request; None when none does (the limits constrain nothing).
    ``pods`` is not a request here (Karpenter ``RequestsForSpec`` has none)."""
    counts = [
        min(limit // requests[name], MAX_INT32)
        for name, limit in limits.items()
        if name != "pods" and requests.get(name, 0) > 0
    ]
    return min(counts) if counts else None


def desired_replicas(spec: Mapping[str, Any], template: Mapping[str, Any], scalable_replicas: int | None) -> int:
    """The buffer's size (``controller.go`` ``computeReplicas``): max(replicas, percentage of the workload) capped
    by limits, or limits alone when neither is set; ``scalable_replicas`` is None for a podTemplateRef.

    An unparsable limit or template request counts as no limit (the CRD's pattern admits only quantities)."""
    candidates = []
    percentage = spec.get("percentage")
    if scalable_replicas is not None and percentage is not None and scalable_replicas > 0:
        candidates.append(percentage_replicas(scalable_replicas, int(percentage)))
    if spec.get("replicas") is not None:
        candidates.append(int(spec["replicas"]))
    desired = max(candidates, default=0)
    if spec.get("limits") is None:
        return desired
    try:
        limits = parse_resource_list(spec["limits"])
        requests = pod_requests(template.get("spec") or {})
    except QuantityError:
        return desired
    fit = limit_replicas(limits, requests)
    if fit is None:
        return desired
    return min(desired, fit) if candidates else fit


def resolved_status(buffer: Mapping[str, Any], resolution: Resolution | ResolveError) -> JSON:
    """The buffer's new ``status`` after resolution (``resolveAndUpdateStatus``): a copy of the old one with
    ``provisioningStrategy`` from the spec, and either the resolved fields with ``ReadyForProvisioning=True`` or only
    ``ReadyForProvisioning=False`` (the other fields left as they were)."""
    status: JSON = dict(buffer.get("status") or {})
    generation = (buffer.get("metadata") or {}).get("generation")
    conditions = status.get("conditions") or []
    spec = _spec(buffer)
    if isinstance(resolution, ResolveError):
        status["conditions"] = set_condition(
            conditions, COND_READY_FOR_PROVISIONING, "False", resolution.reason, resolution.message, generation
        )
    else:
        if resolution.pod_template is not None:
            status["podTemplateRef"] = {"name": resolution.pod_template[0]}
            status["podTemplateGeneration"] = resolution.pod_template[1]
            scalable = None
        else:
            status.pop("podTemplateRef", None)
            status.pop("podTemplateGeneration", None)
            scalable = resolution.scalable_replicas
        status["replicas"] = desired_replicas(spec, resolution.template, scalable)
        status["conditions"] = set_condition(
            conditions,
            COND_READY_FOR_PROVISIONING,
            "True",
            REASON_RESOLVED,
            "Pod template resolved successfully",
            generation,
        )
    if spec.get("provisioningStrategy") is not None:
        status["provisioningStrategy"] = spec["provisioningStrategy"]
    else:
        status.pop("provisioningStrategy", None)
    return status


def ready_for_provisioning(buffer: Mapping[str, Any]) -> bool:
    """``ReadyForProvisioning=True``, ``status.replicas > 0`` and a ref in the spec (Karpenter
    ``isBufferReadyForProvisioning``)."""
    spec = _spec(buffer)
    replicas = (buffer.get("status") or {}).get("replicas")
    return (
        condition_true(buffer, COND_READY_FOR_PROVISIONING)
        and isinstance(replicas, int)
        and replicas > 0
        and bool(spec.get("podTemplateRef") or spec.get("scalableRef"))
    )


def _sanitized(spec: Mapping[str, Any]) -> JSON:
    """The template's pod spec without ``nodeName`` and without PVC-backed or ephemeral volumes (and their mounts):
    a virtual pod's PVC never exists (``sanitizeVirtualPodSpec``)."""
    out: JSON = {k: v for k, v in spec.items() if k != "nodeName"}
    volumes = spec.get("volumes") or []
    dropped = {v.get("name") for v in volumes if v.get("persistentVolumeClaim") or v.get("ephemeral")}
    if dropped:
        out["volumes"] = [v for v in volumes if v.get("name") not in dropped]
        for field in ("containers", "initContainers"):
            if spec.get(field):
                out[field] = [
                    {**c, "volumeMounts": [m for m in c.get("volumeMounts") or [] if m.get("name") not in dropped]}
                    for c in spec[field]
                ]
    out["priority"] = VIRTUAL_POD_PRIORITY
    return out


def virtual_pods(buffer: Mapping[str, Any], template: Mapping[str, Any]) -> tuple[Pod, ...]:
    """The buffer's ``status.replicas`` virtual pods in the scheduling model (``BuildVirtualPods``); none unless
    :func:`ready_for_provisioning`."""
    if not ready_for_provisioning(buffer):
        return ()
    meta = buffer.get("metadata") or {}
    name, namespace, uid = str(meta.get("name", "")), str(meta.get("namespace", "")), str(meta.get("uid", ""))
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    spec = _sanitized(template.get("spec") or {})
    obj = {
        "metadata": {
            "name": f"capacity-buffer-{name}-1",
            "namespace": namespace,
            "uid": f"{uid}-1",
            "labels": labels,
            "annotations": {
                FAKE_POD_ANNOTATION: "true",
                BUFFER_NAME_ANNOTATION: name,
                BUFFER_NAMESPACE_ANNOTATION: namespace,
            },
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": KIND, "name": name, "uid": uid, "controller": True}
            ],
        },
        "spec": spec,
    }
    first = scheduling_pod(obj)  # translated once: the replicas differ only in name and uid
    out = [first]
    for i in range(2, int(buffer["status"]["replicas"]) + 1):
        out.append(attrs.evolve(first, name=f"capacity-buffer-{name}-{i}", uid=f"{uid}-{i}"))
    return tuple(out)


def is_virtual(pod: Pod) -> bool:
    """A CapacityBuffer's virtual pod (never bound, never given an event, never counted in pod metrics)."""
    return pod.owner.startswith(OWNER_PREFIX)


def real(pods: Iterable[Pod]) -> list[Pod]:
    """``pods`` without virtual ones."""
    return [p for p in pods if not is_virtual(p)]


@attrs.frozen(slots=True)
class BufferSummary:
    """Where one buffer's virtual pods went in a provisioning pass: on existing or in-flight capacity, onto new
    NodeClaims, nowhere (``bufferProvisioningStatus``)."""

    existing: int = 0
    new: int = 0
    failed: int = 0


def classify(result: SchedulingResult, virtual: Sequence[Pod]) -> dict[str, BufferSummary]:
    """Per buffer uid (the virtual pods' owner uid), where its virtual pods went (``classifyBufferPods``)."""
    owner = {p.uid: p.owner.removeprefix(OWNER_PREFIX) for p in virtual}
    by_uid = {p.key: p.uid for p in virtual}
    counts: dict[str, list[int]] = {}

    def count(uid: str, index: int) -> None:
        buffer = owner.get(uid)
        if buffer is not None:
            counts.setdefault(buffer, [0, 0, 0])[index] += 1

    for pods in result.existing.values():
        for pod in pods:
            count(pod.uid, 0)
    for claim in result.new_nodeclaims:
        for pod in claim.pods:
            count(pod.uid, 1)
    for key in result.errors:
        if key in by_uid:
            count(by_uid[key], 2)
    return {uid: BufferSummary(*c) for uid, c in counts.items()}


def buffer_hosts(result: SchedulingResult) -> dict[str, int]:
    """Existing nodes (by the engine's name: a Node's name, ``nodeclaim/<name>`` in flight) → virtual pods placed
    there (``bufferPodCountsFromResults``)."""
    out = {}
    for node, pods in result.existing.items():
        n = sum(1 for p in pods if is_virtual(p))
        if n:
            out[node] = n
    return out


def provisioning_condition(buffer: Mapping[str, Any], summary: BufferSummary | None) -> tuple[str, str, str] | None:
    """The ``Provisioning`` condition (status, reason, message) a pass gives the buffer, or None to leave it
    (``computeProvisioningCondition``; ``summary`` None: none of its virtual pods was in the pass)."""
    if not condition_true(buffer, COND_READY_FOR_PROVISIONING):
        return "False", REASON_NOT_READY, "Buffer is not ReadyForProvisioning"
    desired = (buffer.get("status") or {}).get("replicas") or 0
    if not desired:
        return "False", REASON_BUFFER_EMPTY, "Buffer has zero desired replicas"
    if summary is None:
        return None
    if summary.new or summary.failed:
        message = f"{summary.new}/{desired} virtual pods required new capacity, {summary.failed} failed"
        return "False", REASON_REQUIRES_NEW, message
    if summary.existing == desired:
        return "True", REASON_FITS_EXISTING, f"All {desired} virtual pods fit on existing capacity"
    return None


__all__ = [
    "ACTIVE_CAPACITY",
    "API_VERSION",
    "COND_PROVISIONING",
    "COND_READY_FOR_PROVISIONING",
    "GROUP",
    "KIND",
    "BufferSummary",
    "Resolution",
    "ResolveError",
    "buffer_hosts",
    "buffer_key",
    "classify",
    "desired_replicas",
    "is_virtual",
    "limit_replicas",
    "percentage_replicas",
    "provisioning_condition",
    "ready_for_provisioning",
    "real",
    "resolve",
    "resolved_status",
    "virtual_pods",
]
