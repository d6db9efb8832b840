"""Instance types no AMI of the EC2NodeClass can boot (issue 7, defect 3), against a real moto server.

The seeded ``al2023@latest`` alias resolves only the ``standard`` AMIs (the nvidia and neuron AMIs are published
under pinned versions only), whose requirements exclude GPU and accelerator types; an AMI selected by id carries
only its architecture, as in Karpenter, and admits them.
"""

from __future__ import annotations

from typing import Any

import pytest

from karpy.apis import labels as wk
from karpy.aws.amis import ami_for, ami_requirements_text
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients
from karpy.cloudprovider.types import InsufficientCapacityError, LaunchRequest

CLUSTER = "aws-test"
STANDARD_ONLY = (  # status.amis is newest first, as Karpenter writes it: the seeded arm64 AMI is a minute newer
    'EC2NodeClass "default" resolves AMIs only for (kubernetes.io/arch In [arm64], '
    "karpenter.k8s.aws/instance-gpu-count DoesNotExist, karpenter.k8s.aws/instance-accelerator-count DoesNotExist)"
    " or (kubernetes.io/arch In [amd64], karpenter.k8s.aws/instance-gpu-count DoesNotExist, "
    "karpenter.k8s.aws/instance-accelerator-count DoesNotExist)"
)


def test_ami_for_and_the_requirements_text() -> None:
    standard = {
        "id": "ami-s",
        "requirements": [
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            {"key": wk.LABEL_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"},
        ],
    }
    nvidia = {
        "id": "ami-n",
        "requirements": [
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
            {"key": wk.LABEL_INSTANCE_GPU_MANUFACTURER, "operator": "In", "values": ["nvidia"]},
        ],
    }
    gpu = {wk.LABEL_ARCH: "amd64", wk.LABEL_INSTANCE_GPU_COUNT: "1", wk.LABEL_INSTANCE_GPU_MANUFACTURER: "nvidia"}
    assert ami_for([standard], gpu) is None
    assert ami_for([standard, nvidia], gpu) is nvidia
    assert ami_for([standard, nvidia], {wk.LABEL_ARCH: "amd64"}) is standard
    assert ami_for([standard], {wk.LABEL_ARCH: "arm64"}) is None
    assert ami_requirements_text([standard, standard, {"id": "x"}]) == (
        "(kubernetes.io/arch In [amd64], karpenter.k8s.aws/instance-gpu-count DoesNotExist) or (any instance type)"
    )


async def test_types_without_a_compatible_ami_are_left_out_and_named(
    cloud: AWSCloudProvider, nodeclass: dict[str, Any]
) -> None:
    """Standard AL2023 AMIs only: no GPU or Neuron type is offered; they are reported with the AMI requirements."""
    names = {it.name for it in await cloud.get_instance_types(nodeclass)}
    assert "m5.large" in names and "m6g.large" in names
    assert not names & {"g4dn.xlarge", "inf1.xlarge"}
    left_out = await cloud.incompatible_instance_types(nodeclass)
    assert {"g4dn.xlarge", "inf1.xlarge"} <= {it.name for it in left_out.instance_types}
    assert all(
        wk.LABEL_INSTANCE_GPU_COUNT in it.labels or wk.LABEL_INSTANCE_ACCELERATOR_COUNT in it.labels
        for it in left_out.instance_types
    )
    assert left_out.reason == STANDARD_ONLY


async def test_an_ami_selected_by_id_admits_gpu_types(
    cloud: AWSCloudProvider, seeded: dict[str, Any], make_nodeclass: Any
) -> None:
    """Karpenter: an AMI not resolved from an alias carries its architecture only, so GPU types stay."""
    obj = make_nodeclass("by-id", amiSelectorTerms=[{"id": seeded["ami_ids"]["x86_64"]}])
    obj["status"] = (await cloud.resolve_nodeclass(obj)).status
    names = {it.name for it in await cloud.get_instance_types(obj)}
    assert "g4dn.xlarge" in names and "m6g.large" not in names, "arm64 types have no AMI now"
    left_out = await cloud.incompatible_instance_types(obj)
    assert "m6g.large" in {it.name for it in left_out.instance_types}


async def test_a_launch_with_no_compatible_ami_raises_naming_it_and_marks_the_offerings(
    clients: AWSClients, seeded: dict[str, Any], nodeclass: dict[str, Any], make_nodeclass: Any
) -> None:
    """The AMIs changed after the plan: the launch fails with InsufficientCapacityError naming the AMI
    requirements, launches nothing, and keeps the types' offerings out of the next plans."""
    cloud = AWSCloudProvider(  # its own ICE cache: the marks must not leak into the session's provider
        clients,
        cluster_name=CLUSTER,
        cluster_endpoint="https://127.0.0.1:6443",
        cluster_ca_bundle="Q0E=",
        region="us-east-1",
        k8s_version="1.34",
    )
    by_id = make_nodeclass("by-id", amiSelectorTerms=[{"id": seeded["ami_ids"]["x86_64"]}])
    by_id["status"] = (await cloud.resolve_nodeclass(by_id)).status
    g4dn = next(it for it in await cloud.get_instance_types(by_id) if it.name == "g4dn.xlarge")
    request = LaunchRequest(
        nodeclaim_name="nc-no-ami",
        nodepool_name="default",
        nodeclass=nodeclass,
        requirements=[],
        instance_types=[g4dn],
        labels={wk.LABEL_NODEPOOL: "default"},
        taints=[],
    )
    with pytest.raises(InsufficientCapacityError) as raised:
        await cloud.create(request)
    assert str(raised.value) == f"no AMI for any of 1 instance types (g4dn.xlarge): {STANDARD_ONLY}"
    assert not [i for i in await cloud.list() if i.tags.get(wk.TAG_NODECLAIM) == "nc-no-ami"]
    for offering in g4dn.offerings:
        assert cloud.unavailable.is_unavailable(offering.capacity_type, "g4dn.xlarge", offering.zone)
