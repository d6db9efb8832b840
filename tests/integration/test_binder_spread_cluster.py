"""A zone-spread workload planned over three NodeClaims of one batch is bound by karpy as the nodes register,
without leaving any pod to kube-scheduler (issue 12: no ``LeftToScheduler`` event per pod for the normal case).

The nodes register one after another; a pod whose share of the spread is only valid once the other zones' pods
are bound waits for them (the batch's registered nodes are bound in one interleaved pass) instead of being
released with a Warning and left to kube-scheduler's retry.

A bare pod is bound only ``BIND_SETTLE`` seconds after its Node's ``karpenter.sh/unregistered`` taint stopped being
NoExecute, so kube-controller-manager's taint-eviction controller has seen the taint lifted before it sees the pod
on the Node (it deleted such a pod within 50 ms of its Binding on a loaded machine; the margin makes that unlikely,
and this test checks the margin, not the race, which seldom shows).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from typing import Any

import pytest
from operator_harness import running_operator
from structlog.testing import capture_logs

from e2e.helpers import apply, delete_nodeclaims, ec2nodeclass, nodeclaims_of, wait_for
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.controllers.binder import BIND_SETTLE
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.integration]
POOL = "spread"
ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]
NAMES = [f"spread-{n}" for n in range(6)]
BARE = "spread-bare"


def spread_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": POOL}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": wk.LABEL_ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": POOL}},
                }
            ],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


async def _clean(kube: KubeClient) -> None:
    for name in [*NAMES, BARE]:
        with contextlib.suppress(ApiError):
            await kube.delete(r.PODS, name, "default")
    with contextlib.suppress(ApiError):
        await kube.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, POOL), timeout=60, what="spread NodeClaims released")


def spread_pool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        nodeclass=POOL,
        requirements=[
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
            {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]},
            {"key": wk.LABEL_ZONE, "operator": "In", "values": ZONES},
        ],
        disruption={"consolidateAfter": "Never"},
    )


async def test_zone_spread_over_a_batch_is_bound_by_karpy_without_leaving_pods(
    local_cluster: Any, kube: KubeClient
) -> None:
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), spread_pool()])
    async with running_operator(local_cluster, kube) as op:
        try:
            with capture_logs() as logs:
                for name in NAMES:
                    await kube.create(r.PODS, spread_pod(name), "default")

                async def all_bound() -> dict[str, str]:
                    nodes = {
                        n: str((await kube.get(r.PODS, n, "default"))["spec"].get("nodeName") or "") for n in NAMES
                    }
                    return nodes if all(nodes.values()) else {}

                placed = await wait_for(all_bound, timeout=90, what="spread pods bound")
            zones = Counter(op.state.nodes[node].labels[wk.LABEL_ZONE] for node in placed.values())
            assert sorted(zones.values()) == [2, 2, 2], zones
            assert len({entry.get("nodeclaim") for entry in logs if entry["event"] == "created nodeclaim"}) == 3
            left = [e for e in logs if e["event"] == "leaving pod to kube-scheduler"]
            assert left == []
            bound_by_karpy = {e["pod"] for e in logs if e["event"] == "bound pod"}
            assert bound_by_karpy == {f"default/{n}" for n in NAMES}
            events = (await kube.list(r.EVENTS, "default"))[0]
            assert not [
                e for e in events if e.get("reason") == "LeftToScheduler" and e["involvedObject"]["name"] in NAMES
            ]
        finally:
            await _clean(kube)


async def test_bare_pod_is_bound_only_once_its_node_has_settled(local_cluster: Any, kube: KubeClient) -> None:
    """Polled every 20 ms: when the pod's Node is first seen with the unregistered taint NoSchedule, and when the
    pod is first seen bound. The Binding comes at least ``BIND_SETTLE`` after karpy saw the taint lifted (half of it
    is asserted, for the polling's own delays); without the settle it came within one poll."""
    pod = spread_pod(BARE)
    del pod["spec"]["topologySpreadConstraints"]
    pod["metadata"]["labels"] = {"app": "bare"}
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), spread_pool()])
    async with running_operator(local_cluster, kube):
        try:
            await kube.create(r.PODS, pod, "default")
            lifted_at: dict[str, float] = {}  # node name -> when first seen with the unregistered taint NoSchedule
            bound_to, bound_at = "", 0.0
            deadline = time.monotonic() + 90
            while not bound_to:
                assert time.monotonic() < deadline, "the bare pod was not bound in 90 s"
                # Both read at once, stamped before either is sent: a slow read makes a lift look earlier and a
                # Binding look later by the same amount, never the other way round.
                asked = time.monotonic()
                (nodes, _), got = await asyncio.gather(
                    kube.list(r.NODES, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"}),
                    kube.get(r.PODS, BARE, "default"),
                )
                for node in nodes:
                    if any(
                        t.get("key") == wk.TAINT_UNREGISTERED_KEY and t.get("effect") == "NoSchedule"
                        for t in node["spec"].get("taints") or []
                    ):
                        lifted_at.setdefault(node["metadata"]["name"], asked)
                bound_to, bound_at = str(got["spec"].get("nodeName") or ""), asked
                await asyncio.sleep(0.02)
            assert bound_to in lifted_at, f"{bound_to} was never seen with the unregistered taint NoSchedule"
            assert bound_at - lifted_at[bound_to] >= BIND_SETTLE / 2, bound_at - lifted_at[bound_to]
            await asyncio.sleep(2)
            assert (await kube.get(r.PODS, BARE, "default"))["spec"]["nodeName"] == bound_to
        finally:
            await _clean(kube)
