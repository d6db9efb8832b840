"""Karpenter's status-condition events and metrics on the local cluster (operatorpkg ``status/controller.go`` as
Karpenter v1.15 runs it): a NodeClaim karpy provisions gets the Normal events ``Launched``, ``Registered``,
``Initialized`` with ``Status condition transitioned, Type: X, Status: Unknown -> True, Reason: X``;
``operator_nodeclaim_status_condition_count`` and the cluster-state gauges (``karpenter_nodes_allocatable``,
``karpenter_pods_state``) describe it; once it is deleted its ``Finalized karpenter.sh/termination`` event exists and
its per-object series are gone.

The operator runs in-process (``operator_harness``), on the real apiserver and moto.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import on_demand_pool, pinned_pod, running_operator
from prometheus_client import REGISTRY

from e2e.helpers import apply, delete_nodeclaims, nodeclaims_of, wait_for
from karpy.apis import labels as wk
from karpy.apis.conditions import condition_true
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "conditions"
POD = "conditions-pod"


def pod() -> dict[str, Any]:
    return pinned_pod(POD, POOL)


def samples(name: str) -> list[dict[str, str]]:
    """The label sets of ``name``'s samples in prometheus-client's default registry (what ``/metrics`` serves)."""
    return [dict(s.labels) for family in REGISTRY.collect() for s in family.samples if s.name == name]


async def events_about(kube: KubeClient, name: str) -> list[dict[str, Any]]:
    query = {"fieldSelector": f"involvedObject.name={name}"}
    return (await kube.list(r.EVENTS, "default", query=query))[0]


@pytest.fixture
async def running(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    async with running_operator(local_cluster, kube) as op:
        try:
            yield op
        finally:
            with contextlib.suppress(ApiError):
                await kube.delete(r.PODS, POD, "default")
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODEPOOLS, POOL)

            async def claims() -> list[dict[str, Any]]:
                return await nodeclaims_of(kube, POOL)

            await delete_nodeclaims(kube, claims, timeout=60, what="status-condition NodeClaims released")


async def test_nodeclaim_transition_events_and_condition_metrics(
    running: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(kube, on_demand_pool(POOL, local_cluster.cluster_name))
    await kube.create(r.PODS, pod(), "default")

    async def initialized() -> dict[str, Any] | None:
        for claim in await nodeclaims_of(kube, POOL):
            if condition_true(claim, wk.COND_INITIALIZED):
                return claim
        return None

    claim = await wait_for(initialized, timeout=120, what="NodeClaim initialized")
    name, node_name = claim["metadata"]["name"], claim["status"]["nodeName"]
    expected = {
        reason: f"Status condition transitioned, Type: {reason}, Status: Unknown -> True, Reason: {reason}"
        for reason in (wk.COND_LAUNCHED, wk.COND_REGISTERED, wk.COND_INITIALIZED)
    }

    async def transition_events() -> dict[str, dict[str, Any]] | None:
        found = {e["reason"]: e for e in await events_about(kube, name) if e["reason"] in expected}
        return found if len(found) == len(expected) else None

    events = await wait_for(transition_events, timeout=30, what="Launched/Registered/Initialized events")
    for reason, event in events.items():
        assert event["type"] == "Normal" and event["message"] == expected[reason], event
        assert (
            event["involvedObject"]["kind"] == "NodeClaim"
            and event["involvedObject"]["uid"] == claim["metadata"]["uid"]
        )
    # karpy's own "Launched <type> in <zone>" event is gone: one Launched event, operatorpkg's.
    launched = [e for e in await events_about(kube, name) if e["reason"] == wk.COND_LAUNCHED]
    assert [e["message"] for e in launched] == [expected[wk.COND_LAUNCHED]]

    count = [
        s for s in samples("operator_nodeclaim_status_condition_count") if s["name"] == name and s["status"] == "True"
    ]
    assert {s["type"] for s in count} >= {"Launched", "Registered", "Initialized", "Ready"}
    assert all(s["karpenter_sh_nodepool"] == POOL and s["karpenter_k8s_aws_ec2nodeclass"] == POOL for s in count)
    transitions = [
        s
        for s in samples("operator_nodeclaim_status_condition_transitions_total")
        if s["karpenter_sh_nodepool"] == POOL
    ]
    assert {s["type"] for s in transitions} >= {"Launched", "Registered", "Initialized"}
    allocatable = [s for s in samples("karpenter_nodes_allocatable") if s["node_name"] == node_name]
    assert {s["resource_type"] for s in allocatable} >= {"cpu", "memory", "pods"}
    assert all(s["nodepool"] == POOL and s["managed"] == "true" and s["zone"] for s in allocatable)
    assert all(s["capacity_type"] == "on-demand" and s["instance_type"] for s in allocatable)

    async def pod_series() -> list[dict[str, str]] | None:
        found = [s for s in samples("karpenter_pods_state") if s["name"] == POD and s["node"] == node_name]
        return found or None

    (state,) = await wait_for(pod_series, timeout=30, what="karpenter_pods_state for the bound pod")
    assert state["nodepool"] == POOL and state["scheduled"] == "true" and state["managed"] == "true"

    # Cost and offerings from the instance types the cloud provider resolves (the minute loop, run once now).
    await running.state_metrics.refresh()
    labels = claim["metadata"]["labels"]
    itype, zone = labels[wk.LABEL_INSTANCE_TYPE], labels[wk.LABEL_ZONE]
    nodeclass = await kube.get(r.EC2NODECLASSES, POOL)
    offered = {
        (o.zone, o.capacity_type): o.price
        for it in await running.cloud.get_instance_types(nodeclass)
        if it.name == itype
        for o in it.offerings
    }
    price = offered[(zone, "on-demand")]
    assert price > 0
    cost = REGISTRY.get_sample_value("karpenter_nodepools_cost_total", {"nodepool": POOL})
    assert cost == pytest.approx(price)
    estimate = {"instance_type": itype, "capacity_type": "on-demand", "zone": zone}
    assert REGISTRY.get_sample_value("karpenter_cloudprovider_instance_type_offering_price_estimate", estimate) == price
    assert REGISTRY.get_sample_value("karpenter_cloudprovider_instance_type_offering_available", estimate) == 1
    assert (
        REGISTRY.get_sample_value("karpenter_cloudprovider_instance_type_cpu_cores", {"instance_type": itype}) or 0
    ) > 0

    await kube.delete(r.PODS, POD, "default")
    await kube.delete(r.NODECLAIMS, name)

    async def finalized() -> list[dict[str, Any]] | None:
        found = [e for e in await events_about(kube, name) if e["reason"] == "Finalized"]
        return found or None

    (event,) = await wait_for(finalized, timeout=90, what="Finalized event of the deleted NodeClaim")
    assert event["message"] == f"Finalized {wk.FINALIZER_TERMINATION}" and event["type"] == "Normal"
    assert not [s for s in samples("operator_nodeclaim_status_condition_count") if s["name"] == name]

    async def node_series_gone() -> bool:
        return not [s for s in samples("karpenter_nodes_allocatable") if s["node_name"] == node_name]

    await wait_for(node_series_gone, timeout=60, what="the deleted Node's series gone")
