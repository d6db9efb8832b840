"""Start ``python -m e2e.cluster up`` as a child process and wait for it: what the ``local_cluster`` fixture uses.

The child runs in its own process group under ``setpriv --pdeathsig TERM``: if the test process dies, the
kernel sends the supervisor SIGTERM and it tears the cluster down (its own children die with it in any case).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from e2e.cluster.controlplane import tail_of, terminate_group
from e2e.helpers import ROOT

AWS_KEYS = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION")


class ClusterStartError(RuntimeError):
    """The local cluster did not become ready; the message ends with the tail of its log."""


def read_env(path: Path) -> dict[str, str]:
    """The ``export K=V`` lines ``up`` writes (values shell-quoted)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip().removeprefix("export ").strip()
        if "=" in line:
            key, _, value = line.partition("=")
            parts = shlex.split(value)
            env[key] = parts[0] if parts else ""
    return env


@dataclass
class LocalCluster:
    """A running local cluster (see the ``local_cluster`` fixture in the root conftest)."""

    workdir: Path
    log: Path
    cluster_name: str
    proc: subprocess.Popen[bytes]
    env: dict[str, str] = field(default_factory=dict)
    start_seconds: float = 0.0

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig."""
        return Path(self.env["KUBECONFIG"])

    @property
    def server(self) -> str:
        """``https://127.0.0.1:<port>``."""
        return self.env["CLUSTER_ENDPOINT"]

    @property
    def audit_log(self) -> Path:
        """The apiserver's audit log (JSON lines): karpy's writes at ``Metadata`` level (see
        ``e2e.cluster.controlplane.audit_policy``); read it with ``e2e.audit.load_audit``."""
        return self.workdir / "logs" / "audit.log"

    @property
    def aws_request_log(self) -> Path:
        """moto's mutating requests (JSON lines ``{t, t_end, service, action, user_agent, status}``, see
        ``e2e.cluster.aws.RequestLog``); read it with ``e2e.audit.load_aws_requests``."""
        return self.workdir / "aws-requests.jsonl"

    @property
    def aws_env(self) -> dict[str, str]:
        """AWS_ENDPOINT_URL (moto), test credentials and region, for boto3 and karpy."""
        return {k: self.env[k] for k in AWS_KEYS if k in self.env}

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM the supervisor (it tears everything down), SIGKILL its group after ``timeout`` seconds."""
        terminate_group(self.proc, timeout)

    def tail(self, lines: int = 60) -> str:
        return tail_of(self.log, lines)


def start(workdir: Path, cluster_name: str, *, timeout: float = 180.0, k8s_version: str = "1.34") -> LocalCluster:
    """Start the supervisor in ``workdir`` and wait for ``workdir/ready``.

    Raises:
        ClusterStartError: it exited or was not ready within ``timeout`` seconds (log tail in the message).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "ready").unlink(missing_ok=True)
    log = workdir / "cluster.log"
    started = time.monotonic()
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [
                "setpriv",
                "--pdeathsig",
                "TERM",
                "--",
                sys.executable,
                "-m",
                "e2e.cluster",
                "up",
                "--workdir",
                str(workdir),
                "--cluster",
                cluster_name,
                "--k8s-version",
                k8s_version,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            start_new_session=True,
        )
    cluster = LocalCluster(workdir, log, cluster_name, proc)
    deadline = started + timeout
    while not (workdir / "ready").exists():
        if proc.poll() is not None:
            raise ClusterStartError(f"local cluster exited with code {proc.returncode}; {log}:\n{cluster.tail()}")
        if time.monotonic() > deadline:
            cluster.stop()
            raise ClusterStartError(f"local cluster not ready after {timeout:.0f}s; {log}:\n{cluster.tail()}")
        time.sleep(0.2)
    cluster.env = read_env(workdir / "env")
    cluster.start_seconds = time.monotonic() - started
    return cluster
