"""Karpenter v1.15's metrics reference, name by name: every family karpy serves has Karpenter's type and label names.

``tests/data/karpenter_v1_15_metrics.json`` holds the 126 names of Karpenter v1.15's metrics reference with the type
and label names Karpenter declares for each (read from the Go sources it names: Karpenter core and AWS provider
v1.15.0, controller-runtime v0.24.1, operatorpkg, client-go/component-base). After a minimal scale-up and scale-down
on the fake cluster (the whole :class:`~karpy.operator.Operator` on :class:`~karpy.kube.fake.FakeKube` and a
metered :class:`~karpy.cloudprovider.fake.FakeCloudProvider`), prometheus-client's default registry is read and for
each name:

* the family exists with Karpenter's type, and the label names it declares and those of every sample it has equal
  the reference's (``le`` of histogram buckets and ``quantile`` of summaries aside);
* or the name is in :data:`EXCEPTIONS` (karpy does not serve it, with the reason) — then it must not be served;
* or the name is in :data:`NOT_YET` (another branch of issue 10 is adding or fixing it) — then it must not already
  be served correctly.

A stale entry (an exception that is served, a NOT_YET name served correctly) fails the test, so entries are struck
as the branches land.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

from karpy.apis import labels as wk
from karpy.apis.conditions import condition_true
from karpy.cloudprovider.fake import FAKE_IMAGE_ID, FakeCloudProvider
from karpy.cloudprovider.metrics import MeteredCloudProvider
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODECLAIMS, NODES, PODS
from karpy.operator import Operator
from karpy.settings import from_environment
from tests.unit.disruption_builders import CATALOGUE, nodeclass, nodepool, pod

REFERENCE_PATH = Path(__file__).resolve().parents[1] / "data" / "karpenter_v1_15_metrics.json"
REFERENCE: dict[str, dict[str, Any]] = json.loads(REFERENCE_PATH.read_text())["metrics"]
IGNORED_LABELS = frozenset({"le", "quantile"})

_AWS_SDK = (
    "aws-sdk-go-v2 middleware metric (github.com/jonathan-innis/aws-sdk-go-prometheus, registered by Karpenter's AWS "
    "operator): its label set cannot be read from the v1.15 sources (the module is not in the Go module cache, the "
    "stored upstream versions label by status_code and name the families differently) and its retry/attempt "
    "families count aws-sdk-go-v2's own retry loop, which botocore's differs from; karpy's AWS calls are visible "
    "through karpenter_cloudprovider_duration_seconds/errors_total instead"
)
EXCEPTIONS: dict[str, str] = {
    "karpenter_interruption_instance_status_unhealthy_total": (
        "counts EC2 DescribeInstanceStatus health checks, which karpy does not poll (it handles the interruption "
        "queue's EventBridge messages only)"
    ),
    "karpenter_cloudprovider_batcher_batch_time_seconds": (
        "Karpenter's AWS provider batches CreateFleet/DescribeInstances/TerminateInstances calls across NodeClaims; "
        "karpy makes one call per NodeClaim, so there is no batch window to measure"
    ),
    "karpenter_cloudprovider_batcher_batch_size": "no EC2 request batcher in karpy (see the batch_time_seconds entry)",
    "aws_sdk_go_request_total": _AWS_SDK,
    "aws_sdk_go_request_retry_count": _AWS_SDK,
    "aws_sdk_go_request_duration_seconds": _AWS_SDK,
    "aws_sdk_go_request_attempt_total": _AWS_SDK,
    "aws_sdk_go_request_attempt_duration_seconds": _AWS_SDK,
}

# Names being added in parallel work, by owner (none now: every reference name is served or a reasoned exception).
# A name served correctly while listed here fails the test as stale.
NOT_YET: dict[str, str] = {}


@attrs.frozen
class Family:
    """One served family: its type, the label names its metric object declares (None for a custom collector),
    and the label names of each of its samples."""

    type: str
    declared: frozenset[str] | None
    samples: tuple[frozenset[str], ...]


def served() -> dict[str, Family]:
    """Every family in the default registry by exposition name (counters with their ``_total``)."""
    declared: dict[str, frozenset[str]] = {}
    for collector in list(REGISTRY._collector_to_names):  # the label names each family declares
        if isinstance(collector, MetricWrapperBase):
            name = collector._name + ("_total" if collector._type == "counter" else "")
            declared[name] = frozenset(collector._labelnames)
    families: dict[str, Family] = {}
    for metric in REGISTRY.collect():
        name = metric.name + ("_total" if metric.type == "counter" else "")
        samples = tuple(frozenset(s.labels) - IGNORED_LABELS for s in metric.samples)
        families[name] = Family(metric.type, declared.get(name), samples)
    return families


def merged(*snapshots: dict[str, Family]) -> dict[str, Family]:
    """The families of several registry snapshots together: a family served in any, with all their samples."""
    families: dict[str, Family] = {}
    for snapshot in snapshots:
        for name, family in snapshot.items():
            seen = families.get(name)
            if seen is None:
                families[name] = family
            else:
                declared = seen.declared if seen.declared is not None else family.declared
                families[name] = Family(seen.type, declared, seen.samples + family.samples)
    return families


def label_problem(name: str, family: Family) -> str:
    """Why ``family`` does not match the reference for ``name`` ("" when it does)."""
    ref = REFERENCE[name]
    want = frozenset(ref["labels"])
    if family.type != ref["type"]:
        return f"{name}: type {family.type}, Karpenter's is {ref['type']}"
    if family.declared is not None and family.declared != want:
        return f"{name}: declares labels {sorted(family.declared)}, Karpenter's are {sorted(want)}"
    wrong = sorted({tuple(sorted(s)) for s in family.samples if s != want})
    if wrong:
        return f"{name}: samples labelled {wrong}, Karpenter's labels are {sorted(want)}"
    return ""


def reference_problems(families: dict[str, Family]) -> list[str]:
    """Every way the served families, :data:`EXCEPTIONS` and :data:`NOT_YET` disagree with the reference."""
    problems = [f"{name}: both an exception and NOT_YET" for name in EXCEPTIONS.keys() & NOT_YET.keys()]
    problems += [
        f"{name}: listed but not in the reference" for name in (EXCEPTIONS.keys() | NOT_YET.keys()) - set(REFERENCE)
    ]
    for name in REFERENCE:
        family = families.get(name)
        if name in EXCEPTIONS:
            if family is not None:
                problems.append(f"{name}: served, strike its exception")
            continue
        problem = "not served" if family is None else label_problem(name, family)
        if name in NOT_YET:
            if not problem:
                problems.append(f"{name}: served as Karpenter's, strike it from NOT_YET ({NOT_YET[name]})")
            continue
        if problem:
            problems.append(problem if family is not None else f"{name}: not served")
    return problems


# --- a minimal scale-up and scale-down on the fake cluster ---------------------------------------------------------


class _Resolver:
    """Resolves an EC2NodeClass to the status it already has (the builders' EC2NodeClass is resolved)."""

    async def resolve_nodeclass(self, nc: Any) -> Any:
        status = {k: v for k, v in (nc.get("status") or {}).items() if k != "conditions"}
        return SimpleNamespace(status=status, conditions=[])


@attrs.define
class Scenario:
    """What the scale-up and scale-down did, and the registry's samples before and after."""

    kube: FakeKube
    cloud: FakeCloudProvider
    before: dict[tuple[str, frozenset[tuple[str, str]]], float]
    after: dict[tuple[str, frozenset[tuple[str, str]]], float]
    launched: list[str]
    families_up: dict[str, Family]
    """The families served while the nodes were up (scrape-time collectors render only what exists)."""

    def delta(self, metric: str, /, **labels: str) -> float:
        """The change of the sum of ``metric``'s samples whose labels include ``labels``."""

        def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
            return sum(v for (n, lab), v in samples.items() if n == metric and set(labels.items()) <= lab)

        return total(self.after) - total(self.before)

    def value(self, metric: str, /, **labels: str) -> float:
        return sum(v for (n, lab), v in self.after.items() if n == metric and set(labels.items()) <= lab)


def samples() -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the default registry: (sample name, labels) → value."""
    return {(s.name, frozenset(s.labels.items())): s.value for metric in REGISTRY.collect() for s in metric.samples}


async def _until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Wait (polling the fake cluster) until ``condition`` holds; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def _node(name: str, claim: dict[str, Any]) -> dict[str, Any]:
    """The Node kubelet would register for ``claim`` (labels and capacity from the launch)."""
    status = claim.get("status") or {}
    labels = {**((claim.get("metadata") or {}).get("labels") or {}), wk.LABEL_HOSTNAME: name}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"providerID": status["providerID"]},
        "status": {
            "capacity": status.get("capacity") or {},
            "allocatable": status.get("allocatable") or {},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        },
    }


def _settled(before: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> bool:
    """The lifecycle queue holds no more keys than before the scenario and no reconcile is running."""
    now = samples()

    def total(snapshot: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str, **labels: str) -> float:
        return sum(v for (n, lab), v in snapshot.items() if n == metric and set(labels.items()) <= lab)

    depth = "workqueue_depth", {"name": "nodeclaim.lifecycle"}
    busy = sum(
        total(now, "controller_runtime_active_workers", controller=c)
        for c in ("nodeclaim.lifecycle", "terminator", "provisioner")
    )
    return total(now, depth[0], **depth[1]) <= total(before, depth[0], **depth[1]) and busy == 0


async def scale_up_and_down() -> Scenario:
    """The whole Operator on the fakes: two pending pods get a NodeClaim, its Node registers and initializes, then
    the pods go and the NodeClaim is deleted until it and its Node are gone."""
    settings = from_environment(
        {
            "CLUSTER_NAME": "c",
            "DISABLE_LEADER_ELECTION": "true",
            "BATCH_IDLE_DURATION": "10ms",
            "BATCH_MAX_DURATION": "50ms",
        }
    )
    # The fake offers only what a NodeClaim's requirements admit, the NodePool label among them.
    catalogue = [attrs.evolve(it, labels={**it.labels, wk.LABEL_NODEPOOL: "np"}) for it in CATALOGUE]
    cloud = FakeCloudProvider(catalogue)
    kube = FakeKube([nodeclass(amis=(FAKE_IMAGE_ID,)), nodepool(), pod("p1"), pod("p2")])
    before = samples()
    operator = Operator(settings, kube, MeteredCloudProvider(cloud, provider="fake"), nodeclasses=_Resolver())
    running = asyncio.create_task(operator.run())
    try:

        def launched() -> list[dict[str, Any]]:
            return [c for c in kube.objects(NODECLAIMS) if (c.get("status") or {}).get("providerID")]

        await _until(lambda: bool(launched()), "a NodeClaim launched")
        claims = launched()
        for i, claim in enumerate(claims):
            await kube.create(NODES, _node(f"node-{i}", claim))
        await _until(
            lambda: all(
                condition_true(kube.object(NODECLAIMS, c["metadata"]["name"]) or {}, wk.COND_INITIALIZED)
                for c in claims
            ),
            "the NodeClaims initialized",
        )
        families_up = served()
        for name in ("p1", "p2"):  # the workload scaled to zero (no kubelet here to finish a graceful deletion)
            kube.remove(PODS, name, "default")
        for claim in claims:
            await kube.delete(NODECLAIMS, claim["metadata"]["name"])
        await _until(lambda: not kube.names(NODECLAIMS) and not kube.names(NODES), "the NodeClaims and Nodes gone")
        # The last deletions queue keys too: stop only once the workers took them (and finished), or the depth
        # and active-worker gauges would read what the cancel interrupted (seen under load on 2 busy cores).
        await _until(lambda: _settled(before), "the work queues drained and the workers idle")
    finally:
        running.cancel()
        with contextlib.suppress(BaseException):
            await running
    return Scenario(kube, cloud, before, samples(), [c["metadata"]["name"] for c in claims], families_up)


@pytest.fixture(scope="module")
def scenario() -> Iterator[Scenario]:
    yield asyncio.run(scale_up_and_down())


def test_reference_file_lists_the_126_names() -> None:
    assert len(REFERENCE) == 126
    assert all(ref["type"] in {"counter", "gauge", "histogram", "summary"} for ref in REFERENCE.values())


def test_every_reference_name_is_served_as_karpenter_or_listed(scenario: Scenario) -> None:
    """Each of the 126 names: served with Karpenter's type and label names (while the nodes were up or after they
    went), or a reasoned exception, or NOT_YET."""
    assert reference_problems(merged(scenario.families_up, served())) == []


def test_checker_fails_on_missing_wrong_and_stale_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check can fail: a missing name, a wrong label set and stale list entries are each reported."""
    monkeypatch.setitem(NOT_YET, "karpenter_build_info", "someone")  # NOT_YET is empty now: list one to test it
    name = "controller_runtime_reconcile_errors_total"
    right = Family("counter", frozenset({"controller"}), (frozenset({"controller"}),))
    assert label_problem(name, right) == ""
    assert "declares labels" in label_problem(name, Family("counter", frozenset({"nodepool"}), ()))
    assert "samples labelled" in label_problem(name, Family("counter", None, (frozenset(),)))
    assert "type gauge" in label_problem(name, Family("gauge", frozenset({"controller"}), ()))
    everything = {n: Family(r["type"], frozenset(r["labels"]), ()) for n, r in REFERENCE.items()}
    problems = reference_problems(everything)
    assert any("strike its exception" in p for p in problems) and any("strike it from NOT_YET" in p for p in problems)
    missing = {n: f for n, f in everything.items() if n != name}
    assert f"{name}: not served" in reference_problems(missing)


