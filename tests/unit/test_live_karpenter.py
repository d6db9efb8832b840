"""The live-benchmark driver's pure parts (benchmarks/live): /proc parsing, Karpenter's settings, manifests,
CRD discovery in a module tree, and the fair KWOK catalogue. Nothing here builds or runs Karpenter."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.live import catalogue
from benchmarks.live import karpenter as k

STATUS = "Name:\tkarpenter-kwok\nVmPeak:\t 900000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n"
# comm with a space and parentheses; utime (field 14) = 250, stime (field 15) = 50.
STAT = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 0 0"


def test_vmhwm_is_peak_resident_bytes() -> None:
    assert k.parse_vmhwm(STATUS) == 123456 * 1024


def test_vmhwm_missing_raises() -> None:
    with pytest.raises(ValueError, match="VmHWM"):
        k.parse_vmhwm("Name:\tkthreadd\n")


def test_cpu_ticks_are_utime_plus_stime_after_comm() -> None:
    assert k.parse_cpu_ticks(STAT) == 300


def test_read_usage_of_this_process() -> None:
    used = k.read_usage(os.getpid())
    assert used.peak_rss_bytes > 1 << 20
    assert used.cpu_seconds > 0


def test_environment_follows_the_kwok_chart_with_leader_election_off(tmp_path: Path) -> None:
    env = k.environment(tmp_path / "kc", metrics_port=1, health_port=2, instance_types_file=tmp_path / "it.json")
    assert env["KUBECONFIG"] == str(tmp_path / "kc")
    assert env["DISABLE_LEADER_ELECTION"] == "true"
    assert (env["METRICS_PORT"], env["HEALTH_PROBE_PORT"]) == ("1", "2")
    assert (env["BATCH_MAX_DURATION"], env["BATCH_IDLE_DURATION"]) == ("10s", "1s")
    assert env["INSTANCE_TYPES_FILE_PATH"] == str(tmp_path / "it.json")
    assert "NodeRepair=false" in env["FEATURE_GATES"]
    assert k.environment(tmp_path, metrics_port=1, health_port=2, extra={"LOG_LEVEL": "debug"})["LOG_LEVEL"] == "debug"


def test_nodepool_points_at_the_kwok_nodeclass() -> None:
    pool = k.nodepool("p", nodeclass="nc")
    ref = pool["spec"]["template"]["spec"]["nodeClassRef"]
    assert ref == {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "nc"}
    keys = {r["key"]: r["values"] for r in pool["spec"]["template"]["spec"]["requirements"]}
    assert keys["karpenter.sh/capacity-type"] == ["on-demand"]
    assert k.kwok_nodeclass("nc", "5s")["spec"] == {"nodeRegistrationDelay": "5s"}


def test_deployment_requests() -> None:
    dep = k.deployment("inflate", 7, cpu="1", memory="1Gi")
    assert dep["spec"]["replicas"] == 7
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}


def test_crd_documents_reads_the_chart_and_kwok_crds(tmp_path: Path) -> None:
    (tmp_path / "kwok" / "charts" / "crds").mkdir(parents=True)
    (tmp_path / "kwok" / "apis" / "crds").mkdir(parents=True)
    crd = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata: {{name: {}}}\n"
    (tmp_path / "kwok" / "charts" / "crds" / "b.yaml").write_text(crd.format("nodepools.karpenter.sh"))
    (tmp_path / "kwok" / "charts" / "crds" / "a.yaml").write_text(crd.format("nodeclaims.karpenter.sh") + "---\n")
    (tmp_path / "kwok" / "apis" / "crds" / "k.yaml").write_text(crd.format("kwoknodeclasses.karpenter.kwok.sh"))
    names = [d["metadata"]["name"] for d in k.crd_documents(tmp_path)]
    assert names == ["nodeclaims.karpenter.sh", "nodepools.karpenter.sh", "kwoknodeclasses.karpenter.kwok.sh"]


def _kwok_type(name: str, od: float, spot: float, arch: str = "x86_64", os_: str = "linux") -> dict[str, object]:
    def offering(ct: str, price: float) -> dict[str, object]:
        return {
            "Price": price,
            "Available": True,
            "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": [ct]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-west-2a"]},
            ],
        }

    return {
        "name": name,
        "offerings": [offering("spot", spot), offering("on-demand", od)],
        "architecture": arch,
        "operatingSystems": [os_],
        "resources": {"cpu": "2", "memory": "8Gi", "pods": "29"},
    }


def test_overlap_counts_names_and_prices() -> None:
    kwok = [_kwok_type("m5.large", 0.102, 0.03), _kwok_type("c5.large", 0.085, 0.02), _kwok_type("x-1x", 1.0, 0.5)]
    report = catalogue.overlap(kwok, {"m5.large": 0.096, "c5.large": 0.085, "t3.micro": 0.0104})
    assert (report["kwok_types"], report["table_types"], report["common"], report["same_price"]) == (3, 3, 2, 1)
    assert report["ratio_max"] == pytest.approx(0.102 / 0.096)


def test_fair_catalogue_reprices_and_rezones_on_demand_only() -> None:
    kwok = [
        _kwok_type("m5.large", 0.102, 0.03, os_="windows"),
        _kwok_type("m5.large", 0.102, 0.03),
        _kwok_type("m5.large", 0.102, 0.03),
        _kwok_type("c1.medium", 0.13, 0.03, arch="i386"),
        _kwok_type("x-1x", 1.0, 0.5),
    ]
    fair = catalogue.fair_catalogue(kwok, {"m5.large": 0.096, "c1.medium": 0.13}, ["us-east-1a", "us-east-1b"])
    assert [t["name"] for t in fair] == ["m5.large"]  # linux only, once; i386 has no kubernetes.io/arch
    assert (fair[0]["architecture"], fair[0]["operatingSystems"]) == ("amd64", ["linux"])
    assert fair[0]["resources"] == {"cpu": "2", "memory": "8Gi", "pods": "29"}
    offerings = fair[0]["offerings"]
    assert [o["Price"] for o in offerings] == [0.096, 0.096]
    assert {catalogue._requirement(o, catalogue.ZONE) for o in offerings} == {"us-east-1a", "us-east-1b"}
    assert {catalogue._requirement(o, catalogue.CAPACITY_TYPE) for o in offerings} == {"on-demand"}
    json.dumps(fair)  # what INSTANCE_TYPES_FILE_PATH reads


def test_karpy_prices_us_east_1() -> None:
    prices = catalogue.karpy_prices()
    assert prices["m5.large"] == pytest.approx(0.096)


class _FakeCluster:
    """Answers the Deployment apply, then lists pods that turn Running one poll at a time, NodeClaims, Nodes."""

    def __init__(self, pods: int) -> None:
        self.pods = pods
        self.polls = 0
        self.applied: list[str] = []

    async def request(self, method: str, path: str, **_: object) -> dict[str, object]:
        self.applied.append(f"{method} {path}")
        return {}

    async def list(self, res: object, namespace: str | None = None, **_: object) -> tuple[list[dict[str, object]], str]:
        kind = getattr(res, "kind", "")
        if kind == "Pod":
            self.polls += 1
            return [
                {"metadata": {"uid": f"p{i}"}, "status": {"phase": "Running" if i < self.polls else "Pending"}}
                for i in range(self.pods)
            ], "1"
        if kind == "NodeClaim":
            return [{"metadata": {"name": "c1"}}, {"metadata": {"name": "c2"}}], "1"
        node = {"metadata": {"labels": {"node.kubernetes.io/instance-type": "m5.large"}}}
        return [
            {**node, "spec": {"providerID": "kwok://n1"}},
            {**node, "spec": {"providerID": "kwok://n2"}},
            {**node, "spec": {"providerID": "aws:///us-east-1a/i-1"}},
        ], "1"


async def test_provision_waits_for_every_pod_and_counts_nodes_by_provider() -> None:
    fake = _FakeCluster(pods=3)
    result = await k.provision(fake, "inflate", 3, interval=0.0)
    assert fake.polls == 3  # until the third pod turned Running
    assert any("deployments/inflate" in call for call in fake.applied)
    assert (result.pods, result.nodeclaims, result.nodes) == (3, 2, 2)
    assert result.instance_types == {"m5.large": 2}
    assert 0 <= result.p50_seconds <= result.p99_seconds <= result.total_seconds


async def test_provision_times_out() -> None:
    fake = _FakeCluster(pods=5)
    with pytest.raises(TimeoutError, match="Running"):
        await k.provision(fake, "inflate", 5, interval=0.0, timeout=-1.0)
