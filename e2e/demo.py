"""``make demo``: a local cluster where karpy provisions real nodes for a real workload, narrated.

Starts the local cluster (control plane + KWOK + moto + node agent, ``python -m e2e.cluster up``), installs
karpy's CRDs and RBAC, runs karpy as its ServiceAccount, applies a Karpenter user's NodePool and
EC2NodeClass and the ``inflate`` Deployment, scales it up and down, and prints nodes as they appear and
disappear. ``--keep`` leaves everything running until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from e2e.helpers import (
    ROOT,
    KarpyProcess,
    apply,
    free_port,
    karpy_process,
    load_documents,
    scale,
)
from karpy.apis import labels as wk
from karpy.kube import resources as r
from karpy.kube.client import KubeClient

CLUSTER = "karpy-demo"


def say(text: str) -> None:
    """One narrated line with a clock."""
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def read_env(path: Path) -> dict[str, str]:
    """The ``export K=V`` lines the cluster supervisor writes."""
    env = {}
    for line in path.read_text().splitlines():
        line = line.removeprefix("export ").strip()
        if "=" in line:
            key, _, value = line.partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


def start_cluster(workdir: Path) -> tuple[subprocess.Popen[bytes], dict[str, str]]:
    """Start the cluster supervisor and wait for its ready marker."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "ready").unlink(missing_ok=True)
    log = (workdir / "cluster.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "e2e.cluster", "up", "--workdir", str(workdir), "--cluster", CLUSTER],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=ROOT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    while not (workdir / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            print((workdir / "cluster.log").read_text()[-3000:])
            raise SystemExit("local cluster failed to start")
        time.sleep(0.5)
    return proc, read_env(workdir / "env")


def node_row(node: dict[str, Any], pods: int) -> str:
    labels = node["metadata"].get("labels") or {}
    return (
        f"{node['metadata']['name']:<34} {labels.get(wk.LABEL_INSTANCE_TYPE, '?'):<12} "
        f"{labels.get(wk.LABEL_ZONE, '?'):<11} {labels.get(wk.LABEL_CAPACITY_TYPE, '?'):<10} pods={pods}"
    )


async def watch_nodes(client: KubeClient, until: Any, timeout: float) -> None:
    """Print each node's arrival and departure until ``until()`` holds."""
    known: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        nodes, _ = await client.list(r.NODES)
        pods, _ = await client.list(r.PODS, "default", query={"labelSelector": "app=inflate"})
        per_node: dict[str, int] = {}
        for p in pods:
            if p["spec"].get("nodeName"):
                per_node[p["spec"]["nodeName"]] = per_node.get(p["spec"]["nodeName"], 0) + 1
        current = {n["metadata"]["name"]: node_row(n, per_node.get(n["metadata"]["name"], 0)) for n in nodes}
        for name in sorted(current.keys() - known.keys()):
            say(f"+ node {current[name]}")
        for name in sorted(known.keys() - current.keys()):
            say(f"- node {name} removed")
        known = current
        running = sum(1 for p in pods if p["status"].get("phase") == "Running")
        if await until(nodes, pods):
            say(f"  {len(nodes)} node(s), {running}/{len(pods)} inflate pods Running")
            return
        await asyncio.sleep(1)
    raise SystemExit("demo step timed out")


async def demo(keep: bool, replicas: int) -> None:
    workdir = ROOT / ".e2e-run" / "demo"
    say("starting the local cluster (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK, moto)")
    cluster, env = start_cluster(workdir)
    karpy: KarpyProcess | None = None
    client = await KubeClient.from_environment(env["KUBECONFIG"])
    try:
        say("installing karpy's CRDs and RBAC (manifests/)")
        karpy = await karpy_process(
            client, env["CLUSTER_ENDPOINT"], CLUSTER, workdir, env, METRICS_PORT=str(free_port())
        )
        (workdir / "karpy.log").unlink(missing_ok=True)
        karpy.start()
        say(f"karpy running (JSON logs: {workdir / 'karpy.log'})")
        text = (ROOT / "e2e" / "manifests" / "nodepool.yaml").read_text().replace("${CLUSTER_NAME}", CLUSTER)
        import yaml

        await apply(client, [d for d in yaml.safe_load_all(text) if d])
        await apply(client, load_documents(ROOT / "e2e" / "manifests" / "inflate.yaml"))
        say("applied NodePool 'default', EC2NodeClass 'default' and Deployment 'inflate' (1 CPU, 1.5Gi per pod)")
        say(f"scaling inflate to {replicas} replicas")
        start = time.monotonic()
        await scale(client, "inflate", replicas)

        async def all_running(nodes: list[Any], pods: list[Any]) -> bool:
            return len(pods) == replicas and all(p["status"].get("phase") == "Running" for p in pods)

        await watch_nodes(client, all_running, 300)
        say(f"all {replicas} pods Running after {time.monotonic() - start:.1f}s")
        claims, _ = await client.list(r.NODECLAIMS)
        for c in claims:
            say(
                f"  nodeclaim {c['metadata']['name']}: {c['metadata']['labels'].get(wk.LABEL_INSTANCE_TYPE)} "
                f"→ {c['status'].get('providerID')}"
            )
        if keep:
            say("--keep: leaving the cluster running; KUBECONFIG=" + env["KUBECONFIG"] + " (Ctrl-C to stop)")
            await asyncio.Event().wait()
        say("scaling inflate to 0: empty nodes are removed after consolidateAfter (10s)")
        start = time.monotonic()
        await scale(client, "inflate", 0)

        async def no_nodes(nodes: list[Any], pods: list[Any]) -> bool:
            return not nodes

        await watch_nodes(client, no_nodes, 300)
        say(f"every node removed after {time.monotonic() - start:.1f}s; demo complete")
    finally:
        if karpy is not None:
            karpy.stop()
        await client.close()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(cluster.pid, signal.SIGTERM)
        cluster.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description="karpy demo on a local cluster")
    parser.add_argument("--keep", action="store_true", help="keep the cluster running after scale-up")
    parser.add_argument("--replicas", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(demo(args.keep, args.replicas))


if __name__ == "__main__":
    main()