def test_reconciles_and_workqueues_are_counted(scenario: Scenario) -> None:
    """controller-runtime's families count every reconcile of the scenario; the queues drained."""
    for controller in ("nodeclaim.lifecycle", "terminator", "provisioner"):
        assert scenario.delta("controller_runtime_reconcile_total", controller=controller) > 0, controller
        assert scenario.value("controller_runtime_max_concurrent_reconciles", controller=controller) >= 1
        assert scenario.value("controller_runtime_active_workers", controller=controller) == 0
    lifecycle_reconciles = scenario.delta("controller_runtime_reconcile_total", controller="nodeclaim.lifecycle")
    assert scenario.delta("controller_runtime_reconcile_time_seconds_count", controller="nodeclaim.lifecycle") == (
        lifecycle_reconciles
    )
    queue = {"name": "nodeclaim.lifecycle", "controller": "nodeclaim.lifecycle"}
    assert scenario.delta("workqueue_adds_total", **queue) > 0
    assert scenario.delta("workqueue_work_duration_seconds_count", **queue) == lifecycle_reconciles
    # the gauge is process-wide (one queue per name in production): other tests' discarded queues may leave keys
    assert scenario.delta("workqueue_depth", **queue) == 0  # every key this scenario queued was taken


def test_client_requests_are_counted(scenario: Scenario) -> None:
    """client_go_request_total counts every apiserver request by method and status code (FakeKube serves watches
    without the transport that counts them, so they are left out here)."""
    requests = [r for r in scenario.kube.requests if not r.query.get("watch")]
    for method in ("GET", "POST", "PATCH", "DELETE"):
        sent = sum(1 for r in requests if r.method == method)
        assert scenario.delta("client_go_request_total", method=method) == sent, method
    assert scenario.delta("client_go_request_total", method="POST", code="201") > 0
    assert scenario.delta("client_go_request_duration_seconds_count", verb="CREATE", kind="nodeclaims") >= len(
        scenario.launched
    )


