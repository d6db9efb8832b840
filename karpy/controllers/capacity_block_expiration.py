"""Nodes of an expiring capacity block are deleted before EC2 reclaims them (Karpenter AWS
``pkg/controllers/capacityreservation/expiration/controller.go``).

Unkeyed, every minute: a NodeClaim labelled ``karpenter.k8s.aws/capacity-reservation-id`` of a reservation its
EC2NodeClass lists as ``state: expiring`` (a capacity block within 40 minutes of its end,
:func:`karpy.aws.capacityreservations.to_status`) is deleted, so its pods are drained and re-planned while the
instance still runs. Karpenter reads the reservations from EC2 by id; karpy reads the EC2NodeClasses' status, which
the status controller refreshes from EC2 every minute (a block no NodeClass selects any more is not seen: its
instances end with it, as Karpenter's would once EC2 stops listing it).
"""

from __future__ import annotations

from typing import Final

import structlog

from karpy.apis import labels as wk
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import NODECLAIMS
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.capacityblocks")
INTERVAL: Final = 60.0
EXPIRING: Final = "expiring"


def expiring_reservations(state: ClusterState) -> set[str]:
    """Ids of the reservations some EC2NodeClass status lists as expiring."""
    return {
        str(entry.get("id"))
        for obj in state.nodeclasses.values()
        for entry in (obj.get("status") or {}).get("capacityReservations") or []
        if entry.get("state") == EXPIRING
    }


class CapacityBlockExpiration:
    """The ``capacityreservation.expiration`` singleton (see the module docstring)."""

    name = "capacityreservation.expiration"

    def __init__(self, client: KubeClient, state: ClusterState) -> None:
        self.client = client
        self.state = state

    async def reconcile(self) -> Result:
        """One pass; requeued a minute later.

        Raises:
            ApiError: a delete was refused (retried with backoff).
        """
        expiring = expiring_reservations(self.state)
        if not expiring:
            return Result(requeue_after=INTERVAL)
        for claim in list(self.state.nodeclaim_views.values()):
            reservation = claim.meta.labels.get(wk.LABEL_CAPACITY_RESERVATION_ID)
            if reservation not in expiring or claim.deleting:
                continue
            try:
                await self.client.delete(NODECLAIMS, claim.name)
            except ApiError as err:
                if not err.not_found:
                    raise
                continue
            log.info("initiating delete for capacity block expiration", nodeclaim=claim.name, reservation=reservation)
        return Result(requeue_after=INTERVAL)
