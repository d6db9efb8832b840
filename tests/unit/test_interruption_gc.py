"""The interruption controller's handling rules (fake queue, fake apiserver, fake cloud) and the garbage
collection decisions (pure functions with an injected clock)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from karpy.apis import labels as wk
from karpy.apis.nodeclaim import NodeClaim
from karpy.aws.launchtemplates import OwnedTemplate, unused_templates
from karpy.aws.messages import parse
from karpy.cloudprovider.fake import FakeCloudProvider, FakeInterruptionQueue
from karpy.cloudprovider.types import (
    CloudInstance,
    CloudProviderError,
    InterruptionKind,
    InterruptionMessage,
    QueuedMessage,
)
from karpy.controllers.garbagecollection import leaked_instances, orphan_candidates, owned_by_karpy
from karpy.controllers.interruption import Interruption, instance_id_of, should_drain
from karpy.kube.errors import ApiError
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODES
from karpy.state.cluster import ClusterState

CLUSTER = "unit"
NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def claim(name: str, instance_id: str = "", *, launched_ago: float = 600.0, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "resourceVersion": "1",
        "creationTimestamp": (NOW - timedelta(seconds=launched_ago + 5)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "labels": {
            wk.LABEL_NODEPOOL: "pool",
            wk.LABEL_INSTANCE_TYPE: "m5.large",
            wk.LABEL_ZONE: "us-east-1b",
            wk.LABEL_CAPACITY_TYPE: "spot",
        },
    }
    if deleting:
        meta["deletionTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    status: dict[str, Any] = {}
    if instance_id:
        stamp = (NOW - timedelta(seconds=launched_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        status = {
            "providerID": f"aws:///us-east-1b/{instance_id}",
            "conditions": [{"type": "Launched", "status": "True", "lastTransitionTime": stamp}],
        }
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "status": status}


def controller(
    kube: FakeKube, queue: FakeInterruptionQueue, *claims: dict[str, Any], rebalance: bool = False
) -> tuple[Interruption, FakeCloudProvider, list[int]]:
    state = ClusterState()
    for c in claims:
        state.apply("NodeClaim", "ADDED", c)
    kube.seed(*claims)
    cloud = FakeCloudProvider(cluster_name=CLUSTER)
    triggered: list[int] = []
    ctl = Interruption(
        kube,
        state,
        cloud,
        EventRecorder(kube),
        queue,
        on_disrupted=lambda: triggered.append(1),
        rebalance_replacement=rebalance,
        now=lambda: NOW,
    )
    return ctl, cloud, triggered


def failing_deletes(status: int) -> FakeKube:
    """An apiserver that answers every DELETE with ``status``."""
    kube = FakeKube()
    kube.fail("delete", ApiError(status, "Boom", "refused"), times=None)
    return kube


def deleted(kube: FakeKube) -> list[str]:
    """The names of the objects DELETEd, in order."""
    return [r.path.rsplit("/", 1)[-1] for r in kube.requests_to("DELETE")]


def queued(kind_body: dict[str, Any] | str, handle: str = "rh-1") -> QueuedMessage:
    body = kind_body if isinstance(kind_body, str) else json.dumps(kind_body)
    return QueuedMessage(message_id="m-1", receipt_handle=handle, message=parse(body))


def spot(instance_id: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "x",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "source": "aws.ec2",
        "time": "2026-01-01T11:59:58Z",
        "detail": {"instance-id": instance_id, "instance-action": "terminate"},
    }


async def test_spot_interruption_deletes_nodeclaim_marks_offering_and_triggers() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, cloud, triggered = controller(kube, queue, claim("a", "i-aaa"), claim("b", "i-bbb"))
    assert await ctl.handle(queued(spot("i-aaa"))) is True
    assert deleted(kube) == ["a"]
    assert cloud.marked == [("m5.large", "us-east-1b", "spot")]
    assert queue.deleted == ["rh-1"]
    assert triggered == [1]


async def test_message_for_an_unmanaged_instance_is_deleted_without_action() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, cloud, triggered = controller(kube, queue, claim("a", "i-aaa"))
    assert await ctl.handle(queued(spot("i-other"))) is True
    assert deleted(kube) == [] and cloud.marked == [] and triggered == []
    assert queue.deleted == ["rh-1"]


async def test_already_deleting_nodeclaim_is_not_deleted_again() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, _, triggered = controller(kube, queue, claim("a", "i-aaa", deleting=True))
    assert await ctl.handle(queued(spot("i-aaa"))) is True
    assert deleted(kube) == [] and triggered == []


async def test_handling_error_leaves_the_message() -> None:
    kube, queue = failing_deletes(500), FakeInterruptionQueue()
    ctl, _, _ = controller(kube, queue, claim("a", "i-aaa"))
    assert await ctl.handle(queued(spot("i-aaa"))) is False
    assert queue.deleted == []


async def test_not_found_on_delete_counts_as_handled() -> None:
    kube, queue = failing_deletes(404), FakeInterruptionQueue()
    ctl, _, _ = controller(kube, queue, claim("a", "i-aaa"))
    assert await ctl.handle(queued(spot("i-aaa"))) is True
    assert queue.deleted == ["rh-1"]


async def test_malformed_and_unknown_messages_are_deleted() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, _, _ = controller(kube, queue, claim("a", "i-aaa"))
    results = await ctl.handle_batch(
        [queued("{broken", "rh-bad"), queued({"version": "0", "source": "x", "detail-type": "y"}, "rh-unknown")]
    )
    assert results == [True, True]
    assert sorted(queue.deleted) == ["rh-bad", "rh-unknown"]
    assert deleted(kube) == []


async def test_failed_delete_reports_not_deleted() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    queue.fail("delete", CloudProviderError("nope"))
    ctl, _, _ = controller(kube, queue, claim("a", "i-aaa"))
    assert await ctl.handle(queued(spot("i-aaa"))) is False


def rebalance(instance_id: str) -> dict[str, Any]:
    return {
        "version": "0",
        "detail-type": "EC2 Instance Rebalance Recommendation",
        "source": "aws.ec2",
        "detail": {"instance-id": instance_id},
    }


async def test_rebalance_is_an_event_only_by_default() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, cloud, _ = controller(kube, queue, claim("a", "i-aaa"))
    assert await ctl.handle(queued(rebalance("i-aaa"))) is True
    assert deleted(kube) == [] and cloud.marked == []
    assert queue.deleted == ["rh-1"]


async def test_rebalance_replacement_setting_deletes_the_nodeclaim() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, cloud, triggered = controller(kube, queue, claim("a", "i-aaa"), rebalance=True)
    assert await ctl.handle(queued(rebalance("i-aaa"))) is True
    assert deleted(kube) == ["a"] and cloud.marked == [] and triggered == [1]


def test_should_drain_table() -> None:
    assert should_drain(InterruptionKind.SPOT_INTERRUPTED, False)
    assert not should_drain(InterruptionKind.REBALANCE_RECOMMENDATION, False)
    assert should_drain(InterruptionKind.REBALANCE_RECOMMENDATION, True)
    assert not should_drain(InterruptionKind.INVALID, True)
    assert instance_id_of("aws:///us-east-1a/i-0abc") == "i-0abc" and instance_id_of("") == ""
    assert InterruptionMessage(kind=InterruptionKind.INVALID).instance_ids == ()


# --- garbage collection decisions ------------------------------------------------------------------------------


def instance(
    instance_id: str, *, age: float = 120.0, state: str = "running", nodepool: bool = True, nodeclaim: str = ""
) -> CloudInstance:
    tags = {wk.cluster_tag(CLUSTER): "owned"}
    if nodepool:
        tags[wk.TAG_NODEPOOL] = "pool"
    if nodeclaim:
        tags[wk.TAG_NODECLAIM] = nodeclaim
    return CloudInstance(
        instance_id=instance_id,
        provider_id=f"aws:///us-east-1a/{instance_id}",
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="on-demand",
        state=state,
        image_id="ami-1",
        launch_time=NOW - timedelta(seconds=age),
        tags=tags,
    )


def test_leaked_instances_only_unowned_old_karpy_instances() -> None:
    claims = {"a": NodeClaim.from_json(claim("a", "i-a")), "inflight": NodeClaim.from_json(claim("inflight"))}
    instances = [
        instance("i-a"),  # has a NodeClaim by providerID
        instance("i-b", nodeclaim="inflight"),  # its NodeClaim's launch is in flight
        instance("i-leak", nodeclaim="gone"),  # tagged with a NodeClaim that no longer exists
        instance("i-young", age=10),  # too young
        instance("i-other", nodepool=False),  # another node manager (cluster tag only)
        instance("i-dying", state="shutting-down"),
        instance("i-leak2"),
        instance("i-second", nodeclaim="a"),  # a second launch for "a", which already points at i-a
    ]
    leaked = leaked_instances(instances, claims, cluster_name=CLUSTER, now=NOW)
    assert [i.instance_id for i in leaked] == ["i-leak", "i-leak2", "i-second"]
    assert not owned_by_karpy(instance("i-x"), "another-cluster")


def test_leak_grace_is_thirty_seconds() -> None:
    assert leaked_instances([instance("i-1", age=29.0)], {}, cluster_name=CLUSTER, now=NOW) == []
    assert len(leaked_instances([instance("i-1", age=30.0)], {}, cluster_name=CLUSTER, now=NOW)) == 1


def test_orphan_candidates_respect_launch_age_and_state() -> None:
    claims = [
        claim("live", "i-live"),
        claim("gone", "i-gone"),
        claim("young", "i-young", launched_ago=5),
        claim("deleting", "i-del", deleting=True),
        claim("unlaunched"),
    ]
    found = orphan_candidates([NodeClaim.from_json(c) for c in claims], {"i-live"}, now=NOW.timestamp())
    assert [c.name for c in found] == ["gone"]


def test_unused_launch_templates() -> None:
    def lt(name: str, nodeclass: str | None) -> OwnedTemplate:
        tags = {wk.TAG_NODECLASS: nodeclass} if nodeclass else {}
        return OwnedTemplate(template_id=f"lt-{name}", name=f"karpenter.k8s.aws/{name}", created=None, tags=tags)

    templates = [lt("used", "default"), lt("stale", "default"), lt("orphan", "deleted"), lt("untagged", None)]
    last_used = {"karpenter.k8s.aws/used": 1000.0, "karpenter.k8s.aws/stale": 100.0}
    # 400 s after start: the stale one (unused for 900 s) and the deleted NodeClass's go; a template this
    # process never used counts from its start (400 s ≥ the 300 s TTL), so it goes too.
    chosen = unused_templates(templates, nodeclasses={"default"}, last_used=last_used, started=600.0, now=1000.0)
    assert [t.name.rsplit("/", 1)[-1] for t in chosen] == ["stale", "orphan", "untagged"]
    # Right after a restart nothing merely unknown is deleted.
    chosen = unused_templates(templates, nodeclasses={"default"}, last_used={}, started=990.0, now=1000.0)
    assert [t.name.rsplit("/", 1)[-1] for t in chosen] == ["orphan"]


def node(name: str, instance_id: str, *, ready: bool) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"providerID": f"aws:///us-east-1b/{instance_id}"},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


async def test_collect_once_terminates_leaks_and_deletes_confirmed_orphans() -> None:
    from karpy.controllers.garbagecollection import GarbageCollection

    state = ClusterState()
    claims = [
        claim("live", "i-live"),
        claim("orphan", "i-orphan"),  # instance gone, no Node
        claim("ready-node", "i-ready"),  # instance not listed but its Node is Ready: trusted
        claim("late", "i-late"),  # not listed, but DescribeInstances finds it: eventual consistency
    ]
    for c in claims:
        state.apply("NodeClaim", "ADDED", c)
    nodes = [node("n-ready", "i-ready", ready=True), node("n-leak", "i-leak", ready=True)]
    for n in nodes:
        state.apply("Node", "ADDED", n)
    cloud = FakeCloudProvider(cluster_name=CLUSTER)
    for listed in (instance("i-live"), instance("i-leak"), instance("i-other", nodepool=False)):
        cloud.add_instance(listed)
    cloud.add_instance(instance("i-late"), listed=False)
    kube = FakeKube(claims)
    kube.seed(*nodes, resource=NODES)
    gc = GarbageCollection(kube, state, cloud, cluster_name=CLUSTER, now=lambda: NOW)
    collected = await gc.collect_once()
    assert collected == {"instances": ["i-leak"], "nodeclaims": ["orphan"], "launch_templates": []}
    assert cloud.delete_calls == ["aws:///us-east-1a/i-leak"]
    assert sorted(deleted(kube)) == ["n-leak", "orphan"]  # the leak's Node and the orphaned NodeClaim


def test_rebalance_replacement_setting() -> None:
    import pytest

    from karpy.settings import SettingsError, from_environment

    assert from_environment({"CLUSTER_NAME": "c"}).interruption_rebalance_replacement is False
    env = {"CLUSTER_NAME": "c", "INTERRUPTION_QUEUE": "q", "INTERRUPTION_REBALANCE_REPLACEMENT": "true"}
    settings = from_environment(env)
    assert settings.interruption_rebalance_replacement is True and settings.interruption_queue == "q"
    with pytest.raises(SettingsError, match="INTERRUPTION_REBALANCE_REPLACEMENT"):
        from_environment({"CLUSTER_NAME": "c", "INTERRUPTION_REBALANCE_REPLACEMENT": "maybe"})


async def test_scheduled_change_drains_every_affected_instance_once() -> None:
    kube, queue = FakeKube(), FakeInterruptionQueue()
    ctl, cloud, triggered = controller(kube, queue, claim("a", "i-aaa"), claim("b", "i-bbb"), claim("c", "i-ccc"))
    body = {
        "version": "0",
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "detail": {
            "service": "EC2",
            "eventTypeCategory": "scheduledChange",
            "affectedEntities": [{"entityValue": "i-aaa"}, {"entityValue": "i-ccc"}, {"entityValue": "i-unknown"}],
        },
    }
    assert await ctl.handle(queued(body)) is True
    assert sorted(deleted(kube)) == ["a", "c"] and cloud.marked == [] and triggered == [1]


async def test_capacity_reservation_interruption_drains_and_marks_that_reservation() -> None:
    """Karpenter AWS ``interruption/utils.go``: a reclaimed interruptible reservation's NodeClaim is drained and
    its reserved offering marked unavailable, scoped to that reservation, with a
    ``CapacityReservationInstanceInterrupted`` event."""
    kube, queue = FakeKube(), FakeInterruptionQueue()
    reserved = claim("r", "i-rrr")
    reserved["metadata"]["labels"].update(
        {wk.LABEL_CAPACITY_TYPE: "reserved", wk.LABEL_CAPACITY_RESERVATION_ID: "cr-0abc"}
    )
    ctl, cloud, triggered = controller(kube, queue, reserved)
    body = {**spot("i-rrr"), "detail-type": "EC2 Capacity Reservation Instance Interruption Warning"}
    assert await ctl.handle(queued(body)) is True
    assert deleted(kube) == ["r"] and triggered == [1]
    assert cloud.marked == [("m5.large", "us-east-1b", "reserved")] and cloud.marked_reservations == ["cr-0abc"]
    await ctl.events.flush()
    assert "CapacityReservationInstanceInterrupted" in [e["reason"] for e in kube.events()]