def test_cloud_provider_calls_are_counted(scenario: Scenario) -> None:
    """karpenter_cloudprovider_duration_seconds counts each Create (one per NodeClaim launched) by the
    reconciler that made it, and each Delete; the termination's NodeClaimNotFoundError is counted as an error."""
    creates = scenario.delta(
        "karpenter_cloudprovider_duration_seconds_count",
        method="Create",
        provider="fake",
        controller="nodeclaim.lifecycle",
    )
    assert creates == len(scenario.cloud.create_calls) == len(scenario.launched)
    deletes = scenario.delta("karpenter_cloudprovider_duration_seconds_count", method="Delete", provider="fake")
    assert deletes == len(scenario.cloud.delete_calls) > 0
    not_found = scenario.delta(
        "karpenter_cloudprovider_errors_total", method="Delete", error="NodeClaimNotFoundError", provider="fake"
    )
    assert 0 < not_found <= deletes


async def test_balanced_consolidation_metrics_are_observed_with_karpenters_labels() -> None:
    """karpenter_consolidation_score and karpenter_consolidation_moves_total: a Balanced NodePool's refused and
    approved moves are observed, labelled decision/nodepool/policy as Karpenter's (disruption/balanced.go)."""
    from tests.unit.test_disruption_balanced import decide, one_node

    before = samples()
    refused = await decide(one_node("Balanced", pool_name="ref-bal"), 0.15)  # saves 25 %: refused
    approved = await decide(one_node("Balanced", pool_name="ref-bal"), 0.08)  # saves 60 %: approved
    assert refused.command is None and approved.command is not None
    after = samples()

    def delta(metric: str, **labels: str) -> float:
        def total(snapshot: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> float:
            return sum(v for (n, lab), v in snapshot.items() if n == metric and set(labels.items()) <= lab)

        return total(after) - total(before)

    for decision in ("approved", "rejected"):
        labels = {"decision": decision, "nodepool": "ref-bal", "policy": "Balanced"}
        assert delta("karpenter_consolidation_moves_total", **labels) == 1, decision
        assert delta("karpenter_consolidation_score_count", **labels) == 1, decision
    families = served()
    for name in ("karpenter_consolidation_score", "karpenter_consolidation_moves_total"):
        assert families[name].samples and label_problem(name, families[name]) == ""
