"""CapacityBuffers in ``karpy simulate``: the headroom the controller would plan for the manifests' buffers.

A CapacityBuffer manifest has no status, so the simulation resolves it as the buffer controller would
(:func:`karpy.scheduling.buffers.resolve` and :func:`~karpy.scheduling.buffers.resolved_status`: the PodTemplate
its ``podTemplateRef`` names, or the Deployment, StatefulSet or ReplicaSet its ``scalableRef`` names, with that
workload's replicas after ``--scale``), then plans its virtual pods beside the real pending pods
(:func:`~karpy.scheduling.buffers.virtual_pods`). A buffer that does not resolve plans nothing and is reported
with the ``ReadyForProvisioning`` reason. On a cluster this takes ``FEATURE_GATES=CapacityBuffer=true`` (Karpenter's
default is off); the simulation plans the buffers it is given and says so in a note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from karpy.apis.meta import JSON
from karpy.apis.quantity import QuantityError, parse_resource_list
from karpy.scheduling import buffers as cb
from karpy.scheduling.model import Pod
from karpy.simulate.validation import ManifestError

GATE_NOTE = "CapacityBuffers are planned only with FEATURE_GATES=CapacityBuffer=true on the controller (default off)"


@attrs.frozen
class BufferPlan:
    """One buffer as the simulation resolved it: ``replicas`` planned (0 when not ready) and, when not ready, the
    ``ReadyForProvisioning`` reason and message."""

    key: str
    replicas: int
    reason: str = ""
    message: str = ""


def check_capacity_buffer(obj: Mapping[str, Any], origin: str) -> None:
    """The CRD's schema and CEL rules (Karpenter v1.15's CapacityBuffer CRD): ``replicas`` and ``percentage`` are
    int32 ≥ 0, ``limits`` are quantities; a podTemplateRef needs replicas or limits; not both refs.

    Raises:
        ManifestError: a rule is broken.
    """
    spec = obj.get("spec") or {}
    ref = f"CapacityBuffer {(obj.get('metadata') or {}).get('name')}"
    for field in ("replicas", "percentage"):
        value, top = spec.get(field), cb.MAX_INT32
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top):
            raise ManifestError(f"{origin}: {ref}: spec.{field} must be an integer from 0 to {top}, not {value!r}")
    if spec.get("limits") is not None:
        try:
            if not isinstance(spec["limits"], Mapping):
                raise QuantityError(f"{spec['limits']!r} is not a map of quantities")
            parse_resource_list(dict(spec["limits"]))
        except QuantityError as err:
            raise ManifestError(f"{origin}: {ref}: spec.limits: {err}") from None
    if spec.get("podTemplateRef") and spec.get("replicas") is None and spec.get("limits") is None:
        raise ManifestError(f"{origin}: {ref}: If podTemplateRef is set, replicas or limits must also be set")
    if spec.get("podTemplateRef") and spec.get("scalableRef"):
        raise ManifestError(f"{origin}: {ref}: You must define either PodTemplateRef or ScalableRef, but not both")


def buffer_pods(
    buffers: list[JSON], pod_templates: list[JSON], workloads: Mapping[str, Mapping[str, JSON]]
) -> tuple[list[Pod], list[BufferPlan]]:
    """The virtual pods of ``buffers`` and how each resolved (sorted by ``namespace/name``).

    ``workloads``: kind → ``namespace/name`` → ``{"spec": {"template", "replicas"}}`` (replicas after ``--scale``).
    """
    templates = {f"{t['metadata'].get('namespace') or 'default'}/{t['metadata']['name']}": t for t in pod_templates}
    pods: list[Pod] = []
    plans: list[BufferPlan] = []
    for buffer in sorted(buffers, key=cb.buffer_key):
        resolution = cb.resolve(buffer, templates, workloads)
        resolved = {**buffer, "status": cb.resolved_status(buffer, resolution)}
        if isinstance(resolution, cb.ResolveError):
            plans.append(BufferPlan(cb.buffer_key(buffer), 0, resolution.reason, resolution.message))
            continue
        virtual = cb.virtual_pods(resolved, resolution.template)
        pods.extend(virtual)
        empty = (cb.REASON_BUFFER_EMPTY, "Buffer has zero desired replicas") if not virtual else ("", "")
        plans.append(BufferPlan(cb.buffer_key(buffer), len(virtual), *empty))
    return pods, plans


__all__ = ["GATE_NOTE", "BufferPlan", "buffer_pods", "check_capacity_buffer"]
