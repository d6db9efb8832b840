"""``consolidationPolicy: Balanced`` in the disruption controller, on the fake apiserver and virtual time: the same
node is replaced under WhenEmptyOrUnderutilized and under Balanced only when the saving pays for the disruption;
the NodePool's other nodes weigh in; empty nodes stay emptiness's; metrics and events as Karpenter's."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from prometheus_client import REGISTRY

from karpy.consolidation.balanced import BALANCED
from karpy.controllers.disruption import controls
from karpy.controllers.disruption.controls import DisruptionSettings
from karpy.controllers.disruption.helpers import Context
from karpy.controllers.disruption.types import Command
from tests.unit.disruption_builders import T0, itype, node, nodeclaim, nodeclass, nodepool, pod
from tests.unit.test_disruption_orchestrator import FAST, Harness

WEOU = "WhenEmptyOrUnderutilized"


def one_node(policy: str, *, pool_name: str = "np", annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """A NodePool with one c.xlarge node ($0.20/h) running 1.5 CPU of pods."""
    pool = nodepool(pool_name, policy=policy, annotations=annotations)
    claim = nodeclaim("a", pool, instance_type="c.xlarge")
    pods = [pod(f"w{i}", "node-a", cpu="500m") for i in range(3)]
    return [nodeclass(), pool, claim, node(claim), *pods]


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return value or 0.0


@attrs.define
class Decided:
    h: Harness
    ctx: Context
    command: Command | None


async def decide(objs: list[dict[str, Any]], cheaper: float, settings: DisruptionSettings = FAST) -> Decided:
    """One disruption decision over ``objs`` whose catalogue offers the node's type and a cheaper 4-CPU type at
    ``cheaper`` $/h (events flushed, nothing started)."""
    h = Harness(objs, settings)
    h.cloud.instance_types = [itype("c.xlarge", 4, 8, 0.20), itype("e.xlarge", 4, 8, cheaper)]
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    command = h.disruption.decide(ctx)
    await h.events.flush()
    return Decided(h, ctx, command)


async def test_a_25_percent_saving_replaces_under_weou_but_not_balanced() -> None:
    """One node, NodePool = that node: the score is the saving's share of the node's price, so Balanced wants at
    least half of it; karpy's own 10 % floor lets WhenEmptyOrUnderutilized take 25 %."""
    weou = await decide(one_node(WEOU), 0.15)
    assert weou.command is not None and weou.command.decision == "replace"
    rejected_before = sample(
        "karpenter_consolidation_moves_total", decision="rejected", nodepool="bal", policy=BALANCED
    )
    h = await decide(one_node(BALANCED, pool_name="bal"), 0.15)
    assert h.command is None
    ctx = h.ctx
    assert ctx.totals["bal"].cost == pytest.approx(0.20) and ctx.totals["bal"].disruption == pytest.approx(4.0)
    after = sample("karpenter_consolidation_moves_total", decision="rejected", nodepool="bal", policy=BALANCED)
    assert after == rejected_before + 1
    assert sample(
        "karpenter_consolidation_score_bucket", decision="rejected", nodepool="bal", policy=BALANCED, le="0.33"
    )
    assert not h.h.kube.events("Unconsolidatable", name="a"), "Balanced refusals publish no event (as Karpenter)"
    assert ctx.blocked["a"].startswith("Balanced score 0.25 < threshold 0.50")


async def test_a_60_percent_saving_replaces_under_balanced_with_an_approved_event() -> None:
    approved_before = sample(
        "karpenter_consolidation_moves_total", decision="approved", nodepool="bal2", policy=BALANCED
    )
    h = await decide(one_node(BALANCED, pool_name="bal2"), 0.08)
    command = h.command
    assert command is not None and command.decision == "replace" and command.savings == pytest.approx(0.12)
    assert sample("karpenter_consolidation_moves_total", decision="approved", nodepool="bal2", policy=BALANCED) == (
        approved_before + 1
    )
    (event, *_) = h.h.kube.events("ConsolidationApproved", name="a")
    assert event["message"] == "score 0.60 >= threshold 0.50 (k: 2, savings 60.0%, disruption 100.0%)"


async def test_weou_moves_are_counted_but_not_scored() -> None:
    before = sample("karpenter_consolidation_moves_total", decision="approved", nodepool="plain", policy=WEOU)
    h = await decide(one_node(WEOU, pool_name="plain"), 0.08)
    assert h.command is not None
    assert sample("karpenter_consolidation_moves_total", decision="approved", nodepool="plain", policy=WEOU) == (
        before + 1
    )
    assert sample("karpenter_consolidation_score_count", decision="approved", nodepool="plain", policy=WEOU) == 0


async def test_karpy_savings_floor_applies_before_balanced_and_both_must_pass() -> None:
    """A 60 % saving passes Balanced; a NodePool floor of 0.7 refuses it first, and the move is never scored."""
    before = sample("karpenter_consolidation_score_count", decision="approved", nodepool="floor", policy=BALANCED)
    strict = {controls.ANNOTATION_MIN_SAVINGS_RATIO: "0.7"}
    h = await decide(one_node(BALANCED, pool_name="floor", annotations=strict), 0.08)
    assert h.command is None
    assert sample("karpenter_consolidation_score_count", decision="approved", nodepool="floor", policy=BALANCED) == (
        before
    )


