"""Cluster discovery through EKS DescribeCluster (moto's EKS), as Karpenter's AWS operator does it
(``ResolveClusterEndpoint``, ``GetCABundle``, the version provider with ``EKS_CONTROL_PLANE``); and ``karpy run``
without ``CLUSTER_ENDPOINT``: it starts with the discovered endpoint, or stops with one line naming the variable.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.cluster.aws import MotoAWS
from e2e.helpers import aws_client
from karpy.aws.eks import ClusterDiscoveryError, describe_cluster, discover
from karpy.aws.session import AWSClients
from karpy.settings import Settings, StartupError

ROOT = Path(__file__).resolve().parents[2]
ROLE = "arn:aws:iam::123456789012:role/eks-cluster"


def eks_cluster(moto_aws: MotoAWS, name: str, version: str = "1.34") -> dict[str, Any]:
    """An EKS cluster in moto (its endpoint and CA data are moto's random ones); DescribeCluster's ``cluster``."""
    eks = aws_client("eks", moto_aws.endpoint_url)
    eks.create_cluster(name=name, roleArn=ROLE, resourcesVpcConfig={}, version=version)
    return dict(eks.describe_cluster(name=name)["cluster"])


class Refusing:
    """An EKS client that must not be called."""

    async def describe_cluster(self, **_: Any) -> Any:
        raise AssertionError("DescribeCluster called although nothing was missing")


async def test_unset_endpoint_and_ca_come_from_describe_cluster(moto_aws: MotoAWS) -> None:
    """No CLUSTER_ENDPOINT, no CA from the kube client: both from DescribeCluster(CLUSTER_NAME)."""
    cluster = eks_cluster(moto_aws, "discover-both")
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        found = await discover(Settings(cluster_name="discover-both"), clients.eks, ca_bundle="")
    assert found.endpoint == cluster["endpoint"].rstrip("/")
    assert found.ca_bundle == cluster["certificateAuthority"]["data"] != ""
    assert found.k8s_version is None  # EKS_CONTROL_PLANE=false: the apiserver's version


async def test_kube_client_ca_wins_over_describe_cluster(moto_aws: MotoAWS) -> None:
    """Karpenter's GetCABundle (CLUSTER_CA_BUNDLE, else the REST config's CA) comes first; only the endpoint is
    discovered."""
    cluster = eks_cluster(moto_aws, "discover-endpoint")
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        found = await discover(Settings(cluster_name="discover-endpoint"), clients.eks, ca_bundle="S1VCRQ==")
    assert (found.endpoint, found.ca_bundle) == (cluster["endpoint"].rstrip("/"), "S1VCRQ==")


async def test_nothing_missing_means_no_describe_cluster() -> None:
    """CLUSTER_ENDPOINT set and a CA known: DescribeCluster is not called (Karpenter returns the option as is)."""
    settings = Settings(cluster_name="c", cluster_endpoint="https://api.example:443")
    found = await discover(settings, Refusing(), ca_bundle="Q0E=")
    assert (found.endpoint, found.ca_bundle) == ("https://api.example:443", "Q0E=")


async def test_eks_control_plane_takes_the_version_from_describe_cluster(moto_aws: MotoAWS) -> None:
    """EKS_CONTROL_PLANE=true: the Kubernetes version is DescribeCluster's (AWS pkg/providers/version)."""
    eks_cluster(moto_aws, "discover-version", version="1.33")
    settings = Settings(cluster_name="discover-version", cluster_endpoint="https://x:443", eks_control_plane=True)
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        found = await discover(settings, clients.eks, ca_bundle="Q0E=")
    assert found.k8s_version == "1.33"


