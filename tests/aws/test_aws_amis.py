"""AMI resolution for every family Karpenter v1.15 resolves, against moto seeded as ``e2e/cluster/aws.py`` seeds
the local AWS (Karpenter AWS ``pkg/providers/amifamily/{ami.go,al2023.go,al2.go,bottlerocket.go,windows.go}``,
``pkg/controllers/nodeclass/ami.go``).

moto's images carry no ``DeprecationTime``: deprecated-image handling is checked with botocore's Stubber.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import pytest
from aiobotocore.session import get_session
from aiobotocore.stub import AioStubber

from e2e.cluster import aws as seed
from e2e.cluster.aws import MotoAWS, seed_amis
from karpy.apis import labels as wk
from karpy.aws.amis import AMIProvider, UnsupportedAliasError, alias_parameters, resolve_amis
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients

K8S = "1.34"
V = seed.AMI_VERSION
ARCH_AMD64 = {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]}
ARCH_ARM64 = {"key": wk.LABEL_ARCH, "operator": "In", "values": ["arm64"]}
NO_GPU = {"key": wk.LABEL_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"}
NO_ACCELERATOR = {"key": wk.LABEL_INSTANCE_ACCELERATOR_COUNT, "operator": "DoesNotExist"}
GPU = {"key": wk.LABEL_INSTANCE_GPU_COUNT, "operator": "Exists"}
ACCELERATOR = {"key": wk.LABEL_INSTANCE_ACCELERATOR_COUNT, "operator": "Exists"}


def windows(build: str) -> list[dict[str, Any]]:
    """Karpenter's Windows requirements, ordered by key length then key as its AMI reconciler writes them."""
    return [
        {"key": wk.LABEL_OS, "operator": "In", "values": ["windows"]},
        ARCH_AMD64,
        {"key": wk.LABEL_WINDOWS_BUILD, "operator": "In", "values": [build]},
    ]


def by_name(amis: list[dict[str, Any]]) -> dict[str, list[list[dict[str, Any]]]]:
    """AMI name → its requirement sets (an image booting two variants has two entries, in no set order)."""
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for ami in amis:
        out.setdefault(ami["name"], []).append(ami["requirements"])
    return {name: sorted(sets, key=repr) for name, sets in out.items()}


async def resolve(clients: AWSClients, terms: list[dict[str, Any]], k8s: str = K8S) -> list[dict[str, Any]]:
    return await resolve_amis(clients.ec2, clients.ssm, terms, k8s)


async def test_al2023_latest_resolves_the_standard_amis_with_karpenters_requirements_newest_first(
    clients: AWSClients, seeded: dict[str, Any]
) -> None:
    amis = await resolve(clients, [{"alias": "al2023@latest"}])
    assert amis == [  # arm64 is seeded a minute newer
        {
            "id": seeded["ami_ids"]["arm64"],
            "name": f"amazon-eks-node-al2023-arm64-standard-{K8S}-{V}",
            "requirements": [ARCH_ARM64, NO_GPU, NO_ACCELERATOR],
        },
        {
            "id": seeded["ami_ids"]["x86_64"],
            "name": f"amazon-eks-node-al2023-x86_64-standard-{K8S}-{V}",
            "requirements": [ARCH_AMD64, NO_GPU, NO_ACCELERATOR],
        },
    ]


async def test_al2023_pinned_reads_every_variant_parameter(clients: AWSClients, seeded: dict[str, Any]) -> None:
    amis = by_name(await resolve(clients, [{"alias": f"al2023@{V}"}]))
    assert amis == {
        f"amazon-eks-node-al2023-arm64-standard-{K8S}-{V}": [[ARCH_ARM64, NO_GPU, NO_ACCELERATOR]],
        f"amazon-eks-node-al2023-x86_64-standard-{K8S}-{V}": [[ARCH_AMD64, NO_GPU, NO_ACCELERATOR]],
        f"amazon-eks-node-al2023-x86_64-nvidia-{K8S}-{V}": [[ARCH_AMD64, GPU]],
        f"amazon-eks-node-al2023-arm64-nvidia-{K8S}-{V}": [[ARCH_ARM64, GPU]],
        f"amazon-eks-node-al2023-x86_64-neuron-{K8S}-{V}": [[ARCH_AMD64, ACCELERATOR]],
    }
    assert (
        f"/aws/service/eks/optimized-ami/{K8S}/amazon-linux-2023/x86_64/neuron/"
        f"amazon-eks-node-al2023-x86_64-neuron-{K8S}-{V}/image_id" in alias_parameters(f"al2023@{V}", K8S)
    )


