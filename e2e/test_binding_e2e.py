"""No Binding violates a pod's constraints, through a drift wave (issue 7, defect 2), on the local cluster.

A StatefulSet ``bind-db`` (2 replicas, required zone anti-affinity between its pods) whose volumes are zonal PVs
pinned to us-east-1b (``data-bind-db-0``) and us-east-1c (``data-bind-db-1``) runs on NodePool ``bind``
(drift budget ``nodes: 1``). An EC2NodeClass change drifts both nodes; karpy replaces them one by one.

Bindings are not watchable objects, so a watch on the StatefulSet's pods records every transition of
``spec.nodeName`` from empty to a node (whoever made it: karpy's binder or kube-scheduler) and checks it at that
moment against the node's zone label: the pod's PV zone, and no other ``bind-db`` pod already bound in the same
zone. Every drift replacement NodeClaim must also be planned into the zone of the pod it is for. No zone is
us-east-1a, the zone a plan ignoring the volumes and the other drifted node's pod would pick first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from collections.abc import Set as AbstractSet
from typing import Any

import pytest

from e2e.helpers import (
    KarpyProcess,
    apply,
    assert_nodeclaim_counters,
    ec2nodeclass,
    karpy_process,
    nodeclaims_of,
    record_figures,
    stop_karpy,
    wait_for,
)
from e2e.helpers import nodepool as shared_nodepool
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource

pytestmark = [pytest.mark.e2e]
POOL = "bind"
APP = "bind-db"
TAINT_KEY = "karpy-e2e/binding"
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", True)
# Ordinal → the zone its PV lives in.
PV_ZONES = {0: "us-east-1b", 1: "us-east-1c"}


def nodepool() -> dict[str, Any]:
    return shared_nodepool(
        POOL,
        requirements=[
            {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.LABEL_INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m"]},
            {"key": wk.LABEL_INSTANCE_GENERATION, "operator": "Gt", "values": ["4"]},
            {"key": wk.LABEL_ARCH, "operator": "In", "values": ["amd64"]},
        ],
        taints=[{"key": TAINT_KEY, "value": POOL, "effect": "NoSchedule"}],
        disruption={"consolidateAfter": "Never", "budgets": [{"nodes": "1"}]},
    )


def volume(ordinal: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A zonal PV and the StatefulSet's claim for ``ordinal``, pre-bound to each other."""
    claim = f"data-{APP}-{ordinal}"
    zone = {"key": wk.LABEL_ZONE, "operator": "In", "values": [PV_ZONES[ordinal]]}
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{APP}-pv-{ordinal}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "bind-static",
            "local": {"path": f"/mnt/{APP}-{ordinal}"},
            "claimRef": {"namespace": "default", "name": claim},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [zone]}]}},
        },
    }
    pvc = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": "default", "labels": {"app": APP}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "bind-static",
            "volumeName": f"{APP}-pv-{ordinal}",
        },
    }
    return pv, pvc


def statefulset() -> dict[str, Any]:
    spec = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {wk.LABEL_NODEPOOL: POOL},
        "tolerations": [{"key": TAINT_KEY, "operator": "Equal", "value": POOL, "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": APP}}, "topologyKey": wk.LABEL_ZONE}
                ]
            }
        },
        "containers": [
            {
                "name": "db",
                "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.7",
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
            }
        ],
    }
    template = {
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "bind-static",
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": APP, "namespace": "default"},
        "spec": {
            "replicas": len(PV_ZONES),
            "serviceName": APP,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": APP}},
            "template": {"metadata": {"labels": {"app": APP}}, "spec": spec},
            "volumeClaimTemplates": [template],
        },
    }


