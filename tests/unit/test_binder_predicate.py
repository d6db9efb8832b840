"""The binder checks kube-scheduler's filters before each Binding (issue 7, defect 2).

A StatefulSet pod whose bound PV pins zone B, or whose required zone anti-affinity excludes zone A, is not bound
onto a node in zone A although it is planned there: it is left to kube-scheduler, with a log line and a
``LeftToScheduler`` event naming the filter. Pods bound in the same pass count for the next check.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from karpy.apis import labels as wk
from karpy.controllers.binder import Binder
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from tests.unit.disruption_builders import following_plans, loaded_state, node, nodeclaim, nodepool, pod

JSON = dict[str, Any]
DB_ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": wk.LABEL_ZONE, "labelSelector": {"matchLabels": {"app": "db"}}}
        ]
    }
}


def in_zone(obj: JSON, zone: str) -> JSON:
    obj["metadata"]["labels"][wk.LABEL_ZONE] = zone
    return obj


def planned_on(claim: JSON, *pods: str) -> JSON:
    claim["metadata"]["annotations"][wk.ANNOTATION_PLANNED_PODS] = json.dumps([f"default/{p}" for p in pods])
    return claim


def db_pod(name: str, node_name: str = "", *, claim: str = "", anti: bool = True) -> JSON:
    obj = pod(name, node_name, owner="db", labels={"app": "db"})
    obj["metadata"]["ownerReferences"][0]["kind"] = "StatefulSet"
    if anti:
        obj["spec"]["affinity"] = DB_ANTI
    if claim:
        obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return obj


def zonal_volume(pvc: str, zone: str) -> list[JSON]:
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pv-{pvc}", "resourceVersion": "1"},
        "spec": {
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": wk.LABEL_ZONE, "operator": "In", "values": [zone]}]}
                    ]
                }
            },
        },
    }
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": pvc, "namespace": "default", "resourceVersion": "1"},
        "spec": {"volumeName": f"pv-{pvc}"},
    }
    return [pv, claim]


async def run(objs: list[JSON], claim: str) -> tuple[FakeKube, Binder]:
    state = loaded_state(objs)
    kube = FakeKube(objs)
    events = EventRecorder(kube)
    binder = Binder(kube, state, following_plans(state), events=events, settle=0.0)
    await binder.reconcile(claim)
    await events.flush()  # every Event the reconcile published is posted
    return kube, binder


def left(kube: FakeKube) -> dict[str, str]:
    return {e["involvedObject"]["name"]: e["message"] for e in kube.events("LeftToScheduler")}


def bindings(kube: FakeKube) -> list[tuple[str, str]]:
    """(pod, node) of each Binding, in order."""
    return [(pod, node) for _, pod, node in kube.bindings]


async def test_pod_outside_its_volume_zone_is_left_to_kube_scheduler() -> None:
    pool = nodepool()
    old = in_zone(nodeclaim("old-a", pool), "us-east-1a")
    repl = planned_on(in_zone(nodeclaim("repl-a", pool), "us-east-1a"), "db-1", "web")
    objs = [
        pool,
        old,
        node(old),
        repl,
        node(repl),
        db_pod("db-0", "node-old-a", anti=False),
        db_pod("db-1", claim="data-db-1", anti=False),
        pod("web", owner="web"),
        *zonal_volume("data-db-1", "us-east-1b"),
    ]
    kube, binder = await run(objs, "repl-a")
    assert bindings(kube) == [("web", "node-repl-a")]
    assert "VolumeBinding" in left(kube)["db-1"], kube.events()
    assert "default/db-1" not in {p.key for p in binder.plans.pods_of("repl-a")}


async def test_pod_whose_zone_anti_affinity_excludes_the_node_is_left_to_kube_scheduler() -> None:
    pool = nodepool()
    old = in_zone(nodeclaim("old-a", pool), "us-east-1a")
    repl_a = planned_on(in_zone(nodeclaim("repl-a", pool), "us-east-1a"), "db-1")
    repl_b = planned_on(in_zone(nodeclaim("repl-b", pool), "us-east-1b"), "db-2")
    objs = [pool, old, node(old), repl_a, node(repl_a), repl_b, node(repl_b)]
    objs += [db_pod("db-0", "node-old-a"), db_pod("db-1"), db_pod("db-2")]
    kube, _ = await run(objs, "repl-a")
    assert bindings(kube) == []
    assert "InterPodAffinity" in left(kube)["db-1"]
    kube, _ = await run(objs, "repl-b")
    assert bindings(kube) == [("db-2", "node-repl-b")]


async def test_pods_bound_in_one_pass_count_for_the_next() -> None:
    pool = nodepool()
    repl = planned_on(in_zone(nodeclaim("repl-a", pool), "us-east-1a"), "db-1", "db-2")
    kube, _ = await run([pool, repl, node(repl), db_pod("db-1"), db_pod("db-2")], "repl-a")
    assert bindings(kube) == [("db-1", "node-repl-a")]
    assert "InterPodAffinity" in left(kube)["db-2"]


async def test_pod_that_does_not_fit_or_tolerate_is_left() -> None:
    pool = nodepool()
    repl = planned_on(in_zone(nodeclaim("repl-a", pool), "us-east-1a"), "big", "small")
    n = node(repl, cpu=2)
    n["spec"]["taints"] = [{"key": wk.TAINT_UNREGISTERED_KEY, "effect": "NoSchedule"}]  # ephemeral: ignored
    kube, _ = await run([pool, repl, n, pod("big", cpu="3"), pod("small", cpu="1")], "repl-a")
    assert bindings(kube) == [("small", "node-repl-a")]
    assert left(kube)["big"].endswith("NodeResourcesFit: insufficient cpu")
    n["spec"]["taints"] = [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]
    kube, _ = await run([pool, repl, n, pod("big", cpu="3"), pod("small", cpu="1")], "repl-a")
    assert bindings(kube) == []
    assert "TaintToleration" in left(kube)["small"]


async def test_local_volume_of_another_node_is_left_to_kube_scheduler() -> None:
    """A local PV's hostname is dropped when planning a new node, but a Binding must honour it."""
    pool = nodepool()
    repl = planned_on(in_zone(nodeclaim("repl-a", pool), "us-east-1a"), "db-1")
    pv, claim = zonal_volume("data-db-1", "us-east-1a")
    pv["spec"] = {
        "local": {"path": "/mnt/disk"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": wk.LABEL_HOSTNAME, "operator": "In", "values": ["old-node"]}]}
                ]
            }
        },
    }
    kube, _ = await run([pool, repl, node(repl), db_pod("db-1", claim="data-db-1"), pv, claim], "repl-a")
    assert bindings(kube) == []
    assert "VolumeBinding" in left(kube)["db-1"]


