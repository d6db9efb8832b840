"""Garbage collection: leaked instances (Karpenter AWS ``pkg/controllers/nodeclaim/garbagecollection/
controller.go``), NodeClaims whose instance is gone (core ``pkg/controllers/nodeclaim/garbagecollection/
controller.go``) and unused launch templates (AWS ``pkg/providers/launchtemplate/launchtemplate.go`` deletes them
on cache eviction and NodeClass deletion).

An unkeyed reconciler run by the runtime's singleton loop once every kind is listed: a pass every 10 s for the
first 20 passes (Karpenter's start-up cadence, so a leak left by a crash is found quickly), then every 30 s
(Karpenter: 2 minutes); a failed pass is retried after 10 s doubling to 30 s.

* **Leaked instances** (:func:`leaked_instances`): an instance carrying karpy's ownership tags — the cluster
  tag ``kubernetes.io/cluster/<cluster>=owned`` AND ``karpenter.sh/nodepool`` — that no NodeClaim owns, neither
  by providerID nor by its ``karpenter.sh/nodeclaim`` tag (a NodeClaim whose launch is in flight owns its
  instance before its providerID is written), launched at least 30 s ago, is terminated, and its Node (if one
  registered) deleted. An instance with only the cluster tag belongs to another node manager and is never
  touched.
* **Orphaned NodeClaims** (:func:`orphan_candidates`): a launched, non-deleting NodeClaim whose instance is not
  among the live instances, launched at least 30 s ago (EC2's eventual consistency), and whose Node is absent,
  not Ready or deleting, is deleted once a direct DescribeInstances confirms the instance is gone (metric
  reason ``garbage_collected``); the terminator then finishes.
* **Launch templates**: at most every 5 minutes, the cloud provider deletes the cluster's templates that no
  launch needs (NodeClass deleted, or unused for 5 minutes).

Only the terminator drains; this controller terminates instances that no NodeClaim owns (nothing to drain
for karpy) and otherwise only deletes NodeClaims.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Final, Protocol

import structlog

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.types import CloudInstance, CloudProvider, NodeClaimNotFoundError
from karpy.controllers.interruption import instance_id_of
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import NODECLAIMS, NODES
from karpy.metrics import GARBAGE_COLLECTED, GC_INSTANCES_TERMINATED, GC_LAUNCH_TEMPLATES_DELETED, nodeclaim_disrupted
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState

log = structlog.get_logger("karpy.garbagecollection")
INSTANCE_GRACE: Final = 30.0
NODECLAIM_GRACE: Final = 30.0
FAST_INTERVAL: Final = 10.0
FAST_PASSES: Final = 20
INTERVAL: Final = 30.0
TEMPLATE_INTERVAL: Final = 300.0
GONE_STATES: Final = frozenset({"shutting-down", "terminated"})


class LaunchTemplateJanitor(Protocol):
    """Deletes launch templates no launch needs (AWS: :meth:`karpy.aws.cloudprovider.AWSCloudProvider.
    delete_unused_launch_templates`)."""

    async def delete_unused_launch_templates(self, nodeclasses: Collection[str]) -> tuple[str, ...]:
        """Delete unneeded templates given the existing EC2NodeClass names; the deleted names.

        Raises:
            CloudProviderError: the cloud could not be read or refused.
        """
        ...


def owned_by_karpy(instance: CloudInstance, cluster_name: str) -> bool:
    """Both ownership tags: ``kubernetes.io/cluster/<cluster>=owned`` and ``karpenter.sh/nodepool``."""
    return instance.tags.get(wk.cluster_tag(cluster_name)) == "owned" and wk.TAG_NODEPOOL in instance.tags


def leaked_instances(
    instances: Iterable[CloudInstance],
    nodeclaims: Mapping[str, NodeClaim],
    *,
    cluster_name: str,
    now: datetime,
    grace: float = INSTANCE_GRACE,
) -> list[CloudInstance]:
    """Instances karpy owns (:func:`owned_by_karpy`) that no NodeClaim in ``nodeclaims`` (name → view) owns by
    providerID or (while that NodeClaim has no providerID yet) by the ``karpenter.sh/nodeclaim`` tag, not already
    shutting down, launched ≥ ``grace``
    seconds before ``now`` (aware UTC). Pure."""
    claimed = {instance_id_of(c.provider_id) for c in nodeclaims.values()} - {""}
    out = []
    for instance in instances:
        if not owned_by_karpy(instance, cluster_name) or instance.state in GONE_STATES:
            continue
        if instance.instance_id in claimed:
            continue
        # The tag protects an instance only while its NodeClaim's launch is unrecorded (no providerID: the
        # lifecycle will adopt it). Once the NodeClaim points at an instance, another one carrying its tag is a
        # second launch (a retried CreateFleet whose first answer was lost) and is leaked.
        owner = nodeclaims.get(instance.tags.get(wk.TAG_NODECLAIM, ""))
        if owner is not None and not owner.provider_id:
            continue
        if (now - instance.launch_time).total_seconds() < grace:
            continue
        out.append(instance)
    return out


def launched_at(claim: NodeClaim) -> float:
    """When the NodeClaim launched (``Launched`` condition's lastTransitionTime, else its creation), epoch s."""
    launched = claim.condition(wk.COND_LAUNCHED)
    return (launched.last_transition_time if launched is not None else 0.0) or claim.meta.creation_timestamp


def orphan_candidates(
    nodeclaims: Iterable[NodeClaim],
    live_instance_ids: Collection[str],
    *,
    now: float,
    grace: float = NODECLAIM_GRACE,
) -> list[NodeClaim]:
    """Launched, non-deleting NodeClaims whose instance id is not in ``live_instance_ids`` and that launched
    ≥ ``grace`` seconds before ``now`` (epoch seconds). Pure; the caller confirms each with the cloud."""
    out = []
    for claim in nodeclaims:
        instance_id = instance_id_of(claim.provider_id)
        if not instance_id or claim.deleting or not claim.is_true(wk.COND_LAUNCHED):
            continue
        if instance_id in live_instance_ids or now - launched_at(claim) < grace:
            continue
        out.append(claim)
    return out


class GarbageCollection:
    """Unkeyed reconciler (:class:`~karpy.runtime.singleton.Singleton`); see the module docstring.
    ``templates`` is optional (no launch-template cleanup)."""

    name = "garbagecollection"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        *,
        cluster_name: str,
        templates: LaunchTemplateJanitor | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.cluster_name = cluster_name
        self.templates = templates
        self.now = now
        self.passes = 0
        self._templates_at: float | None = None

    async def reconcile(self) -> Result:
        """One pass once every kind is listed; the next one on Karpenter's cadence (see the module docstring).

        Raises:
            ApiError, CloudProviderError: the pass failed; the loop retries it with backoff (10 s doubling to 30 s).
        """
        await self.state.wait_listed()
        try:
            await self.collect_once()
        finally:
            self.passes += 1
        return Result(requeue_after=FAST_INTERVAL if self.passes < FAST_PASSES else INTERVAL)

    async def collect_once(self) -> dict[str, list[str]]:
        """One pass; what was collected: ``{"instances": [ids], "nodeclaims": [names], "launch_templates": […]}``.

        Raises:
            CloudProviderError: the instances could not be listed.
            ApiError: the apiserver refused a deletion.
        """
        instances = await self.cloud.list()
        terminated = await self._terminate_leaks(instances)
        live = {i.instance_id for i in instances if i.state not in GONE_STATES}
        orphans = await self._delete_orphans(live)
        templates = await self._clean_templates()
        return {"instances": terminated, "nodeclaims": orphans, "launch_templates": templates}

    async def _terminate_leaks(self, instances: list[CloudInstance]) -> list[str]:
        leaked = leaked_instances(instances, self.state.nodeclaim_views, cluster_name=self.cluster_name, now=self.now())
        done = []
        for instance in leaked:
            # Re-check against the freshest state: a NodeClaim may have been written while we listed.
            if leaked_instances([instance], self.state.nodeclaim_views, cluster_name=self.cluster_name, now=self.now()):
                try:
                    await self.cloud.delete(instance.provider_id)
                except NodeClaimNotFoundError:
                    continue
                GC_INSTANCES_TERMINATED.inc()
                done.append(instance.instance_id)
                log.info(
                    "terminated leaked instance",
                    instance_id=instance.instance_id,
                    nodepool=instance.tags.get(wk.TAG_NODEPOOL),
                    nodeclaim_tag=instance.tags.get(wk.TAG_NODECLAIM),
                    launched=instance.launch_time.isoformat(),
                )
                await self._delete_node_of(instance.provider_id, instance.instance_id)
        return done

    async def _delete_node_of(self, pid: str, instance_id: str) -> None:
        names = [n.name for n in self.state.nodes.values() if instance_id_of(n.provider_id) == instance_id]
        for name in names:
            try:
                await self.client.delete(NODES, name)
                log.info("deleted node of leaked instance", node=name, provider_id=pid)
            except ApiError as err:
                if not err.not_found:
                    raise

    async def _delete_orphans(self, live: set[str]) -> list[str]:
        now = self.now().timestamp()
        deleted = []
        for claim in orphan_candidates(list(self.state.nodeclaim_views.values()), live, now=now):
            node = self.state.node_for_nodeclaim(claim)
            if node is not None and node.ready and not node.deleting:
                # A Ready Node means a heartbeating kubelet: trust it over a listing (Karpenter lets the NodeClaim go
                # only when its Node is absent or not Ready).
                continue
            pid = claim.provider_id
            try:
                instance = await self.cloud.get(pid)
            except NodeClaimNotFoundError:
                instance = None
            if instance is not None:
                continue  # listed late (eventual consistency): it exists
            name = claim.name
            try:
                await self.client.delete(NODECLAIMS, name)
            except ApiError as err:
                if err.not_found:
                    continue
                raise
            pool = claim.nodepool
            nodeclaim_disrupted(claim, GARBAGE_COLLECTED)
            log.info("deleted nodeclaim whose instance is gone", nodeclaim=name, provider_id=pid, nodepool=pool)
            deleted.append(name)
        return deleted

    async def _clean_templates(self) -> list[str]:
        if self.templates is None:
            return []
        clock = self.now().timestamp()
        if self._templates_at is not None and clock - self._templates_at < TEMPLATE_INTERVAL:
            return []
        self._templates_at = clock
        deleted = await self.templates.delete_unused_launch_templates(set(self.state.nodeclass_views))
        GC_LAUNCH_TEMPLATES_DELETED.inc(len(deleted))
        return list(deleted)
