"""``INTERRUPTION_QUEUE`` naming a queue that does not exist (against moto): karpy refuses to start with one line
naming the variable and exit 2, instead of running Ready while spot interruptions are silently ignored.

The apiserver is a stand-in answering ``/version`` only (the queue is checked right after it), so no local
cluster is needed; a second case with an existing queue proves the check passes it (karpy starts and is
stopped with SIGTERM once it logged that it starts, which it does after every startup check)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from e2e.cluster.aws import MotoAWS
from e2e.helpers import aws_client

ROOT = Path(__file__).resolve().parents[2]


def karpy(moto_aws: MotoAWS, kubeconfig: Path, queue: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "CLUSTER_NAME": "startup-test",
        "AWS_ENDPOINT_URL": moto_aws.endpoint_url,
        "METRICS_PORT": "0",
        "HEALTH_PROBE_PORT": "0",
        "LEADER_ELECTION_NAMESPACE": "default",  # outside a pod it must be given (leader election is on)
        "INTERRUPTION_QUEUE": queue,
        # Given, so karpy does not discover them through EKS DescribeCluster (as Karpenter would): this test is
        # about the queue check (discovery: test_aws_cluster_discovery.py).
        "CLUSTER_ENDPOINT": "https://127.0.0.1:6443",
        "CLUSTER_CA_BUNDLE": "Q0E=",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "karpy", "run"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_missing_interruption_queue_is_one_line_and_exit_2(moto_aws: MotoAWS, kubeconfig: Path) -> None:
    proc = karpy(moto_aws, kubeconfig, "no-such-queue")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, (out, err)
    lines = (out + err).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("karpy: cannot start: INTERRUPTION_QUEUE=no-such-queue: GetQueueUrl"), lines[0]


def test_existing_interruption_queue_passes_the_check(moto_aws: MotoAWS, kubeconfig: Path) -> None:
    sqs = aws_client("sqs", moto_aws.endpoint_url)
    sqs.create_queue(QueueName="startup-test-queue")
    proc = karpy(moto_aws, kubeconfig, "startup-test-queue")
    try:
        deadline = time.monotonic() + 30
        lines: list[str] = []
        while time.monotonic() < deadline and proc.poll() is None:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            lines.append(line)
            if '"starting karpy"' in line:
                break
        assert proc.poll() is None, lines
        assert '"starting karpy"' in lines[-1], lines  # got past the queue check, not just still alive
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=30)
