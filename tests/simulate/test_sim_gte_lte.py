"""``karpy simulate`` and Karpenter's ``Gte``/``Lte``: NodePool requirements accept them (Karpenter v1.15's NodePool
CRD), a pod's node affinity does not (Kubernetes' NodeSelectorOperator has no Gte/Lte)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sim_helpers import deployment, nodeclass, nodepool, run, run_json, write

CPU = "karpenter.k8s.aws/instance-cpu"


def _catalogue(tmp_path: Path) -> str:
    """Types of 2, 4, 8 and 16 vCPUs, the cheapest per vCPU the largest, so bounds decide the choice."""
    types = [
        {
            "name": f"c.{cpu}x",
            "capacity": {"cpu": str(cpu), "memory": f"{cpu * 2}Gi", "pods": 30},
            "overhead": {"cpu": "100m", "memory": "256Mi"},
            "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux", CPU: str(cpu)},
            "offerings": [{"zone": "zone-a", "capacityType": "on-demand", "price": price}],
        }
        for cpu, price in ((2, 0.10), (4, 0.16), (8, 0.24), (16, 0.32))
    ]
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps({"instanceTypes": types}))
    return str(path)


def _types(result: dict[str, Any]) -> list[str]:
    return [n["instanceType"] for n in result["newNodes"]]


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        # 12 pods of 900m (8 fit 8 vCPUs, 4 fit 4): without bounds one 16-vCPU node; Lte 8 leaves the 8- and
        # 4-vCPU types; Gte 4 with Lte 4 only the 4-vCPU one.
        ([], ["c.16x"]),
        ([{"key": CPU, "operator": "Lte", "values": ["8"]}], ["c.8x", "c.4x"]),
        (
            [{"key": CPU, "operator": "Gte", "values": ["4"]}, {"key": CPU, "operator": "Lte", "values": ["4"]}],
            ["c.4x"] * 3,
        ),
    ],
)
def test_nodepool_gte_lte_bound_the_instance_types(
    tmp_path: Path, capsys: Any, bounds: list[dict[str, Any]], expected: list[str]
) -> None:
    pool = nodepool(
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}, *bounds]
    )
    path = write(tmp_path, nodeclass(), pool, deployment("web", 12, cpu="900m", memory="256Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", _catalogue(tmp_path))
    assert sorted(_types(result)) == sorted(expected)
    assert result["summary"]["unschedulablePods"] == 0


@pytest.mark.parametrize("op", ["Gte", "Lte"])
def test_pod_node_affinity_rejects_gte_lte_as_kubernetes_does(tmp_path: Path, capsys: Any, op: str) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": CPU, "operator": op, "values": ["4"]}]}]
            }
        }
    }
    path = write(tmp_path, nodeclass(), nodepool(), deployment("web", 1, affinity=affinity))
    code, out, err = run(capsys, "-f", path, "--catalogue", _catalogue(tmp_path))
    assert (code, out) == (2, "")
    assert re.search(rf"node affinity: {re.escape(CPU)}: unknown operator '{op}'", err), err


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["-1"], "instance-cpu Gte needs a non-negative integer value, got -1"),
        (["four"], "instance-cpu Gte needs exactly one integer value"),
        (["4", "8"], "instance-cpu Gte needs exactly one integer value"),
    ],
)
def test_nodepool_gte_needs_one_non_negative_integer(
    tmp_path: Path, capsys: Any, values: list[str], message: str
) -> None:
    pool = nodepool(requirements=[{"key": CPU, "operator": "Gte", "values": values}])
    code, _, err = run(capsys, "-f", write(tmp_path, nodeclass(), pool, deployment("web", 1)))
    assert code == 2 and message in err, err


def test_a_static_nodepool_is_not_used_for_pods(tmp_path: Path, capsys: Any) -> None:
    """Karpenter never provisions for pods from a NodePool with ``spec.replicas``; the simulation says why."""
    static = nodepool("static")
    static["spec"]["replicas"] = 2
    path = write(tmp_path, nodeclass(), static, nodepool("dynamic"), deployment("web", 1, cpu="900m"))
    result = run_json(capsys, "-f", path, "--catalogue", _catalogue(tmp_path))
    assert [n["nodePool"] for n in result["newNodes"]] == ["dynamic"]
    (unusable,) = result["unusableNodePools"]
    assert unusable["nodePool"] == "static" and "static NodePool (spec.replicas)" in unusable["reason"]
