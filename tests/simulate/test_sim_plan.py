"""``karpy simulate`` end to end through the CLI: a hand-made catalogue with known answers, JSON shape."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sim_helpers import (
    CATALOGUE,
    deployment,
    nodeclass,
    nodepool,
    pod_spec,
    run,
    run_json,
    write,
)


def _nodes(result: dict[str, Any]) -> list[tuple[str, str, str, str, float, int]]:
    return [
        (n["nodePool"], n["instanceType"], n["zone"], n["capacityType"], n["pricePerHour"], len(n["pods"]))
        for n in result["newNodes"]
    ]


def test_ten_one_cpu_pods_take_a_large_and_a_medium_node(tmp_path: Path, capsys: Any) -> None:
    # overhead 100m: large (8 cpu) takes 7 pods, the remaining 3 fit a medium (4 cpu); medium is cheaper in zone-b.
    path = write(tmp_path, nodeclass(), nodepool(), deployment("web", 10, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result) == [
        ("default", "m.large", "zone-a", "on-demand", 0.20, 7),
        ("default", "m.medium", "zone-b", "on-demand", 0.09, 3),
    ]
    assert result["summary"] == {
        "pendingPods": 10,
        "newNodes": 2,
        "podsOnNewNodes": 10,
        "podsOnExistingNodes": 0,
        "unschedulablePods": 0,
        "pricePerHour": 0.29,
    }
    assert result["nodePools"] == {"default": {"nodes": 2, "pods": 10, "pricePerHour": 0.29}}


def test_launch_prefers_spot_when_the_nodepool_allows_it(tmp_path: Path, capsys: Any) -> None:
    pool = nodepool(
        requirements=[{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]}]
    )
    path = write(tmp_path, nodeclass(), pool, deployment("web", 7, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result) == [("default", "m.large", "zone-a", "spot", 0.06, 7)]


def test_a_single_small_pod_gets_the_cheapest_type(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, nodeclass(), nodepool(), deployment("one", None, cpu="500m"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result) == [("default", "t.small", "zone-a", "on-demand", 0.05, 1)]
    assert result["newNodes"][0]["instanceTypeCandidates"] == 4


def test_gpu_pod_with_limits_only_lands_on_the_gpu_type(tmp_path: Path, capsys: Any) -> None:
    gpu = deployment("train", 1)
    gpu["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1, "cpu": "2"}}
    path = write(tmp_path, nodeclass(), nodepool(), gpu)
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result) == [("default", "g.gpu", "zone-a", "on-demand", 1.0, 1)]
    assert result["newNodes"][0]["requests"]["nvidia.com/gpu"] == "1"


def test_nodepool_weight_and_limits(tmp_path: Path, capsys: Any) -> None:
    # The heavier NodePool is tried first; its limit (8 cpu) allows one large node, the rest goes elsewhere.
    heavy = nodepool("heavy", weight=10, limits={"cpu": "8"})
    path = write(tmp_path, nodeclass(), heavy, nodepool("light"), deployment("web", 10, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert [(n[0], n[1], n[5]) for n in _nodes(result)] == [("heavy", "m.large", 7), ("light", "m.medium", 3)]


def test_unschedulable_reasons(tmp_path: Path, capsys: Any) -> None:
    huge = deployment("huge", 1, cpu="64")
    arm = deployment("arm", 1, nodeSelector={"kubernetes.io/arch": "arm64"})
    tainted = nodepool("tainted", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    path = write(tmp_path, nodeclass(), tainted, huge, arm)
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    reasons = {u["pod"].split("/")[1].split("-")[0]: u["reason"] for u in result["unschedulable"]}
    assert set(reasons) == {"huge", "arm"}
    assert 'nodepool "tainted"' in reasons["huge"] and "dedicated=x:NoSchedule" in reasons["huge"]
    assert result["newNodes"] == []


def test_unschedulable_reasons_name_the_failed_constraint(tmp_path: Path, capsys: Any) -> None:
    path = write(
        tmp_path,
        nodeclass(),
        nodepool(),
        deployment("huge", 1, cpu="64"),
        deployment("arm", 1, nodeSelector={"kubernetes.io/arch": "arm64"}),
    )
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    reasons = {u["pod"].split("/")[1].split("-")[0]: u["reason"] for u in result["unschedulable"]}
    assert "no instance type has enough allocatable for cpu=64" in reasons["huge"]
    assert "kubernetes.io/arch" in reasons["arm"] and "arm64" in reasons["arm"]


def test_missing_nodeclass_makes_the_nodepool_unusable_not_a_crash(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, nodepool(nodeclass="absent"), deployment("web", 2))
    code, out, _ = run(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert code == 0
    assert 'default: EC2NodeClass "absent" not found' in out
    assert 'nodepool "default" not usable: EC2NodeClass "absent" not found' in out
    assert "2 unschedulable" in out


def test_not_ready_nodeclass_is_not_usable(tmp_path: Path, capsys: Any) -> None:
    nc = nodeclass()
    nc["status"] = {"conditions": [{"type": "Ready", "status": "False"}]}
    path = write(tmp_path, nc, nodepool(), deployment("web", 1))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert result["unusableNodePools"] == [{"nodePool": "default", "reason": 'EC2NodeClass "default" is not Ready'}]


def test_resolved_nodeclass_subnets_limit_the_launch_zones(tmp_path: Path, capsys: Any) -> None:
    nc = nodeclass()
    nc["status"] = {"subnets": [{"id": "subnet-1", "zone": "zone-a", "zoneID": "az-1"}]}
    path = write(tmp_path, nc, nodepool(), deployment("web", 3, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result) == [("default", "m.medium", "zone-a", "on-demand", 0.10, 3)]


def test_existing_node_takes_pods_first_and_daemonsets_count(tmp_path: Path, capsys: Any) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1", "labels": {"kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux"}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"}},
    }
    bound = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "running", "namespace": "default"},
        "spec": {**pod_spec(cpu="1"), "nodeName": "node-1"},
    }
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {}, "template": {"metadata": {"labels": {"a": "b"}}, "spec": pod_spec(cpu="1")}},
    }
    # 4 cpu - 1 (running) - 1 (daemonset pod) = 2 left: two 1-cpu pods fit, the third needs a new node.
    path = write(tmp_path, nodeclass(), nodepool(), node, bound, ds, deployment("web", 3, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert [(e["name"], len(e["pods"])) for e in result["existingNodes"]] == [("node-1", 2)]
    # the new node carries the DaemonSet's 1 cpu too: 2 cpu needed, a 2-cpu small type has only 1.9 allocatable.
    assert _nodes(result) == [("default", "m.medium", "zone-b", "on-demand", 0.09, 1)]
    assert any("DaemonSet kube-system/agent" in n for n in result["notes"])


def test_json_output_shape(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, nodeclass(), nodepool(), deployment("web", 2))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert set(result) == {
        "catalogue",
        "spot",
        "preferencePolicy",
        "solveSeconds",
        "summary",
        "nodePools",
        "newNodes",
        "existingNodes",
        "unschedulable",
        "unusableNodePools",
        "notes",
    }
    assert isinstance(result["solveSeconds"], float) and 0 <= result["solveSeconds"] < 5
    node = result["newNodes"][0]
    assert set(node) == {
        "name",
        "nodePool",
        "instanceType",
        "zone",
        "capacityType",
        "pricePerHour",
        "instanceTypeCandidates",
        "requests",
        "pods",
    }
    assert node["name"] == "default-1" and node["requests"]["cpu"] == "2"


@pytest.mark.parametrize("policy", ["Respect", "Ignore"])
def test_preference_policy_is_reported(tmp_path: Path, capsys: Any, policy: str) -> None:
    path = write(tmp_path, nodeclass(), nodepool(), deployment("web", 1))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE, "--preference-policy", policy)
    assert result["preferencePolicy"] == policy
    assert len(result["newNodes"]) == 1


def test_text_output_lists_nodes_by_nodepool(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, nodeclass(), nodepool(), deployment("web", 10, memory="512Mi"))
    code, out, err = run(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert code == 0, err
    assert out.startswith("10 pending pods: 10 on 2 new nodes ($0.2900/hour), 0 on existing nodes, 0 unschedulable")
    assert "NodePool default: 2 nodes, $0.2900/hour" in out
    assert "default-1  m.large        zone-a  on-demand  0.2000" in out


@pytest.mark.parametrize(("policy", "expected"), [("Respect", "m.medium"), ("Ignore", "t.small")])
def test_preferred_node_affinity_follows_the_preference_policy(
    tmp_path: Path, capsys: Any, policy: str, expected: str
) -> None:
    prefer_m = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 50,
                    "preference": {
                        "matchExpressions": [
                            {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m"]}
                        ]
                    },
                }
            ]
        }
    }
    path = write(tmp_path, nodeclass(), nodepool(), deployment("web", 1, cpu="500m", affinity=prefer_m))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE, "--preference-policy", policy)
    assert [n["instanceType"] for n in result["newNodes"]] == [expected]


def test_zone_topology_spread_puts_replicas_in_both_zones(tmp_path: Path, capsys: Any) -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    web = deployment("web", 2, cpu="500m", topologySpreadConstraints=spread)
    path = write(tmp_path, nodeclass(), nodepool(), web)
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert sorted(n["zone"] for n in result["newNodes"]) == ["zone-a", "zone-b"]


def test_pods_of_a_deleting_node_are_rescheduled(tmp_path: Path, capsys: Any) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "old", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "20"}},
    }
    bound = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "moving", "namespace": "default"},
        "spec": {**pod_spec(cpu="500m"), "nodeName": "old"},
    }
    path = write(tmp_path, nodeclass(), nodepool(), node, bound)
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert result["existingNodes"] == []
    assert [n["pods"] for n in result["newNodes"]] == [["default/moving"]]


def test_namespace_manifests_give_namespace_labels() -> None:
    from karpy.simulate.manifests import Manifests
    from karpy.simulate.plan import namespace_labels

    m = Manifests(namespaces=[{"metadata": {"name": "team-a", "labels": {"tier": "gold"}}}])
    assert namespace_labels(m) == {"team-a": {"tier": "gold", "kubernetes.io/metadata.name": "team-a"}}


def test_notes_name_ignored_kinds_and_idle_workloads(tmp_path: Path, capsys: Any) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    path = write(tmp_path, nodeclass(), nodepool(), svc, deployment("idle", 0))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert result["notes"] == [
        "ignored 1 Service object",
        "no pods from Deployment default/idle (0 replicas or suspended; --scale NAME=N runs N)",
    ]


def _wffc_class(name: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": "ebs.csi.aws.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": [zone]}]}],
    }


def _statefulset(storage_class: str | None) -> dict[str, Any]:
    sts = deployment("db", 3, memory="512Mi")
    sts["kind"] = "StatefulSet"
    claim_spec: dict[str, Any] = {"resources": {"requests": {"storage": "1Gi"}}}
    if storage_class:
        claim_spec["storageClassName"] = storage_class
    sts["spec"]["volumeClaimTemplates"] = [{"metadata": {"name": "data"}, "spec": claim_spec}]
    return sts


def test_statefulset_claims_follow_the_storage_class_allowed_topologies(tmp_path: Path, capsys: Any) -> None:
    # Unconstrained, the medium node is cheapest in zone-b; the WaitForFirstConsumer class allows only zone-a.
    path = write(tmp_path, nodeclass(), nodepool(), _statefulset("zonal"), _wffc_class("zonal", "zone-a"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert sorted(p for n in result["newNodes"] for p in n["pods"]) == ["default/db-0", "default/db-1", "default/db-2"]
    assert {n["zone"] for n in result["newNodes"]} == {"zone-a"}
    free = run_json(
        capsys,
        "-f",
        write(tmp_path, nodeclass(), nodepool(), _statefulset(None), name="free.yaml"),
        "--catalogue",
        CATALOGUE,
    )
    assert {n["zone"] for n in free["newNodes"]} == {"zone-b"}, "no class: the volumes do not constrain the zone"


def test_a_bound_zonal_volume_pins_the_pod_and_a_missing_class_makes_it_wait(tmp_path: Path, capsys: Any) -> None:
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv-a"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-1"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-a"]}
                            ]
                        }
                    ]
                }
            },
        },
    }
    bound = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-a", "namespace": "default"},
        "spec": {"volumeName": "pv-a", "resources": {"requests": {"storage": "1Gi"}}},
    }
    waiting = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data-x", "namespace": "default"},
        "spec": {"storageClassName": "missing", "resources": {"requests": {"storage": "1Gi"}}},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {**pod_spec(), "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]},
        }
        for name, claim in (("pinned", "data-a"), ("stuck", "data-x"))
    ]
    path = write(tmp_path, nodeclass(), nodepool(), pv, bound, waiting, *pods)
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert [(n["zone"], n["pods"]) for n in result["newNodes"]] == [("zone-a", ["default/pinned"])]
    assert result["unschedulable"] == [
        {
            "pod": "default/stuck",
            "reason": 'waiting for volumes: storageclass "missing" of persistentvolumeclaim "default/data-x" not found',
        }
    ]
    assert result["summary"]["pendingPods"] == 2


def test_a_bound_daemonset_pod_is_not_counted_twice(tmp_path: Path, capsys: Any) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1"},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "20"}},
    }
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {}, "template": {"spec": pod_spec(cpu="1")}},
    }
    ds_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "agent-x",
            "namespace": "kube-system",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "controller": True}],
        },
        "spec": {**pod_spec(cpu="1"), "nodeName": "node-1"},
    }
    path = write(tmp_path, nodeclass(), nodepool(), node, ds, ds_pod, deployment("web", 1))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    # 2 cpu - 1 (the bound agent pod) leaves room for the 1-cpu web pod; a second agent pod would leave none.
    [existing] = result["existingNodes"]
    assert existing["name"] == "node-1" and [p.split("-")[0] for p in existing["pods"]] == ["default/web"]
    assert result["newNodes"] == [] and result["notes"] == []


def test_text_output_groups_pods_with_the_same_reason(tmp_path: Path, capsys: Any) -> None:
    path = write(tmp_path, nodeclass(), nodepool(), deployment("huge", 5, cpu="64"))
    code, out, _ = run(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert code == 0
    [line] = [x for x in out.splitlines() if x.startswith("  5 pods (huge-")]
    assert line.endswith("no instance type has enough allocatable for cpu=64, memory=1Gi")
    assert ", … (+2)): " in line


def test_pods_being_deleted_are_not_planned(tmp_path: Path, capsys: Any) -> None:
    """A pending pod with a deletionTimestamp is going away (kube-scheduler skips it; its controller makes the
    replacement): no capacity is planned for it, whether unbound or bound to a deleting Node."""
    gone = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "leaving", "namespace": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": pod_spec(cpu="1"),
    }
    draining = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "old", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "20"}},
    }
    evicted = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "evicted", "namespace": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {**pod_spec(cpu="1"), "nodeName": "old"},
    }
    path = write(tmp_path, nodeclass(), nodepool(), draining, gone, evicted, deployment("web", 1, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert result["summary"]["pendingPods"] == 1
    [node] = result["newNodes"]
    assert [p.split("-")[0] for p in node["pods"]] == ["default/web"]
    assert result["unschedulable"] == []
    assert sorted(n for n in result["notes"] if "being deleted" in n) == [
        "pod default/evicted is being deleted: not planned",
        "pod default/leaving is being deleted: not planned",
    ]


def test_daemonset_overhead_comes_from_its_live_pod(tmp_path: Path, capsys: Any) -> None:
    """A LimitRange gave the DaemonSet's pods 2 CPU where the template asks for 100m: the new node for a 1-CPU
    pod must hold 3 CPU (m.medium, 3.9 allocatable), not 1.1 (t.small, 1.9)."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-1"},
        "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "20"}},
    }
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "kube-system"},
        "spec": {"selector": {}, "template": {"spec": pod_spec(cpu="100m", memory="128Mi")}},
    }
    ds_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "agent-x",
            "namespace": "kube-system",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "controller": True}],
        },
        "spec": {**pod_spec(cpu="2", memory="128Mi"), "nodeName": "node-1"},
    }
    path = write(tmp_path, nodeclass(), nodepool(), node, ds, ds_pod, deployment("web", 1, memory="512Mi"))
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result) == [("default", "m.medium", "zone-b", "on-demand", 0.09, 1)]
    assert result["newNodes"][0]["requests"]["cpu"] == "3"
    # The template alone (no live pod) would have fitted the small type.
    path = write(tmp_path, nodeclass(), nodepool(), ds, deployment("web", 1, memory="512Mi"), name="template.yaml")
    result = run_json(capsys, "-f", path, "--catalogue", CATALOGUE)
    assert _nodes(result)[0][1] == "t.small"
