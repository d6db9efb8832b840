"""karpy's CRDs on the real apiserver accept what Karpenter v1.15 accepts and still reject what it rejects.

Every object is sent with ``dryRun=All`` (admission, schema, defaulting and CEL run; nothing is stored) and
``fieldValidation=Strict`` (an unknown field is an error, as ``kubectl apply`` reports it). The accepted objects use
what karpy's CRDs refused before issue 9 (Karpenter v1.9's schema): ``Gte``/``Lte``, ``consolidationPolicy:
Balanced``, the ``Unhealthy`` budget reason, ``node-role.kubernetes.io/*`` template labels, the newer
karpenter.k8s.aws keys, networkInterfaces, placementGroupSelector, connectionTracking, cpuOptions, a free-form
kubelet, NodeOverlay and CapacityBuffer.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.helpers import ec2nodeclass, nodepool
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource

pytestmark = [pytest.mark.integration]

NODEOVERLAYS = Resource("karpenter.sh", "v1alpha1", "nodeoverlays", "NodeOverlay", False)
CAPACITYBUFFERS = Resource("autoscaling.x-k8s.io", "v1beta1", "capacitybuffers", "CapacityBuffer", True)
DRY_RUN = {"dryRun": "All", "fieldValidation": "Strict"}


async def dry_create(kube: KubeClient, res: Resource, body: dict[str, Any]) -> dict[str, Any]:
    """POST ``body`` with dry run and strict field validation; the object as the apiserver would store it."""
    namespace = "default" if res.namespaced else None
    stored: dict[str, Any] = await kube.request("POST", res.path(namespace), body=body, query=DRY_RUN)
    return stored


async def rejection(kube: KubeClient, res: Resource, body: dict[str, Any]) -> str:
    """The apiserver's message for an object it refuses (fails the test when it is accepted): 422 Invalid for
    schema and CEL errors, 400 BadRequest for an unknown field under strict field validation."""
    with pytest.raises(ApiError) as err:
        await dry_create(kube, res, body)
    assert err.value.status in (400, 422), err.value
    return err.value.message


def v115_nodepool(name: str = "v115") -> dict[str, Any]:
    return nodepool(
        name,
        requirements=[
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["4"]},
            {"key": "karpenter.k8s.aws/instance-memory", "operator": "Lte", "values": ["65536"]},
            {"key": "karpenter.k8s.aws/capacity-reservation-type", "operator": "In", "values": ["default"]},
            {"key": "node-role.kubernetes.io/worker", "operator": "Exists"},
        ],
        labels={"node-role.kubernetes.io/worker": "", "example.kubernetes.io/team": "a", "team": "a"},
        disruption={
            "consolidationPolicy": "Balanced",
            "budgets": [{"nodes": "1", "reasons": ["Unhealthy", "Drifted"]}, {"nodes": "10%"}],
        },
    )


async def test_a_v115_nodepool_is_accepted_and_defaulted(kube: KubeClient) -> None:
    """Gte/Lte, Balanced, an Unhealthy budget and node-role labels apply; consolidateAfter defaults to 0s even
    when disruption is given without it (v1.15 defaults the field, not only the whole block)."""
    stored = await dry_create(kube, r.NODEPOOLS, v115_nodepool())
    disruption = stored["spec"]["disruption"]
    assert (disruption["consolidationPolicy"], disruption["consolidateAfter"]) == ("Balanced", "0s")
    assert disruption["budgets"][0]["reasons"] == ["Unhealthy", "Drifted"]
    assert stored["spec"]["template"]["metadata"]["labels"]["node-role.kubernetes.io/worker"] == ""
    operators = [req["operator"] for req in stored["spec"]["template"]["spec"]["requirements"]]
    assert operators == ["Gte", "Lte", "In", "Exists"]


async def test_a_nodeclaim_with_gte_is_accepted(kube: KubeClient) -> None:
    claim = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "v115-claim"},
        "spec": {
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["2"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["v115"]},
            ],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "v115"},
        },
    }
    stored = await dry_create(kube, r.NODECLAIMS, claim)
    assert stored["spec"]["requirements"][0]["operator"] == "Gte"


async def test_a_v115_ec2nodeclass_is_accepted_with_its_kubelet_as_written(kube: KubeClient) -> None:
    kubelet = {
        "maxPods": 110,
        "cpuManagerPolicy": "static",
        "featureGates": {"InPlacePodVerticalScaling": True},
        "evictionHard": {"memory.available": "5%"},
        "logging": {"format": "json", "verbosity": 2},
    }
    body = ec2nodeclass(
        "v115",
        "local",
        kubelet=kubelet,
        networkInterfaces=[
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
            {"networkCardIndex": 1, "deviceIndex": 0, "interfaceType": "efa-only"},
        ],
        placementGroupSelector={"name": "analytics"},
        connectionTracking={"tcpEstablishedTimeout": 3600},
        cpuOptions={"nestedVirtualization": "enabled"},
    )
    stored = await dry_create(kube, r.EC2NODECLASSES, body)
    assert stored["spec"]["kubelet"] == kubelet
    assert stored["spec"]["placementGroupSelector"] == {"name": "analytics"}
    assert stored["spec"]["cpuOptions"] == {"nestedVirtualization": "enabled"}
    assert len(stored["spec"]["networkInterfaces"]) == 2


async def test_a_nodeoverlay_and_a_capacitybuffer_are_accepted(kube: KubeClient) -> None:
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "v115-overlay"},
        "spec": {
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
            "priceAdjustment": "-10%",
            "capacity": {"example.com/fpga": "1"},
            "weight": 10,
        },
    }
    assert (await dry_create(kube, NODEOVERLAYS, overlay))["spec"]["priceAdjustment"] == "-10%"
    buffer = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "v115-buffer", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "buffer-pod"}, "replicas": 2},
    }
    stored = await dry_create(kube, CAPACITYBUFFERS, buffer)
    assert stored["spec"]["provisioningStrategy"] == "buffer.x-k8s.io/active-capacity"


def _with(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``body`` with the dotted ``path`` under ``spec`` set to ``value``."""
    node = body["spec"]
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("template.metadata.labels", {"karpenter.sh/team": "a"}, 'label domain "karpenter.sh" is restricted'),
        ("template.metadata.labels", {"karpenter.k8s.aws/x": "a"}, 'label domain "karpenter.k8s.aws" is restricted'),
        ("template.metadata.labels", {"kubernetes.io/hostname": "a"}, 'label "kubernetes.io/hostname" is restricted'),
        (
            "template.spec.requirements",
            [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gte", "values": ["four"]}],
            "must have a single positive integer value",
        ),
        (
            "template.spec.requirements",
            [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["x"]}],
            'label "karpenter.sh/nodepool" is restricted',
        ),
        ("disruption.budgets", [{"nodes": "1", "reasons": ["Expired"]}], "Unsupported value"),
        ("disruption.budgets", [{"nodes": "1", "reasons": ["Empty", "Empty"]}], "Duplicate value"),
        ("disruption.consolidationPolicy", "WhenUnderutilized", "Unsupported value"),
    ],
)
async def test_nodepools_karpenter_rejects_are_rejected(kube: KubeClient, path: str, value: Any, message: str) -> None:
    assert message in await rejection(kube, r.NODEPOOLS, _with(v115_nodepool(), path, value))


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "networkInterfaces",
            [{"networkCardIndex": 0, "deviceIndex": 1, "interfaceType": "interface"}],
            "networkInterfaces must include a primary interface with interfaceType='interface'",
        ),
        ("placementGroupSelector", {"name": "a", "id": "pg-0123"}, "'name' and 'id' are mutually exclusive"),
        ("connectionTracking", {}, "at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout"),
        ("cpuOptions", {"nestedVirtualization": "on"}, "Unsupported value"),
        ("kubelet", ["maxPods"], "spec.kubelet: Invalid value"),
        # Fields karpy's CRD once had and Karpenter never did: unknown now.
        ("placementGroup", {"name": "a"}, 'unknown field "spec.placementGroup"'),
        (
            "securityGroupSelectorTerms",
            [{"id": "sg-0123", "vpcID": "vpc-0123"}],
            'unknown field "spec.securityGroupSelectorTerms[0].vpcID"',
        ),
    ],
)
async def test_ec2nodeclasses_karpenter_rejects_are_rejected(
    kube: KubeClient, field: str, value: Any, message: str
) -> None:
    body = ec2nodeclass("v115-bad", "local", **{field: value})
    assert message in await rejection(kube, r.EC2NODECLASSES, body)


async def test_overlays_and_buffers_karpenter_rejects_are_rejected(kube: KubeClient) -> None:
    overlay = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "v115-bad-overlay"},
        "spec": {"requirements": [], "price": "1.5", "priceAdjustment": "+1"},
    }
    assert "cannot set both 'price' and 'priceAdjustment'" in await rejection(kube, NODEOVERLAYS, overlay)
    overlay["spec"] = {"requirements": [], "capacity": {"cpu": "1"}}
    assert "invalid resource restricted" in await rejection(kube, NODEOVERLAYS, overlay)
    buffer = {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": "v115-bad-buffer", "namespace": "default"},
        "spec": {"podTemplateRef": {"name": "p"}, "replicas": 1, "scalableRef": {"kind": "Deployment", "name": "d"}},
    }
    assert "either PodTemplateRef or ScalableRef, but not both" in await rejection(kube, CAPACITYBUFFERS, buffer)
