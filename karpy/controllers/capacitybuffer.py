"""The CapacityBuffer controller (``autoscaling.x-k8s.io/v1beta1``, gate ``CapacityBuffer``, off by default): resolves
each buffer's pod shape and size into its status, and keeps the provisioner planning the buffer's headroom.

Karpenter core ``pkg/controllers/capacitybuffer/controller.go`` (keyed by ``namespace/name``): a buffer is
re-resolved when it changes, when the PodTemplate its ``podTemplateRef`` names changes, when the workload its
``scalableRef`` names changes its spec (generation), and every 30 s; each reconcile wakes the provisioner, whose
pass plans the buffer's virtual pods (:mod:`karpy.scheduling.buffers`) and so restores headroom that real pods
took. The pure rules (replicas, percentage, limits, the conditions) are in :mod:`karpy.scheduling.buffers`.

Status written (only when it changes, as a merge patch of the status subresource carrying the resourceVersion; a
conflict or a vanished buffer retries in 1 s): ``replicas``, ``podTemplateRef``, ``podTemplateGeneration``,
``provisioningStrategy``, ``ReadyForProvisioning`` and — once the provisioner has run a pass — ``Provisioning``,
which Karpenter's provisioner writes itself after each pass (``provisioning/buffers.go``); here the provisioner
hands its pass to :meth:`CapacityBufferController.observe_pass` and this controller is the buffer status' only
writer. Condition transitions are published as events and metrics by the status-conditions controller
(``operator_capacitybuffer_status_condition_*``, as Karpenter's generic status controller for CapacityBuffers). A
karpy addition: a buffer that does not resolve also gets a Warning event naming the reason, once per 2 minutes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from karpy.apis.conditions import set_condition
from karpy.apis.meta import JSON
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import CAPACITYBUFFERS
from karpy.runtime.controller import Result
from karpy.scheduling import buffers as cb
from karpy.scheduling.model import Pod, SchedulingResult
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.capacitybuffer")

RESYNC_SECONDS = 30.0  # Karpenter's RequeueAfter: 30 * time.Second
CONFLICT_RETRY_SECONDS = 1.0


def status_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> JSON:
    """A merge patch turning status ``old`` into ``new`` (removed fields as null)."""
    patch: JSON = {k: v for k, v in new.items() if old.get(k) != v}
    patch.update({k: None for k in old if k not in new})
    return patch


class CapacityBufferController:
    """Keyed by ``namespace/name``. ``trigger`` wakes the provisioner (``Provisioner.trigger``)."""

    name = "capacitybuffer"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        events: EventRecorder,
        *,
        trigger: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.state = state
        self.events = events
        self.trigger = trigger
        # The last provisioning pass: per buffer uid where its virtual pods went; None before the first pass.
        self.summaries: dict[str, cb.BufferSummary] | None = None
        # Told which buffers' Provisioning condition the last pass changed (the operator enqueues them).
        self.enqueue: Callable[[str], None] = lambda key: None

    # Provisioner side ------------------------------------------------------------------------------------

    def observe_pass(self, result: SchedulingResult, virtual: Sequence[Pod]) -> None:
        """A provisioning pass planned ``virtual`` among its pods with ``result``: remember where each buffer's
        virtual pods went, and enqueue the buffers whose ``Provisioning`` condition that changes."""
        self.summaries = cb.classify(result, virtual)
        for key, buffer in self.state.capacity_buffers.items():
            if self._provisioning_changes(buffer):
                self.enqueue(key)

    def _provisioning_changes(self, buffer: Mapping[str, Any]) -> bool:
        wanted = self._provisioning(buffer)
        if wanted is None:
            return False
        status, reason, message = wanted
        for c in (buffer.get("status") or {}).get("conditions") or []:
            if c.get("type") == cb.COND_PROVISIONING:
                return (c.get("status"), c.get("reason"), c.get("message")) != (status, reason, message)
        return True

    def _provisioning(self, buffer: Mapping[str, Any]) -> tuple[str, str, str] | None:
        if self.summaries is None:
            return None
        uid = str((buffer.get("metadata") or {}).get("uid") or "")
        return cb.provisioning_condition(buffer, self.summaries.get(uid))

    # Reconcile -------------------------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result:
        """Resolve the buffer into its status, write it if it changed, and wake the provisioner.

        Never raises for a bad buffer (it gets ``ReadyForProvisioning=False`` and a Warning event).

        Raises:
            ApiError: the status write failed other than by a conflict or a vanished buffer (retried with backoff).
        """
        buffer = self.state.capacity_buffers.get(key)
        if buffer is None:
            # Deleted: its virtual pods are gone from the next pass; a pass now lets emptiness reclaim its nodes.
            self.trigger()
            return Result()
        resolution = cb.resolve(buffer, self.state.pod_templates, self.state.workloads)
        old = dict(buffer.get("status") or {})
        status = cb.resolved_status(buffer, resolution)
        provisioning = self._provisioning({**buffer, "status": status})
        if provisioning is not None:
            generation = (buffer.get("metadata") or {}).get("generation")
            status["conditions"] = set_condition(
                status.get("conditions") or [], cb.COND_PROVISIONING, *provisioning, generation
            )
        if isinstance(resolution, cb.ResolveError):
            self.events.publish(_ref(buffer), WARNING, resolution.reason, resolution.message)
        if _differs(old, status):
            retry = await self._write(key, buffer, status_patch(old, status))
            if retry is not None:
                return retry
        self.trigger()
        return Result(requeue_after=RESYNC_SECONDS)

    async def _write(self, key: str, buffer: Mapping[str, Any], patch: JSON) -> Result | None:
        namespace, name = key.split("/", 1)
        body = {"metadata": {"resourceVersion": buffer["metadata"].get("resourceVersion")}, "status": patch}
        try:
            updated = await self.client.merge_patch(CAPACITYBUFFERS, name, body, namespace, subresource="status")
        except ApiError as err:
            if err.conflict or err.not_found:
                return Result(requeue_after=CONFLICT_RETRY_SECONDS)
            raise
        self.state.apply("CapacityBuffer", "MODIFIED", updated)
        log.info(
            "capacitybuffer status",
            capacitybuffer=key,
            replicas=(updated.get("status") or {}).get("replicas"),
            conditions={c.get("type"): c.get("reason") for c in (updated.get("status") or {}).get("conditions") or []},
        )
        return None


def _differs(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """The status changed other than in a condition's lastTransitionTime."""

    def norm(status: Mapping[str, Any]) -> Mapping[str, Any]:
        conditions = sorted(
            (
                (c.get("type"), c.get("status"), c.get("reason"), c.get("message"), c.get("observedGeneration"))
                for c in status.get("conditions") or []
            ),
            key=str,
        )
        return {**{k: v for k, v in status.items() if k != "conditions"}, "conditions": conditions}

    return norm(old) != norm(new)


