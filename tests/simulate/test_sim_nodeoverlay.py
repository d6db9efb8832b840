"""``karpy simulate`` reads NodeOverlays and applies them: the documented example (manifests/examples/nodeoverlay.yaml)
changes the chosen type by price and makes an extended-resource pod schedulable; conflicts and invalid overlays
are reported as their ``ValidationSucceeded`` condition would say."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.simulate.sim_helpers import run, run_json
from tests.unit.test_manifests import schema_of, validate

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "nodeoverlay.yaml"


def docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def without_overlays(tmp_path: Path) -> str:
    path = tmp_path / "no-overlays.yaml"
    path.write_text(yaml.safe_dump_all([d for d in docs() if d["kind"] != "NodeOverlay"]))
    return str(path)


def with_extra(tmp_path: Path, *extra: dict[str, Any]) -> str:
    path = tmp_path / "extra.yaml"
    path.write_text(yaml.safe_dump_all([*docs(), *extra]))
    return str(path)


def test_example_overlays_pass_the_crd_schema() -> None:
    schema = schema_of("nodeoverlays.karpenter.sh")
    overlays = [d for d in docs() if d["kind"] == "NodeOverlay"]
    assert len(overlays) == 2
    for overlay in overlays:
        assert validate(overlay, schema) == [], overlay["metadata"]["name"]


def test_price_overlay_changes_the_chosen_type(capsys: Any, tmp_path: Path) -> None:
    plain = run_json(capsys, "-f", without_overlays(tmp_path), "--scale", "overlay-price-demo=1")
    [node] = plain["newNodes"]
    assert (node["instanceType"], node["pricePerHour"]) == ("c5.large", 0.085)
    assert "nodeOverlays" not in plain  # only when the manifests hold some

    result = run_json(capsys, "-f", str(EXAMPLE), "--scale", "overlay-price-demo=1")
    [node] = result["newNodes"]
    assert node["instanceType"] == "m5.large"
    assert round(node["pricePerHour"], 6) == 0.0576  # $0.096 - 40 %
    reports = {r["name"]: r for r in result["nodeOverlays"]}
    assert reports["overlay-m5-savings-plan"] == {
        "name": "overlay-m5-savings-plan",
        "applied": True,
        "instanceTypes": {"overlay-demo": ["m5.large", "m5.xlarge"]},
    }
    assert any("NodeOverlay=true" in n for n in result["notes"])


def test_capacity_overlay_makes_the_extended_resource_pod_schedulable(capsys: Any, tmp_path: Path) -> None:
    plain = run_json(capsys, "-f", without_overlays(tmp_path), "--scale", "overlay-capacity-demo=1")
    assert plain["newNodes"] == []
    [entry] = plain["unschedulable"]
    assert "example.com/license" in entry["reason"] or "resources" in entry["reason"], entry

    result = run_json(capsys, "-f", str(EXAMPLE), "--scale", "overlay-capacity-demo=1")
    [node] = result["newNodes"]
    assert node["instanceType"] == "c5.large" and node["requests"]["example.com/license"] == "1"
    assert result["unschedulable"] == []


def test_text_plan_lists_the_overlays(capsys: Any) -> None:
    code, out, err = run(capsys, "-f", str(EXAMPLE), "--scale", "overlay-price-demo=1")
    assert code == 0, err
    assert "NodeOverlays:" in out
    assert "overlay-m5-savings-plan: applied to nodepool overlay-demo: 2 instance types (m5.large, m5.xlarge)" in out


def test_conflicting_and_invalid_overlays_are_reported_and_not_applied(capsys: Any, tmp_path: Path) -> None:
    twin = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "aaa-same-weight"},
        "spec": {
            "weight": 10,
            "requirements": [{"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]}],
            "price": "5",
        },
    }
    bad = {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": "bad"},
        "spec": {"requirements": [], "capacity": {"cpu": "8"}},
    }
    result = run_json(capsys, "-f", with_extra(tmp_path, twin, bad), "--scale", "overlay-price-demo=1")
    reports = {r["name"]: r for r in result["nodeOverlays"]}
    assert reports["aaa-same-weight"]["applied"] is False
    assert reports["aaa-same-weight"]["reason"] == "Conflict"
    assert reports["bad"]["reason"] == "RuntimeValidation" and "cpu" in reports["bad"]["message"]
    assert reports["overlay-m5-savings-plan"]["applied"] is True
    [node] = result["newNodes"]
    assert node["instanceType"] == "m5.large", "the conflicting $5 price is not applied"


def test_the_examples_directory_is_unaffected_by_the_demo_overlays(capsys: Any, tmp_path: Path) -> None:
    """The overlays select only the example's own NodePool: the other examples plan exactly as without them."""
    examples = ROOT / "manifests" / "examples"
    copy = tmp_path / "examples"
    shutil.copytree(examples, copy)
    (copy / "nodeoverlay.yaml").unlink()
    args = ("--scale", "inflate=6", "--scale", "gpu-inflate=2", "--scale", "inflate-arm64=3")
    with_demo = run_json(capsys, "-f", str(examples), *args)
    without = run_json(capsys, "-f", str(copy), *args)
    assert with_demo["newNodes"] and "overlay-demo" not in {n["nodePool"] for n in with_demo["newNodes"]}

    def plan(result: dict[str, Any]) -> list[tuple[str, str, float]]:
        return sorted((n["nodePool"], n["instanceType"], n["pricePerHour"]) for n in result["newNodes"])

    assert plan(with_demo) == plan(without)
