"""``python -m e2e.cluster up``: its env file, and that no process outlives it, however it ends."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from e2e.cluster import launcher
from e2e.cluster.__main__ import write_env
from e2e.cluster.nodeagent import instance_of_provider_id


def test_env_file_round_trip(tmp_path: Path) -> None:
    env = {"KUBECONFIG": "/tmp/a dir/kubeconfig", "CLUSTER_NAME": "demo", "AWS_REGION": "us-east-1", "EMPTY": ""}
    write_env(tmp_path / "env", env)
    assert (tmp_path / "env").read_text().splitlines()[0] == "export KUBECONFIG='/tmp/a dir/kubeconfig'"
    assert launcher.read_env(tmp_path / "env") == env


def test_instance_of_provider_id() -> None:
    assert instance_of_provider_id("aws:///us-east-1a/i-0123456789abcdef0") == "i-0123456789abcdef0"
    assert instance_of_provider_id("aws:///us-east-1a/i-0123456789abcdef0/") == "i-0123456789abcdef0"
    assert instance_of_provider_id("kwok://node-1") is None
    assert instance_of_provider_id("aws:///us-east-1a/") is None


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (zombies excluded)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            out.append(int(entry.name))
    return out


@pytest.mark.integration
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_process_outlives_the_supervisor(tmp_path: Path, sig: signal.Signals) -> None:
    """SIGTERM: ordered teardown. SIGKILL (no teardown at all): the kernel's parent-death signal kills the rest."""
    cluster = launcher.start(tmp_path / "c", "outlive", timeout=120)
    try:
        components = [p for p in processes_mentioning(str(tmp_path / "c")) if p != cluster.proc.pid]
        names = {Path(os.readlink(f"/proc/{p}/exe")).name for p in components}
        assert {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} <= names
        os.kill(cluster.proc.pid, sig)
        cluster.proc.wait(30)
        deadline = time.monotonic() + 15
        while processes_mentioning(str(tmp_path / "c")) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_mentioning(str(tmp_path / "c")) == []
        assert not (tmp_path / "c" / "ready").exists() or sig == signal.SIGKILL
    finally:
        cluster.stop(10)
