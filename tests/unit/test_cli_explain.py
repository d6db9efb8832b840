"""``karpy explain``'s reasoning and formatting on cluster-shaped objects (no cluster: the objects are what
:func:`karpy.cli.explain.read_cluster` hands over). The reasons are the engine's (``karpy simulate``'s)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from karpy.cli.explain import (
    ExplainError,
    PoolVerdict,
    describe_node,
    explain,
    nodepool_not_ready,
    render_text,
    to_json,
)
from karpy.simulate.catalogue import BuiltinCatalogue
from karpy.simulate.manifests import Manifests, collect
from karpy.simulate.plan import PlannedNode
from karpy.simulate.reading import Document

ROOT = Path(__file__).resolve().parents[2]
READY = {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": ""}]}


def nodepool(
    name: str, *, taints: list[dict[str, str]] | None = None, status: Any = READY, **spec: Any
) -> dict[str, Any]:
    template_spec: dict[str, Any] = {
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
        "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
    }
    if taints:
        template_spec["taints"] = taints
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": template_spec}, **spec},
        "status": status,
    }


NODECLASS = {
    "apiVersion": "karpenter.k8s.aws/v1",
    "kind": "EC2NodeClass",
    "metadata": {"name": "default"},
    "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}]},
    "status": {"subnets": [{"id": "subnet-1", "zone": "us-east-1a", "zoneID": "use1-az1"}]},
}


def pod(name: str, *, node: str = "", cpu: str = "500m") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}}}],
            "priority": 0,
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def cluster(*objs: dict[str, Any]) -> Manifests:
    return collect([Document(f"cluster {o['kind']}", o) for o in objs])


@pytest.fixture(scope="module")
def catalogue() -> BuiltinCatalogue:
    return BuiltinCatalogue("us-east-1")


TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


def test_one_pool_fits_the_other_is_tainted(catalogue: BuiltinCatalogue) -> None:
    ex = explain(
        cluster(nodepool("a"), nodepool("b", taints=[TAINT]), NODECLASS, pod("web"), pod("other")),
        catalogue,
        "default/web",
    )
    a, b = ex.verdicts
    assert (a.nodepool, a.fits, b.nodepool, b.fits) == ("a", True, "b", False)
    assert a.node is not None and a.node.capacity_type == "on-demand" and a.node.zone == "us-east-1a"
    assert a.node.price is not None and a.node.instance_types and a.node.instance_type in a.node.instance_types
    assert "did not tolerate taint dedicated=gpu:NoSchedule" in b.reason
    # The plan batches both pending pods, as the provisioner would, onto NodePool a.
    assert ex.node is not None and ex.node.nodepool == "a" and set(ex.node.pods) == {"default/web", "default/other"}
    text = render_text(ex)
    assert "  a: can host the pod: " in text
    assert "  b: cannot host the pod: " in text and "did not tolerate taint dedicated=gpu:NoSchedule" in text
    assert f"NodeClaim {ex.node.name} (NodePool a): {ex.node.instance_type}, on-demand, us-east-1a, $" in text
    doc = to_json(ex)
    assert [(p["nodePool"], p["fits"]) for p in doc["nodePools"]] == [("a", True), ("b", False)]
    assert doc["plan"]["nodeClaim"]["nodePool"] == "a"


def test_nodeclass_not_ready_limits_and_not_ready_nodepools(catalogue: BuiltinCatalogue) -> None:
    not_ready_class = {
        **NODECLASS,
        "metadata": {"name": "broken"},
        "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "SubnetsNotFound"}]},
    }
    broken = nodepool("broken")
    broken["spec"]["template"]["spec"]["nodeClassRef"]["name"] = "broken"
    ex = explain(
        cluster(
            broken,
            nodepool("limited", limits={"cpu": "0"}),
            nodepool("starting", status={}),
            NODECLASS,
            not_ready_class,
            pod("web"),
        ),
        catalogue,
        "default/web",
    )
    reasons = {v.nodepool: v.reason for v in ex.verdicts}
    assert reasons["broken"] == 'EC2NodeClass "broken" is not Ready'
    assert "limit" in reasons["limited"]
    assert reasons["starting"].startswith("NodePool has no Ready condition yet")
    assert not any(v.fits for v in ex.verdicts)
    assert ex.node is None and ex.unschedulable
    assert "unschedulable: " in render_text(ex)


def test_no_compatible_instance_type(catalogue: BuiltinCatalogue) -> None:
    ex = explain(cluster(nodepool("a"), NODECLASS, pod("huge", cpu="100000")), catalogue, "default/huge")
    [a] = ex.verdicts
    assert not a.fits and "no instance type has enough allocatable" in a.reason


def test_a_bound_or_missing_pod_is_not_explained(catalogue: BuiltinCatalogue) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "labels": {}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }
    manifests = cluster(nodepool("a"), NODECLASS, node, pod("bound", node="n1"))
    with pytest.raises(ExplainError, match="bound to node n1"):
        explain(manifests, catalogue, "default/bound")
    with pytest.raises(ExplainError, match="pod default/nope not found"):
        explain(manifests, catalogue, "default/nope")


def test_nodepool_readiness_reason() -> None:
    assert nodepool_not_ready(nodepool("a")) == ""
    down = nodepool("a", status={"conditions": [{"type": "Ready", "status": "False", "message": "NodeClass gone"}]})
    assert nodepool_not_ready(down) == "NodePool is not Ready: NodeClass gone"


def test_describe_node_formats() -> None:
    node = PlannedNode(
        name="a-1",
        nodepool="a",
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="on-demand",
        price=0.096,
        pods=("default/web",),
        candidates=8,
        requests={},
        instance_types=("m5.large", "m5a.large", "c5.xlarge", "m6i.large", "m7i.large", "r5.large", "t3.large", "x"),
    )
    assert describe_node(node) == (
        "NodeClaim a-1 (NodePool a): m5.large, on-demand, us-east-1a, $0.0960/hour; 8 instance types "
        "(m5.large, m5a.large, c5.xlarge, m6i.large, m7i.large, r5.large, … (+2)); 1 pod"
    )
    failed = PlannedNode("a-2", "a", "", "", "", None, (), 0, {}, launch_error="no offering")
    assert describe_node(failed) == "NodeClaim a-2 (NodePool a): not launchable: no offering; 0 instance types; 0 pods"
    assert PoolVerdict("a", False, reason="x").fits is False


def test_a_daemonset_pod_is_not_explained(catalogue: BuiltinCatalogue) -> None:
    ds_pod = pod("agent")
    ds_pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u", "controller": True}
    ]
    with pytest.raises(ExplainError, match="belongs to a DaemonSet"):
        explain(cluster(nodepool("a"), NODECLASS, ds_pod), catalogue, "default/agent")


def run_explain(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL")}
    return subprocess.run(
        [sys.executable, "-m", "karpy", "explain", "web"],
        env={**base, "HOME": "/nonexistent-home", **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_kubeconfig_is_one_line_and_exit_3() -> None:
    result = run_explain({"KUBECONFIG": "/nonexistent/kubeconfig"})
    assert result.returncode == 3
    assert (result.stdout + result.stderr).splitlines() == [
        "karpy explain: cannot read the cluster: KUBECONFIG=/nonexistent/kubeconfig: no such file"
    ]


def test_unreachable_apiserver_is_one_line_and_exit_4(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}"}}}}]\n'
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    result = run_explain({"KUBECONFIG": str(config)})
    assert result.returncode == 4
    [line] = (result.stdout + result.stderr).splitlines()
    assert line.startswith(f"karpy explain: cannot read the cluster: KUBECONFIG={config}: apiserver ")
    assert "did not answer" in line


def test_explain_builds_the_catalogue_as_simulate_does() -> None:
    """``karpy explain`` and ``karpy simulate`` build the built-in catalogue with the same function, so the
    controller's VM_MEMORY_OVERHEAD_PERCENT and RESERVED_ENIS apply to both."""
    import argparse

    from karpy.cli import explain as explain_cli

    parser = argparse.ArgumentParser()
    explain_cli.add_explain(parser.add_subparsers())
    args = parser.parse_args(
        ["explain", "p", "--region", "us-east-1", "--vm-memory-overhead-percent", "0.1", "--reserved-enis", "1"]
    )
    catalogue = explain_cli._catalogue(args)
    assert isinstance(catalogue, BuiltinCatalogue)
    assert (catalogue.region, catalogue.vm_memory_overhead_percent, catalogue.reserved_enis) == ("us-east-1", 0.1, 1)
