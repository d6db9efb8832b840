"""karpy's operator graph running in-process on the test loop, against the local cluster and moto."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from karpy.aws.cloudprovider import AWSCloudProvider
from karpy.aws.session import AWSClients
from karpy.kube.client import KubeClient
from karpy.operator import Operator, kubernetes_version
from karpy.settings import from_environment


@contextlib.asynccontextmanager
async def running_operator(
    cluster: Any,
    kube: KubeClient,
    queue: Callable[[AWSClients], Any] | None = None,
    **settings: str,
) -> AsyncIterator[Operator]:
    """An :class:`Operator` wired as ``karpy run`` wires it, synced and running until the block exits.

    ``settings`` are karpy's environment variables on top of the cluster's AWS ones (fast 200 ms / 2 s batch
    windows by default); ``queue`` builds an interruption queue from the AWS clients.
    """
    env = {
        **cluster.aws_env,
        "CLUSTER_NAME": cluster.cluster_name,
        "BATCH_IDLE_DURATION": "200ms",
        "BATCH_MAX_DURATION": "2s",
        **settings,
    }
    config = from_environment(env)
    async with AWSClients.create(config.aws_region, config.aws_endpoint_url) as clients:
        cloud = AWSCloudProvider(
            clients,
            cluster_name=config.cluster_name,
            cluster_endpoint=cluster.server,
            cluster_ca_bundle="",
            region=config.aws_region,
            k8s_version=await kubernetes_version(kube),
        )
        op = Operator(config, kube, cloud, interruption_queue=queue(clients) if queue else None)
        task = asyncio.create_task(op.run())
        await asyncio.wait_for(op.state.wait_synced(), 30)
        try:
            yield op
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
