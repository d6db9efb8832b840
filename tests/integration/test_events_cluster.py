"""Karpenter's events through the real apiserver, read as ``kubectl describe`` reads them.

A NodePool's node runs a pod annotated ``karpenter.sh/do-not-disrupt``: the disruption controller (operator
in-process, moto as AWS) publishes Karpenter's ``DisruptionBlocked`` (Normal, core
``disruption/events/events.go`` ``Blocked``) on the NodeClaim and on its Node, with Karpenter's message (after
the launch-time ones, which Karpenter publishes too). The
events are listed the way kubectl's describers list them (kubectl ``describe.go`` ``searchEvents``): across all
namespaces with the field selector ``involvedObject.name``, ``involvedObject.namespace`` (empty for
cluster-scoped objects), ``involvedObject.kind`` and ``involvedObject.uid``. Everything made here is deleted at
the end.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from operator_harness import cleanup_pool, running_operator, tainted_pool, tolerating_pod

from e2e.helpers import apply, ec2nodeclass, nodeclaims_of, wait_for
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "events-it"
TAINT = "karpy-test/events-it"
DISRUPTION = {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1s"}


SETTINGS = {"DISRUPTION_POLL_INTERVAL": "500ms", "DISRUPTION_VALIDATION_DELAY": "1s"}
LAUNCH_BLOCKERS = {
    # Karpenter's DisruptionBlocked while a NodeClaim launches (core state/statenode.go ValidateNodeDisruptable)
    "Nodeclaim does not have an associated node",
    "Node isn't initialized",
    "Node is nominated for a pending pod",
}


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
    local_cluster: Any, kube: KubeClient
) -> None:
    """The first operator launches the node; its launch-time DisruptionBlocked events (no Node yet, not
    initialized, nominated) hold the 2-minute de-duplication of each object, as in Karpenter. A second operator
    (a restart: a fresh recorder) finds the initialized node guarded by the pod and says so on both objects."""
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), tainted_pool(POOL, TAINT, DISRUPTION)])
    cleaned = False
    try:
        async with running_operator(local_cluster, kube, **SETTINGS):
            claim, node = await _launch_guarded_node(kube)
        before = {e["metadata"]["name"] for obj in (claim, node) for e in await describe_events(kube, obj)}
        async with running_operator(local_cluster, kube, **SETTINGS) as op:
            try:
                await _assert_blocked_by_the_pod(kube, op, claim, node, before)
            finally:
                await cleanup_pool(kube, POOL, "events integration NodeClaims released")
                cleaned = True
    finally:
        if not cleaned:
            async with running_operator(local_cluster, kube, **SETTINGS):
                await cleanup_pool(kube, POOL, "events integration NodeClaims released")


async def _launch_guarded_node(kube: KubeClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """Create the do-not-disrupt pod and wait until its node is bound and its NodeClaim Initialized."""
    await kube.create(r.PODS, tolerating_pod(POOL, TAINT, {wk.ANNOTATION_DO_NOT_DISRUPT: "true"}), "default")

    async def bound() -> str:
        return str((await kube.get(r.PODS, POOL, "default"))["spec"].get("nodeName") or "")

    node_name = await wait_for(bound, timeout=60, what="pod bound")
    (claim,) = await nodeclaims_of(kube, POOL)
    name = claim["metadata"]["name"]

    async def initialized() -> dict[str, Any] | None:
        obj = await kube.get(r.NODECLAIMS, name)
        conditions = (obj.get("status") or {}).get("conditions") or []
        done = any(c["type"] == wk.COND_INITIALIZED and c["status"] == "True" for c in conditions)
        return obj if done else None

    claim = await wait_for(initialized, timeout=60, what="NodeClaim initialized")
    node = await kube.get(r.NODES, node_name)
    claim.setdefault("kind", "NodeClaim")
    node.setdefault("kind", "Node")
    return claim, node


async def _assert_blocked_by_the_pod(
    kube: KubeClient, op: Operator, claim: dict[str, Any], node: dict[str, Any], before: set[str]
) -> None:
    """``before``: the events that the first operator published."""
    expected = f'Pod has "{wk.ANNOTATION_DO_NOT_DISRUPT}" annotation (Pod=default/{POOL})'

    async def blocked(obj: dict[str, Any]) -> list[dict[str, Any]]:
        events = [e for e in await describe_events(kube, obj) if e["reason"] == "DisruptionBlocked"]
        fresh = [e for e in events if e["metadata"]["name"] not in before]
        return events if any(e["message"] == expected for e in fresh) else []

    await wait_for(lambda: blocked(claim), timeout=60, what="DisruptionBlocked on the NodeClaim")
    await wait_for(lambda: blocked(node), timeout=30, what="DisruptionBlocked on the Node")
    start = op.disruption.evaluations
    await wait_for(
        lambda: asyncio.sleep(0, op.disruption.evaluations >= start + 4), timeout=30, what="4 more evaluations"
    )
    on_claim, on_node = await blocked(claim), await blocked(node)
    for events, kind in ((on_claim, "NodeClaim"), (on_node, "Node")):
        assert {e["type"] for e in events} == {"Normal"}, events
        by_pod = [e for e in events if e["message"] == expected and e["metadata"]["name"] not in before]
        assert len(by_pod) == 1, f"de-duplicated on the {kind}'s UID across evaluations: {events}"
        assert {e["message"] for e in events} - {expected} <= LAUNCH_BLOCKERS, events
        [event] = by_pod
        assert event["metadata"]["namespace"] == "default", "cluster-scoped objects' events live in default"
        assert event["involvedObject"]["kind"] == kind
        assert event["source"]["component"] == "karpy"
    assert on_claim[0]["involvedObject"]["apiVersion"] == "karpenter.sh/v1"
    assert [c["metadata"]["name"] for c in await nodeclaims_of(kube, POOL)] == [claim["metadata"]["name"]], (
        "not disrupted"
    )
