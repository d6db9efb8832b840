"""GPU and Neuron pods under an EC2NodeClass with no GPU-capable AMI, on the local cluster (issue 7, defect 3).

The ``al2023@latest`` alias resolves only the AL2023 ``standard`` AMIs in moto (no nvidia or neuron variant is
published), whose requirements exclude GPU and accelerator instance types. Before the fix karpy planned a GPU
type anyway, the launch found no AMI, the NodeClaim was deleted and the next batch planned it again: about one
NodeClaim a second, with nothing on the pods but kube-scheduler's message. Now the types without an AMI are
left out of the NodePool's instance types (as Karpenter does): over 2 minutes, watched on the NodeClaim watch
stream, at most 3 NodeClaims are created for the pool (none are expected), and every pod carries karpy's
``FailedScheduling`` Warning naming the AMI requirements.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import (
    PoolEnv,
    apply,
    assert_nodeclaim_counters,
    condition_ready,
    ec2nodeclass,
    pool_env,
    wait_for,
)
from e2e.helpers import deployment as shared_deployment
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

pytestmark = [pytest.mark.e2e]
POOL = "launch-noami"
TAINT_KEY = "karpy-e2e/launch"
WINDOW = 120.0
MAX_NODECLAIMS = 3
DEPLOYMENTS = {"launch-gpu": (2, wk.RESOURCE_NVIDIA_GPU), "launch-neuron": (1, wk.RESOURCE_NEURON)}


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ],
        taints=[{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
    )


def deployment(app: str, replicas: int, resource: str) -> dict[str, Any]:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
        "tolerations": [
            {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
            {"key": resource, "operator": "Exists", "effect": "NoSchedule"},
        ],
        "containers": [
            {
                "name": "app",
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {resource: "1"}},
            }
        ],
    }
    return shared_deployment(app, replicas, spec)


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[PoolEnv]:
    work = tmp_path_factory.mktemp("karpy-launch")
    workloads = [(r.DEPLOYMENTS, app, "default") for app in DEPLOYMENTS]
    async with pool_env(local_cluster, work, POOL, PoolEnv, workloads=workloads) as e:
        yield e


async def _karpy_synced(env: PoolEnv) -> bool:
    return any(line.get("message") == "cluster state synced" for line in env.karpy.logs())


async def created_nodeclaims(client: KubeClient, pool: str, since: str, seconds: float) -> list[str]:
    """Names of NodePool ``pool``'s NodeClaims the watch stream reports ADDED within ``seconds`` from ``since`` (a LIST
    resourceVersion); the watch is resumed from its last resourceVersion whenever the apiserver ends it."""
    added: list[str] = []
    rv = since
    deadline = time.monotonic() + seconds
    query = {"watch": "1", "labelSelector": f"{wk.LABEL_NODEPOOL}={pool}", "allowWatchBookmarks": "true"}
    while (left := deadline - time.monotonic()) > 0:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(left):
                async for line in client.stream_lines(
                    r.NODECLAIMS.path(),
                    {**query, "resourceVersion": rv, "timeoutSeconds": int(left) + 1},
                    read_timeout=left + 5,
                ):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise AssertionError(f"NodeClaim watch failed: {obj}")
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if event.get("type") == "ADDED":
                        added.append(obj["metadata"]["name"])
    return added


async def test_no_churn_and_failed_scheduling_names_the_ami(env: PoolEnv) -> None:
    cluster = env.cluster.cluster_name
    await apply(env.client, [ec2nodeclass(POOL, cluster), nodepool()])
    await wait_for(lambda: condition_ready(env.client, r.EC2NODECLASSES, POOL), timeout=60, what="EC2NodeClass Ready")
    nodeclass = await env.client.get(r.EC2NODECLASSES, POOL)
    amis = nodeclass["status"]["amis"]
    assert amis and all(
        {"key": wk.LABEL_INSTANCE_GPU_COUNT, "operator": "DoesNotExist"} in a["requirements"] for a in amis
    ), f"the alias must resolve standard AMIs only: {amis}"
    await wait_for(lambda: condition_ready(env.client, r.NODEPOOLS, POOL), timeout=60, what=f"NodePool {POOL} Ready")
    await wait_for(lambda: _karpy_synced(env), timeout=30, what="karpy's cluster state synced")
    existing, since = await env.client.list(r.NODECLAIMS, query={"labelSelector": f"{wk.LABEL_NODEPOOL}={POOL}"})
    assert existing == []

    watching = asyncio.create_task(created_nodeclaims(env.client, POOL, since, WINDOW))
    await apply(env.client, [deployment(app, n, res) for app, (n, res) in DEPLOYMENTS.items()])
    expected = sum(n for n, _ in DEPLOYMENTS.values())

    async def told() -> dict[str, str]:
        pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await env.pods(*DEPLOYMENTS)}
        events = (await env.client.list(r.EVENTS, "default"))[0]
        out = {
            e["involvedObject"]["name"]: e["message"]
            for e in events
            if e["type"] == "Warning"
            and e["reason"] == "FailedScheduling"
            and e["source"].get("component") == "karpy"
            and e["involvedObject"].get("uid") in pods.values()
        }
        return out if len(pods) == expected and len(out) == expected else {}

    messages = await wait_for(told, timeout=60, what="karpy's FailedScheduling on every GPU and Neuron pod")
    for name, message in messages.items():
        assert message.startswith(  # Karpenter's PodFailedToScheduleEvent text (scheduling/events.go)
            "Failed to schedule pod, "
            f'incompatible with nodepool "{POOL}": no instance type that fits has a compatible AMI: '
            f'EC2NodeClass "{POOL}" resolves AMIs only for ('
        ), f"{name}: {message}"
        assert f"{wk.LABEL_INSTANCE_GPU_COUNT} DoesNotExist" in message, f"{name}: {message}"
        assert f"{wk.LABEL_INSTANCE_ACCELERATOR_COUNT} DoesNotExist" in message, f"{name}: {message}"
    created = await watching
    print(f"NodeClaims created in {WINDOW:.0f}s: {created}")
    assert len(created) <= MAX_NODECLAIMS, f"{len(created)} NodeClaims in {WINDOW:.0f}s: {created}"
    assert env.karpy.alive
    assert all(not p["spec"].get("nodeName") for p in await env.pods(*DEPLOYMENTS))
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])
