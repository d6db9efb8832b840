"""NodePool status against the real apiserver: usage that shrinks is written once, then left alone."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.controllers.nodepool_status import NodePoolStatusReconciler
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.events import EventRecorder
from karpy.state.cluster import ClusterState

pytestmark = [pytest.mark.integration]


def _nodepool(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "nowhere"},
                }
            }
        },
    }


async def test_shrinking_usage_drops_stale_resources_and_settles(kube: KubeClient) -> None:
    """Resources left over from removed NodeClaims are nulled, and the next reconcile writes nothing."""
    created = await kube.create(r.NODEPOOLS, _nodepool("status-shrink"))
    try:
        stale = {"status": {"resources": {"cpu": "8", "memory": "32Gi", "nodes": "2"}, "nodes": 2}}
        await kube.merge_patch(r.NODEPOOLS, "status-shrink", stale, subresource="status")
        state = ClusterState()
        state.apply("NodePool", "ADDED", await kube.get(r.NODEPOOLS, "status-shrink"))
        reconciler = NodePoolStatusReconciler(kube, state, EventRecorder(kube))

        await reconciler.reconcile("status-shrink")
        after = await kube.get(r.NODEPOOLS, "status-shrink")
        assert after["status"]["resources"] == {"nodes": "0"}
        assert after["status"]["nodes"] == 0

        state.apply("NodePool", "MODIFIED", after)
        await reconciler.reconcile("status-shrink")
        again = await kube.get(r.NODEPOOLS, "status-shrink")
        assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"], "no second write"
    finally:
        await kube.delete(r.NODEPOOLS, created["metadata"]["name"])
