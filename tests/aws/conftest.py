"""A real moto server on 127.0.0.1 for the AWS provider tests, seeded once per session (no Kubernetes needed)."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from e2e.cluster.aws import AWS_ENV, MotoAWS, seed_cluster, start_moto
from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients

CLUSTER = "aws-test"
ENDPOINT = "https://127.0.0.1:6443"
CA = "Q0EgYnVuZGxl"


@pytest.fixture(scope="session")
def moto_aws() -> Iterator[MotoAWS]:
    """moto's server in this process (state is in-process), with test credentials in the environment."""
    saved = {k: os.environ.get(k) for k in AWS_ENV}
    os.environ.update(AWS_ENV)
    server = start_moto()
    yield server
    server.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def seeded(moto_aws: MotoAWS) -> dict[str, Any]:
    """The ids ``seed_cluster`` created for :data:`CLUSTER`."""
    return seed_cluster(moto_aws.endpoint_url, CLUSTER)


@pytest.fixture(scope="session")
async def clients(moto_aws: MotoAWS, seeded: dict[str, Any]) -> AsyncIterator[AWSClients]:
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as opened:
        yield opened


@pytest.fixture(scope="session")
def cloud(clients: AWSClients) -> AWSCloudProvider:
    """One provider for the session: its catalogue caches make later tests fast."""
    return AWSCloudProvider(
        clients,
        cluster_name=CLUSTER,
        cluster_endpoint=ENDPOINT,
        cluster_ca_bundle=CA,
        region="us-east-1",
        k8s_version="1.34",
    )


def nodeclass_spec(name: str = "default", **spec: Any) -> dict[str, Any]:
    """An EC2NodeClass as a Karpenter user writes it, for :data:`CLUSTER`."""
    return {
        "apiVersion": "karpenter.k8s.aws/v1",
        "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {
            "role": f"KarpenterNodeRole-{CLUSTER}",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": CLUSTER}}],
            **spec,
        },
    }


@pytest.fixture(scope="session")
def make_nodeclass() -> Callable[..., dict[str, Any]]:
    """``make_nodeclass(name, **spec_overrides)`` → an EC2NodeClass for the test cluster (no status)."""
    return nodeclass_spec


@pytest.fixture(scope="session")
async def nodeclass(cloud: AWSCloudProvider) -> dict[str, Any]:
    """The default EC2NodeClass with its status resolved by the provider."""
    obj = nodeclass_spec()
    resolution = await cloud.resolve_nodeclass(obj)
    assert resolution.ready, resolution.conditions
    obj["status"] = resolution.status
    return obj
