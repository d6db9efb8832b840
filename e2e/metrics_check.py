"""Checks of a ``/metrics`` scrape against Karpenter v1.15's metrics reference and against what happened on the
cluster, for the e2e scale-up/scale-down tests (first used by ``test_emptiness_e2e.py``).

A scrape is :func:`e2e.helpers.scrape_metrics`' ``{(sample name, labels): value}``. :func:`label_mismatches`
checks every sample of a reference family against Karpenter's label names (``tests/data/karpenter_v1_15_metrics.json``,
the same reference and lists as ``tests/unit/test_metrics_reference.py``); :func:`check_scale_up` and
:func:`check_scale_down` check the values of the families against the NodeClaims the test saw come and go.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.unit.test_metrics_reference import EXCEPTIONS, IGNORED_LABELS, NOT_YET, REFERENCE

Scrape = Mapping[tuple[str, frozenset[tuple[str, str]]], float]


def family_of(sample: str) -> str | None:
    """The reference family a sample belongs to (``x_bucket``/``x_count``/``x_sum`` → ``x``, a counter's
    ``x_created`` → ``x_total``), None when it is no reference family's."""
    if sample in REFERENCE:
        return sample
    for suffix in ("_bucket", "_count", "_sum", "_created"):
        if sample.endswith(suffix):
            base = sample[: -len(suffix)]
            for name in (base, f"{base}_total"):
                if name in REFERENCE:
                    return name
    return None


def label_mismatches(scrape: Scrape) -> list[str]:
    """Samples of reference families whose label names differ from Karpenter's (families still listed in
    NOT_YET or EXCEPTIONS aside: the unit reference test tracks those)."""
    wrong: set[str] = set()
    for name, labels in scrape:
        family = family_of(name)
        if family is None or family in NOT_YET or family in EXCEPTIONS:
            continue
        got = {k for k, _ in labels} - IGNORED_LABELS
        want = set(REFERENCE[family]["labels"])
        if got != want:
            wrong.add(f"{name}: {sorted(got)} != {sorted(want)}")
    return sorted(wrong)


def total(scrape: Scrape, metric: str, /, **labels: str) -> float:
    """The sum of ``metric``'s samples whose labels include ``labels``."""
    return sum(v for (n, lab), v in scrape.items() if n == metric and set(labels.items()) <= lab)


def delta(before: Scrape, after: Scrape, metric: str, /, **labels: str) -> float:
    """How much ``metric`` (summed over the samples matching ``labels``) moved from ``before`` to ``after``."""
    return total(after, metric, **labels) - total(before, metric, **labels)


def check_scale_up(before: Scrape, after: Scrape, *, nodepool: str, nodeclaims: int) -> None:
    """After ``nodeclaims`` NodeClaims of ``nodepool`` launched and initialized between the two scrapes: each
    was launched by a CloudProvider Create from the NodeClaim lifecycle reconciler, created with one apiserver
    POST, and reconciled; the lifecycle work queue is served. Raises AssertionError naming the figure."""
    creates = delta(before, after, "karpenter_cloudprovider_duration_seconds_count", method="Create", provider="aws")
    by_lifecycle = delta(
        before,
        after,
        "karpenter_cloudprovider_duration_seconds_count",
        method="Create",
        provider="aws",
        controller="nodeclaim.lifecycle",
    )
    assert creates >= nodeclaims and by_lifecycle == creates, (creates, by_lifecycle, nodeclaims)
    posts = delta(
        before,
        after,
        "client_go_request_duration_seconds_count",
        verb="CREATE",
        group="karpenter.sh",
        version="v1",
        kind="nodeclaims",
        subresource="",
    )
    assert posts >= nodeclaims, ("nodeclaim POSTs", posts, nodeclaims)
    assert delta(before, after, "client_go_request_total", method="POST", code="201") >= nodeclaims
    for controller in ("nodeclaim.lifecycle", "provisioner", "binder"):
        reconciles = delta(before, after, "controller_runtime_reconcile_total", controller=controller)
        assert reconciles > 0, (controller, reconciles)
        assert total(after, "controller_runtime_max_concurrent_reconciles", controller=controller) >= 1
    queue = {"name": "nodeclaim.lifecycle", "controller": "nodeclaim.lifecycle"}
    assert delta(before, after, "workqueue_adds_total", **queue) >= nodeclaims
    assert ("workqueue_depth", frozenset({**queue, "priority": ""}.items())) in after
    assert total(after, "controller_runtime_conversion_webhook_panics_total") == 0
    created = delta(
        before,
        after,
        "karpenter_nodeclaims_created_total",
        nodepool=nodepool,
        reason="provisioned",
        min_values_relaxed="false",
    )
    assert created >= nodeclaims and creates >= created, (created, creates)
    assert delta(before, after, "karpenter_nodes_created_total", nodepool=nodepool) >= nodeclaims
    nodes = total(after, "karpenter_nodes_allocatable", nodepool=nodepool, resource_type="cpu")
    assert nodes > 0
    series = [lab for (n, lab) in after if n == "karpenter_nodes_allocatable" and ("nodepool", nodepool) in lab]
    assert len({dict(lab)["node_name"] for lab in series}) == nodeclaims
    # One cost series per NodePool; its value needs the pool's prices, which the instance-type snapshot
    # picks up on its next (once a minute) refresh: a figure for the collector's own tests, not this scrape.
    assert ("karpenter_nodepools_cost_total", frozenset({("nodepool", nodepool)})) in after


def check_scale_down(before: Scrape, after: Scrape, *, nodepool: str, nodeclaims: int) -> None:
    """After ``nodeclaims`` NodeClaims of ``nodepool`` were disrupted and terminated between the two scrapes:
    each instance was deleted through the CloudProvider by the terminator (Delete until the instance is gone,
    which ends in a NodeClaimNotFoundError) and the NodeClaims' apiserver DELETEs were counted."""
    deletes = delta(
        before,
        after,
        "karpenter_cloudprovider_duration_seconds_count",
        method="Delete",
        provider="aws",
        controller="terminator",
    )
    assert deletes >= nodeclaims, ("Delete calls", deletes, nodeclaims)
    gone = delta(
        before,
        after,
        "karpenter_cloudprovider_errors_total",
        method="Delete",
        provider="aws",
        error="NodeClaimNotFoundError",
    )
    assert nodeclaims <= gone <= deletes, (gone, deletes)  # each termination ends when the instance is gone
    assert delta(before, after, "controller_runtime_reconcile_total", controller="terminator") >= nodeclaims
    assert delta(before, after, "client_go_request_total", method="DELETE") >= nodeclaims
    assert total(after, "controller_runtime_active_workers", controller="terminator") >= 0
    disrupted = delta(before, after, "karpenter_nodeclaims_disrupted_total", nodepool=nodepool, reason="empty")
    assert disrupted == nodeclaims, disrupted
    terminated = delta(before, after, "karpenter_nodeclaims_terminated_total", nodepool=nodepool)
    assert terminated == nodeclaims, terminated
    assert delta(before, after, "karpenter_nodes_terminated_total", nodepool=nodepool) == nodeclaims
    left = [lab for (n, lab) in after if n == "karpenter_nodes_allocatable" and ("nodepool", nodepool) in lab]
    assert not left, f"per-node series left after the nodes went: {left[:3]}"
