"""CapacityBuffer end to end on the local cluster (control plane + KWOK + moto), karpy as its own process with
``FEATURE_GATES=CapacityBuffer=true``.

A buffer keeps room for 2 pods of Deployment ``cbuf``'s template (``scalableRef``, ``replicas: 2``) in NodePool
``cbuf`` (``consolidateAfter: 10s``):

1. karpy launches one node for the headroom alone (no real pod planned on it) and the buffer reports
   ``Provisioning=True/FitsExistingCapacity``; the node stays although it is empty and Consolidatable (emptiness
   publishes ``Unconsolidatable: Node "…" has buffer pods``, Karpenter ``emptiness.go``);
2. the Deployment is scaled to 2: kube-scheduler binds both pods to that existing node, and no NodeClaim is
   created before they are bound (the pods never waited for a launch);
3. the buffer then re-provisions its headroom: a second NodeClaim, again with no real pod planned, created after
   the pods were bound, for the buffer pods the first node cannot hold any more (its spare room may still take
   one), and the buffer is back to ``FitsExistingCapacity``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    ec2nodeclass,
    pool_env,
    pool_pod_spec,
    scale,
    wait_for,
)
from e2e.helpers import deployment as shared_deployment
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.apis.times import parse_time
from karpy.kube import resources as r

pytestmark = [pytest.mark.e2e]
POOL = "cbuf"
TAINT = "karpy-e2e/cbuf"
BUFFER = "cbuf-headroom"


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            {"key": wk.LABEL_INSTANCE_GENERATION, "operator": "Gt", "values": ["4"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ],
        taints=[{"key": TAINT, "effect": "NoSchedule"}],
        disruption={"consolidateAfter": "10s", "budgets": [{"nodes": "100%"}]},
    )


def deployment() -> dict[str, Any]:
    spec = pool_pod_spec(POOL, TAINT, {"cpu": "1", "memory": "512Mi"})
    return shared_deployment(POOL, 0, spec)


def capacity_buffer() -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": BUFFER, "namespace": "default"},
        "spec": {"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": POOL}, "replicas": 2},
    }


class Env(PoolEnv):
    async def buffer(self) -> dict[str, Any]:
        return await self.client.get(r.CAPACITYBUFFERS, BUFFER, "default")

    async def provisioning(self) -> str:
        conditions = (await self.buffer()).get("status", {}).get("conditions") or []
        return next((c["reason"] for c in conditions if c["type"] == "Provisioning"), "")


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    work = tmp_path_factory.mktemp("karpy-capacitybuffer")
    workloads = [(r.CAPACITYBUFFERS, BUFFER, "default"), (r.DEPLOYMENTS, POOL, "default")]
    async with pool_env(local_cluster, work, POOL, Env, workloads=workloads, FEATURE_GATES="CapacityBuffer=true") as e:
        yield e


def _planned(claim: dict[str, Any]) -> list[str]:
    return list(json.loads(claim["metadata"]["annotations"].get(wk.ANNOTATION_PLANNED_PODS, "[]")))


async def test_pods_start_on_the_headroom_and_the_buffer_refills(env: Env, local_cluster: Any) -> None:
    client = env.client
    await apply(client, [ec2nodeclass(POOL, local_cluster.cluster_name), nodepool(), deployment()])
    await client.create(r.CAPACITYBUFFERS, capacity_buffer(), "default")

    # 1. headroom alone gets a node, which stays although empty.
    async def one_ready_node() -> dict[str, Any] | None:
        claims = await env.claims()
        ready = [
            c
            for c in claims
            if any(x["type"] == "Ready" and x["status"] == "True" for x in c.get("status", {}).get("conditions", []))
        ]
        return ready[0] if len(claims) == 1 and ready else None

    first = await wait_for(one_ready_node, timeout=120, what="one Ready node for the headroom", interval=1)
    assert _planned(first) == [], "no real pod planned onto the headroom node"
    assert json.loads(first["metadata"]["annotations"][wk.ANNOTATION_DECISION])["bufferPods"] == 2
    node_name = first["status"]["nodeName"]

    async def fits() -> bool:
        return await env.provisioning() == "FitsExistingCapacity"

    await wait_for(fits, timeout=90, what="Provisioning=True/FitsExistingCapacity", interval=1)

    async def kept_for_buffer() -> bool:
        events = (await client.list(r.EVENTS, "default"))[0] + (await client.list(r.EVENTS))[0]
        return any(
            e["reason"] == "Unconsolidatable"
            and "has buffer pods" in e["message"]
            and e["involvedObject"]["name"] == node_name
            for e in events
        )

    await wait_for(kept_for_buffer, timeout=90, what="emptiness keeps the headroom node", interval=2)
    assert [c["metadata"]["name"] for c in await env.claims()] == [first["metadata"]["name"]]

    # 2. scale up: both pods bound to the existing node, nothing launched for them.
    await scale(client, POOL, 2)

    async def bound() -> list[dict[str, Any]] | None:
        pods = await env.pods(terminating=True)
        return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = await wait_for(bound, timeout=60, what="both pods bound", interval=0.5)
    assert {p["spec"]["nodeName"] for p in pods} == {node_name}, "the pods took the headroom node"
    bound_at = max(
        parse_time(next(c["lastTransitionTime"] for c in p["status"]["conditions"] if c["type"] == "PodScheduled"))
        for p in pods
    )
    for p in pods:
        scheduled = next(c for c in p["status"]["conditions"] if c["type"] == "PodScheduled")
        assert scheduled["status"] == "True"
    early = [
        c["metadata"]["name"]
        for c in await env.claims()
        if c["metadata"]["name"] != first["metadata"]["name"]
        and parse_time(c["metadata"]["creationTimestamp"]) < bound_at
    ]
    assert early == [], "no NodeClaim launched before the pods started on the existing node"

    # 3. the buffer re-provisions its headroom on a new node.
    async def refilled() -> dict[str, Any] | None:
        fresh = [c for c in await env.claims() if c["metadata"]["name"] != first["metadata"]["name"]]
        launched = [c for c in fresh if (c.get("status") or {}).get("providerID")]
        return launched[0] if launched else None

    second = await wait_for(refilled, timeout=120, what="a new NodeClaim for the headroom", interval=1)
    assert parse_time(second["metadata"]["creationTimestamp"]) >= bound_at
    assert _planned(second) == [], "no real pod planned onto the new headroom node"
    # What the first node can no longer hold (its spare room after the two pods may still take one buffer pod).
    assert json.loads(second["metadata"]["annotations"][wk.ANNOTATION_DECISION])["bufferPods"] in (1, 2)
    await wait_for(fits, timeout=120, what="the buffer fits existing capacity again", interval=1)
    assert len(await env.claims()) == 2
    await assert_nodeclaim_counters(client, env.karpy, pools=[POOL])
