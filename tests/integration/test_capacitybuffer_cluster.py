"""CapacityBuffer (``FEATURE_GATES=CapacityBuffer=true``) against the real apiserver and moto, the operator wired as
``karpy run`` wires it: a ready buffer gets a NodeClaim that plans no real pod, sized for the headroom; its status
is resolved (replicas, podTemplateRef, ``ReadyForProvisioning``) and, once the headroom sits on that capacity,
``Provisioning=True/FitsExistingCapacity``; a buffer naming a missing PodTemplate gets
``ReadyForProvisioning=False/PodTemplateNotFound`` and a Warning event; no pod object is ever made for the
headroom."""

from __future__ import annotations

import contextlib
import json
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
POOL = "cbuf"
TAINT = "karpy-it/cbuf"


def pool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ],
        taints=[{"key": TAINT, "effect": "NoSchedule"}],
        disruption={"consolidateAfter": "Never"},
    )


def pod_template(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {
                "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
                "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
                ],
            },
        },
    }


def buffer(name: str, template: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"podTemplateRef": {"name": template}, "replicas": replicas},
    }


@pytest.fixture(scope="module")
async def operator(local_cluster: Any, kube: KubeClient) -> AsyncIterator[Operator]:
    async with running_operator(local_cluster, kube, FEATURE_GATES="CapacityBuffer=true") as op:
        try:
            yield op
        finally:
            await _cleanup(kube)


async def _cleanup(kube: KubeClient) -> None:
    for name in ("cbuf-headroom", "cbuf-lost"):
        with contextlib.suppress(ApiError):
            await kube.delete(r.CAPACITYBUFFERS, name, "default")
    with contextlib.suppress(ApiError):
        await kube.delete(r.PODTEMPLATES, "cbuf-slot", "default")
    with contextlib.suppress(ApiError):
        await kube.delete(r.NODEPOOLS, POOL)
    await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, POOL), timeout=60, what="buffer NodeClaims released")
    with contextlib.suppress(ApiError):
        await kube.delete(r.EC2NODECLASSES, POOL)


def _condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


async def test_a_buffer_provisions_headroom_without_real_pods(
    operator: Operator, kube: KubeClient, local_cluster: Any
) -> None:
    await apply(kube, [ec2nodeclass(POOL, local_cluster.cluster_name), pool()])
    await kube.create(r.PODTEMPLATES, pod_template("cbuf-slot"), "default")
    await kube.create(r.CAPACITYBUFFERS, buffer("cbuf-headroom", "cbuf-slot", 2), "default")

    async def resolved() -> dict[str, Any] | None:
        obj = await kube.get(r.CAPACITYBUFFERS, "cbuf-headroom", "default")
        return obj if _condition(obj, "ReadyForProvisioning").get("status") == "True" else None

    status = (await wait_for(resolved, timeout=30, what="buffer ReadyForProvisioning"))["status"]
    assert status["replicas"] == 2 and status["podTemplateRef"] == {"name": "cbuf-slot"}
    assert status["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"
    assert _condition({"status": status}, "ReadyForProvisioning")["reason"] == "Resolved"

    async def launched() -> list[dict[str, Any]]:
        claims = await nodeclaims_of(kube, POOL)
        return claims if claims and all((c.get("status") or {}).get("providerID") for c in claims) else []

    claims = await wait_for(launched, timeout=60, what="a NodeClaim for the headroom")
    assert len(claims) == 1, "2 × 1 cpu fit one node"
    annotations = claims[0]["metadata"]["annotations"]
    assert json.loads(annotations[wk.ANNOTATION_PLANNED_PODS]) == [], "no real pod planned"
    assert json.loads(annotations[wk.ANNOTATION_DECISION])["bufferPods"] == 2

    async def fits() -> dict[str, Any] | None:
        obj = await kube.get(r.CAPACITYBUFFERS, "cbuf-headroom", "default")
        return obj if _condition(obj, "Provisioning").get("reason") == "FitsExistingCapacity" else None

    obj = await wait_for(fits, timeout=90, what="Provisioning=True/FitsExistingCapacity")
    assert _condition(obj, "Provisioning")["status"] == "True"
    assert await nodeclaims_of(kube, POOL) != [] and len(await nodeclaims_of(kube, POOL)) == 1, "no second launch"
    pods = (await kube.list(r.PODS, "default"))[0]
    assert not [p for p in pods if p["metadata"]["name"].startswith("capacity-buffer-")], "virtual pods stay virtual"
    events = (await kube.list(r.EVENTS, "default"))[0]
    assert not [e for e in events if e["involvedObject"].get("name", "").startswith("capacity-buffer-")]
    assert any(e["involvedObject"].get("kind") == "CapacityBuffer" for e in events), "condition transition events"


async def test_a_buffer_naming_a_missing_template_is_not_ready(operator: Operator, kube: KubeClient) -> None:
    await kube.create(r.CAPACITYBUFFERS, buffer("cbuf-lost", "cbuf-missing", 1), "default")

    async def not_found() -> dict[str, Any] | None:
        obj = await kube.get(r.CAPACITYBUFFERS, "cbuf-lost", "default")
        return obj if _condition(obj, "ReadyForProvisioning").get("reason") == "PodTemplateNotFound" else None

    obj = await wait_for(not_found, timeout=30, what="ReadyForProvisioning=False/PodTemplateNotFound")
    assert _condition(obj, "ReadyForProvisioning")["message"] == 'podtemplates "cbuf-missing" not found'

    async def warned() -> bool:
        events = (await kube.list(r.EVENTS, "default"))[0]
        return any(
            e["reason"] == "PodTemplateNotFound"
            and e["involvedObject"].get("name") == "cbuf-lost"
            and e["type"] == "Warning"
            for e in events
        )

    await wait_for(warned, timeout=30, what="a Warning event on the buffer")
