"""A launch renders user data once per distinct inputs: a batch of NodeClaims with the same candidate types
(e.g. 200 small nodes, up to 60 types each) shares a handful of renders instead of one per type per launch."""

from __future__ import annotations

from karpy.aws import amifamily
from karpy.aws.instancetypes import kubelet_resources
from karpy.aws.launchtemplates import LaunchTemplateProvider
from tests.aws.test_aws_userdata import CAPACITY, launch_request


def test_same_inputs_render_once_and_other_inputs_render_anew() -> None:
    provider = LaunchTemplateProvider(None, "demo", cluster_endpoint="https://127.0.0.1:6443", cluster_ca_bundle="Q0E=")
    request = launch_request("al2023@latest")
    spec = request.nodeclass["spec"]
    family = amifamily.family_of(spec)
    small = kubelet_resources(CAPACITY, {})
    first = provider.user_data(family, spec, request, "on-demand", small)
    again = [provider.user_data(family, spec, launch_request("al2023@latest"), "on-demand", small) for _ in range(5)]
    assert again == [first] * 5
    assert provider.renders == 1

    big = kubelet_resources({**CAPACITY, "cpu": 8000, "pods": 58}, {})
    other = provider.user_data(family, spec, request, "on-demand", big)  # other kubelet resources
    spot = provider.user_data(family, spec, request, "spot", small)  # other capacity-type label
    tainted = launch_request("al2023@latest")
    tainted.taints.append({"key": "x", "effect": "NoSchedule"})
    with_taint = provider.user_data(family, spec, tainted, "on-demand", small)
    assert provider.renders == 4
    assert len({first, other, spot, with_taint}) == 4
    assert "58" in other and "capacity-type=spot" in spot and "key: x" in with_taint
