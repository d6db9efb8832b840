"""The NodeClaim disruption conditions: ``Consolidatable`` and ``Drifted``, one keyed reconciler per NodeClaim
(Karpenter core ``pkg/controllers/nodeclaim/disruption``: ``consolidation.go``, ``drift.go``).

For a NodeClaim of a known NodePool that is not being deleted (key: the NodeClaim's name):

* ``Consolidatable`` is True once its initialized node saw no pod event (bound or left) for the NodePool's
  ``consolidateAfter`` (since initialization at the earliest), False before; absent with ``consolidateAfter:
  Never`` or while the NodeClaim is not initialized (core ``consolidation.go``).
* ``Drifted`` (reason: the drift), judged once the NodeClaim is *launched* and removed while it is not (core
  ``drift.go``; a launched but uninitialized NodeClaim is still no disruption candidate): when the NodeClaim no
  longer matches its NodePool (hash, requirements), its instance type left the NodePool's instance types
  (checked an hour after creation, then every 30 minutes), it no longer matches its EC2NodeClass (hash, the AMI
  mapped to its instance type), or its instance no longer matches the EC2NodeClass (security groups, subnet,
  then its placement-group-id label against the group the selector resolves to now; asked of the cloud provider
  at most once per ``drift_check_interval``), or it expired in a NodePool annotated
  ``karpy.sh/expiration: Budgeted``; removed when none holds. When a reason cannot be judged (the catalogue
  cannot be read, the instance type or the AMIs are unknown) the condition stays as it is, as Karpenter's
  reconciler leaves it on an error.

Conditions are written only on a change. The result requeues the key for the next time-based change (the
node becoming Consolidatable, the next instance check, budgeted expiry); the operator enqueues it on every
change of the NodeClaim, its Node, its node's pods, its NodePool or EC2NodeClass (:func:`affected_nodeclaims`).

Flat beside :mod:`karpy.controllers.nodeclaim_lifecycle` (Karpenter's ``nodeclaim/lifecycle``), as
:mod:`karpy.controllers.nodeclaim_expiration` is: the three ``nodeclaim/*`` controllers stay siblings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.apis.conditions import conditions_json, set_condition
from karpy.apis.ec2nodeclass import EC2NodeClass
from karpy.apis.nodeclaim import NodeClaim
from karpy.apis.nodepool import NodePool
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InstanceType
from karpy.controllers.disruption import controls
from karpy.controllers.disruption import drift as dr
from karpy.controllers.disruption.emptiness import consolidatable, consolidate_after
from karpy.controllers.disruption.helpers import Clock, consolidatable_at, patch_conditions
from karpy.controllers.static_capacity import is_static
from karpy.kube.client import KubeClient
from karpy.runtime.controller import Result
from karpy.state.cluster import ClusterState
from karpy.state.views import NodeInfo, PodInfo

log = structlog.get_logger("karpy.disruption")

# Core drift.go: instance type drift is judged only for NodeClaims older than an hour, and a passed check is
# trusted for 30 minutes (``instanceTypeNotFoundCheckCache``), seconds.
INSTANCE_TYPE_CHECK_AFTER = 3600.0
INSTANCE_TYPE_CHECK_TTL = 1800.0


class NodeClaimDisruption:
    """Keyed reconciler of a NodeClaim's ``Consolidatable`` and ``Drifted`` conditions (module docstring)."""

    name = "nodeclaim.disruption"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        settings: controls.DisruptionSettings | None = None,
        *,
        clock: Clock = time.time,
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.settings = settings or controls.DisruptionSettings()
        self.clock = clock
        # NodeClaim name → (checked at, drift reason): the throttle of the instance lookups.
        self._instance_drift: dict[str, tuple[float, str]] = {}
        # NodeClaim name → when its instance type was last found among the NodePool's instance types.
        self._instance_type_found: dict[str, float] = {}

    async def reconcile(self, key: str) -> Result:
        """Write NodeClaim ``key``'s conditions if they changed; requeue for the next time-based change."""
        claim = self.state.nodeclaim_view(key)
        if claim is None:
            self._instance_drift.pop(key, None)
            self._instance_type_found.pop(key, None)
            return Result()
        if claim.deleting:
            return Result()
        pool = self.state.nodepool_view(claim.nodepool)
        if pool is None:
            return Result()
        now = self.clock()
        want_consolidatable: bool | None = None
        # A static NodePool's NodeClaims are never Consolidatable (core nodeclaim/disruption/controller.go).
        if consolidate_after(pool) is not None and not is_static(pool) and claim.is_true(wk.COND_INITIALIZED):
            node = self.state.node_for_nodeclaim(claim)
            last = self.state.last_pod_event.get(node.name, self.state.started_at) if node else now
            want_consolidatable = consolidatable(claim, pool, last, now)
        drift: str | None = ""
        if claim.is_true(wk.COND_LAUNCHED):
            drift = await self.drift_reason(claim, pool, now)
        await self._write_conditions(key, claim, want_consolidatable, drift)
        return Result(requeue_after=self._next_change(key, claim, pool, now))

    async def drift_reason(self, claim: NodeClaim, nodepool: NodePool, now: float) -> str | None:
        """Why the launched NodeClaim drifted ("" when it has not; None when it cannot be judged now), in core
        ``drift.go``'s order: the NodePool, the instance type, then the cloud provider's (the EC2NodeClass's
        objects, then the instance, throttled); karpy's budgeted expiry last."""
        reason = dr.nodepool_drift(claim, nodepool)
        if reason:
            return reason
        nodeclass = self.state.nodeclass_view(claim.node_class_ref.name) or self.state.nodeclass_view(
            nodepool.template.node_class_ref.name
        )
        types = await self._instance_types(claim, nodeclass)
        found = self._instance_type_found.get(claim.name)
        created = claim.meta.creation_timestamp
        if (found is None or now - found >= INSTANCE_TYPE_CHECK_TTL) and now - created > INSTANCE_TYPE_CHECK_AFTER:
            if types is None:
                return None
            if dr.instance_type_not_found(types, claim):
                return dr.INSTANCE_TYPE_NOT_FOUND
            self._instance_type_found[claim.name] = now
        if nodeclass is not None:
            instance_type = dr.find_instance_type(types, claim) if types is not None else None
            maybe = dr.nodeclass_drift(claim, nodeclass, instance_type)
            if maybe is None:
                return None
            reason = maybe or await self._instance_drift_reason(claim, nodeclass, now)
        if not reason and controls.expiration_budgeted(nodepool) and dr.expired(claim, now):
            reason = dr.EXPIRED
        return reason

    async def _instance_types(self, claim: NodeClaim, nodeclass: EC2NodeClass | None) -> list[InstanceType] | None:
        """The NodePool's instance types (its EC2NodeClass's catalogue, unavailable offerings included), None
        when they cannot be read (Karpenter's ``GetInstanceTypes`` error)."""
        if nodeclass is None:
            return None
        try:
            return await self.cloud.get_instance_types(nodeclass.raw)
        except CloudProviderError as err:
            log.debug("instance types unknown for drift", nodeclaim=claim.name, error=str(err)[:300])
            return None

    def _next_change(self, key: str, claim: NodeClaim, nodepool: NodePool, now: float) -> float:
        """Seconds until a condition can change with no event: the node becoming Consolidatable, the next
        instance drift check, budgeted expiry; at most ``drift_check_interval``."""
        times = [consolidatable_at(self.state, claim)]
        checked = self._instance_drift.get(key)
        if checked is not None:
            times.append(checked[0] + self.settings.drift_check_interval)
        if controls.expiration_budgeted(nodepool):
            times.append(dr.expires_at(claim))
        soonest = min((at - now for at in times if at is not None and at > now), default=None)
        limit = self.settings.drift_check_interval
        return limit if soonest is None else min(soonest, limit)

    async def _instance_drift_reason(self, claim: NodeClaim, nodeclass: EC2NodeClass, now: float) -> str:
        name = claim.name
        cached = self._instance_drift.get(name)
        if cached is not None and now - cached[0] < self.settings.drift_check_interval:
            return cached[1]
        pid = claim.provider_id
        reason = ""
        if pid:
            try:
                reason = dr.instance_drift(nodeclass, await self.cloud.get(pid))
            except CloudProviderError as err:
                log.debug("instance drift not checked", nodeclaim=name, error=str(err))
        if not reason:  # AWS drift.go: after security groups and subnets; None (not judged) counts as none
            reason = await self.cloud.placement_group_drift(nodeclass.raw, claim.meta.labels) or ""
        self._instance_drift[name] = (now, reason)
        return reason

    async def _write_conditions(
        self, name: str, claim: NodeClaim, want_consolidatable: bool | None, drift: str | None
    ) -> None:
        conditions = conditions_json(claim.raw)
        before = json.dumps(conditions, sort_keys=True)
        generation = claim.meta.generation
        if want_consolidatable is None:
            conditions = [c for c in conditions if c.get("type") != wk.COND_CONSOLIDATABLE]
        else:
            status = "True" if want_consolidatable else "False"
            current = claim.condition(wk.COND_CONSOLIDATABLE)
            if current is None or current.status != status:
                conditions = set_condition(conditions, wk.COND_CONSOLIDATABLE, status, "Consolidatable", "", generation)
        current_drift = claim.condition(wk.COND_DRIFTED)
        if drift is None:  # not judged: leave the condition as it is
            pass
        elif drift and (current_drift is None or current_drift.reason != drift):
            conditions = set_condition(conditions, wk.COND_DRIFTED, "True", drift, "", generation)
            log.info("nodeclaim drifted", nodeclaim=name, reason=drift)
        elif not drift and current_drift is not None:
            conditions = [c for c in conditions if c.get("type") != wk.COND_DRIFTED]
        if json.dumps(conditions, sort_keys=True) == before:
            return
        await patch_conditions(self.client, self.state, name, conditions, claim)


