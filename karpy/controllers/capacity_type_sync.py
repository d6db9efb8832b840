"""A reservation that ended demotes its nodes: ``karpenter.sh/capacity-type`` ``reserved`` → ``on-demand``
(Karpenter AWS ``pkg/controllers/capacityreservation/capacitytype/controller.go``).

Unkeyed, every minute: the cloud's instances are listed, and a NodeClaim labelled ``reserved`` whose instance the
cloud now reports as ``on-demand`` (its capacity reservation expired or was cancelled: EC2 keeps the instance
running as on-demand) is relabelled ``on-demand`` without the ``karpenter.k8s.aws/capacity-reservation-*``
labels; so is its registered Node. Deleting NodeClaims and Nodes are left alone (they are draining anyway), and
only the demotion is handled, never a promotion to ``reserved`` (as Karpenter).
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.types import CloudProvider
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import NODECLAIMS, NODES, Resource
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.capacitytype")
INTERVAL: Final = 60.0
RESERVED_LABELS: Final = (
    wk.LABEL_CAPACITY_RESERVATION_ID,
    wk.LABEL_CAPACITY_RESERVATION_TYPE,
    wk.LABEL_CAPACITY_RESERVATION_INTERRUPTIBLE,
)


def demotion_patch() -> dict[str, Any]:
    """The labels patch of a demoted NodeClaim or Node: on-demand, reservation labels removed."""
    labels: dict[str, Any] = {wk.LABEL_CAPACITY_TYPE: wk.CAPACITY_TYPE_ON_DEMAND}
    labels.update(dict.fromkeys(RESERVED_LABELS))
    return {"metadata": {"labels": labels}}


class CapacityTypeSync:
    """The ``capacityreservation.capacitytype`` singleton (see the module docstring)."""

    name = "capacityreservation.capacitytype"

    def __init__(self, client: KubeClient, state: ClusterState, cloud: CloudProvider) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud

    async def reconcile(self) -> Result:
        """One pass; requeued a minute later.

        Raises:
            CloudProviderError: the instances could not be listed (retried with backoff).
            ApiError: a patch was refused (retried with backoff).
        """
        instances = {i.provider_id: i for i in await self.cloud.list()}
        demoted: list[str] = []
        for claim in list(self.state.nodeclaim_views.values()):
            instance = instances.get(claim.provider_id) if claim.provider_id else None
            if instance is None or claim.deleting or instance.capacity_type != wk.CAPACITY_TYPE_ON_DEMAND:
                continue
            if await self._demote(claim):
                demoted.append(claim.name)
        if demoted:
            log.info("capacity reservation ended: nodeclaims now on-demand", nodeclaims=demoted)
        return Result(requeue_after=INTERVAL)

    async def _demote(self, claim: NodeClaim) -> bool:
        updated = False
        if claim.meta.labels.get(wk.LABEL_CAPACITY_TYPE) == wk.CAPACITY_TYPE_RESERVED:
            updated = await self._patch(NODECLAIMS, "NodeClaim", claim.name)
        node = self.state.node_for_nodeclaim(claim)
        if (
            node is not None
            and not node.deleting
            and node.labels.get(wk.LABEL_REGISTERED) == "true"
            and node.labels.get(wk.LABEL_CAPACITY_TYPE) == wk.CAPACITY_TYPE_RESERVED
        ):
            updated = await self._patch(NODES, "Node", node.name) or updated
        return updated

    async def _patch(self, resource: Resource, kind: str, name: str) -> bool:
        try:
            updated = await self.client.merge_patch(resource, name, demotion_patch())
        except ApiError as err:
            if err.not_found:
                return False
            raise
        self.state.apply(kind, "MODIFIED", updated)
        return True
