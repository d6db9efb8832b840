"""NodePool status against the real apiserver: usage that shrinks is written once, then left alone."""

from __future__ import annotations

import asyncio
import contextlib
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


async def test_nodepool_no_instance_type_can_satisfy_is_warned_on_the_apiserver(
    kube: KubeClient, local_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``kubernetes.io/arch DoesNotExist`` against the real catalogue (moto): a Warning Event
    NoCompatibleInstanceTypes on the NodePool, which stays Ready; a satisfiable NodePool gets no such event."""
    from e2e.helpers import ec2nodeclass
    from karpy.apis import labels as wk
    from karpy.apis.conditions import condition
    from karpy.aws.cloudprovider import AWSCloudProvider
    from karpy.aws.session import AWSClients
    from karpy.kube.events import WARNING

    for key, value in local_cluster.aws_env.items():
        monkeypatch.setenv(key, value)
    names = ("status-noarch", "status-amd64")
    nodeclass = await kube.create(r.EC2NODECLASSES, ec2nodeclass("status-compat", local_cluster.cluster_name))
    try:
        async with AWSClients.create("us-east-1", local_cluster.aws_env["AWS_ENDPOINT_URL"]) as clients:
            cloud = AWSCloudProvider(
                clients,
                cluster_name=local_cluster.cluster_name,
                cluster_endpoint=local_cluster.server,
                cluster_ca_bundle="",
                region="us-east-1",
                k8s_version="1.34",
            )
            resolution = await cloud.resolve_nodeclass(nodeclass)
            assert resolution.ready, resolution.conditions
            conditions = [{**c, "lastTransitionTime": "2026-01-01T00:00:00Z"} for c in resolution.conditions]
            conditions.append(
                {
                    "type": wk.COND_READY,
                    "status": "True",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            )
            nodeclass = await kube.merge_patch(
                r.EC2NODECLASSES,
                "status-compat",
                {"status": {**resolution.status, "conditions": conditions}},
                subresource="status",
            )
            state = ClusterState()
            state.apply("EC2NodeClass", "ADDED", nodeclass)
            reconciler = NodePoolStatusReconciler(kube, state, EventRecorder(kube), cloud=cloud)
            for name, req in zip(
                names,
                (
                    {"key": wk.LABEL_ARCH, "operator": "DoesNotExist"},
                    {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
                ),
                strict=True,
            ):
                pool = _nodepool(name)
                pool["spec"]["template"]["spec"]["requirements"] = [req]
                pool["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "status-compat"
                state.apply("NodePool", "ADDED", await kube.create(r.NODEPOOLS, pool))
                await reconciler.reconcile(name)
                await asyncio.gather(*reconciler.events._tasks)  # the event POSTs (fire and forget) done

        async def warnings(name: str) -> list[dict[str, Any]]:
            query = {"fieldSelector": f"involvedObject.name={name},involvedObject.kind=NodePool"}
            items = (await kube.list(r.EVENTS, "default", query=query))[0]
            return [e for e in items if e["type"] == WARNING and e["reason"] == "NoCompatibleInstanceTypes"]

        noarch = await warnings("status-noarch")
        assert noarch and "filtered out all compatible available instance types" in noarch[0]["message"]
        assert not await warnings("status-amd64")
        stored = await kube.get(r.NODEPOOLS, "status-noarch")
        assert (condition(stored, wk.COND_READY) or {}).get("status") == "True", "Karpenter keeps it Ready"
    finally:
        for name in names:
            with contextlib.suppress(Exception):
                await kube.delete(r.NODEPOOLS, name)
        await kube.delete(r.EC2NODECLASSES, "status-compat")