async def test_a_nodes_pods_are_bound_concurrently() -> None:
    """Every admitted pod's Binding is in flight at once (not one round trip after another)."""
    names = [f"web-{n}" for n in range(10)]

    class GatedKube(FakeKube):
        in_flight = 0
        peak = 0
        all_in = asyncio.Event()

        async def create_subresource(self, *args: Any, **kwargs: Any) -> JSON:
            GatedKube.in_flight += 1
            GatedKube.peak = max(GatedKube.peak, GatedKube.in_flight)
            if GatedKube.in_flight == len(names):
                GatedKube.all_in.set()
            await asyncio.wait_for(GatedKube.all_in.wait(), timeout=30)
            GatedKube.in_flight -= 1
            return await super().create_subresource(*args, **kwargs)

    pool = nodepool()
    repl = planned_on(in_zone(nodeclaim("repl-a", pool), "us-east-1a"), *names)
    objs = [pool, repl, node(repl, cpu=16), *(pod(n, cpu="100m", owner="web") for n in names)]
    state = loaded_state(objs)
    kube = GatedKube(objs)
    await Binder(kube, state, following_plans(state), events=EventRecorder(kube), settle=0.0).reconcile("repl-a")
    assert GatedKube.peak == len(names)
    assert sorted(bindings(kube)) == [(n, "node-repl-a") for n in sorted(names)]
