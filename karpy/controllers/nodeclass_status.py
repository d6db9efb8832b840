"""EC2NodeClass status: resolved subnets, security groups, AMIs, instance profile and the Ready condition.

Karpenter AWS ``pkg/controllers/nodeclass/controller.go`` (with ``subnet.go``, ``securitygroup.go``, ``ami.go``,
``instanceprofile.go``, ``validation.go``, ``placementgroup.go`` and ``hash/controller.go``): ``Ready`` = AMIsReady ∧
SubnetsReady ∧ SecurityGroupsReady ∧ InstanceProfileReady ∧ ValidationSucceeded ∧ PlacementGroupReady. Re-resolved
every ``SUBNET_REFRESH_INTERVAL`` so new subnets or AMIs are picked up. The resolution itself lives behind the cloud
provider (``resolve_nodeclass``).

A part whose AWS read *failed* (the resolution's ``failed``: connection refused, throttling, 5xx) keeps its last
known ``status`` value and condition, so ``Ready`` does not flip on an AWS blip; the other parts are still
written, and the reconcile then fails so the key is retried with backoff (Karpenter's nodeclass reconcilers
return the error without touching status). Only a NodeClass with nothing known yet for that part gets the
``…ResolutionFailed`` condition. Not Ready means the lifecycle deletes unlaunched NodeClaims of this class
(Karpenter's ``NodeClassNotReady``), which is why a read error must never count as "nothing matched".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import structlog

from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json, same_conditions, set_condition
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.hashing import legacy_nodeclass_hash, nodeclass_hash
from karpy.apis.kubelet import REASON_INVALID, validate_kubelet
from karpy.controllers.hash_restamp import nodeclass_stamp, restamp_nodeclaims
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import EC2NODECLASSES
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.nodeclass")
SUB_CONDITIONS = (
    wk.COND_SUBNETS_READY,
    wk.COND_SECURITY_GROUPS_READY,
    wk.COND_AMIS_READY,
    wk.COND_INSTANCE_PROFILE_READY,
    wk.COND_VALIDATION_SUCCEEDED,
    wk.COND_PLACEMENT_GROUP_READY,
    # Written only with the ReservedCapacity gate on (karpy.aws.capacityreservations), as Karpenter's Ready set
    # includes it only then.
    wk.COND_CAPACITY_RESERVATIONS_READY,
)


class NodeClassResolutionError(Exception):
    """An AWS read failed while resolving an EC2NodeClass; its last known status was kept."""


class NodeClassResolver(Protocol):
    """Resolves an EC2NodeClass (the AWS cloud provider implements it)."""

    async def resolve_nodeclass(self, nodeclass: Mapping[str, Any]) -> Any:
        """Returns an object with ``status`` (dict) and ``conditions`` (list of condition dicts with
        type, status, reason, message)."""
        ...


class NodeClassStatusReconciler:
    """Keyed by EC2NodeClass name.

    Args:
        ca_bundle: the cluster CA bundle the EC2NodeClass hash includes (None: none).
    """

    name = "ec2nodeclass.status"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        resolver: NodeClassResolver,
        events: EventRecorder,
        *,
        refresh_interval: float = 60.0,
        ca_bundle: str | None = None,
    ) -> None:
        self.client = client
        self.ca_bundle = ca_bundle
        self.state = state
        self.resolver = resolver
        self.events = events
        self.refresh_interval = refresh_interval

    async def reconcile(self, key: str) -> Result:
        """Resolve and write status when it changed; requeue for the periodic refresh."""
        nodeclass = self.state.nodeclass_view(key)
        if nodeclass is None or nodeclass.deleting:
            return Result()
        await self._ensure_hash(nodeclass)
        resolution = await self.resolver.resolve_nodeclass(nodeclass.raw)
        failed: dict[str, str] = dict(getattr(resolution, "failed", None) or {})
        generation = nodeclass.meta.generation
        old_status = nodeclass.status
        known = {c.type for c in nodeclass.conditions}
        stored = conditions_json(nodeclass.raw)
        conditions = stored
        for c in resolution.conditions:
            if c["type"] in failed and c["type"] in known:
                continue  # a failed read: the last known condition (and status value) stands
            conditions = set_condition(
                conditions, c["type"], c["status"], c["reason"], c.get("message", ""), generation
            )
        # spec.kubelet is free-form in the CRD: checked here, as Karpenter's nodeclass validation controller does.
        kubelet_errors = validate_kubelet((nodeclass.raw.get("spec") or {}).get("kubelet"))
        conditions = set_condition(
            conditions,
            wk.COND_VALIDATION_SUCCEEDED,
            "False" if kubelet_errors else "True",
            REASON_INVALID if kubelet_errors else "ValidationSucceeded",
            "; ".join(kubelet_errors),
            generation,
        )
        failing = [c for c in conditions if c.get("type") in SUB_CONDITIONS and c.get("status") != "True"]
        if failing:
            first = failing[0]
            conditions = set_condition(
                conditions, wk.COND_READY, "False", first["reason"], first.get("message", ""), generation
            )
        else:
            conditions = set_condition(conditions, wk.COND_READY, "True", "Ready", "", generation)
        new_status = {**resolution.status, "conditions": conditions}
        unchanged = same_conditions(conditions, stored) and all(
            old_status.get(k) == v for k, v in resolution.status.items()
        )
        if not unchanged:
            try:
                updated = await self.client.merge_patch(
                    EC2NODECLASSES, key, {"status": new_status}, subresource="status"
                )
            except ApiError as err:
                if err.not_found:
                    return Result()
                raise
            self.state.apply("EC2NodeClass", "MODIFIED", updated)
            if failing:
                log.info("ec2nodeclass not ready", ec2nodeclass=key, reason=failing[0]["reason"])
                self.events.publish(updated, WARNING, failing[0]["reason"], failing[0].get("message", ""))
            else:
                log.info(
                    "ec2nodeclass ready",
                    ec2nodeclass=key,
                    subnets=len(resolution.status.get("subnets") or []),
                )
        if failed:
            # Retried with the controller's per-key backoff, as Karpenter's reconcile error is.
            parts = ", ".join(f"{t}: {m}" for t, m in sorted(failed.items()))
            raise NodeClassResolutionError(
                f"ec2nodeclass {key}: AWS read failed, last known status kept ({parts})"[:500]
            )
        return Result(requeue_after=self.refresh_interval)

    async def _ensure_hash(self, nodeclass: EC2NodeClass) -> None:
        """Stamp the EC2NodeClass's hash annotations (AWS ``pkg/controllers/nodeclass/hash``, the hash including
        the cluster CA bundle), first re-stamping its NodeClaims when only the hash algorithm changed
        (:mod:`karpy.controllers.hash_restamp`).

        Raises:
            ApiError: a patch was refused; the reconcile is retried.
        """
        annotations = nodeclass.meta.annotations
        want = nodeclass_hash(nodeclass.raw, self.ca_bundle)
        if (
            annotations.get(wk.ANNOTATION_NODECLASS_HASH) == want
            and annotations.get(wk.ANNOTATION_NODECLASS_HASH_VERSION) == wk.NODECLASS_HASH_VERSION
        ):
            return
        stamp = nodeclass_stamp(want, legacy_nodeclass_hash(nodeclass.raw))
        claims = [
            claim
            for claim in self.state.nodeclaim_views.values()
            if claim.node_class_ref.ec2nodeclass and claim.node_class_ref.name == nodeclass.name
        ]
        await restamp_nodeclaims(self.client, self.state, claims, annotations, stamp)
        patch = {
            "metadata": {
                "annotations": {
                    wk.ANNOTATION_NODECLASS_HASH: want,
                    wk.ANNOTATION_NODECLASS_HASH_VERSION: wk.NODECLASS_HASH_VERSION,
                }
            }
        }
        updated = await self.client.merge_patch(EC2NODECLASSES, nodeclass.name, patch)
        self.state.apply("EC2NodeClass", "MODIFIED", updated)
