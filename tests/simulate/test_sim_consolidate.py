"""``karpy simulate --consolidate`` on manifests/examples/balanced.yaml: Balanced takes the oversized node's replace
and refuses the crowded node's, which WhenEmptyOrUnderutilized takes; the numbers are the controller's own
(karpy.consolidation), and the other examples' workloads stay off the demo nodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simulate.sim_helpers import run, run_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "balanced.yaml"


def with_policy(tmp_path: Path, policy: str) -> str:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    for d in docs:
        if d["kind"] == "NodePool":
            d["spec"]["disruption"]["consolidationPolicy"] = policy
    path = tmp_path / f"{policy}.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def nodes(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in result["consolidation"]["nodes"]}


def test_balanced_takes_the_oversized_node_and_keeps_the_crowded_one(capsys: Any) -> None:
    result = run_json(capsys, "-f", str(EXAMPLE), "--consolidate")
    view = result["consolidation"]
    assert view["nodePoolTotals"]["balanced-demo"] == {"pricePerHour": 1.152, "disruptionCost": 9.0}
    by_node = nodes(result)
    oversized, crowded = by_node["oversized"], by_node["crowded"]
    assert (oversized["move"], oversized["replacement"].split()[0]) == ("replace", "m5.large")
    assert oversized["savingsPerHour"] == pytest.approx(0.288)
    assert oversized["balancedScore"] == pytest.approx((0.288 / 1.152) / (2 / 9), abs=1e-4)
    assert oversized["verdict"].startswith("taken: Balanced score 1.12 >= threshold 0.50")
    assert (crowded["move"], crowded["replacement"]) == ("replace", "m5.2xlarge")
    assert crowded["savingsPerHour"] == pytest.approx(0.384)
    assert crowded["balancedScore"] == pytest.approx((0.384 / 1.152) / (7 / 9), abs=1e-4)
    assert crowded["verdict"].startswith("kept: Balanced score 0.43 < threshold 0.50")
    assert crowded["verdict"].endswith("WhenEmptyOrUnderutilized would take it")
    first = view["firstCommand"]
    assert (first["method"], first["decision"], first["nodes"]) == ("single-node", "replace", ["oversized"])
    assert first["balancedScores"]["balanced-demo"] == pytest.approx(1.125, abs=1e-4)


def test_when_empty_or_underutilized_takes_both_moves(capsys: Any, tmp_path: Path) -> None:
    result = run_json(capsys, "-f", with_policy(tmp_path, "WhenEmptyOrUnderutilized"), "--consolidate")
    by_node = nodes(result)
    assert by_node["oversized"]["verdict"] == "taken"
    assert by_node["crowded"]["verdict"] == "taken (Balanced would refuse it: score 0.43 < 0.50)"


def test_when_empty_keeps_both_and_text_output(capsys: Any, tmp_path: Path) -> None:
    result = run_json(capsys, "-f", with_policy(tmp_path, "WhenEmpty"), "--consolidate")
    assert result["consolidation"]["firstCommand"] is None
    assert {n["verdict"] for n in nodes(result).values()} == {"kept: WhenEmpty consolidates only empty nodes"}
    code, out, _ = run(capsys, "-f", str(EXAMPLE), "--consolidate")
    assert code == 0
    assert "first command: single-node replace oversized → m5.large" in out
    assert "kept: Balanced score 0.43 < threshold 0.50" in out


def test_an_empty_node_goes_first_and_do_not_disrupt_keeps_a_node(capsys: Any, tmp_path: Path) -> None:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    docs = [d for d in docs if not (d["kind"] == "Pod" and d["metadata"]["name"] == "solo")]
    for d in docs:
        if d["kind"] == "Pod" and d["metadata"]["name"] == "web-0":
            d["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}
    path = tmp_path / "changed.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    result = run_json(capsys, "-f", str(path), "--consolidate")
    view = result["consolidation"]
    assert view["firstCommand"]["method"] == "emptiness" and view["firstCommand"]["nodes"] == ["oversized"]
    assert set(nodes(result)) == {"oversized"}
    assert any("crowded: not consolidated" in n and "do-not-disrupt" in n for n in view["notes"])


def test_without_the_flag_the_plan_is_unchanged(capsys: Any) -> None:
    result = run_json(capsys, "-f", str(EXAMPLE))
    assert "consolidation" not in result and result["summary"]["pendingPods"] == 0
