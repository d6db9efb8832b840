"""Node repair end to end on the local cluster (control plane + KWOK + moto + node agent), karpy as its own process
with ``FEATURE_GATES=NodeRepair=true`` and the AWS provider's own repair policies.

A Deployment's pod runs on a node karpy launched. The node's instance then reports ``NetworkingReady=False``
through the node agent (playing the EKS node monitoring agent: the instance tag ``karpy-e2e/condition/
NetworkingReady``, :mod:`e2e.cluster.nodeagent`), with a ``lastTransitionTime`` 31 minutes back — past the AWS
policy's 30-minute toleration. karpy deletes the node's NodeClaim (1 unhealthy node of 1 is within the 20 %
breaker, rounded up), the pod is recreated and lands on a new node, and ``/metrics`` counts it in
``karpenter_nodeclaims_unhealthy_disrupted_total{condition="networking_ready"}`` and
``karpenter_nodeclaims_disrupted_total{reason="unhealthy"}``.

karpy runs with ``LEGACY_NODE_REPAIR=true`` (the legacy ``node.health`` path and the AWS legacy policies): the v1.15
path measures a toleration from no earlier than the Node's creation, so on a node just launched it could only act
after 30 real minutes; the legacy path takes the reported transition time as it is, so a backdated condition is
due at once. The v1.15 path is covered by ``tests/integration/test_node_repair_cluster.py`` and the unit tests.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from e2e.cluster.nodeagent import condition_tag
from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    condition_ready,
    deployment,
    ec2nodeclass,
    instance_id_of,
    pool_env,
    pool_pod_spec,
    scrape_metrics,
    tainted_nodepool,
    wait_for,
)
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.e2e]
POOL = "repair-e2e"
TAINT = "karpy-e2e/repair"


def manifests(cluster: str) -> list[dict[str, Any]]:
    """A tainted on-demand NodePool (never consolidated), its EC2NodeClass and a one-pod Deployment."""
    pool = tainted_nodepool(
        POOL,
        TAINT,
        [
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
    )
    spec = pool_pod_spec(POOL, TAINT, {"cpu": "500m", "memory": "256Mi"})
    return [ec2nodeclass(POOL, cluster), pool, deployment(POOL, 1, spec)]


class Env(PoolEnv):
    async def running_on(self) -> str | None:
        """The node the Deployment's one pod runs on (None while it does not run)."""
        live = await self.pods()
        if len(live) == 1 and live[0]["status"].get("phase") == "Running":
            return str(live[0]["spec"].get("nodeName") or "") or None
        return None


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    work = tmp_path_factory.mktemp("karpy-repair")
    async with pool_env(
        local_cluster, work, POOL, Env, FEATURE_GATES="NodeRepair=true", LEGACY_NODE_REPAIR="true"
    ) as e:
        yield e


def unhealthy_total(scrape: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in scrape.items() if n == name and labels.items() <= dict(ls).items())


async def test_a_node_reporting_networking_not_ready_past_its_toleration_is_replaced(env: Env) -> None:
    await apply(env.client, manifests(env.cluster.cluster_name))
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, POOL), timeout=90, what=f"NodePool {POOL} Ready")
    first = await wait_for(env.running_on, timeout=180, what="the pod Running on a node karpy launched")
    (claim,) = await env.claims()
    assert claim["status"]["nodeName"] == first
    since = datetime.now(UTC) - timedelta(minutes=31)
    tag = condition_tag("NetworkingReady", "False", "IPAMDNotRunning", since=since)
    env.ec2.create_tags(Resources=[instance_id_of(claim["status"]["providerID"])], Tags=[tag])

    async def reported() -> str:
        """ "reported" once the Node carries the condition; "gone" when karpy repaired it between two polls (the
        condition is 31 minutes old, so the repair may follow at once): the unhealthy-disrupted counter below,
        labelled by condition, then proves it was NetworkingReady that karpy acted on."""
        try:
            node = await env.client.get(r.NODES, first)
        except ApiError as err:
            if err.status == 404:
                return "gone"
            raise
        conditions = node["status"].get("conditions") or []
        seen = any(c.get("type") == "NetworkingReady" and c.get("status") == "False" for c in conditions)
        return "reported" if seen else ""

    await wait_for(reported, timeout=30, what="the node agent reporting NetworkingReady=False")

    async def moved() -> str | None:
        names = {c["metadata"]["name"] for c in await env.claims()}
        node = await env.running_on()
        return node if claim["metadata"]["name"] not in names and node and node != first else None

    second = await wait_for(moved, timeout=240, what="the unhealthy node replaced and the pod running on a new one")
    assert second != first
    scrape = await scrape_metrics(env.karpy.metrics_port)
    counted = unhealthy_total(
        scrape,
        "karpenter_nodeclaims_unhealthy_disrupted_total",
        condition="networking_ready",
        nodepool=POOL,
        capacity_type="on-demand",
    )
    assert counted == 1, counted
    disrupted = unhealthy_total(scrape, "karpenter_nodeclaims_disrupted_total", reason="unhealthy", nodepool=POOL)
    assert disrupted == 1, disrupted
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
