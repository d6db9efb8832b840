"""The terminator's drain and release against an in-memory apiserver: pods stuck terminating do not hold the
drain (Karpenter ``IsStuckTerminating``), the terminationGracePeriod force-delete is sent once per pod, and
``karpenter_nodeclaims_terminated_total`` counts each NodeClaim exactly once."""

from __future__ import annotations

from prometheus_client import REGISTRY

from karpy.apis import labels as wk
from karpy.controllers.terminator import STUCK_TERMINATING_AFTER, Terminator, stuck_terminating
from karpy.kube.events import EventRecorder
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS
from karpy.state.views import pod_info
from tests.unit.disruption_builders import T0, loaded_state, node, nodeclaim, nodeclass, nodepool, pod, ts
from tests.unit.test_terminator_tgp import apiserver, evictions_asked, gone_cloud, pods_deleted

# The shared fake apiserver removes a deleting object when its last finalizer goes (a later patch answers 404).


def _terminated(pool: str) -> float:
    """``karpenter_nodeclaims_terminated_total{nodepool=pool}`` summed over its other labels (capacity_type, zone)."""
    return sum(
        s.value
        for family in REGISTRY.collect()
        if family.name == "karpenter_nodeclaims_terminated"
        for s in family.samples
        if s.name == "karpenter_nodeclaims_terminated_total" and s.labels.get("nodepool") == pool
    )


def _terminating_pod(name: str, node_name: str, deletion: float) -> dict:
    p = pod(name, node_name)
    p["metadata"]["deletionTimestamp"] = ts(deletion)
    p["metadata"]["finalizers"] = ["example.com/hold"]  # stays in the apiserver, as on a dead kubelet
    return p


def test_stuck_terminating_is_a_minute_past_the_deletion_timestamp() -> None:
    info = pod_info(_terminating_pod("p", "n", T0))
    assert info.deletion_timestamp == T0
    assert not stuck_terminating(info, T0 + STUCK_TERMINATING_AFTER)
    assert stuck_terminating(info, T0 + STUCK_TERMINATING_AFTER + 1)
    assert not stuck_terminating(pod_info(pod("q", "n")), T0 + 10_000), "a pod not deleting is never stuck"


async def test_a_pod_stuck_terminating_does_not_hold_the_drain() -> None:
    """A dead kubelet never confirms the pod's end: a minute past its deletionTimestamp it no longer blocks."""
    pool = nodepool("stuck")
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0 - 300)
    stuck = _terminating_pod("stuck", "node-a", T0 - 120)
    leaving = _terminating_pod("leaving", "node-a", T0 - 10)  # within its minute: still waited for
    objs = [nodeclass(), pool, claim, node(claim), stuck, leaving]
    state = loaded_state(objs)
    now = [T0]
    kube = apiserver(objs, state, lambda: now[0])
    term = Terminator(kube, state, gone_cloud(), EventRecorder(kube), clock=lambda: now[0])
    assert (await term.reconcile("a")).requeue_after is not None, "the pod within its minute holds the drain"
    assert kube.object(NODECLAIMS, "a") is not None
    now[0] = T0 + 51  # both are stuck now
    before = _terminated("stuck")
    for _ in range(3):
        await term.reconcile("a")
    assert kube.object(NODECLAIMS, "a") is None, "the drain ended and the NodeClaim was released"
    assert not evictions_asked(kube) and not pods_deleted(kube)
    assert _terminated("stuck") - before == 1


def _tgp_setup(now: float) -> tuple[FakeKube, Terminator]:
    pool = nodepool("tgp")
    claim = nodeclaim("a", pool, terminationGracePeriod="60s")
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    p = pod("dnd", "node-a", annotations={wk.ANNOTATION_DO_NOT_DISRUPT: "true"})
    p["spec"]["terminationGracePeriodSeconds"] = 30
    early = _terminating_pod("early", "node-a", T0 + 40)  # already stops before the deadline (T0 + 60)
    early["spec"]["terminationGracePeriodSeconds"] = 30
    objs = [nodeclass(), pool, claim, node(claim), p, early]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: now)
    term = Terminator(kube, state, gone_cloud(), EventRecorder(kube), clock=lambda: now)
    return kube, term


async def test_the_deadline_force_delete_is_sent_once_per_pod() -> None:
    """The informer cache lags (a dead kubelet never removes the pod): the delete is still not re-sent on every
    drain poll, and a pod whose containers already stop by the deadline is not deleted again."""
    kube, term = _tgp_setup(now=T0 + 50)
    await term.reconcile("a")  # stamps the deadline (T0 + 60) and deletes the pod
    kube.sink = None  # from here the watch delivers nothing: the cache keeps the pod as it was
    for _ in range(5):
        await term.reconcile("a")
    assert pods_deleted(kube) == ["dnd"], pods_deleted(kube)


async def test_release_counts_a_nodeclaim_once_even_when_reconciled_on_stale_state() -> None:
    """A reconcile that runs before the watch delivers the NodeClaim's deletion re-runs the release: the 404 it
    gets counts nothing (terminated must never exceed created)."""
    pool = nodepool("once")
    claim = nodeclaim("a", pool)
    claim["metadata"]["deletionTimestamp"] = ts(T0)
    objs = [nodeclass(), pool, claim]
    state = loaded_state(objs)
    kube = apiserver(objs, state, lambda: T0)
    term = Terminator(kube, state, gone_cloud(), EventRecorder(kube), clock=lambda: T0)
    kube.sink = None  # the watch lags: state still holds the NodeClaim with its finalizer
    before = _terminated("once")
    for _ in range(3):
        await term.reconcile("a")
    assert _terminated("once") - before == 1
    assert kube.object(NODECLAIMS, "a") is None