class Bindings:
    """Watches the StatefulSet's pods; checks every transition of ``spec.nodeName`` from empty to a node.

    ``bound`` holds, per pod uid, the zone of its node while the pod exists (terminating pods included: they
    still count for kube-scheduler's inter-pod anti-affinity).
    """

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.bound: dict[str, tuple[str, str]] = {}  # uid → (pod name, zone)
        self.seen: dict[str, str] = {}  # uid → nodeName as last seen
        self.bindings: list[dict[str, Any]] = []
        self.violations: list[str] = []
        self.zones: dict[str, str] = {}
        self.task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()

    async def _zone(self, node_name: str) -> str:
        if node_name not in self.zones:
            node = await self.client.get(r.NODES, node_name)
            self.zones[node_name] = node["metadata"]["labels"].get(wk.LABEL_ZONE, "")
        return self.zones[node_name]

    async def _event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid, name = meta["uid"], meta["name"]
        if kind == "DELETED":
            self.bound.pop(uid, None)
            self.seen.pop(uid, None)
            return
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        before = self.seen.get(uid, "")
        self.seen[uid] = node_name
        if not node_name or before:
            return
        zone = await self._zone(node_name)
        ordinal = int(name.rsplit("-", 1)[1])
        siblings = sorted(n for u, (n, z) in self.bound.items() if z == zone and u != uid)
        self.bindings.append({"pod": name, "node": node_name, "zone": zone, "at": time.time()})
        if zone != PV_ZONES[ordinal]:
            self.violations.append(f"{name} bound to {node_name} in {zone}, its PV is in {PV_ZONES[ordinal]}")
        if siblings:
            self.violations.append(f"{name} bound to {node_name} in {zone}, where {siblings} already run")
        self.bound[uid] = (name, zone)

    async def _run(self) -> None:
        items, rv = await self.client.list(r.PODS, "default", query={"labelSelector": f"app={APP}"})
        assert not items, "no bind-db pod before the watch starts"
        self.ready.set()
        query = {"watch": "true", "labelSelector": f"app={APP}", "resourceVersion": rv, "allowWatchBookmarks": "true"}
        async for line in self.client.stream_lines(r.PODS.path("default"), query, read_timeout=120):
            event = json.loads(line)
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                await self._event(event["type"], event["object"])

    async def __aenter__(self) -> Bindings:
        self.task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.wait_for(self.ready.wait(), 30)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            if self.task.done() and self.task.exception() is not None:
                raise AssertionError("the pod watch failed") from self.task.exception()
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


class Env:
    def __init__(self, cluster: Any, client: KubeClient, karpy: KarpyProcess) -> None:
        self.cluster = cluster
        self.client = client
        self.karpy = karpy

    async def claims(self) -> list[dict[str, Any]]:
        return await nodeclaims_of(self.client, POOL)

    async def pods(self) -> list[dict[str, Any]]:
        return (await self.client.list(r.PODS, "default", query={"labelSelector": f"app={APP}"}))[0]

    async def running(self, avoid: AbstractSet[str] = frozenset()) -> list[dict[str, Any]]:
        """The StatefulSet's pods when all are Running and none on a node of ``avoid``, else []."""
        pods = [p for p in await self.pods() if not p["metadata"].get("deletionTimestamp")]
        ok = len(pods) == len(PV_ZONES) and all(
            p["status"].get("phase") == "Running" and p["spec"].get("nodeName") not in avoid for p in pods
        )
        return pods if ok else []

    def lines(self, message: str, since: int = 0) -> list[dict[str, Any]]:
        return [line for line in self.karpy.logs()[since:] if line.get("message") == message]


