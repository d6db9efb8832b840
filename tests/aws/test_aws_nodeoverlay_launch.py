"""A launch with NodeOverlay prices (Karpenter AWS ``providers/instance/instance.go`` and ``types.go``): EC2 would
rank by its own prices, so the overrides carry the overlaid price as ``Priority``, ordered by it, under
``prioritized`` (on-demand) or ``capacity-optimized-prioritized`` (spot); moto launches the first override."""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.apis.nodeoverlay import NodeOverlay
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients
from karpy.cloudprovider.types import InstanceType, LaunchRequest
from karpy.scheduling.nodeoverlay import PoolTypes, evaluate

ON_DEMAND = {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
ZONE_A = {"key": wk.LABEL_ZONE, "operator": "In", "values": ["us-east-1a"]}


def request(nodeclass: dict[str, Any], types: list[InstanceType], name: str) -> LaunchRequest:
    return LaunchRequest(
        nodeclaim_name=name,
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=[ON_DEMAND, ZONE_A],
        instance_types=types,
        labels={wk.LABEL_NODEPOOL: "default", wk.LABEL_EC2NODECLASS: "default"},
        taints=[],
        kubelet={},
    )


def overlaid(types: list[InstanceType], price: str, family: str) -> list[InstanceType]:
    overlay = NodeOverlay.from_json(
        {
            "metadata": {"name": "o"},
            "spec": {
                "requirements": [{"key": wk.LABEL_INSTANCE_FAMILY, "operator": "In", "values": [family]}],
                "price": price,
            },
        }
    )
    out = evaluate([overlay], [PoolTypes("default", {}, types)]).apply("default", types)
    assert out is not None
    return out


async def test_overlaid_prices_order_and_prioritize_the_fleet(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any], clients: AWSClients, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalogue = await cloud.get_instance_types(nodeclass)
    types = [t for t in catalogue if t.name in ("c5.large", "m5.large")]
    calls: list[dict[str, Any]] = []
    real = clients.ec2.create_fleet

    async def recorded(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return await real(**kwargs)

    monkeypatch.setattr(clients.ec2, "create_fleet", recorded)
    plain = await cloud.create(request(nodeclass, types, "nc-overlay-plain"))
    cheap_m5 = await cloud.create(request(nodeclass, overlaid(types, "0.001", "m5"), "nc-overlay-m5"))
    monkeypatch.undo()
    await cloud.delete(plain.provider_id)
    await cloud.delete(cheap_m5.provider_id)

    assert plain.instance_type == "c5.large" and calls[0]["OnDemandOptions"] == {"AllocationStrategy": "lowest-price"}
    assert all("Priority" not in o for c in calls[0]["LaunchTemplateConfigs"] for o in c["Overrides"])

    assert cheap_m5.instance_type == "m5.large"
    assert calls[1]["OnDemandOptions"] == {"AllocationStrategy": "prioritized"}
    overrides = [o for c in calls[1]["LaunchTemplateConfigs"] for o in c["Overrides"]]
    assert [(o["InstanceType"], o["Priority"]) for o in overrides] == [("m5.large", 0.001), ("c5.large", 0.085)]
