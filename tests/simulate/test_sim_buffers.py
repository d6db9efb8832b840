"""``karpy simulate`` with CapacityBuffers: the headroom is planned as buffer pods (extra nodes), marked as buffer in
the plan, sized from replicas, a workload's percentage (after ``--scale``) and limits; unresolvable buffers are
reported; the documented example shows the effect."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.simulate.sim_helpers import CATALOGUE, deployment, nodeclass, nodepool, pod_spec, run, run_json, write

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "capacitybuffer.yaml"


def buffer(name: str = "headroom", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling.x-k8s.io/v1beta1",
        "kind": "CapacityBuffer",
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def pod_template(name: str = "slot", cpu: str = "1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": "default"},
        "template": {"metadata": {"labels": {"app": "slot"}}, "spec": pod_spec(cpu=cpu, memory="1Gi")},
    }


def buffer_pods(result: dict[str, Any]) -> list[str]:
    return [p for n in result["newNodes"] for p in n.get("bufferPods", [])]


def test_the_documented_example_adds_headroom_nodes(tmp_path: Path, capsys: Any) -> None:
    """The example's buffer keeps room for 20 % more ``inflate`` pods: with the buffer the plan has extra room that
    holds only buffer pods; without it, none."""
    base = [nodeclass(), nodepool(), deployment("inflate", 0, cpu="1", memory="1536Mi")]
    without = run_json(capsys, "-f", write(tmp_path, *base), "--scale", "inflate=10", "--catalogue", CATALOGUE)
    with_buffer = run_json(
        capsys, "-f", write(tmp_path, *base), "-f", str(EXAMPLE), "--scale", "inflate=10", "--catalogue", CATALOGUE
    )
    assert without["summary"]["pendingPods"] == with_buffer["summary"]["pendingPods"] == 10
    assert "bufferPods" not in without["summary"] and buffer_pods(without) == []
    assert sorted(buffer_pods(with_buffer)) == [
        "default/capacity-buffer-inflate-headroom-1",
        "default/capacity-buffer-inflate-headroom-2",
    ], "ceil(20 % of 10 replicas)"
    assert with_buffer["summary"]["bufferPods"] == with_buffer["summary"]["bufferPodsOnNewNodes"] == 2
    cpu = {n["name"]: n["requests"]["cpu"] for n in with_buffer["newNodes"]}
    assert sum(int(c.rstrip("m")) / (1000 if c.endswith("m") else 1) for c in cpu.values()) == 12.0
    assert with_buffer["summary"]["pricePerHour"] > without["summary"]["pricePerHour"]
    assert all(not p.startswith("default/capacity-buffer") for n in with_buffer["newNodes"] for p in n["pods"])
    assert with_buffer["capacityBuffers"] == [{"buffer": "default/inflate-headroom", "replicas": 2}]
    code, out, _ = run(
        capsys, "-f", write(tmp_path, *base), "-f", str(EXAMPLE), "--scale", "inflate=10", "--catalogue", CATALOGUE
    )
    assert code == 0 and "CapacityBuffer headroom: 2 buffer pods: 2 on new nodes" in out
    assert "+ 2 buffer (capacity-buffer-inflate-headroom-1" in out or "+ 1 buffer" in out
    assert "FEATURE_GATES=CapacityBuffer=true" in out


def test_the_example_alone_at_zero_replicas_plans_nothing(capsys: Any) -> None:
    code, out, err = run(capsys, "-f", str(EXAMPLE), "--catalogue", CATALOGUE)
    assert code == 0, err
    assert "default/inflate-headroom: 0 buffer pods (ScalableRefNotFound" in out


def test_a_pod_template_buffer_fills_existing_room_first(tmp_path: Path, capsys: Any) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "spare", "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}},
    }
    path = write(
        tmp_path,
        nodeclass(),
        nodepool(),
        node,
        pod_template(cpu="1"),
        buffer(podTemplateRef={"name": "slot"}, replicas=3),
    )
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert result["existingNodes"] == [
        {
            "name": "spare",
            "pods": [],
            "bufferPods": ["default/capacity-buffer-headroom-1", "default/capacity-buffer-headroom-2"],
        }
    ]
    assert buffer_pods(result) == ["default/capacity-buffer-headroom-3"]
    assert result["summary"]["bufferPodsOnExistingNodes"] == 2


def test_limits_cap_the_buffer_and_bad_buffers_are_reported(tmp_path: Path, capsys: Any) -> None:
    path = write(
        tmp_path,
        nodeclass(),
        nodepool(),
        pod_template(cpu="1"),
        buffer("capped", podTemplateRef={"name": "slot"}, replicas=10, limits={"cpu": "2"}),
        buffer("lost", podTemplateRef={"name": "nope"}, replicas=1),
        buffer("job", scalableRef={"kind": "Job", "name": "x"}),
    )
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    by_key = {b["buffer"]: b for b in result["capacityBuffers"]}
    assert by_key["default/capped"] == {"buffer": "default/capped", "replicas": 2}
    assert by_key["default/lost"]["reason"] == "PodTemplateNotFound"
    assert by_key["default/job"] == {
        "buffer": "default/job",
        "replicas": 0,
        "reason": "ResolutionFailed",
        "message": 'unsupported kind "Job"',
    }
    assert result["summary"]["bufferPods"] == 2


def test_a_buffer_breaking_the_crd_rules_is_invalid_input(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, nodeclass(), nodepool(), buffer(podTemplateRef={"name": "slot"}))
    code, _, err = run(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert code == 2 and "If podTemplateRef is set, replicas or limits must also be set" in err


def test_a_buffer_with_fields_of_the_wrong_type_is_invalid_input(tmp_path: Path, capsys: Any) -> None:
    # The CRD's schema (replicas/percentage: int32 >= 0, limits: quantities) refuses these at admission; a manifest
    # never met it, so simulate says so in one line (exit 2) instead of a traceback.
    for spec, fragment in (
        ({"podTemplateRef": {"name": "slot"}, "replicas": "many"}, "replicas"),
        ({"podTemplateRef": {"name": "slot"}, "replicas": -1}, "replicas"),
        ({"scalableRef": {"kind": "Deployment", "name": "web"}, "percentage": "20%"}, "percentage"),
        ({"podTemplateRef": {"name": "slot"}, "limits": {"cpu": "lots"}}, "limits"),
    ):
        path = write(tmp_path, nodeclass(), nodepool(), pod_template(), buffer(**spec))
        code, _, err = run(capsys, "-f", path, "--catalogue", CATALOGUE)
        assert code == 2 and fragment in err and "CapacityBuffer headroom" in err, (spec, err)
