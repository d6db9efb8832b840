"""Static capacity end to end on the local cluster (control plane + KWOK + node agent + moto), karpy as its own
process with ``FEATURE_GATES=StaticCapacity=true`` (Karpenter core ``pkg/controllers/static``).

A NodePool ``static`` with ``replicas: 2`` and no pod asking for anything gets two Ready nodes; ``kubectl scale``
(a PATCH of the NodePool's ``/scale`` subresource) takes it to 4, then to 1 (the surplus NodeClaims deleted, their
instances terminated); a Node deleted out of band (``kubectl delete node``) takes its NodeClaim with it, and a new
node replaces it; a template change drifts the node, and static drift replaces it (replacement first). Karpenter's
NodeClaim counters match the NodeClaims left at the end (created − terminated = live).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    ec2nodeclass,
    nodepool,
    pool_env,
    record_figures,
    wait_for,
)
from karpy.apis import labels as wk
from karpy.kube import resources as r

pytestmark = [pytest.mark.e2e]
POOL = "static"
PROVISIONING = "provisioning nodeclaims to satisfy replica count"
DEPROVISIONING = "deprovisioning nodeclaims to satisfy replica count"


class Env(PoolEnv):
    async def nodes(self) -> list[dict[str, Any]]:
        query = {"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"}
        return (await self.client.list(r.NODES, query=query))[0]

    async def settled(self, count: int) -> list[str] | None:
        """The names of ``count`` Ready Nodes of the pool, each of an Initialized NodeClaim, with nothing else of the
        pool left (no NodeClaim or Node being deleted); None otherwise."""
        claims = await self.claims()
        nodes = await self.nodes()
        if len(claims) != count or len(nodes) != count:
            return None
        if any(o["metadata"].get("deletionTimestamp") for o in (*claims, *nodes)):
            return None
        initialized = all(_true(c, "Initialized") for c in claims)
        ready = all(_true(n, "Ready") for n in nodes)
        if not (initialized and ready):
            return None
        return sorted(n["metadata"]["name"] for n in nodes)

    async def scale(self, count: int) -> None:
        """``kubectl scale nodepool static --replicas=<count>``: a merge patch of the scale subresource."""
        await self.client.merge_patch(r.NODEPOOLS, POOL, {"spec": {"replicas": count}}, subresource="scale")

    async def pods_on(self, names: list[str]) -> list[str]:
        pods = (await self.client.list(r.PODS))[0]
        return [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}"
            for p in pods
            if (p.get("spec") or {}).get("nodeName") in names
            and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])
        ]


def _true(obj: dict[str, Any], type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or [])


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    work = tmp_path_factory.mktemp("karpy-static")
    async with pool_env(local_cluster, work, POOL, Env, workloads=(), FEATURE_GATES="StaticCapacity=true") as e:
        yield e


def static_pool(count: int) -> dict[str, Any]:
    return nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        replicas=count,
        limits={"nodes": "6"},
    )


async def test_static_nodepool_keeps_scales_replaces_and_drifts_its_nodes(local_cluster: Any, env: Env) -> None:
    await apply(env.client, [ec2nodeclass(POOL, local_cluster.cluster_name), static_pool(2)])
    two = await wait_for(lambda: env.settled(2), timeout=180, what="2 static nodes Ready", interval=1)
    assert await env.pods_on(two) == [], "no pod asked for these nodes"

    await env.scale(4)
    four = await wait_for(lambda: env.settled(4), timeout=180, what="4 static nodes Ready", interval=1)
    assert set(two) <= set(four), "a scale-up adds nodes, it replaces none"

    await env.scale(1)
    (one,) = await wait_for(lambda: env.settled(1), timeout=180, what="scaled down to 1 node", interval=1)
    assert one in four

    # A Node deleted out of band: its NodeClaim goes with it, and static provisioning replaces the node.
    await env.client.delete(r.NODES, one)

    async def replaced() -> list[str] | None:
        names = await env.settled(1)
        return names if names and names != [one] else None

    (new,) = await wait_for(replaced, timeout=180, what="the deleted node replaced", interval=1)
    assert new != one

    # The template changes: the node drifts and static drift replaces it, the replacement first (Karpenter
    # staticdrift.go); static provisioning adds nothing meanwhile (the candidate is pending disruption).
    await env.client.merge_patch(r.NODEPOOLS, POOL, {"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}})

    async def drifted_away() -> list[str] | None:
        names = await env.settled(1)
        return names if names and names != [new] else None

    (latest,) = await wait_for(drifted_away, timeout=180, what="the drifted node replaced", interval=1)
    (claim,) = await env.claims()
    assert claim["metadata"]["labels"].get("rev") == "2"
    done = [line["command"] for line in env.karpy.logs() if line.get("message") == "disruption command done"]
    assert [(c["method"], c["reason"], c["decision"]) for c in done] == [("static-drift", "Drifted", "replace")]
    assert latest != new

    ups = [line["provision_count"] for line in env.karpy.logs() if line.get("message") == PROVISIONING]
    downs = [line["deprovision_count"] for line in env.karpy.logs() if line.get("message") == DEPROVISIONING]
    assert ups[:2] == [2, 2] and ups[-1] == 1, ups  # 2 from nothing, 2 more, 1 for the lost node
    assert downs == [3], downs
    record_figures(static_provisioning_passes=len(ups), static_deprovisioning_passes=len(downs))
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
