"""The disruption controller's writes against the real apiserver and moto, with the operator in-process.

One scenario: a paused NodePool's empty node gets ``Consolidatable=True`` written through the status subresource
(the CRD schema accepts it) but is not disrupted while the cluster-wide pause Namespace says so; once the pause
is lifted the emptiness command deletes it, with the decision record in a ``DisruptionTerminating`` event, and
the terminator finishes the termination. Everything made here is deleted at the end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import cleanup_pool, running_operator, tainted_pool, tolerating_pod

from e2e.helpers import apply, ec2nodeclass, nodeclaims_of, wait_for
from karpy.apis import labels as wk
from karpy.controllers.disruption import controls
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "disr-it"
TAINT = "karpy-test/disr-it"
PAUSE_NS = "karpy-it-disruption-pause"
DISRUPTION = {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "1s", "budgets": [{"nodes": "100%"}]}


def namespace(paused: bool) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": PAUSE_NS, "annotations": {controls.ANNOTATION_PAUSED: "true" if paused else "false"}},
    }


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    await apply(kube, [namespace(paused=True)])
    async with running_operator(
        local_cluster,
        kube,
        DISRUPTION_POLL_INTERVAL="500ms",
        DISRUPTION_VALIDATION_DELAY="1s",
        DISRUPTION_PAUSE_NAMESPACE=PAUSE_NS,
    ) as op:
        try:
            yield op
        finally:
            await cleanup_pool(kube, POOL, "disruption integration NodeClaims released", (r.NAMESPACES, PAUSE_NS, None))


async def test_pause_namespace_holds_then_emptiness_deletes_with_a_decision_record(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), tainted_pool(POOL, TAINT, DISRUPTION)])
    await kube.create(r.PODS, tolerating_pod(POOL, TAINT), "default")

    async def bound() -> str:
        return str((await kube.get(r.PODS, POOL, "default"))["spec"].get("nodeName") or "")

    await wait_for(bound, timeout=60, what="pod bound")
    (claim,) = await nodeclaims_of(kube, POOL)
    name = claim["metadata"]["name"]
    await kube.delete(r.PODS, POOL, "default")

    async def consolidatable() -> bool:
        obj = await kube.get(r.NODECLAIMS, name)
        return any(
            c["type"] == wk.COND_CONSOLIDATABLE and c["status"] == "True" for c in obj["status"].get("conditions", [])
        )

    await wait_for(consolidatable, timeout=30, what="Consolidatable=True written")
    start = operator.disruption.evaluations
    await wait_for(
        lambda: asyncio.sleep(0, operator.disruption.evaluations >= start + 8), timeout=30, what="8 evaluations"
    )
    assert [c["metadata"]["name"] for c in await nodeclaims_of(kube, POOL)] == [name], "paused: the empty node stays"
    assert not (await kube.get(r.NODECLAIMS, name))["metadata"].get("deletionTimestamp")
    await apply(kube, [namespace(paused=False)])

    async def gone() -> bool:
        return not await nodeclaims_of(kube, POOL)

    await wait_for(gone, timeout=30, what="empty node disrupted once unpaused")
    events = (await kube.list(r.EVENTS, "default", query={"fieldSelector": f"involvedObject.name={name}"}))[0]
    terminating = [e for e in events if e["reason"] == "DisruptionTerminating"]
    assert terminating and '"reason": "Empty"' in terminating[0]["message"]
    assert '"podsMoved": 0' in terminating[0]["message"]
