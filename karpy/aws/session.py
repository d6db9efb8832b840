"""The aiobotocore clients karpy uses, opened and closed together.

``AWSClients.create(region, endpoint_url)`` is an async context manager holding EC2, SSM, IAM, SQS, EKS and
Pricing clients (EKS for cluster discovery, :mod:`karpy.aws.eks`). The Pricing API only has endpoints in a
few regions (Karpenter ``pkg/providers/pricing``): us-east-1 for most regions, ap-south-1 for ``ap-*``,
eu-central-1 for ``eu-*``, cn-northwest-1 for ``cn-*``. When ``endpoint_url`` (``AWS_ENDPOINT_URL``) is given,
every client talks to it (a local AWS such as moto).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session


def pricing_region(region: str) -> str:
    """The region whose Pricing API endpoint serves ``region`` (Karpenter's mapping)."""
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith("eu-"):
        return "eu-central-1"
    if region.startswith("cn-"):
        return "cn-northwest-1"
    return "us-east-1"


@attrs.define
class AWSClients:
    """Open aiobotocore clients (typed ``Any``: aiobotocore ships no stubs)."""

    region: str
    ec2: Any
    ssm: Any
    iam: Any
    sqs: Any
    pricing: Any
    endpoint_url: str | None = None
    eks: Any = None

    @classmethod
    @contextlib.asynccontextmanager
    async def create(cls, region: str, endpoint_url: str | None = None) -> AsyncIterator[AWSClients]:
        """Open every client for ``region`` (``endpoint_url`` overrides all endpoints) and close them on exit."""
        session = get_session()
        # Standard retry mode: throttling and 5xx are retried with jittered backoff by botocore itself.
        config = AioConfig(
            retries={"max_attempts": 3, "mode": "standard"},
            connect_timeout=10,
            read_timeout=30,
            max_pool_connections=50,
        )
        async with contextlib.AsyncExitStack() as stack:

            async def client(service: str, client_region: str, client_config: AioConfig = config) -> Any:
                return await stack.enter_async_context(
                    session.create_client(
                        service, region_name=client_region, endpoint_url=endpoint_url, config=client_config
                    )
                )

            yield cls(
                region=region,
                ec2=await client("ec2", region),
                ssm=await client("ssm", region),
                iam=await client("iam", region),
                sqs=await client("sqs", region),
                # One attempt: a failing Pricing API falls back to the static table (karpy.aws.pricing).
                pricing=await client(
                    "pricing", pricing_region(region), config.merge(AioConfig(retries={"total_max_attempts": 1}))
                ),
                endpoint_url=endpoint_url,
                eks=await client("eks", region),
            )
