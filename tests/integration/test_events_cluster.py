"""Karpenter's events through the real apiserver, read as ``kubectl describe`` reads them.

A NodePool's node runs a pod annotated ``karpenter.sh/do-not-disrupt``: the disruption controller (operator
in-process, moto as AWS) publishes Karpenter's ``DisruptionBlocked`` (Normal, core
``disruption/events/events.go`` ``Blocked``) on the NodeClaim and on its Node, with Karpenter's message. The
events are listed the way kubectl's describers list them (kubectl ``describe.go`` ``searchEvents``): across all
namespaces with the field selector ``involvedObject.name``, ``involvedObject.namespace`` (empty for
cluster-scoped objects), ``involvedObject.kind`` and ``involvedObject.uid``. Everything made here is deleted at
the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import running_operator

from e2e.helpers import apply, delete_nodeclaims, ec2nodeclass, nodeclaims_of, wait_for
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "events-it"
TAINT = "karpy-test/events-it"


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        taints=[{"key": TAINT, "effect": "NoSchedule"}],
        disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1s"},
    )


def guarded_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": POOL,
            "namespace": "default",
            "labels": {"app": POOL},
            "annotations": {wk.ANNOTATION_DO_NOT_DISRUPT: "true"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    async with running_operator(
        local_cluster, kube, DISRUPTION_POLL_INTERVAL="500ms", DISRUPTION_VALIDATION_DELAY="1s"
    ) as op:
        try:
            yield op
        finally:
            await _cleanup(kube)


async def _claims(kube: KubeClient) -> list[dict[str, Any]]:
    return await nodeclaims_of(kube, POOL)


async def _cleanup(kube: KubeClient) -> None:
    for res, name, ns in ((r.PODS, POOL, "default"), (r.NODEPOOLS, POOL, None)):
        with contextlib.suppress(ApiError):
            await kube.delete(res, name, ns)
    await delete_nodeclaims(kube, lambda: _claims(kube), timeout=60, what="events integration NodeClaims released")
    with contextlib.suppress(ApiError):
        await kube.delete(r.EC2NODECLASSES, POOL)


async def describe_events(kube: KubeClient, obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The events ``kubectl describe`` shows for ``obj`` (a cluster-scoped object)."""
    meta = obj["metadata"]
    selector = ",".join(
        [
            f"involvedObject.name={meta['name']}",
            "involvedObject.namespace=",
            f"involvedObject.kind={obj['kind']}",
            f"involvedObject.uid={meta['uid']}",
        ]
    )
    items, _ = await kube.list(r.EVENTS, None, query={"fieldSelector": selector})
    return items


async def test_do_not_disrupt_pod_blocks_disruption_with_karpenters_event_on_nodeclaim_and_node(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), nodepool()])
    await kube.create(r.PODS, guarded_pod(), "default")

    async def bound() -> str:
        return str((await kube.get(r.PODS, POOL, "default"))["spec"].get("nodeName") or "")

    node_name = await wait_for(bound, timeout=60, what="pod bound")
    (claim,) = await _claims(kube)
    node = await kube.get(r.NODES, node_name)
    claim = await kube.get(r.NODECLAIMS, claim["metadata"]["name"])
    claim.setdefault("kind", "NodeClaim")
    node.setdefault("kind", "Node")
    expected = f'Pod has "{wk.ANNOTATION_DO_NOT_DISRUPT}" annotation (Pod=default/{POOL})'

    async def blocked(obj: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for e in await describe_events(kube, obj) if e["reason"] == "DisruptionBlocked"]

    on_claim = await wait_for(lambda: blocked(claim), timeout=60, what="DisruptionBlocked on the NodeClaim")
    on_node = await wait_for(lambda: blocked(node), timeout=30, what="DisruptionBlocked on the Node")
    for events, kind in ((on_claim, "NodeClaim"), (on_node, "Node")):
        assert [(e["type"], e["message"]) for e in events] == [("Normal", expected)], events
        [event] = events
        assert event["metadata"]["namespace"] == "default", "cluster-scoped objects' events live in default"
        assert event["involvedObject"]["kind"] == kind
        assert event["source"]["component"] == "karpy"
    assert on_claim[0]["involvedObject"]["apiVersion"] == "karpenter.sh/v1"
    assert [c["metadata"]["name"] for c in await _claims(kube)] == [claim["metadata"]["name"]], "not disrupted"
