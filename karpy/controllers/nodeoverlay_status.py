"""NodeOverlay evaluation and status (gate ``NodeOverlay``): Karpenter core v1.15
``pkg/controllers/nodeoverlay/controller.go``.

One unkeyed pass (Karpenter's reconciler re-evaluates every overlay whichever one changed, one worker): the
instance types of every NodePool (through its EC2NodeClass) are evaluated against every NodeOverlay
(:func:`karpy.scheduling.nodeoverlay.evaluate`: validation, weights, conflicts), each overlay's conditions are
written, and only then does the shared :class:`~karpy.scheduling.nodeoverlay.OverlayStore` take the new evaluation,
which the provisioner, disruption, launch and metrics apply to the instance types they read.

Conditions (operatorpkg's ready set ``Ready`` ← ``ValidationSucceeded``): ``ValidationSucceeded=True`` (reason
``ValidationSucceeded``) and ``Ready=True`` (``Ready``) for an applied overlay; ``ValidationSucceeded=False`` with
reason ``RuntimeValidation`` (message: what is invalid) or ``Conflict`` (``conflict with another overlay``) and
``Ready=False`` (``UnhealthyDependents``, ``ValidationSucceeded=False``) otherwise. The status is patched with the
object's resourceVersion (Karpenter's optimistic lock); a conflict or a vanished overlay re-runs the pass half a
second later (once the watch has brought the change) without storing this evaluation. karpy's addition: a Warning
event (reason ``Conflict`` or ``RuntimeValidation``) when an overlay becomes not valid, as for every invalid object
karpy reads.

A NodePool whose instance types cannot be read (EC2NodeClass missing or not resolved) is not evaluated — it gets no
instance types until a later pass evaluates it (Karpenter ``UnevaluatedNodePoolError``) — and the pass fails so it
is retried with backoff; the others are evaluated and stored. Passes run on NodeOverlay, NodePool and
EC2NodeClass changes (the operator's routing) and every 6 hours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import structlog

from karpy.apis.conditions import conditions_json, same_conditions, set_condition
from karpy.apis.nodeoverlay import COND_VALIDATION_SUCCEEDED, NodeOverlay
from karpy.cloudprovider.types import CloudProvider, InstanceType
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import NODEOVERLAYS
from karpy.runtime.controller import Result
from karpy.scheduling.nodeoverlay import Evaluation, OverlayStatus, OverlayStore, PoolTypes, evaluate
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.nodeoverlay")
REEVALUATE_SECONDS: Final = 6 * 3600.0
CONFLICT_RETRY_SECONDS: Final = 0.5
COND_READY: Final = "Ready"


class NodeOverlayEvaluationError(Exception):
    """Some NodePools' instance types could not be read; the pass is retried with backoff."""


class NodeOverlayStatus:
    """See the module docstring. ``on_updated`` is called after a new evaluation is stored (the operator wakes the
    provisioner and tells disruption that prices may have changed, Karpenter's ``MarkUnconsolidated``)."""

    name = "nodeoverlay.status"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        events: EventRecorder,
        store: OverlayStore,
        *,
        on_updated: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.events = events
        self.store = store
        self.on_updated = on_updated

    async def reconcile(self) -> Result:
        """One evaluation (see the module docstring).

        Raises:
            NodeOverlayEvaluationError: a NodePool's instance types could not be read (after storing the rest).
            ApiError: a status patch failed otherwise than by a conflict or a missing overlay.
        """
        await self.state.wait_listed()
        pools, failures = await self._pools()
        overlays = list(self.state.nodeoverlay_views.values())
        evaluation = evaluate(overlays, pools)
        for overlay in sorted(overlays, key=lambda o: o.name):
            if not await self._write_status(overlay, evaluation.statuses[overlay.name]):
                # An overlay changed or vanished: evaluate again once the watch has brought the change.
                return Result(requeue_after=CONFLICT_RETRY_SECONDS)
        self._store(evaluation)
        if failures:
            raise NodeOverlayEvaluationError("; ".join(failures)[:1000])
        return Result(requeue_after=REEVALUATE_SECONDS)

    async def _pools(self) -> tuple[list[PoolTypes], list[str]]:
        """Every NodePool with its template labels and its EC2NodeClass's instance types (un-overlaid), and what
        could not be read."""
        pools: list[PoolTypes] = []
        failures: list[str] = []
        by_class: dict[str, list[InstanceType]] = {}
        for name, pool in sorted(self.state.nodepool_views.items()):
            class_name = pool.template.node_class_ref.name
            nodeclass = self.state.nodeclass_view(class_name)
            if nodeclass is None:
                failures.append(f"nodepool {name}: EC2NodeClass {class_name} not found")
                continue
            if class_name not in by_class:
                try:
                    by_class[class_name] = await self.cloud.get_instance_types(nodeclass.raw)
                except Exception as err:  # one broken NodePool must not keep overlays from the others (Karpenter)
                    failures.append(f"nodepool {name}: listing instance types, {err}")
                    continue
            pools.append(PoolTypes(name, dict(pool.template.labels), by_class[class_name]))
        return pools, failures

    def _store(self, evaluation: Evaluation) -> None:
        previous = self.store.evaluation
        self.store.evaluation = evaluation
        if (previous.updates, previous.evaluated) != (evaluation.updates, evaluation.evaluated):
            log.info(
                "nodeoverlays evaluated",
                applied=evaluation.applied(),
                nodepools=sorted(evaluation.evaluated),
            )
            if self.on_updated is not None:
                self.on_updated()

    async def _write_status(self, overlay: NodeOverlay, status: OverlayStatus) -> bool:
        """Patch the overlay's conditions when they change; False when it changed or vanished meanwhile."""
        stored = conditions_json(overlay.raw)
        conditions = overlay_conditions(stored, status, overlay.meta.generation)
        if same_conditions(conditions, stored):
            return True
        patch: dict[str, Any] = {"status": {"conditions": conditions}}
        if overlay.meta.resource_version:  # optimistic lock: a changed overlay is evaluated again first
            patch["metadata"] = {"resourceVersion": overlay.meta.resource_version}
        try:
            updated = await self.client.merge_patch(NODEOVERLAYS, overlay.name, patch, subresource="status")
        except ApiError as err:
            if err.conflict or err.not_found:
                return False
            raise
        self.state.apply("NodeOverlay", "MODIFIED", updated)
        was = next((c for c in stored if c.get("type") == COND_VALIDATION_SUCCEEDED), None)
        if not status.applied and (was is None or was.get("status") != "False" or was.get("reason") != status.reason):
            log.warning("nodeoverlay not applied", nodeoverlay=overlay.name, reason=status.reason, why=status.message)
            self.events.publish(updated, WARNING, status.reason, f"NodeOverlay {overlay.name}: {status.message}")
        return True


def overlay_conditions(stored: list[Any], status: OverlayStatus, generation: int | None) -> list[Any]:
    """The overlay's conditions after ``status`` (operatorpkg's ready set: ``Ready`` follows
    ``ValidationSucceeded``)."""
    if status.applied:
        out = set_condition(stored, COND_VALIDATION_SUCCEEDED, "True", COND_VALIDATION_SUCCEEDED, "", generation)
        return set_condition(out, COND_READY, "True", COND_READY, "", generation)
    out = set_condition(stored, COND_VALIDATION_SUCCEEDED, "False", status.reason, status.message, generation)
    return set_condition(
        out, COND_READY, "False", "UnhealthyDependents", f"{COND_VALIDATION_SUCCEEDED}=False", generation
    )