@pytest.mark.parametrize("version", ["latest", seed.BOTTLEROCKET_VERSION, f"v{seed.BOTTLEROCKET_VERSION}"])
async def test_bottlerocket_standard_image_boots_standard_and_neuron_types(
    clients: AWSClients, seeded: dict[str, Any], version: str
) -> None:
    """``bottlerocket@1.49.0`` and ``bottlerocket@v1.49.0`` read the same parameter (the "v" is trimmed)."""
    amis = by_name(await resolve(clients, [{"alias": f"bottlerocket@{version}"}]))
    br = f"bottlerocket-aws-k8s-{K8S}"
    tail = f"v{seed.BOTTLEROCKET_VERSION}-4ce1a5b2"
    assert amis == {
        f"{br}-x86_64-{tail}": sorted([[ARCH_AMD64, NO_GPU, NO_ACCELERATOR], [ARCH_AMD64, ACCELERATOR]], key=repr),
        f"{br}-arm64-{tail}": [[ARCH_ARM64, NO_GPU, NO_ACCELERATOR]],
        f"{br}-nvidia-x86_64-{tail}": [[ARCH_AMD64, GPU]],
        f"{br}-nvidia-arm64-{tail}": [[ARCH_ARM64, GPU]],
    }
    assert f"/aws/service/bottlerocket/aws-k8s-{K8S}-nvidia/arm64/{version.lstrip('v')}/image_id" in (
        alias_parameters(f"bottlerocket@{version}", K8S)
    )


@pytest.mark.parametrize(("year", "build"), [("2019", "10.0.17763"), ("2022", "10.0.20348")])
async def test_windows_alias_requires_windows_and_its_build(
    clients: AWSClients, seeded: dict[str, Any], year: str, build: str
) -> None:
    amis = await resolve(clients, [{"alias": f"windows{year}@latest"}])
    name = f"Windows_Server-{year}-English-Core-EKS_Optimized-{K8S}-2025.01.01"
    assert [(a["id"], a["name"], a["requirements"]) for a in amis] == [(seeded["images"][name], name, windows(build))]


async def test_windows_2025_needs_kubernetes_1_35(clients: AWSClients, moto_aws: MotoAWS) -> None:
    with pytest.raises(UnsupportedAliasError, match=r"requires EKS version 1\.35 or higher, current version: 1\.34"):
        await resolve(clients, [{"alias": "windows2025@latest"}])
    images = seed_amis(moto_aws.endpoint_url, "1.35")
    amis = await resolve(clients, [{"alias": "windows2025@latest"}], "1.35")
    name = "Windows_Server-2025-English-Core-EKS_Optimized-1.35-2025.01.01"
    assert [(a["id"], a["requirements"]) for a in amis] == [(images[name], windows("10.0.26100"))]


async def test_al2_alias_is_refused_from_1_33_and_its_gpu_image_boots_nvidia_and_neuron(
    clients: AWSClients, moto_aws: MotoAWS
) -> None:
    with pytest.raises(UnsupportedAliasError, match=r"AL2 aliases are no longer supported on EKS 1\.33"):
        await resolve(clients, [{"alias": "al2@latest"}])
    seed_amis(moto_aws.endpoint_url, "1.32")
    for version in ("latest", V):
        amis = by_name(await resolve(clients, [{"alias": f"al2@{version}"}], "1.32"))
        assert amis == {
            f"amazon-eks-node-1.32-{V}": [[ARCH_AMD64, NO_GPU, NO_ACCELERATOR]],
            f"amazon-eks-arm64-node-1.32-{V}": [[ARCH_ARM64, NO_GPU, NO_ACCELERATOR]],
            f"amazon-eks-gpu-node-1.32-{V}": sorted([[ARCH_AMD64, GPU], [ARCH_AMD64, ACCELERATOR]], key=repr),
        }


