"""NodeClaim tagging (Karpenter AWS ``pkg/controllers/nodeclaim/tagging/controller.go``): a registered NodeClaim's
instance gets the missing ones of ``Name``, ``karpenter.sh/nodeclaim`` and ``eks:eks-cluster-name``, then the
NodeClaim both tagged annotations; at most one CreateTags per second, proven on a fake clock."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from karpy.apis import labels as wk
from karpy.cloudprovider.fake import FakeCloudProvider
from karpy.cloudprovider.types import CloudProviderError, NodeClaimNotFoundError
from karpy.controllers.nodeclaim_tagging import ANNOTATION_CLUSTER_NAME_TAGGED, NodeClaimTagging
from karpy.kube import resources as r
from karpy.kube.fake import FakeKube
from karpy.runtime.clock import FakeClock
from karpy.runtime.controller import Result
from tests.unit.disruption_builders import cloud_instance, loaded_state, nodeclaim, nodeclass, nodepool

JSON = dict[str, Any]
CLUSTER = "unit"
BOTH = {wk.ANNOTATION_TAGGED: "true", ANNOTATION_CLUSTER_NAME_TAGGED: "true"}


def setup(
    claims: list[JSON], *, tags: dict[str, str] | None = None, launched: bool = True
) -> tuple[FakeKube, FakeCloudProvider, FakeClock, NodeClaimTagging]:
    pool = nodepool("default")
    objs = [nodeclass(), pool, *claims]
    kube = FakeKube(objs)
    cloud = FakeCloudProvider(cluster_name=CLUSTER)
    if launched:
        for claim in claims:
            cloud.add_instance(attrs.evolve(cloud_instance(claim), tags=dict(tags or {})))
    clock = FakeClock()
    tagging = NodeClaimTagging(kube, loaded_state(objs), cloud, cluster_name=CLUSTER, clock=clock)
    return kube, cloud, clock, tagging


def claim(name: str, **kw: Any) -> JSON:
    return nodeclaim(name, nodepool("default"), **kw)


def annotations(kube: FakeKube, name: str) -> dict[str, str]:
    obj = kube.object(r.NODECLAIMS, name)
    assert obj is not None
    return dict(obj["metadata"].get("annotations") or {})


async def test_tags_only_the_missing_ones_and_annotates() -> None:
    kube, cloud, _, tagging = setup([claim("a")], tags={wk.TAG_NODECLAIM: "a", "team": "x"})

    assert await tagging.reconcile("a") == Result()

    assert cloud.create_tags_calls == [
        ("aws:///us-east-1a/i-a", {wk.TAG_NAME: "node-a", wk.TAG_EKS_CLUSTER_NAME: CLUSTER})
    ]
    assert cloud.instances["i-a"].tags == {
        wk.TAG_NODECLAIM: "a",
        "team": "x",
        wk.TAG_NAME: "node-a",
        wk.TAG_EKS_CLUSTER_NAME: CLUSTER,
    }
    assert annotations(kube, "a").items() >= BOTH.items()


async def test_existing_tag_values_are_never_overwritten() -> None:
    kube, cloud, _, tagging = setup(
        [claim("a")], tags={wk.TAG_NAME: "mine", wk.TAG_NODECLAIM: "a", wk.TAG_EKS_CLUSTER_NAME: "other"}
    )

    await tagging.reconcile("a")

    assert cloud.create_tags_calls == []  # every key present: no CreateTags, as Karpenter
    assert cloud.instances["i-a"].tags[wk.TAG_NAME] == "mine"
    assert annotations(kube, "a").items() >= BOTH.items()


@pytest.mark.parametrize(
    "notes",
    [BOTH, {wk.ANNOTATION_TAGGED: "true"}, {ANNOTATION_CLUSTER_NAME_TAGGED: "true"}],
    ids=["both", "tagged-only", "cluster-name-only"],
)
async def test_annotations_decide_whether_to_tag(notes: dict[str, str]) -> None:
    kube, cloud, _, tagging = setup([claim("a", annotations=notes)])

    await tagging.reconcile("a")

    if notes == BOTH:  # already tagged: the instance is not even read
        assert cloud.calls == []
        assert kube.requests_to("PATCH", r.NODECLAIMS) == []
    else:  # one annotation alone is not enough (Karpenter's compatibility re-tag)
        assert len(cloud.create_tags_calls) == 1
        assert annotations(kube, "a").items() >= BOTH.items()


async def test_nodename_less_terminating_and_unmanaged_nodeclaims_are_skipped() -> None:
    unregistered = claim("unregistered")
    unregistered["status"]["nodeName"] = ""
    terminating = claim("terminating")
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    unmanaged = claim("unmanaged")
    unmanaged["spec"]["nodeClassRef"] = {"group": "example.com", "kind": "OtherNodeClass", "name": "x"}
    kube, cloud, _, tagging = setup([unregistered, terminating, unmanaged])

    for name in ("unregistered", "terminating", "unmanaged", "missing"):
        assert await tagging.reconcile(name) == Result()

    assert cloud.calls == []
    assert kube.requests_to("PATCH", r.NODECLAIMS) == []


async def test_instance_gone_is_not_retried_and_not_annotated() -> None:
    kube, cloud, _, tagging = setup([claim("a")], launched=False)

    assert await tagging.reconcile("a") == Result()  # no exception: the work queue does not retry

    assert cloud.get_calls == ["aws:///us-east-1a/i-a"]
    assert cloud.create_tags_calls == []
    assert wk.ANNOTATION_TAGGED not in annotations(kube, "a")


async def test_instance_gone_between_read_and_create_tags_is_not_retried() -> None:
    kube, cloud, _, tagging = setup([claim("a")])
    cloud.fail("create_tags", NodeClaimNotFoundError("instance i-a not found"))

    assert await tagging.reconcile("a") == Result()

    assert wk.ANNOTATION_TAGGED not in annotations(kube, "a")


async def test_create_tags_failure_is_raised_for_backoff() -> None:
    kube, cloud, _, tagging = setup([claim("a")])
    cloud.fail("create_tags", CloudProviderError("RequestLimitExceeded"))

    with pytest.raises(CloudProviderError):
        await tagging.reconcile("a")
    assert wk.ANNOTATION_TAGGED not in annotations(kube, "a")


async def test_at_most_one_create_tags_per_second() -> None:
    names = ["a", "b", "c"]
    kube, cloud, clock, tagging = setup([claim(n) for n in names])
    start = clock.now()
    made: list[tuple[float, str]] = []

    pending = list(names)
    while pending:
        waits: dict[str, float] = {}
        for name in pending:
            before = len(cloud.create_tags_calls)
            result = await tagging.reconcile(name)
            if len(cloud.create_tags_calls) > before:
                made.append((clock.now() - start, name))
            else:
                assert result.requeue_after is not None and result.requeue_after > 0
                waits[name] = result.requeue_after
        pending = sorted(waits, key=waits.__getitem__)
        if pending:
            await clock.advance(min(waits.values()))

    assert made == [(0.0, "a"), (1.0, "b"), (2.0, "c")]
    assert all(annotations(kube, n).items() >= BOTH.items() for n in names)


async def test_a_nodeclaim_with_nothing_missing_does_not_wait_for_a_slot() -> None:
    kube, cloud, _, tagging = setup([claim("a"), claim("b")])
    await tagging.reconcile("a")  # takes the slot at t0
    cloud.instances["i-b"] = attrs.evolve(
        cloud.instances["i-b"], tags={wk.TAG_NAME: "node-b", wk.TAG_NODECLAIM: "b", wk.TAG_EKS_CLUSTER_NAME: CLUSTER}
    )

    assert await tagging.reconcile("b") == Result()

    assert [p for p, _ in cloud.create_tags_calls] == ["aws:///us-east-1a/i-a"]
    assert annotations(kube, "b").items() >= BOTH.items()


async def test_unparsable_provider_id_is_logged_not_retried() -> None:
    bad = claim("a")
    bad["status"]["providerID"] = "kwok://a"
    kube, cloud, _, tagging = setup([bad], launched=False)

    assert await tagging.reconcile("a") == Result()

    assert cloud.create_tags_calls == []
    assert wk.ANNOTATION_TAGGED not in annotations(kube, "a")
