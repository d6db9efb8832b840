"""Balanced scoring (karpy.consolidation.balanced), with the cases of Karpenter core
``pkg/controllers/disruption/balanced_test.go``, ``balanced_scoring_test.go`` and ``balanced_adversarial_test.go``
written as karpy's own."""

from __future__ import annotations

import math

import attrs
import pytest

from karpy.consolidation import balanced as b
from karpy.consolidation.balanced import PoolNode, PoolTotals, Score, score_move

# The RFC's pool: eight m7i.xlarge ($4.84/day) and two m7i.2xlarge ($9.68/day); 80 pods, disruption 10 + 80.
RFC = PoolTotals(cost=58.08, disruption=90)


def expected(savings: float, disruption: float, totals: PoolTotals) -> float:
    return (savings / totals.cost) / (disruption / totals.disruption)


@pytest.mark.parametrize(
    ("savings", "disruption", "approved"),
    [
        (7.26, 4.0, True),  # oversized node: m7i.2xlarge → m7i.large, 3 pods
        (4.84, 5.0, True),  # spare capacity: delete an m7i.xlarge with 4 pods
        (2.42, 9.0, False),  # marginal: m7i.xlarge → m7i.large moving 8 pods
    ],
)
def test_rfc_pool_moves(savings: float, disruption: float, approved: bool) -> None:
    result = score_move(savings, disruption, RFC)
    assert result.approved is approved
    assert result.score == pytest.approx(expected(savings, disruption, RFC), abs=0.02)
    assert result.savings_fraction == pytest.approx(savings / RFC.cost)
    assert result.disruption_fraction == pytest.approx(disruption / RFC.disruption)


def test_zero_savings_scores_zero_and_a_uniform_pool_replace_passes() -> None:
    assert score_move(0.0, 11.0, RFC).score == 0 and not score_move(0.0, 11.0, RFC).approved
    uniform = PoolTotals(48.40, 90)
    assert score_move(2.42, 9.0, uniform).approved  # same move as the marginal one, cheaper pool


def test_disruption_heavy_node_is_refused_where_a_light_one_passes() -> None:
    het = PoolTotals(58.08, 117)
    assert score_move(4.84, 5.0, het).approved
    assert not score_move(4.84, 32.0, het).approved


def test_scale_invariance_and_cross_pool_equivalence() -> None:
    ten, hundred = score_move(7.26, 4.0, RFC), score_move(7.26, 4.0, PoolTotals(580.80, 900))
    assert ten.score == pytest.approx(hundred.score, abs=0.01)
    on_demand = score_move(4.84, 4.0, PoolTotals(48.40, 90))
    spot = score_move(1.45, 4.0, PoolTotals(14.50, 90))
    assert on_demand.score == pytest.approx(spot.score, abs=0.01) and on_demand.approved and spot.approved


@pytest.mark.parametrize(
    ("savings", "disruption", "score", "approved"),
    [
        (20.0, 5.0, 4.0, True),
        (10.0, 10.0, 1.0, True),
        (5.0, 50.0, 0.10, False),
        (10.0, 0.0, math.inf, True),
        (0.0, 10.0, 0.0, False),
        (-5.0, 10.0, 0.0, False),
    ],
)
def test_score_table(savings: float, disruption: float, score: float, approved: bool) -> None:
    result = score_move(savings, disruption, PoolTotals(100.0, 100.0))
    assert result.score == pytest.approx(score, abs=0.01) and result.approved is approved


def test_zero_totals_and_zero_values() -> None:
    assert not score_move(4.84, 5.0, PoolTotals(0, 90)).approved, "no NodePool cost: nothing to normalise against"
    assert math.isinf(score_move(4.84, 0.0, RFC).score) and score_move(4.84, 0.0, RFC).approved
    assert not score_move(0.0, 0.0, RFC).approved


def test_threshold_is_one_over_k() -> None:
    marginal = score_move(2.42, 9.0, RFC)
    assert marginal.threshold == 0.5 and not marginal.approved
    assert attrs.evolve(marginal, k=3).approved  # threshold 0.33
    assert not attrs.evolve(marginal, k=1).approved
    assert b.BALANCED_K == 2


