"""Concurrent launches of one NodeClass share one DescribeLaunchTemplates / CreateLaunchTemplate in flight
(karpy.aws.launchtemplates.LaunchTemplateProvider.ensure)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from botocore.exceptions import ClientError

from karpy.aws.launchtemplates import LaunchTemplateProvider

DATA = {"ImageId": "ami-1", "InstanceType": "m5.large"}


def client_error(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, "op")


class CountingEC2:
    """Counts calls; each call yields to the loop so concurrent callers overlap. ``fail``: error to raise from
    describe (once per call) while set."""

    def __init__(self) -> None:
        self.describes = 0
        self.creates = 0
        self.fail: Exception | None = None
        self.gate = asyncio.Event()
        self.started = asyncio.Event()

    async def describe_launch_templates(self, **_: Any) -> dict[str, Any]:
        self.describes += 1
        self.started.set()
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        raise client_error("InvalidLaunchTemplateName.NotFoundException")

    async def create_launch_template(self, **_: Any) -> dict[str, Any]:
        self.creates += 1
        await asyncio.sleep(0)
        return {}


async def ensure_many(provider: LaunchTemplateProvider, ec2: CountingEC2, n: int) -> list[Any]:
    calls = [asyncio.ensure_future(provider.ensure(DATA, {"k": "v"})) for _ in range(n)]
    await ec2.started.wait()
    for _ in range(5):  # let every caller reach the shared operation before EC2 answers
        await asyncio.sleep(0)
    ec2.gate.set()
    return await asyncio.gather(*calls, return_exceptions=True)


async def test_twenty_concurrent_ensures_of_one_name_send_one_describe_and_one_create() -> None:
    ec2 = CountingEC2()
    provider = LaunchTemplateProvider(ec2, "demo")
    names = await ensure_many(provider, ec2, 20)
    assert len(set(names)) == 1 and str(names[0]).startswith("karpenter.k8s.aws/")
    assert (ec2.describes, ec2.creates) == (1, 1)
    assert await provider.ensure(DATA, {}) == names[0]  # cached now
    assert (ec2.describes, ec2.creates) == (1, 1)


async def test_a_failed_shared_operation_reaches_every_waiter_and_the_next_call_retries() -> None:
    ec2 = CountingEC2()
    ec2.fail = client_error("UnauthorizedOperation")
    provider = LaunchTemplateProvider(ec2, "demo")
    results = await ensure_many(provider, ec2, 20)
    assert ec2.describes == 1
    assert all(isinstance(r, ClientError) for r in results) and len(results) == 20
    ec2.fail = None
    name = await provider.ensure(DATA, {})
    assert name.startswith("karpenter.k8s.aws/")
    assert (ec2.describes, ec2.creates) == (2, 1)


async def test_a_cancelled_waiter_does_not_cancel_the_others() -> None:
    ec2 = CountingEC2()
    provider = LaunchTemplateProvider(ec2, "demo")
    first = asyncio.ensure_future(provider.ensure(DATA, {}))
    second = asyncio.ensure_future(provider.ensure(DATA, {}))
    await ec2.started.wait()
    first.cancel()
    ec2.gate.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert (await second).startswith("karpenter.k8s.aws/")
    assert (ec2.describes, ec2.creates) == (1, 1)
