"""``python -m e2e.cluster up --workdir DIR --cluster NAME``: the local cluster as one supervised process.

Starts the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KWOK; binaries from
``build.sh``), moto's server in this process on 127.0.0.1 seeded for the cluster (``e2e.cluster.aws``) and the
node agent (moto also has the EKS cluster, whose DescribeCluster answers this apiserver's endpoint and CA), then writes:

- ``DIR/kubeconfig`` — admin kubeconfig;
- ``DIR/env`` — ``export K=V`` lines: KUBECONFIG, CLUSTER_NAME, CLUSTER_ENDPOINT, AWS_ENDPOINT_URL and the
  AWS test credentials and region;
- ``DIR/ready`` — last, once everything answers (its content: seconds from start to ready);
- ``DIR/aws-requests.jsonl`` — moto's mutating requests, appended as they arrive (``e2e.cluster.aws.RequestLog``);
- ``DIR/logs/audit.log`` — the apiserver's audit log of karpy's writes (``e2e.cluster.controlplane.audit_policy``).

Runs until SIGTERM/SIGINT, until its parent process goes away, or until a control-plane component dies
(exit code 1), then tears everything down. Logs: stdout (the node agent, this supervisor) and DIR/logs/.

``python -m e2e.cluster build`` only builds the binaries and prints their directory.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import os
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from e2e.cluster.controlplane import ControlPlane, ControlPlaneError, ensure_binaries

log = logging.getLogger("e2e.cluster")
# moto's mutating requests, one JSON line each (e2e.cluster.aws.RequestLog), under the workdir.
AWS_REQUEST_LOG = "aws-requests.jsonl"


def write_env(path: Path, env: dict[str, str]) -> None:
    """``export K=V`` lines, values shell-quoted."""
    path.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))


class _Stop(Exception):
    """SIGTERM/SIGINT during the synchronous start."""


def _raise_stop(signum: int, frame: Any) -> None:
    raise _Stop(signal.Signals(signum).name)


async def _serve(cp: ControlPlane, env: dict[str, str], workdir: Path, cluster: str, started: float) -> int:
    """Run the node agent, write ``ready``, and wait for a reason to stop; the exit code."""
    import boto3

    from e2e.cluster.nodeagent import NodeAgent
    from karpy.kube.client import KubeClient

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    parent = os.getppid()
    kube = await KubeClient.from_environment(str(cp.kubeconfig))
    ec2 = boto3.client(
        "ec2",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name=env["AWS_REGION"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
    )
    agent = NodeAgent(kube, ec2, cluster, env["AWS_REGION"])
    try:
        await agent.sync_once()  # the agent works before anyone relies on it
        task = asyncio.create_task(agent.run(), name="node-agent")
        elapsed = time.monotonic() - started
        (workdir / "ready").write_text(f"{elapsed:.1f}\n")
        log.info("cluster %s ready in %.1fs: %s (env in %s)", cluster, elapsed, cp.server, workdir / "env")
        code = 0
        while not stop.is_set():
            with_timeout = asyncio.create_task(stop.wait())
            await asyncio.wait({with_timeout, task}, timeout=1.0)
            with_timeout.cancel()
            if task.done():
                log.error("node agent stopped: %r", task.exception())
                code = 1
                break
            if (dead := cp.failed()) is not None:
                log.error("%s exited with code %s; shutting down", dead.name, dead.proc.returncode)
                code = 1
                break
            if os.getppid() != parent:
                log.warning("parent process %d is gone; shutting down", parent)
                break
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return code
    finally:
        await kube.close()


def up(workdir: Path, cluster: str, k8s_version: str) -> int:
    """Start the cluster, serve until told to stop, tear down; the exit code."""
    from e2e.cluster import aws

    started = time.monotonic()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    for stale in ("ready", "env"):
        (workdir / stale).unlink(missing_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    signal.signal(signal.SIGTERM, _raise_stop)
    signal.signal(signal.SIGINT, _raise_stop)
    cp: ControlPlane | None = None
    moto: Any = None
    try:
        bindir = ensure_binaries(workdir / "logs" / "build.log")
        cp = ControlPlane(workdir, bindir)
        cp.start()
        log.info("control plane up in %.1fs at %s", time.monotonic() - started, cp.server)
        moto = aws.start_moto(request_log=workdir / AWS_REQUEST_LOG)
        aws.seed_cluster(moto.endpoint_url, cluster, k8s_version)
        # EKS DescribeCluster answers this apiserver's endpoint and (self-signed serving) CA: cluster discovery.
        ca_data = base64.b64encode((workdir / "pki" / "apiserver.crt").read_bytes()).decode()
        aws.seed_eks_cluster(moto.endpoint_url, cluster, cp.server, ca_data, k8s_version)
        env = {
            "KUBECONFIG": str(cp.kubeconfig),
            "CLUSTER_NAME": cluster,
            "CLUSTER_ENDPOINT": cp.server,
            **aws.AWS_ENV,
            "AWS_ENDPOINT_URL": moto.endpoint_url,
        }
        write_env(workdir / "env", env)
        log.info("moto at %s seeded for %s", moto.endpoint_url, cluster)
        # From here asyncio's handlers take over the signals.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        return asyncio.run(_serve(cp, env, workdir, cluster, started))
    except _Stop as why:
        log.info("stopped by %s during start", why)
        return 0
    except ControlPlaneError as err:
        log.error("control plane failed: %s", err)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # teardown is not interrupted
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        (workdir / "ready").unlink(missing_ok=True)
        if cp is not None:
            cp.stop()
        if moto is not None:
            moto.stop()
        log.info("cluster %s torn down", cluster)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the local cluster and run until SIGTERM")
    p_up.add_argument("--workdir", type=Path, required=True)
    p_up.add_argument("--cluster", required=True, help="cluster name (tags, discovery)")
    p_up.add_argument("--k8s-version", default="1.34", help="Kubernetes minor version for the AMI SSM parameters")
    sub.add_parser("build", help="build the control-plane binaries if missing; print their directory")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stdout, force=True
    )
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if args.command == "build":
        print(ensure_binaries())
        return 0
    return up(args.workdir, args.cluster, args.k8s_version)


if __name__ == "__main__":
    sys.exit(main())
