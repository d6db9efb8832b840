"""``karpy explain POD`` against the real apiserver: a pending pod that NodePool A can host and NodePool B cannot
(B's taint is not tolerated); the output names both NodePools, B's reason, and the plan's NodeClaim from A.

The command runs as a user runs it (``python -m karpy explain``, the kubeconfig from ``$KUBECONFIG``). No karpy
controller runs here, so the NodePools' Ready condition is written as karpy's NodePool status controller writes it
(the provisioner, and so ``explain``, only launches from Ready NodePools); the EC2NodeClass has no status, which the
simulation treats as resolved.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from e2e.helpers import ROOT, apply, ec2nodeclass, nodepool
from karpy.kube import resources as r
from karpy.kube.client import MERGE_PATCH, KubeClient
from karpy.kube.errors import ApiError

pytestmark = [pytest.mark.integration]

LABEL = "explain.karpy.sh/test"
TAINT = {"key": "explain.karpy.sh/dedicated", "value": "gpu", "effect": "NoSchedule"}
POD = "explain-web"


def pending_pod() -> dict[str, Any]:
    """A pod only a NodePool's new node can host: its nodeSelector names a label no existing node has."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": "default"},
        "spec": {
            "nodeSelector": {LABEL: "yes"},
            "containers": [
                {"name": "c", "image": "registry.k8s.io/pause:3.9", "resources": {"requests": {"cpu": "1"}}}
            ],
        },
    }


async def mark_ready(kube: KubeClient, name: str) -> None:
    """The NodePool's Ready condition, as karpy's NodePool status controller sets it."""
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ]
        }
    }
    await kube.request("PATCH", r.NODEPOOLS.path(None, name, "status"), body=status, content_type=MERGE_PATCH)


@pytest.fixture
async def objects(kube: KubeClient, local_cluster: Any) -> AsyncIterator[None]:
    await apply(
        kube,
        [
            ec2nodeclass("explain", local_cluster.cluster_name),
            nodepool("explain-a", nodeclass="explain", labels={LABEL: "yes"}),
            nodepool("explain-b", nodeclass="explain", labels={LABEL: "yes"}, taints=[TAINT]),
        ],
    )
    for name in ("explain-a", "explain-b"):
        await mark_ready(kube, name)
    await kube.create(r.PODS, pending_pod(), "default")
    try:
        yield
    finally:
        for res, name, ns in (
            (r.PODS, POD, "default"),
            (r.NODEPOOLS, "explain-a", None),
            (r.NODEPOOLS, "explain-b", None),
            (r.EC2NODECLASSES, "explain", None),
        ):
            try:
                await kube.request("DELETE", res.path(ns, name), query={"gracePeriodSeconds": 0})
            except ApiError as err:
                if err.status != 404:
                    raise


async def karpy_explain(local_cluster: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "HOME")}
    env["KUBECONFIG"] = str(local_cluster.kubeconfig)
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "karpy", "explain", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_explain_names_the_pool_that_fits_and_why_the_other_does_not(objects: None, local_cluster: Any) -> None:
    result = await karpy_explain(local_cluster, POD, "-n", "default", "--region", "us-east-1")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith(f"Pod default/{POD}: pending; requests cpu=1"), out
    assert "  explain-a: can host the pod: " in out, out
    assert (
        '  explain-b: cannot host the pod: incompatible with nodepool "explain-b": '
        "did not tolerate taint explain.karpy.sh/dedicated=gpu:NoSchedule"
    ) in out, out
    assert "NodeClaim explain-a-1 (NodePool explain-a): " in out, out
    assert "on-demand" in out and "$" in out

    as_json = await karpy_explain(local_cluster, POD, "-n", "default", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    verdicts = {p["nodePool"]: p for p in doc["nodePools"]}
    assert verdicts["explain-a"]["fits"] is True and verdicts["explain-a"]["nodeClaim"]["instanceTypes"]
    assert verdicts["explain-b"]["fits"] is False and "did not tolerate taint" in verdicts["explain-b"]["reason"]
    assert doc["plan"]["nodeClaim"]["nodePool"] == "explain-a"
    assert doc["plan"]["nodeClaim"]["pricePerHour"] > 0


async def test_explain_a_missing_pod_is_one_line_and_exit_1(objects: None, local_cluster: Any) -> None:
    result = await karpy_explain(local_cluster, "no-such-pod", "-n", "default")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == ["karpy explain: pod default/no-such-pod not found"]
    assert result.stdout == ""
