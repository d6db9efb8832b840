"""NodeClaim tagging: once a NodeClaim has registered, tag its instance ``Name=<node name>``,
``karpenter.sh/nodeclaim=<name>`` and ``eks:eks-cluster-name=<cluster>`` and mark the NodeClaim
``karpenter.k8s.aws/tagged: "true"`` and ``compatibility.karpenter.k8s.aws/cluster-name-tagged: "true"``, one keyed
reconciler per NodeClaim (Karpenter AWS ``pkg/controllers/nodeclaim/tagging/controller.go``).

As Karpenter does: only a managed NodeClaim (its ``nodeClassRef`` names an EC2NodeClass) with ``status.nodeName``
set, not being deleted and not already carrying both annotations ``"true"`` is taggable. The instance's current
tags are read fresh (``CloudProvider.get`` is uncached) and only the missing keys are created, so a tag a user or
Karpenter wrote is never overwritten; then both annotations are patched. An instance that is gone, or a
providerID the cloud provider cannot parse, is logged and not retried (Karpenter ignores ``NodeClaimNotFound``
and logs an unparsable providerID); the NodeClaim stays unannotated.

CreateTags shares EC2's mutating-call budget with CreateFleet, so Karpenter makes at most one call per second
(it sleeps a second after each on a single worker). karpy reserves one-second slots on its runtime clock
instead: a NodeClaim whose slot has not come yet is requeued for it (no worker sleeps), which keeps the same
limit with any number of workers.

karpy already tags ``karpenter.sh/nodeclaim`` (and the cluster tags) at launch, so a crash between launch and
registration never leaks an instance; on a karpy launch only ``Name`` is usually missing here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import structlog

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.types import CloudProvider, NodeClaimNotFoundError
from karpy.kube import resources as r
from karpy.kube.client import KubeClient, ignore_not_found
from karpy.runtime.clock import Clock, LoopClock
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.controllers.nodeclaim_tagging")
# Karpenter AWS ``AnnotationClusterNameTaggedCompatability`` (``compatibility.karpenter.k8s.aws/cluster-name-tagged``).
ANNOTATION_CLUSTER_NAME_TAGGED: Final = "compatibility.karpenter.k8s.aws/cluster-name-tagged"
TAGGED_ANNOTATIONS: Final = (wk.ANNOTATION_TAGGED, ANNOTATION_CLUSTER_NAME_TAGGED)
# Seconds between two CreateTags calls of this controller (Karpenter sleeps 1 s after each).
CREATE_TAGS_INTERVAL: Final = 1.0


def tagged(annotations: Mapping[str, str]) -> bool:
    """Both tagged annotations are ``"true"`` (Karpenter wrote them, or karpy did)."""
    return all(annotations.get(a) == "true" for a in TAGGED_ANNOTATIONS)


def taggable(claim: NodeClaim) -> bool:
    """Karpenter ``isTaggable`` plus its managed predicate: an EC2NodeClass NodeClaim with a node name, not
    terminating, and not carrying both tagged annotations ``"true"``."""
    if tagged(claim.meta.annotations):
        return False
    return claim.node_class_ref.ec2nodeclass and bool(claim.node_name) and not claim.meta.deleting


def wanted_tags(claim: NodeClaim, cluster_name: str) -> dict[str, str]:
    """The tags Karpenter's tagging controller puts on a registered NodeClaim's instance."""
    return {wk.TAG_NAME: claim.node_name, wk.TAG_NODECLAIM: claim.name, wk.TAG_EKS_CLUSTER_NAME: cluster_name}


class NodeClaimTagging:
    """Keyed reconciler tagging registered NodeClaims' instances (see the module docstring).

    Args:
        client: patches the NodeClaim annotations.
        state: cluster state (the NodeClaim views).
        cloud: reads the instance (uncached) and creates its tags.
        cluster_name: the ``eks:eks-cluster-name`` tag value (``CLUSTER_NAME``).
        clock: monotonic clock of the CreateTags rate limit (the event loop's by default).
    """

    name = "nodeclaim.tagging"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        *,
        cluster_name: str,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.cluster_name = cluster_name
        self.clock = clock or LoopClock()
        self._next_slot = float("-inf")
        self._slots: dict[str, float] = {}

    async def reconcile(self, key: str) -> Result:
        """Tag NodeClaim ``key``'s instance with what it misses, then annotate the NodeClaim; requeue for the
        next CreateTags slot when the rate limit holds it back.

        Raises:
            CloudProviderError: EC2 could not be read or refused the tags (retried with backoff).
            ApiError: the annotation patch failed other than 404.
        """
        claim = self.state.nodeclaim_view(key)
        if claim is None or not taggable(claim):
            self._slots.pop(key, None)
            return Result()
        try:
            instance = await self.cloud.get(claim.provider_id)
            missing = {k: v for k, v in wanted_tags(claim, self.cluster_name).items() if k not in instance.tags}
            if missing:
                wait = self._reserve(key)
                if wait > 0:
                    return Result(requeue_after=wait)
                await self.cloud.create_tags(claim.provider_id, missing)
        except NodeClaimNotFoundError as err:
            # Karpenter: an unparsable providerID is logged, a vanished instance ignored; neither is retried.
            log.info("not tagging instance", provider_id=claim.provider_id, reason=str(err))
            self._slots.pop(key, None)
            return Result()
        patch = {"metadata": {"annotations": dict.fromkeys(TAGGED_ANNOTATIONS, "true")}}
        await ignore_not_found(self.client.merge_patch(r.NODECLAIMS, key, patch))
        return Result()

    def _reserve(self, key: str) -> float:
        """Seconds until ``key`` may call CreateTags; 0 means now (its slot is used up). Each key holds one
        slot, at least :data:`CREATE_TAGS_INTERVAL` after the previous one, so calls stay one per second."""
        now = self.clock.now()
        slot = self._slots.get(key)
        if slot is None:
            slot = max(now, self._next_slot)
            self._next_slot = slot + CREATE_TAGS_INTERVAL
            self._slots[key] = slot
        if slot > now:
            return slot - now
        del self._slots[key]
        return 0.0