def affected_nodeclaims(state: ClusterState, kind: str, key: str, old: Any, new: Any) -> list[str]:
    """The NodeClaims whose disruption conditions or expiration a state change can change (the operator's
    routing enqueues them): the NodeClaim itself, a Node's NodeClaim, the NodeClaim of a node a pod bound to or
    left, every NodeClaim of a NodePool, or of an EC2NodeClass."""
    if kind == "NodeClaim":
        return [key]
    if kind == "Node":
        node: NodeInfo | None = new or old
        claim = state.nodeclaim_view_for_node(node) if node is not None else None
        return [claim.name] if claim is not None else []
    if kind == "Pod":
        return _pod_nodeclaims(state, old, new)
    if kind == "NodePool":
        return [c.name for c in state.nodeclaim_views_of(key)]
    if kind == "EC2NodeClass":
        pools = {n for n, p in state.nodepool_views.items() if p.template.node_class_ref.name == key}
        return [n for n, c in state.nodeclaim_views.items() if c.node_class_ref.name == key or c.nodepool in pools]
    return []


def _pod_nodeclaims(state: ClusterState, old: PodInfo | None, new: PodInfo | None) -> list[str]:
    """A pod event moves its node's ``consolidateAfter`` clock only when the pod binds, leaves or finishes."""
    before = old.node_name if old is not None and not old.terminal else ""
    after = new.node_name if new is not None and not new.terminal else ""
    if before == after:
        return []
    return list(_claims_of_nodes(state, (n for n in (before, after) if n)))


def _claims_of_nodes(state: ClusterState, names: Iterable[str]) -> Iterable[str]:
    for name in names:
        node = state.nodes.get(name)
        claim = state.nodeclaim_view_for_node(node) if node is not None else None
        if claim is not None:
            yield claim.name
