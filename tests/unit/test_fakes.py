"""The shared test doubles: FakeCloudProvider, FakeInterruptionQueue, FakeLaunchTemplateJanitor and FakeKube."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import (
    FakeCloudProvider,
    FakeInterruptionQueue,
    FakeLaunchTemplateJanitor,
)
from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProvider,
    CloudProviderError,
    IncompatibleInstanceTypes,
    InstanceType,
    InsufficientCapacityError,
    InterruptionMessage,
    InterruptionQueue,
    LaunchRequest,
    NodeClaimNotFoundError,
    Offering,
    QueuedMessage,
)
from karpy.controllers.garbagecollection import LaunchTemplateJanitor
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES, PDBS, PODS
from karpy.kube.watch import Informer
from karpy.state.cluster import ClusterState

JSON = dict[str, Any]
T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def itype(name: str, price: float, zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")) -> InstanceType:
    offerings = tuple(
        Offering(zone=z, capacity_type=ct, price=price * (0.5 if ct == "spot" else 1.0), zone_id=f"use1-az{i}")
        for i, z in enumerate(zones, 1)
        for ct in ("spot", "on-demand")
    )
    return InstanceType(
        name=name,
        labels={wk.LABEL_INSTANCE_TYPE: name, wk.LABEL_ARCH: "amd64"},
        capacity={"cpu": 2000, "memory": 4 << 30, "pods": 29},
        overhead={"cpu": 100},
        offerings=offerings,
    )


SMALL, LARGE = itype("c.large", 0.1), itype("c.xlarge", 0.2)


def launch(name: str = "np-1", *requirements: JSON, types: tuple[InstanceType, ...] = (SMALL, LARGE)) -> LaunchRequest:
    return LaunchRequest(
        nodeclaim_name=name,
        nodepool_name="np",
        nodeclass={"metadata": {"name": "default"}},
        requirements=list(requirements),
        instance_types=list(types),
        labels={},
        taints=[],
    )


# --- FakeCloudProvider ------------------------------------------------------------------------------------------


async def test_cloud_create_launches_the_cheapest_admitted_offering_with_deterministic_ids() -> None:
    cloud: CloudProvider = FakeCloudProvider([SMALL, LARGE])
    on_demand = {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}
    zone_b = {"key": wk.LABEL_ZONE, "operator": "NotIn", "values": ["us-east-1a"]}
    first = await cloud.create(launch("np-1", on_demand, zone_b))
    assert (first.instance_type, first.zone, first.capacity_type) == ("c.large", "us-east-1b", "on-demand")
    assert first.instance_id == "i-00000000000000001"
    assert first.provider_id == "aws:///us-east-1b/i-00000000000000001"
    assert first.labels[wk.LABEL_ZONE_ID] == "use1-az2" and first.allocatable["cpu"] == 1900
    second = await cloud.create(launch("np-2"))
    assert (second.instance_id, second.capacity_type, second.zone) == ("i-00000000000000002", "spot", "us-east-1a")


async def test_cloud_create_is_idempotent_by_nodeclaim_name() -> None:
    cloud = FakeCloudProvider([SMALL])
    first = await cloud.create(launch("np-1"))
    again = await cloud.create(launch("np-1"))
    assert again.provider_id == first.provider_id and len(await cloud.list()) == 1
    assert len(cloud.create_calls) == 2


async def test_cloud_get_list_delete_and_not_found_after_delete() -> None:
    cloud = FakeCloudProvider([SMALL], cluster_name="c1")
    launched = await cloud.create(launch("np-1"))
    instance = await cloud.get(launched.provider_id)
    assert instance.tags[wk.cluster_tag("c1")] == "owned" and instance.tags[wk.TAG_NODECLAIM] == "np-1"
    assert [i.instance_id for i in await cloud.list()] == [launched.instance_id]
    await cloud.delete(launched.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.get(launched.provider_id)
    with pytest.raises(NodeClaimNotFoundError):
        await cloud.delete(launched.provider_id)
    assert await cloud.list() == []
    assert cloud.delete_calls == [launched.provider_id] * 2 and cloud.get_calls == [launched.provider_id] * 2


async def test_cloud_mark_unavailable_hides_the_offering_from_types_and_launches() -> None:
    cloud = FakeCloudProvider([SMALL])
    for zone in ("us-east-1a", "us-east-1b"):
        cloud.mark_unavailable("c.large", zone, "spot")
    assert cloud.marked == [("c.large", "us-east-1a", "spot"), ("c.large", "us-east-1b", "spot")]
    [it] = await cloud.get_instance_types({})
    assert {(o.zone, o.capacity_type) for o in it.offerings if not o.available} == {
        ("us-east-1a", "spot"),
        ("us-east-1b", "spot"),
    }
    assert (await cloud.create(launch())).capacity_type == "on-demand"
    only_spot = {"key": wk.LABEL_CAPACITY_TYPE, "operator": "In", "values": ["spot"]}
    with pytest.raises(InsufficientCapacityError):
        await cloud.create(launch("np-2", only_spot, types=(SMALL,)))
    cloud.clear_unavailable()
    assert (await cloud.create(launch("np-3", only_spot, types=(SMALL,)))).capacity_type == "spot"


async def test_cloud_injected_errors_and_create_limits() -> None:
    cloud = FakeCloudProvider([SMALL], incompatible=IncompatibleInstanceTypes((LARGE,), "no AMI"))
    assert (await cloud.incompatible_instance_types({})).reason == "no AMI"
    cloud.fail("create", InsufficientCapacityError("ICE"), times=2)
    for _ in range(2):
        with pytest.raises(InsufficientCapacityError, match="ICE"):
            await cloud.create(launch())
    await cloud.create(launch())
    cloud.allowed_create_calls = 3
    with pytest.raises(InsufficientCapacityError, match="AllowedCreateCalls"):
        await cloud.create(launch("np-2"))
    cloud.create_errors_for_nodepool["np"] = CloudProviderError("pool broken")
    with pytest.raises(CloudProviderError, match="pool broken"):
        await cloud.create(launch("np-3"))
    cloud.fail("get_instance_types", CloudProviderError("down"))
    with pytest.raises(CloudProviderError):
        await cloud.get_instance_types({})
    assert await cloud.get_instance_types({}) == [SMALL]


async def test_cloud_added_instances_can_be_unlisted_but_found() -> None:
    cloud = FakeCloudProvider()
    late = CloudInstance("i-late", "aws:///us-east-1a/i-late", "m5.large", "us-east-1a", "spot", "running", "", T0, {})
    cloud.add_instance(late, listed=False)
    assert await cloud.list() == []
    assert await cloud.get("aws:///us-east-1b/i-late") == late, "the zone part of a providerID does not matter"


async def test_interruption_queue_delivers_until_deleted() -> None:
    fake_queue = FakeInterruptionQueue()
    queue: InterruptionQueue = fake_queue
    messages = [QueuedMessage(f"m-{i}", f"rh-{i}", InterruptionMessage("no_op")) for i in range(12)]
    fake_queue.send(*messages)
    assert len(await queue.receive()) == 10 and len(await queue.receive()) == 2 and await queue.receive() == []
    await queue.delete("rh-0")
    fake_queue.redeliver()
    assert [m.receipt_handle for m in await queue.receive()][:2] == ["rh-1", "rh-2"]
    fake_queue.fail("delete", CloudProviderError("nope"))
    with pytest.raises(CloudProviderError):
        await queue.delete("rh-1")
    assert fake_queue.deleted == ["rh-0"]


async def test_launch_template_janitor_deletes_templates_of_gone_nodeclasses() -> None:
    fake = FakeLaunchTemplateJanitor({"lt-a": "a", "lt-b": "b"})
    janitor: LaunchTemplateJanitor = fake
    assert await janitor.delete_unused_launch_templates({"a"}) == ("lt-b",)
    assert fake.templates == {"lt-a": "a"} and fake.calls == [frozenset({"a"})]


# --- FakeKube ---------------------------------------------------------------------------------------------------


def pod(name: str, node: str = "", **labels: str) -> JSON:
    spec: JSON = {"containers": [{"name": "c"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def nodeclaim(name: str = "", **meta: Any) -> JSON:
    metadata = {"name": name, **meta} if name else {"generateName": "np-", **meta}
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": metadata, "spec": {}}


async def test_kube_create_get_and_already_exists() -> None:
    kube: KubeClient = FakeKube(clock=lambda: T0)
    created = await kube.create(NODECLAIMS, nodeclaim())
    meta = created["metadata"]
    assert meta["name"].startswith("np-") and meta["uid"] and meta["creationTimestamp"] == "2026-01-01T12:00:00Z"
    assert await kube.get(NODECLAIMS, meta["name"]) == created
    with pytest.raises(ApiError) as err:
        await kube.create(NODECLAIMS, nodeclaim(meta["name"]))
    assert err.value.already_exists
    with pytest.raises(ApiError) as err:
        await kube.get(NODECLAIMS, "missing")
    assert err.value.not_found


async def test_kube_patches_bump_resource_versions_and_conflict_on_a_stale_one() -> None:
    kube = FakeKube()
    claim = await kube.create(NODECLAIMS, nodeclaim("a", labels={"x": "1"}))
    rv = claim["metadata"]["resourceVersion"]
    patched = await kube.merge_patch(NODECLAIMS, "a", {"metadata": {"labels": {"x": None, "y": "2"}}})
    assert patched["metadata"]["labels"] == {"y": "2"} and int(patched["metadata"]["resourceVersion"]) > int(rv)
    with pytest.raises(ApiError) as err:
        await kube.merge_patch(NODECLAIMS, "a", {"metadata": {"resourceVersion": rv, "labels": {"z": "3"}}})
    assert err.value.conflict and not err.value.already_exists
    status = await kube.merge_patch(
        NODECLAIMS, "a", {"status": {"providerID": "p"}, "spec": {"x": 1}}, subresource="status"
    )
    assert status["status"] == {"providerID": "p"} and status["spec"] == {}, "the status subresource writes status only"
    ops: list[JSON] = [
        {"op": "test", "path": "/metadata/labels/y", "value": "2"},
        {"op": "add", "path": "/spec/taints", "value": []},
    ]
    assert (await kube.json_patch(NODECLAIMS, "a", ops))["spec"] == {"taints": []}
    with pytest.raises(ApiError) as err:
        await kube.json_patch(NODECLAIMS, "a", [{"op": "test", "path": "/metadata/labels/y", "value": "nope"}])
    assert err.value.status == 422
    current = await kube.get(NODECLAIMS, "a")
    current["spec"]["replaced"] = True
    replaced = await kube.replace(NODECLAIMS, "a", current)
    assert replaced["spec"]["replaced"] and replaced["metadata"]["generation"] == 3
    with pytest.raises(ApiError) as err:
        await kube.replace(NODECLAIMS, "a", current)
    assert err.value.conflict


async def test_kube_delete_waits_for_finalizers_then_removes() -> None:
    kube = FakeKube(clock=lambda: T0)
    await kube.create(NODECLAIMS, nodeclaim("a", finalizers=["karpenter.sh/termination"]))
    deleting = await kube.delete(NODECLAIMS, "a")
    assert deleting["metadata"]["deletionTimestamp"] == "2026-01-01T12:00:00Z"
    assert (await kube.get(NODECLAIMS, "a"))["metadata"]["deletionTimestamp"]
    await kube.merge_patch(NODECLAIMS, "a", {"metadata": {"finalizers": None}})
    assert kube.object(NODECLAIMS, "a") is None
    with pytest.raises(ApiError) as err:
        await kube.delete(NODECLAIMS, "a")
    assert err.value.not_found


async def test_kube_bound_pods_are_deleted_gracefully() -> None:
    kube = FakeKube([pod("bound", "n1"), pod("pending")])
    await kube.delete(PODS, "pending", "default")
    assert kube.object(PODS, "pending") is None, "an unscheduled pod goes at once"
    gone = await kube.delete(PODS, "bound", "default")
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 30 and kube.object(PODS, "bound") is not None
    await kube.delete(PODS, "bound", "default", body={"gracePeriodSeconds": 0})
    assert kube.names(PODS) == []


async def test_kube_list_selectors_and_pagination() -> None:
    kube = FakeKube([pod(f"p{i}", "n1" if i % 2 else "n2", app="web" if i < 3 else "db") for i in range(5)])
    items, rv = await kube.list(PODS, query={"labelSelector": "app in (web),app!=db", "limit": 2})
    assert [p["metadata"]["name"] for p in items] == ["p0", "p1", "p2"] and rv
    assert "kind" not in items[0], "built-in kinds' LIST items carry no kind, as the apiserver sends them"
    items, _ = await kube.list(PODS, "default", query={"fieldSelector": "spec.nodeName=n1"})
    assert [p["metadata"]["name"] for p in items] == ["p1", "p3"]
    assert len(kube.requests_to("GET", PODS)) == 3, "two pages, then one"
    await kube.create(NODECLAIMS, nodeclaim("c"))
    [claim], _ = await kube.list(NODECLAIMS)
    assert claim["kind"] == "NodeClaim", "custom resources' items keep theirs"


async def test_kube_binding_and_eviction_honour_pdbs() -> None:
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 1},
    }
    kube = FakeKube([pod("w1", "n1", app="web"), pod("w2", "n1", app="web"), pod("new"), pdb])
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "new"},
        "target": {"kind": "Node", "name": "n2"},
    }
    await kube.create_subresource(PODS, "new", "binding", binding, "default")
    assert kube.bindings == [("default", "new", "n2")] and (kube.object(PODS, "new") or {})["spec"]["nodeName"] == "n2"
    with pytest.raises(ApiError) as err:
        await kube.create_subresource(PODS, "new", "binding", binding, "default")
    assert err.value.conflict
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "w1", "namespace": "default"}}
    await kube.create_subresource(PODS, "w1", "eviction", eviction, "default")
    assert (kube.object(PODS, "w1") or {})["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiError) as err:
        await kube.create_subresource(PODS, "w2", "eviction", eviction, "default")
    assert err.value.too_many_requests
    assert (
        kube.evictions == [("default", "w1")] and (kube.object(PDBS, "web") or {})["status"]["disruptionsAllowed"] == 0
    )


async def test_kube_injected_failures_match_verb_resource_and_name() -> None:
    kube = FakeKube([pod("a")])
    kube.fail("delete", ApiError(500, "InternalError", "boom"), resource=PODS, name="a")
    await kube.create(NODES, {"metadata": {"name": "n"}})
    with pytest.raises(ApiError, match="boom"):
        await kube.delete(PODS, "a", "default")
    await kube.delete(PODS, "a", "default")
    assert kube.names(PODS) == []


async def test_kube_collects_events_and_feeds_the_sink() -> None:
    state = ClusterState()
    kube = FakeKube(sink=state)
    recorder = EventRecorder(kube)
    claim = await kube.create(NODECLAIMS, nodeclaim("a"))
    assert "a" in state.nodeclaims
    recorder.publish(claim, WARNING, "Broken", "it broke")
    await asyncio.gather(*recorder._tasks)
    [event] = kube.events("Broken", name="a")
    assert event["type"] == WARNING and event["message"] == "it broke" and event["metadata"]["namespace"] == "default"
    await kube.delete(NODECLAIMS, "a")
    assert "a" not in state.nodeclaims


class Sink:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.lists = 0
        self.changed = asyncio.Event()

    def replace(self, kind: str, items: list[JSON], resource_version: str = "") -> None:
        self.lists += 1
        self.seen += [("LIST", i["metadata"]["name"]) for i in items]
        self.changed.set()

    def apply(self, kind: str, event_type: str, obj: JSON) -> None:
        self.seen.append((event_type, obj["metadata"]["name"]))
        self.changed.set()


async def until(sink: Sink, count: int) -> None:
    while len(sink.seen) < count:
        sink.changed.clear()
        await asyncio.wait_for(sink.changed.wait(), 5)


async def test_kube_serves_an_informer_list_then_watch() -> None:
    kube = FakeKube([pod("a")])
    sink = Sink()
    informer = Informer(kube, PODS, sink)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        await kube.create(PODS, pod("b"), "default")
        await kube.merge_patch(PODS, "a", {"metadata": {"labels": {"x": "1"}}}, "default")
        await kube.delete(PODS, "b", "default")
        await until(sink, 4)
        assert sink.seen == [("LIST", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
        assert informer.resource_version == str(kube._rv)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_kube_watch_from_before_a_compaction_is_gone() -> None:
    kube = FakeKube([pod("a")])
    await kube.create(PODS, pod("b"), "default")
    watch = cast(AsyncGenerator[bytes, None], kube.stream_lines(PODS.path(), {"resourceVersion": "1"}, read_timeout=1))
    async with contextlib.aclosing(watch):
        first = await anext(watch)
    assert b'"ADDED"' in first and b'"b"' in first
    kube.compact()
    lines = [line async for line in kube.stream_lines(PODS.path(), {"resourceVersion": "1"}, read_timeout=1)]
    assert len(lines) == 1 and b'"code": 410' in lines[0]