async def test_an_unsupported_alias_is_an_amis_ready_false_condition(
    cloud: AWSCloudProvider, make_nodeclass: Callable[..., dict[str, Any]]
) -> None:
    """Karpenter's AMI reconciler: ``AMIsReady=False`` with reason ``UnsupportedAlias`` and the error's message."""
    resolution = await cloud.resolve_nodeclass(make_nodeclass("al2", amiSelectorTerms=[{"alias": "al2@latest"}]))
    [condition] = [c for c in resolution.conditions if c["type"] == wk.COND_AMIS_READY]
    assert (condition["status"], condition["reason"]) == ("False", "UnsupportedAlias")
    assert "AL2 aliases are no longer supported" in condition["message"]
    assert resolution.status["amis"] == [] and not resolution.ready


async def test_selector_terms_by_id_name_owner_tags_and_ssm_parameter(
    clients: AWSClients, seeded: dict[str, Any]
) -> None:
    """Karpenter's queries: a name alone looks only at self- and Amazon-owned images, so the custom AMI of another
    account needs its owner; tags (any value with ``*``), ids and an ``ssmParameter`` find it whoever owns it.
    Images not from an alias carry their architecture only."""
    custom = seeded["images"][seed.CUSTOM_AMI_NAME]
    expected = [{"id": custom, "name": seed.CUSTOM_AMI_NAME, "requirements": [ARCH_AMD64]}]
    assert await resolve(clients, [{"name": seed.CUSTOM_AMI_NAME}]) == []
    assert await resolve(clients, [{"name": seed.CUSTOM_AMI_NAME, "owner": seed.CUSTOM_AMI_OWNER}]) == expected
    assert await resolve(clients, [{"name": "acme-golden-*", "owner": seed.CUSTOM_AMI_OWNER}]) == expected
    assert await resolve(clients, [{"tags": {"acme.io/image": "golden", "acme.io/team": "*"}}]) == expected
    assert await resolve(clients, [{"tags": {"acme.io/image": "silver"}}]) == []
    assert await resolve(clients, [{"id": custom}]) == expected
    await clients.ssm.put_parameter(Name="/acme/golden-ami", Value=custom, Type="String")
    await clients.ssm.put_parameter(Name="/acme/not-an-ami", Value="hello", Type="String")
    assert await resolve(clients, [{"ssmParameter": "/acme/golden-ami"}]) == expected
    assert await resolve(clients, [{"ssmParameter": "/acme/not-an-ami"}, {"ssmParameter": "/acme/none"}]) == []
    # A name alone finds the self-owned EKS AMI; terms are ORed, one image per requirement set: same creation
    # date, so the greater name wins ("amazon-eks-…" > "acme-…").
    x86 = seeded["ami_ids"]["x86_64"]
    both = await resolve(clients, [{"name": f"amazon-eks-node-al2023-x86_64-standard-{K8S}-*"}, {"id": custom}])
    assert [(a["id"], a["requirements"]) for a in both] == [(x86, [ARCH_AMD64])]


# Deprecated images (moto has no DeprecationTime: botocore's Stubber) ---------------------------------------


@asynccontextmanager
async def stubbed(service: str) -> AsyncIterator[tuple[Any, AioStubber]]:
    session = get_session()
    async with session.create_client(
        service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    ) as client:
        with AioStubber(client) as stub:
            yield client, stub


def image(image_id: str, created: str, deprecation: str | None = None, name: str = "") -> dict[str, Any]:
    out = {
        "ImageId": image_id,
        "Name": name or image_id,
        "State": "available",
        "Architecture": "x86_64",
        "CreationDate": created,
    }
    if deprecation:
        out["DeprecationTime"] = deprecation
    return out


NOW = datetime(2026, 6, 1, tzinfo=UTC)
QUERY = {
    "Filters": [
        {"Name": "tag:team", "Values": ["a"]},
        {"Name": "state", "Values": ["available"]},
    ],
    "IncludeDeprecated": True,
    "MaxResults": 1000,
}