@pytest.fixture(scope="module")
async def env(local_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    client = await KubeClient.from_environment(str(local_cluster.kubeconfig))
    work = tmp_path_factory.mktemp("karpy-binding")
    c = local_cluster
    karpy = await karpy_process(
        client,
        c.server,
        c.cluster_name,
        work,
        c.aws_env,
        BATCH_MAX_DURATION="5s",
        DISRUPTION_POLL_INTERVAL="1s",
        DISRUPTION_VALIDATION_DELAY="3s",
        DISRUPTION_REPLACEMENT_TIMEOUT="60s",
    )
    karpy.start()
    e = Env(local_cluster, client, karpy)
    try:
        yield e
    finally:
        await stop_karpy(karpy, client, _cleanup(e))


async def _cleanup(env: Env) -> None:
    """Delete the StatefulSet, its volumes, the NodePool, its NodeClaims and the NodeClass while karpy runs."""
    with contextlib.suppress(ApiError):
        await env.client.delete(STATEFULSETS, APP, "default")
    for ordinal in PV_ZONES:
        with contextlib.suppress(ApiError):
            await env.client.delete(r.PODS, f"{APP}-{ordinal}", "default")
        with contextlib.suppress(ApiError):
            await env.client.delete(r.PERSISTENTVOLUMECLAIMS, f"data-{APP}-{ordinal}", "default")
        with contextlib.suppress(ApiError):
            await env.client.delete(r.PERSISTENTVOLUMES, f"{APP}-pv-{ordinal}")
    with contextlib.suppress(ApiError):
        await env.client.delete(r.NODEPOOLS, POOL)
    for claim in await env.claims():
        with contextlib.suppress(ApiError):
            await env.client.delete(r.NODECLAIMS, claim["metadata"]["name"])

    async def gone() -> bool:
        nodes = [
            n
            for n in (await env.client.list(r.NODES))[0]
            if n["metadata"].get("labels", {}).get(wk.LABEL_NODEPOOL) == POOL
        ]
        return not await env.claims() and not nodes

    await wait_for(gone, timeout=120, what="binding test nodeclaims and nodes gone", interval=1)
    with contextlib.suppress(ApiError):
        await env.client.delete(r.EC2NODECLASSES, POOL)


async def _ready(env: Env, res: Resource, name: str) -> bool:
    obj = await env.client.get(res, name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def _zone_of(claim: dict[str, Any]) -> list[str]:
    return next((q["values"] for q in claim["spec"]["requirements"] if q["key"] == wk.LABEL_ZONE), [])


async def test_statefulset_with_zonal_volumes_through_a_drift_wave(env: Env) -> None:
    client = env.client
    await apply(client, [ec2nodeclass(POOL, env.cluster.cluster_name), nodepool()])
    await wait_for(lambda: _ready(env, r.EC2NODECLASSES, POOL), timeout=60, what="EC2NodeClass bind Ready")
    await wait_for(lambda: _ready(env, r.NODEPOOLS, POOL), timeout=60, what="NodePool bind Ready")
    for ordinal in PV_ZONES:
        pv, pvc = volume(ordinal)
        await client.create(r.PERSISTENTVOLUMES, pv)
        await client.create(r.PERSISTENTVOLUMECLAIMS, pvc, "default")
    mark = len(env.karpy.logs())
    start = time.monotonic()
    async with Bindings(client) as watch:
        await client.create(STATEFULSETS, statefulset(), "default")
        pods = await wait_for(env.running, timeout=180, what="bind-db pods Running")
        first_nodes = {p["spec"]["nodeName"] for p in pods}
        original = {c["metadata"]["name"] for c in await env.claims()}
        assert len(original) == len(PV_ZONES), original
        provisioned_s = time.monotonic() - start

        await client.merge_patch(r.EC2NODECLASSES, POOL, {"spec": {"tags": {"karpy-e2e/revision": "2"}}})

        async def replaced() -> list[dict[str, Any]]:
            names = {c["metadata"]["name"] for c in await env.claims()}
            return [] if names & original else await env.running(avoid=first_nodes)

        await wait_for(replaced, timeout=300, what="both drifted nodes replaced, bind-db Running", interval=1)
        # The final bindings are seen through the watch before it closes.
        await wait_for(lambda: _bound_everywhere(watch), timeout=30, what="the watch saw the final bindings")

    assert not watch.violations, watch.violations
    after = [b for b in watch.bindings if b["node"] not in first_nodes]
    assert len(watch.bindings) >= 2 * len(PV_ZONES) and len(after) >= len(PV_ZONES), watch.bindings
    # The drift plans themselves: each replacement was planned into the zone of the pod it was launched for.
    commands = [line["command"] for line in env.lines("disruption command done", mark)]
    assert len(commands) == len(PV_ZONES) and all(c["reason"] == "Drifted" for c in commands), commands
    for claim in await env.claims():
        planned = json.loads(claim["metadata"]["annotations"].get(wk.ANNOTATION_PLANNED_PODS, "[]"))
        for key in planned:
            ordinal = int(key.rsplit("-", 1)[1])
            assert _zone_of(claim) == [PV_ZONES[ordinal]], (claim["metadata"]["name"], key, _zone_of(claim))
    left = env.lines("leaving pod to kube-scheduler", mark)
    record_figures(
        binding_e2e_bindings=len(watch.bindings),
        binding_e2e_provisioned_s=round(provisioned_s, 1),
        binding_e2e_drift_wave_s=round(time.monotonic() - start - provisioned_s, 1),
        binding_e2e_left_to_scheduler=len(left),
    )
    print("bindings:", json.dumps(watch.bindings), "left to kube-scheduler:", [line.get("reason") for line in left])
    await assert_nodeclaim_counters(env.client, env.karpy, [POOL])


async def _bound_everywhere(watch: Bindings) -> bool:
    return len({name for name, _ in watch.bound.values()}) == len(PV_ZONES)
