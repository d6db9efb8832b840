"""NodeOverlay on the real apiserver (v1.15 CRDs) and moto, with ``FEATURE_GATES=NodeOverlay=true``: the overlays'
conditions are written (an equal-weight conflict gets ``ValidationSucceeded=False``/``Conflict`` and a Warning
event), a price overlay makes the NodeClaim's cheapest type — and the launched instance — the overlaid one, and a
capacity overlay lets a pod requesting a custom extended resource get a NodeClaim whose capacity carries it, and an
overlay added later makes consolidation replace a running node by the now cheaper type (Karpenter core
``controllers/nodeoverlay``, ``cloudprovider/overlay``, AWS ``cloudprovider.go`` ``Create``)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from operator_harness import running_operator

from e2e.helpers import apply, delete_nodeclaims, ec2nodeclass, nodeclaims_of, wait_for
from e2e.helpers import deployment as shared_deployment
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.operator import Operator

pytestmark = [pytest.mark.integration]
POOL = "ovl"
TAINT = "karpy-it/ovl"
TYPES = ["c5.large", "m5.large"]  # on-demand $0.085 and $0.096: c5.large is the cheaper one without overlays
OVERLAYS = ("ovl-cheap-m5", "ovl-a-conflict", "ovl-device", "ovl-cons-m5")
CONS = "ovl-cons"  # the consolidation test's NodePool, EC2NodeClass and Deployment
CONS_TAINT = "karpy-it/ovl-cons"


def overlay(name: str, weight: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"weight": weight, **spec},
    }


def m5_only(pool: str = POOL) -> list[dict[str, Any]]:
    return [
        {"key": wk.LABEL_NODEPOOL, "operator": "In", "values": [pool]},
        {"key": wk.LABEL_INSTANCE_FAMILY, "operator": "In", "values": ["m5"]},
    ]


def pod(name: str, requests: dict[str, str], limits: dict[str, str] | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
            "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": resources}],
        },
    }


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    async with running_operator(
        local_cluster,
        kube,
        FEATURE_GATES="NodeOverlay=true",
        DISRUPTION_POLL_INTERVAL="500ms",
        DISRUPTION_VALIDATION_DELAY="1s",
    ) as op:
        try:
            yield op
        finally:
            for name in ("ovl-price", "ovl-device"):
                with contextlib.suppress(ApiError):
                    await kube.delete(r.PODS, name, "default")
            with contextlib.suppress(ApiError):
                await kube.delete(r.DEPLOYMENTS, CONS, "default")
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODEPOOLS, CONS)
            await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, CONS), timeout=60, what="ovl-cons NodeClaims")
            with contextlib.suppress(ApiError):
                await kube.delete(r.EC2NODECLASSES, CONS)
            for name in OVERLAYS:
                with contextlib.suppress(ApiError):
                    await kube.delete(r.NODEOVERLAYS, name)
            with contextlib.suppress(ApiError):
                await kube.delete(r.NODEPOOLS, POOL)
            await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, POOL), timeout=60, what="ovl NodeClaims gone")
            with contextlib.suppress(ApiError):
                await kube.delete(r.EC2NODECLASSES, POOL)


async def _condition(kube: KubeClient, name: str, type_: str) -> tuple[str, str] | None:
    c = condition(await kube.get(r.NODEOVERLAYS, name), type_)
    return None if c is None else (c["status"], c["reason"])


async def test_overlays_get_conditions_and_drive_the_cheapest_type(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    assert operator.overlays is not None, "the gate is on"
    await apply(
        kube,
        [
            ec2nodeclass(POOL, local_cluster.cluster_name),
            shared_nodepool(
                POOL,
                requirements=[
                    {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": TYPES},
                ],
                taints=[{"key": TAINT, "effect": "NoSchedule"}],
                disruption={"consolidateAfter": "Never"},
            ),
        ],
    )
    await kube.create(r.NODEOVERLAYS, overlay("ovl-cheap-m5", 50, requirements=m5_only(), price="0.001"))
    # Same weight, touching the same offerings: "ovl-cheap-m5" sorts later, is evaluated first and wins.
    await kube.create(r.NODEOVERLAYS, overlay("ovl-a-conflict", 50, requirements=m5_only(), priceAdjustment="+5"))

    await wait_for(lambda: _is(kube, "ovl-cheap-m5", "Ready", ("True", "Ready")), timeout=60, what="ovl-cheap-m5 Ready")
    await wait_for(
        lambda: _is(kube, "ovl-a-conflict", "ValidationSucceeded", ("False", "Conflict")),
        timeout=60,
        what="ovl-a-conflict Conflict",
    )
    assert await _condition(kube, "ovl-a-conflict", "Ready") == ("False", "UnhealthyDependents")

    async def conflict_events() -> list[str]:
        query = {"fieldSelector": "involvedObject.name=ovl-a-conflict"}
        return [e["type"] for e in (await kube.list(r.EVENTS, "default", query=query))[0] if e["reason"] == "Conflict"]

    assert await wait_for(conflict_events, timeout=30, what="the Conflict event") == ["Warning"]

    await kube.create(r.PODS, pod("ovl-price", {"cpu": "500m"}), "default")

    async def launched() -> dict[str, Any] | None:
        claims = [c for c in await nodeclaims_of(kube, POOL) if (c.get("status") or {}).get("providerID")]
        return claims[0] if claims else None

    claim = await wait_for(launched, timeout=90, what="the ovl NodeClaim launched")
    types = next(q["values"] for q in claim["spec"]["requirements"] if q["key"] == wk.LABEL_INSTANCE_TYPE)
    assert types[0] == "m5.large", "cheapest first, by the overlaid price"
    assert claim["metadata"]["annotations"]["karpenter.sh/price-overlay-applied"] == "true"
    assert claim["metadata"]["labels"][wk.LABEL_INSTANCE_TYPE] == "m5.large", "the launch followed the overlay"
    decision = claim["metadata"]["annotations"][wk.ANNOTATION_DECISION]
    assert '"cheapestPrice": 0.001' in decision


async def _is(kube: KubeClient, name: str, type_: str, want: tuple[str, str]) -> bool:
    return await _condition(kube, name, type_) == want


async def test_capacity_overlay_gives_an_extended_resource_pod_a_nodeclaim(
    operator: Operator, kube: KubeClient
) -> None:
    device = {"example.com/device": "1"}
    await kube.create(
        r.NODEOVERLAYS,
        overlay("ovl-device", 1, requirements=m5_only(), capacity={"example.com/device": "4", "hugepages-2Mi": "1Gi"}),
    )
    await wait_for(lambda: _is(kube, "ovl-device", "Ready", ("True", "Ready")), timeout=60, what="ovl-device Ready")
    await kube.create(r.PODS, pod("ovl-device", {"cpu": "100m", **device}, device), "default")

    async def with_device() -> dict[str, Any] | None:
        for claim in await nodeclaims_of(kube, POOL):
            if "example.com/device" in ((claim["spec"].get("resources") or {}).get("requests") or {}):
                return claim
        return None

    claim = await wait_for(with_device, timeout=90, what="a NodeClaim for the device pod")
    types = next(q["values"] for q in claim["spec"]["requirements"] if q["key"] == wk.LABEL_INSTANCE_TYPE)
    assert types == ["m5.large"], "only the overlaid types offer the resource"
    assert claim["metadata"]["annotations"]["karpenter.sh/capacity-overlay-applied"] == "true"

    async def capacity() -> dict[str, str] | None:
        stored = await kube.get(r.NODECLAIMS, claim["metadata"]["name"])
        found = (stored.get("status") or {}).get("capacity") or {}
        return found if "example.com/device" in found else None

    launched = await wait_for(capacity, timeout=90, what="the NodeClaim's capacity with the overlaid resource")
    assert launched["example.com/device"] == "4" and launched["hugepages-2Mi"] == "1Gi"


async def test_an_overlay_added_later_makes_consolidation_replace_the_node(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    """Consolidation prices the running node and its replacements through the same overlaid instance types: once
    m5.large costs $0.001/h, the c5.large ($0.085/h) running the pod is replaced by an m5.large."""
    pool = shared_nodepool(
        CONS,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_TYPE, "operator": "In", "values": TYPES},
        ],
        taints=[{"key": CONS_TAINT, "effect": "NoSchedule"}],
        disruption={"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "1s"},
        annotations={"karpy.sh/disruption-cooldown": "0s"},
    )
    spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: CONS},
        "tolerations": [{"key": CONS_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
    }
    await apply(kube, [ec2nodeclass(CONS, local_cluster.cluster_name), pool, shared_deployment(CONS, 1, spec)])

    async def only_type(instance_type: str) -> str | None:
        claims = [c for c in await nodeclaims_of(kube, CONS) if not c["metadata"].get("deletionTimestamp")]
        labels = [c["metadata"]["labels"].get(wk.LABEL_INSTANCE_TYPE) for c in claims]
        return claims[0]["metadata"]["name"] if labels == [instance_type] else None

    first = await wait_for(lambda: only_type("c5.large"), timeout=90, what="a c5.large NodeClaim (no overlay)")
    await kube.create(r.NODEOVERLAYS, overlay("ovl-cons-m5", 50, requirements=m5_only(CONS), price="0.001"))
    replacement = await wait_for(
        lambda: only_type("m5.large"), timeout=150, what="the c5.large replaced by an m5.large", interval=1
    )
    assert replacement != first

    async def terminating() -> list[str]:
        query = {"fieldSelector": f"involvedObject.name={first}"}
        items = (await kube.list(r.EVENTS, "default", query=query))[0]
        return [e["message"] for e in items if e["reason"] == "DisruptionTerminating"]

    messages = await wait_for(terminating, timeout=30, what="the replaced NodeClaim's DisruptionTerminating event")
    assert any("Underutilized" in m for m in messages), messages