async def test_the_nodepools_other_nodes_weigh_in() -> None:
    """A light node in a NodePool of busy nodes: its 25 % saving disrupts a small share of the NodePool, so
    Balanced takes it (the busy nodes are no candidates: a do-not-disrupt pod on each)."""
    pool = nodepool("busy", policy=BALANCED)
    objs: list[dict[str, Any]] = [nodeclass(), pool]
    light = nodeclaim("a", pool, instance_type="c.xlarge")
    objs += [light, node(light), pod("w0", "node-a", cpu="1500m")]
    for name in ("b", "c"):
        claim = nodeclaim(name, pool, instance_type="c.xlarge")
        objs += [claim, node(claim)]
        guard = {"karpenter.sh/do-not-disrupt": "true"}
        objs += [
            pod(f"{name}-{i}", f"node-{name}", cpu="400m", annotations=guard if i == 0 else None) for i in range(8)
        ]
    h = await decide(objs, 0.15)
    command = h.command
    # saving 0.05 of 0.60 (8.3 %) against disruption 2 of 2 + 9 + 9 (10 %): score 0.83
    assert command is not None and [c.name for c in command.candidates] == ["a"]
    assert command.decision == "replace"


async def test_empty_balanced_nodes_go_through_emptiness_unscored() -> None:
    pool = nodepool("empty", policy=BALANCED)
    claim = nodeclaim("a", pool, instance_type="c.xlarge")
    before = sample("karpenter_consolidation_score_count", decision="approved", nodepool="empty", policy=BALANCED)
    h = await decide([nodeclass(), pool, claim, node(claim)], 0.08)
    command = h.command
    assert command is not None and command.method == "emptiness" and command.reason == "Empty"
    assert sample("karpenter_consolidation_score_count", decision="approved", nodepool="empty", policy=BALANCED) == (
        before
    )


async def test_an_approved_balanced_move_survives_validation_and_runs() -> None:
    """The whole pass (validation included, Karpenter does not re-score there): the replacement is launched."""
    h = Harness(one_node(BALANCED, pool_name="full"))
    h.cloud.instance_types = [itype("c.xlarge", 4, 8, 0.20), itype("e.xlarge", 4, 8, 0.08)]
    command = await h.evaluate()
    assert command is not None and command.decision == "replace" and [c.name for c in command.candidates] == ["a"]
    await h.clock.settle()
    assert len(h.replacements()) == 1
    await h.close()


async def test_a_multi_node_balanced_move_is_approved_on_the_nodepool() -> None:
    """Three half-idle c.xlarge ($0.60/h together, one pod each) → one c.large ($0.10/h): saves 83 % of the NodePool
    for all of its disruption, score 0.83; counted once for the NodePool, ConsolidationApproved on the NodePool."""
    pool = nodepool("multi", policy=BALANCED, budgets=[{"nodes": "100%"}])
    objs: list[dict[str, Any]] = [nodeclass(), pool]
    for name in ("a", "b", "c"):
        claim = nodeclaim(name, pool, instance_type="c.xlarge")
        objs += [claim, node(claim), pod(f"{name}-0", f"node-{name}", owner=f"rs-{name}")]
    labels = {"decision": "approved", "nodepool": "multi", "policy": BALANCED}
    before = sample("karpenter_consolidation_moves_total", **labels)
    h = Harness(objs)
    ctx = await h.disruption.context(T0)
    assert ctx is not None
    command = h.disruption.decide(ctx)
    await h.events.flush()
    assert command is not None and command.method == "multi-node" and len(command.candidates) == 3
    assert command.decision == "replace" and command.savings == pytest.approx(0.50)
    assert sample("karpenter_consolidation_moves_total", **labels) == before + 1
    (event,) = h.kube.events("ConsolidationApproved", name="multi")
    assert event["message"] == "score 0.83 >= threshold 0.50 (k: 2, savings 83.3%, disruption 100.0%)"
    assert event["involvedObject"]["kind"] == "NodePool"


async def test_an_empty_node_is_never_consolidated_under_any_policy() -> None:
    """Karpenter v1.15 ``consolidation.go`` ``ShouldDisrupt``: ``IsEmpty`` candidates are emptiness's under every
    policy, so an ``Empty`` budget of 0 holds an empty WhenEmptyOrUnderutilized node: consolidation must not delete
    it under the ``Underutilized`` budget instead."""
    pool = nodepool("weou-empty", policy=WEOU, budgets=[{"nodes": "0", "reasons": ["Empty"]}, {"nodes": "100%"}])
    claim = nodeclaim("a", pool, instance_type="c.xlarge")
    h = await decide([nodeclass(), pool, claim, node(claim)], 0.08)
    assert h.command is None