async def test_unknown_cluster_without_endpoint_is_one_startup_line(moto_aws: MotoAWS) -> None:
    """Neither CLUSTER_ENDPOINT nor an EKS cluster: one line naming CLUSTER_ENDPOINT and the EKS error."""
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        with pytest.raises(ClusterDiscoveryError, match="ResourceNotFoundException"):
            await describe_cluster(clients.eks, "no-such-cluster")
        with pytest.raises(StartupError) as caught:
            await discover(Settings(cluster_name="no-such-cluster"), clients.eks, ca_bundle="Q0E=")
    message = str(caught.value)
    assert message.startswith("CLUSTER_ENDPOINT: unset, and EKS DescribeCluster(no-such-cluster) failed: ")
    assert "ResourceNotFoundException" in message and "\n" not in message


async def test_no_ca_anywhere_is_one_startup_line(moto_aws: MotoAWS) -> None:
    """An endpoint given but no CA (CLUSTER_CA_BUNDLE unset, the kubeconfig has none) and no EKS cluster."""
    settings = Settings(cluster_name="no-such-cluster", cluster_endpoint="https://x:443")
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        with pytest.raises(StartupError, match=r"^CLUSTER_CA_BUNDLE: unset, the kubeconfig has no CA data, and EKS"):
            await discover(settings, clients.eks, ca_bundle="")


# karpy run, end to end against moto (the apiserver is a stand-in answering /version only) --------------------


def karpy(moto_aws: MotoAWS, kubeconfig: Path, cluster: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "CLUSTER_NAME": cluster,
        "AWS_ENDPOINT_URL": moto_aws.endpoint_url,
        "METRICS_PORT": "0",
        "HEALTH_PROBE_PORT": "0",
        "LEADER_ELECTION_NAMESPACE": "default",  # outside a pod it must be given (leader election is on)
    }
    for name in ("CLUSTER_ENDPOINT", "CLUSTER_CA_BUNDLE"):
        env.pop(name, None)
    return subprocess.Popen(
        [sys.executable, "-m", "karpy", "run"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_run_without_endpoint_or_eks_cluster_is_one_line_and_exit_2(moto_aws: MotoAWS, kubeconfig: Path) -> None:
    proc = karpy(moto_aws, kubeconfig, "not-in-eks")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    lines = (out + err).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("karpy: cannot start: CLUSTER_ENDPOINT: unset, and EKS DescribeCluster(not-in-eks)")


def test_run_without_endpoint_starts_with_the_discovered_one(moto_aws: MotoAWS, kubeconfig: Path) -> None:
    cluster = eks_cluster(moto_aws, "in-eks")
    proc = karpy(moto_aws, kubeconfig, "in-eks")
    try:
        deadline = time.monotonic() + 30
        started: dict[str, Any] = {}
        while time.monotonic() < deadline and proc.poll() is None and not started:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if '"starting karpy"' in line:
                started = json.loads(line)
        assert started, proc.poll()
        assert started["endpoint"] == cluster["endpoint"].rstrip("/")
        assert started["endpoint_discovered"] is True
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)


async def test_seeded_eks_cluster_answers_the_given_endpoint_and_ca(moto_aws: MotoAWS) -> None:
    """``seed_eks_cluster`` (what the local cluster runs) makes DescribeCluster answer the apiserver's endpoint
    and CA, so discovery finds exactly them; seeding again changes nothing."""
    from e2e.cluster.aws import seed_eks_cluster

    first = seed_eks_cluster(moto_aws.endpoint_url, "seeded-eks", "https://127.0.0.1:6443", "Q0EgYnVuZGxl")
    again = seed_eks_cluster(moto_aws.endpoint_url, "seeded-eks", "https://127.0.0.1:6443", "Q0EgYnVuZGxl")
    assert (first["endpoint"], first["certificateAuthority"]["data"]) == ("https://127.0.0.1:6443", "Q0EgYnVuZGxl")
    assert again["arn"] == first["arn"]
    async with AWSClients.create("us-east-1", moto_aws.endpoint_url) as clients:
        found = await discover(Settings(cluster_name="seeded-eks", eks_control_plane=True), clients.eks, "")
    assert (found.endpoint, found.ca_bundle, found.k8s_version) == ("https://127.0.0.1:6443", "Q0EgYnVuZGxl", "1.34")