def test_costs_follow_karpenter_eviction_cost() -> None:
    assert b.reschedule_disruption_cost([]) == 1.0, "an empty node still costs the per-node base"
    assert b.reschedule_disruption_cost([0, 0, 0]) == 4.0
    assert b.eviction_cost(2**25) == 2.0 and b.eviction_cost(2**30) == 10.0, "clamped to 10"
    assert b.reschedule_disruption_cost([-(2**26)]) == 1.0, "a negative pod cost does not discount the base"
    assert b.savings_ratio(0.4, 2.0) == pytest.approx(0.2) and b.savings_ratio(None, 1.0) == 0.0


def test_pool_totals_cover_every_node_and_ignore_unknown_prices() -> None:
    nodes = [PoolNode("a", 4.84, 2.0) for _ in range(5)]
    nodes += [PoolNode("b", None, 2.0), PoolNode("b", math.nan, 2.0), PoolNode("b", 4.84, 2.0)]
    totals = b.pool_totals(nodes)
    assert totals["a"].cost == pytest.approx(5 * 4.84) and totals["a"].disruption == pytest.approx(10.0)
    assert totals["b"].cost == pytest.approx(4.84), "unknown and NaN prices count 0"
    assert totals["b"].disruption == pytest.approx(6.0), "every node counts toward the disruption denominator"


@attrs.frozen
class Cand:
    pool: str
    policy: str
    price: float | None
    reschedule_cost: float


def test_evaluate_scores_balanced_pools_only_and_all_must_approve() -> None:
    assert b.evaluate([], 1.0, {}) == (False, {})
    other = Cand("other", "WhenEmptyOrUnderutilized", 4.84, 2.0)
    approved, scores = b.evaluate([other, other], 9.68, b.pool_totals([PoolNode("other", 4.84, 2.0)] * 5))
    assert approved and scores == {}
    one = Cand("bal", b.BALANCED, 4.84, 2.0)
    totals = b.pool_totals([PoolNode("bal", 4.84, 2.0)] * 10)
    approved, scores = b.evaluate([one], 4.84, totals)
    assert approved and scores["bal"].score == pytest.approx(1.0)
    approved, scores = b.evaluate([one], 4.84, {})
    assert not approved and scores["bal"].score == 0, "a NodePool without totals is refused"


def test_cross_pool_moves_credit_each_pool_its_share_of_the_savings() -> None:
    bal, other = Cand("bal", b.BALANCED, 4.84, 2.0), Cand("other", "WhenEmptyOrUnderutilized", 4.84, 2.0)
    totals = b.pool_totals([PoolNode("bal", 4.84, 2.0)] * 5 + [PoolNode("other", 4.84, 2.0)] * 5)
    approved, scores = b.evaluate([bal, other], 9.68, totals)
    assert approved and set(scores) == {"bal"} and scores["bal"].score == pytest.approx(1.0)
    # A second Balanced pool whose share does not pay for its heavy node refuses the whole move.
    heavy = Cand("heavy", b.BALANCED, 1.0, 41.0)
    totals = {**totals, "heavy": PoolTotals(2.0, 43.0)}
    approved, scores = b.evaluate([bal, heavy], 0.5 * (4.84 + 1.0), totals)
    assert scores["bal"].approved and not scores["heavy"].approved and not approved


def test_can_pass_is_the_delete_upper_bound() -> None:
    totals = {"bal": PoolTotals(10 * 4.84, 10 + 80)}
    assert b.can_pass(Cand("bal", b.BALANCED, 4.84, 9.0), totals)
    assert not b.can_pass(Cand("bal", b.BALANCED, 4.84, 40.0), totals)
    assert b.can_pass(Cand("bal", "WhenEmptyOrUnderutilized", 4.84, 40.0), totals), "other policies pass"
    assert b.can_pass(Cand("bal", b.BALANCED, 4.84, 40.0), {}), "no totals: left to the full evaluation"


def test_messages() -> None:
    assert Score(0.1, 0.05).message() == "score 2.00 >= threshold 0.50 (k: 2, savings 10.0%, disruption 5.0%)"
    assert Score(0.1, 0.0).message().startswith("score +Inf >= threshold 0.50")
    assert Score(0.02, 0.1).why_not().startswith("Balanced score 0.20 < threshold 0.50")
