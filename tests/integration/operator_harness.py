"""karpy's operator graph running in-process on the test loop, against the local cluster and moto."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import attrs

from e2e.helpers import delete_nodeclaims, ec2nodeclass, nodeclaims_of
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.aws.session import AWSClients
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource
from karpy.operator import Operator, aws_operator, kubernetes_version
from karpy.settings import from_environment


@attrs.frozen
class RunningOperator:
    """The running operator and the harness's own handle on the AWS clients it was built on (tests patch a
    client's method, e.g. CreateFleet, without reaching into the cloud provider)."""

    operator: Operator
    clients: AWSClients


@contextlib.asynccontextmanager
async def running_operator(
    cluster: Any,
    kube: KubeClient,
    queue: Callable[[AWSClients], Any] | None = None,
    **settings: str,
) -> AsyncIterator[Operator]:
    """An :class:`Operator` wired as ``karpy run`` wires it, synced and running until the block exits (see
    :func:`running_operator_with_clients`)."""
    async with running_operator_with_clients(cluster, kube, queue, **settings) as running:
        yield running.operator


@contextlib.asynccontextmanager
async def running_operator_with_clients(
    cluster: Any,
    kube: KubeClient,
    queue: Callable[[AWSClients], Any] | None = None,
    **settings: str,
) -> AsyncIterator[RunningOperator]:
    """The operator built by :func:`karpy.operator.aws_operator` (as ``karpy run`` builds it), wired and
    running, synced, until the block exits.

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
        op = aws_operator(
            config,
            kube,
            clients,
            cluster_endpoint=cluster.server,
            k8s_version=await kubernetes_version(kube),
            interruption_queue=queue(clients) if queue else None,
        )
        op.wire()
        task = asyncio.create_task(op.run())
        await asyncio.wait_for(op.state.wait_synced(), 30)
        try:
            yield RunningOperator(op, clients)
        finally:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def pinned_pod(name: str, pool: str, cpu: str = "500m") -> dict[str, Any]:
    """A pause pod in ``default`` that only NodePool ``pool``'s nodes take (nodeSelector), deleted at once."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: pool},
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def on_demand_pool(pool: str, cluster_name: str) -> list[dict[str, Any]]:
    """An EC2NodeClass and a NodePool both named ``pool``: on-demand only, never consolidated (a test's node stays)."""
    nodepool = shared_nodepool(
        pool,
        nodeclass=pool,
        requirements=[{"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}],
        disruption={"consolidateAfter": "Never"},
    )
    return [ec2nodeclass(pool, cluster_name), nodepool]


def tainted_pool(pool: str, taint: str, disruption: Mapping[str, Any]) -> dict[str, Any]:
    """A NodePool ``pool`` (EC2NodeClass ``pool``): on-demand c/m types, tainted ``taint``:NoSchedule (only a
    test's tolerating pod lands there), with the ``disruption`` block given."""
    return shared_nodepool(
        pool,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
        ],
        taints=[{"key": taint, "effect": "NoSchedule"}],
        disruption=dict(disruption),
    )


def tolerating_pod(pool: str, taint: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pause pod ``pool`` in ``default`` (label ``app=<pool>``, 500m CPU) on :func:`tainted_pool` ``pool``'s
    nodes only (nodeSelector, toleration of ``taint``), deleted at once; ``annotations`` on the pod when given."""
    metadata: dict[str, Any] = {"name": pool, "namespace": "default", "labels": {"app": pool}}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "nodeSelector": {wk.LABEL_NODEPOOL: pool},
            "tolerations": [{"key": taint, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "500m"}}}],
        },
    }


async def cleanup_pool(kube: KubeClient, pool: str, what: str, *also: tuple[Resource, str, str | None]) -> None:
    """Delete the pod ``pool`` in ``default``, the NodePool ``pool`` and the objects ``also`` (resource, name,
    namespace) when present, then every NodeClaim of the pool (waiting up to 60 s until none is left, else
    AssertionError naming ``what``), then the EC2NodeClass ``pool``. Needs an operator running, whose
    terminator releases the NodeClaims."""
    for res, name, ns in ((r.PODS, pool, "default"), (r.NODEPOOLS, pool, None), *also):
        with contextlib.suppress(ApiError):
            await kube.delete(res, name, ns)
    await delete_nodeclaims(kube, lambda: nodeclaims_of(kube, pool), timeout=60, what=what)
    with contextlib.suppress(ApiError):
        await kube.delete(r.EC2NODECLASSES, pool)