def _ref(buffer: Mapping[str, Any]) -> JSON:
    meta = buffer.get("metadata") or {}
    return {
        "apiVersion": cb.API_VERSION,
        "kind": cb.KIND,
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if meta.get(k) is not None},
    }


def buffers_referencing(state: ClusterState, kind: str, key: str) -> list[str]:
    """The buffers (``namespace/name``) a change of ``kind`` object ``key`` (``namespace/name``) re-resolves: a
    PodTemplate's by ``podTemplateRef``, a Deployment's, StatefulSet's or ReplicaSet's by ``scalableRef``
    (Karpenter's ``podTemplateToBuffers`` and ``scalableRefToBuffers``)."""
    namespace, name = key.split("/", 1)
    out = []
    for buffer_key, buffer in state.capacity_buffers.items():
        if buffer_key.split("/", 1)[0] != namespace:
            continue
        spec = buffer.get("spec") or {}
        if kind == "PodTemplate":
            ref = spec.get("podTemplateRef") or {}
            if ref.get("name") == name:
                out.append(buffer_key)
            continue
        scalable = spec.get("scalableRef") or {}
        if (
            (scalable.get("apiGroup") or "apps") == "apps"
            and scalable.get("kind") == kind
            and scalable.get("name") == name
        ):
            out.append(buffer_key)
    return out


__all__ = ["CapacityBufferController", "buffers_referencing", "status_patch"]