async def test_a_non_deprecated_image_wins_over_a_newer_deprecated_one() -> None:
    """Karpenter's ``compareAMI``: non-deprecated first, then the newest; a deprecated image is still used (marked
    ``deprecated: true``) when nothing else matches; a deprecation time still to come does not count."""
    async with stubbed("ec2") as (ec2, stub), stubbed("ssm") as (ssm, _):
        older = image("ami-old", "2025-01-01T00:00:00.000Z")
        newer_deprecated = image("ami-new", "2026-01-01T00:00:00.000Z", "2026-05-01T00:00:00.000Z")
        stub.add_response("describe_images", {"Images": [newer_deprecated, older]}, QUERY)
        amis = await resolve_amis(ec2, ssm, [{"tags": {"team": "a"}}], K8S, now=lambda: NOW)
        assert amis == [{"id": "ami-old", "name": "ami-old", "requirements": [ARCH_AMD64]}]
        stub.add_response("describe_images", {"Images": [newer_deprecated]}, QUERY)
        amis = await resolve_amis(ec2, ssm, [{"tags": {"team": "a"}}], K8S, now=lambda: NOW)
        assert amis == [{"id": "ami-new", "deprecated": True, "name": "ami-new", "requirements": [ARCH_AMD64]}]
        later = image("ami-later", "2026-02-01T00:00:00.000Z", "2027-01-01T00:00:00.000Z")
        stub.add_response("describe_images", {"Images": [older, later]}, QUERY)
        amis = await resolve_amis(ec2, ssm, [{"tags": {"team": "a"}}], K8S, now=lambda: NOW)
        assert [a["id"] for a in amis] == ["ami-later"]
        stub.assert_no_pending_responses()


async def test_same_creation_date_prefers_the_greater_name_and_pages_are_all_read() -> None:
    async with stubbed("ec2") as (ec2, stub), stubbed("ssm") as (ssm, _):
        stub.add_response(
            "describe_images",
            {"Images": [image("ami-1", "2025-01-01T00:00:00.000Z", name="a-1")], "NextToken": "t"},
            QUERY,
        )
        stub.add_response(
            "describe_images",
            {"Images": [image("ami-2", "2025-01-01T00:00:00.000Z", name="a-2")]},
            {**QUERY, "NextToken": "t"},
        )
        provider = AMIProvider(ec2, ssm, K8S, now=lambda: NOW)
        assert [a["id"] for a in await provider.resolve([{"tags": {"team": "a"}}])] == ["ami-2"]
        stub.assert_no_pending_responses()


async def test_windows_nodeclass_types_run_windows_of_its_build_on_amd64_only(
    cloud: AWSCloudProvider, make_nodeclass: Callable[..., dict[str, Any]]
) -> None:
    """Karpenter's instance type requirements under a Windows family: ``kubernetes.io/os=windows`` and the
    family's ``node.kubernetes.io/windows-build`` on amd64 types; no arm64 type (its OS set is empty)."""
    obj = make_nodeclass("win", amiSelectorTerms=[{"alias": "windows2022@latest"}])
    resolution = await cloud.resolve_nodeclass(obj)
    assert resolution.ready, resolution.conditions
    obj["status"] = resolution.status
    types = await cloud.get_instance_types(obj)
    assert types and {(it.labels[wk.LABEL_ARCH], it.labels[wk.LABEL_OS]) for it in types} == {("amd64", "windows")}
    assert {it.labels[wk.LABEL_WINDOWS_BUILD] for it in types} == {"10.0.20348"}
    linux = make_nodeclass("linux")
    linux["status"] = (await cloud.resolve_nodeclass(linux)).status
    assert {it.labels[wk.LABEL_OS] for it in await cloud.get_instance_types(linux)} == {"linux"}
    assert not any(wk.LABEL_WINDOWS_BUILD in it.labels for it in await cloud.get_instance_types(linux))


async def test_a_custom_family_may_take_its_amis_from_an_alias(
    cloud: AWSCloudProvider, make_nodeclass: Callable[..., dict[str, Any]]
) -> None:
    """Karpenter's ``custom-family-with-alias``: ``amiFamily: Custom`` changes the user data, not the AMIs; the
    alias still resolves its family's images with their variant requirements."""
    alias = [{"alias": "bottlerocket@latest"}]
    custom = await cloud.resolve_nodeclass(make_nodeclass("custom-br", amiFamily="Custom", amiSelectorTerms=alias))
    inferred = await cloud.resolve_nodeclass(make_nodeclass("br", amiSelectorTerms=alias))
    assert custom.ready and custom.status["amis"] == inferred.status["amis"]
    assert {a["name"].rsplit("-", 2)[0] for a in custom.status["amis"]} == {
        f"bottlerocket-aws-k8s-{K8S}-{flavour}{arch}" for flavour in ("", "nvidia-") for arch in ("x86_64", "arm64")
    }
