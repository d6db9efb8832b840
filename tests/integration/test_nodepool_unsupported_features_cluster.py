"""Karpenter v1.15 capabilities on the real apiserver (v1.15 CRDs): a NodePool using ``spec.replicas`` with the
``StaticCapacity`` gate off (Karpenter's default) is accepted, gets ``FeaturesSupported=False`` (reason
``UnsupportedFeature``) and a Warning Event ``UnsupportedFeature`` naming the field, and stays Ready (it keeps no
nodes, as Karpenter); ``consolidationPolicy: Balanced`` is implemented (no condition, no event). The CRD forbids
turning a static NodePool dynamic (Karpenter's CEL rule), so ``replicas`` goes by recreating the NodePool without
it."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from e2e.helpers import ec2nodeclass, nodepool, wait_for
from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.controllers.nodepool_status import COND_FEATURES_SUPPORTED, UNSUPPORTED_FEATURE, NodePoolStatusReconciler
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.state.cluster import ClusterState

pytestmark = [pytest.mark.integration]
NODECLASS = "gates-status"
BALANCED, STATIC = "gates-balanced", "gates-static"


def _status(obj: dict[str, Any], type_: str) -> tuple[str, str] | None:
    c = condition(obj, type_)
    return None if c is None else (c["status"], c["reason"])


class Env:
    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.state = ClusterState()
        self.events = EventRecorder(kube)
        self.reconciler = NodePoolStatusReconciler(kube, self.state, self.events)

    async def reconcile(self, name: str) -> dict[str, Any]:
        """Reconcile NodePool ``name`` from what the apiserver has; the stored object after."""
        self.state.apply("NodePool", "MODIFIED", await self.kube.get(r.NODEPOOLS, name))
        await self.reconciler.reconcile(name)
        await self.events.flush()  # the event POSTs (fire and forget) done
        return await self.kube.get(r.NODEPOOLS, name)

    async def warnings(self, name: str) -> list[str]:
        query = {"fieldSelector": f"involvedObject.name={name},involvedObject.kind=NodePool"}
        items = (await self.kube.list(r.EVENTS, "default", query=query))[0]
        return [e["message"] for e in items if e["type"] == WARNING and e["reason"] == UNSUPPORTED_FEATURE]


async def _ready_nodeclass(kube: KubeClient) -> dict[str, Any]:
    await kube.create(r.EC2NODECLASSES, ec2nodeclass(NODECLASS, "gates"))
    ready = {"type": wk.COND_READY, "status": "True", "reason": "Ready", "message": ""}
    patch = {"status": {"conditions": [{**ready, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}
    return await kube.merge_patch(r.EC2NODECLASSES, NODECLASS, patch, subresource="status")


async def test_balanced_and_static_nodepools_are_reported_then_cleared(kube: KubeClient) -> None:
    env = Env(kube)
    try:
        env.state.apply("EC2NodeClass", "ADDED", await _ready_nodeclass(kube))
        balanced = nodepool(
            BALANCED, nodeclass=NODECLASS, disruption={"consolidationPolicy": "Balanced", "consolidateAfter": "30s"}
        )
        static = nodepool(STATIC, nodeclass=NODECLASS, replicas=2)
        await kube.create(r.NODEPOOLS, balanced)
        await kube.create(r.NODEPOOLS, static)

        # Balanced: implemented, Ready, nothing reported.
        stored = await env.reconcile(BALANCED)
        assert condition(stored, COND_FEATURES_SUPPORTED) is None
        assert _status(stored, wk.COND_READY) == ("True", "Ready")
        assert await env.warnings(BALANCED) == []

        # Static with the StaticCapacity gate off: accepted, reported, Ready (as Karpenter, no nodes kept).
        stored = await env.reconcile(STATIC)
        assert _status(stored, COND_FEATURES_SUPPORTED) == ("False", UNSUPPORTED_FEATURE)
        assert _status(stored, wk.COND_VALIDATION_SUCCEEDED) == ("True", "ValidationSucceeded")
        assert _status(stored, wk.COND_READY) == ("True", "Ready")
        message = condition(stored, COND_FEATURES_SUPPORTED)["message"]
        assert "spec.replicas (2, a static NodePool) needs the StaticCapacity feature gate" in message
        assert [w for w in await env.warnings(STATIC) if "spec.replicas (2, a static NodePool)" in w]

        # replicas goes by recreating the NodePool (the CRD refuses the edit).
        with pytest.raises(ApiError) as refused:
            await kube.merge_patch(r.NODEPOOLS, STATIC, {"spec": {"replicas": None}})
        assert "Cannot transition NodePool between static" in str(refused.value)
        await kube.delete(r.NODEPOOLS, STATIC)
        await _gone(kube, STATIC)
        await kube.create(r.NODEPOOLS, nodepool(STATIC, nodeclass=NODECLASS))
        stored = await env.reconcile(STATIC)
        assert condition(stored, COND_FEATURES_SUPPORTED) is None
        assert _status(stored, wk.COND_VALIDATION_SUCCEEDED) == ("True", "ValidationSucceeded")
        assert _status(stored, wk.COND_READY) == ("True", "Ready")
    finally:
        for name in (BALANCED, STATIC):
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODEPOOLS, name)
        with contextlib.suppress(ApiError):
            await kube.delete(r.EC2NODECLASSES, NODECLASS)


async def _gone(kube: KubeClient, name: str) -> None:
    """Wait (bounded, 10 s) until NodePool ``name`` no longer exists (no finalizer holds it here)."""

    async def absent() -> bool:
        try:
            await kube.get(r.NODEPOOLS, name)
        except ApiError as err:
            if err.not_found:
                return True
            raise
        return False

    await wait_for(absent, timeout=10, what=f"NodePool {name} gone", interval=0.1)
