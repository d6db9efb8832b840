"""``python -m benchmarks.live``: karpy and Karpenter side by side on the same live problem (issue 12, item 2).

For each size and run, each controller on a FRESH local cluster (``e2e.cluster.launcher``; the order alternates per
run), the same problem (:mod:`benchmarks.live.mix`: the workload mix, two NodePools, one catalogue), and:

1. the controller installed and started, its NodePools Ready;
2. every Deployment created at once; the Deployments' ready replicas polled each second; at the end the pods,
   NodeClaims and Nodes listed once: times from the objects' own timestamps (pod creationTimestamp → Ready
   condition), nodes and their instance types priced at karpy's on-demand table, a timeline (NodeClaims, Nodes,
   pods scheduled, pods Ready over time);
3. the controller's requests and writes from the apiserver audit log (``e2e.cluster.controlplane.audit_policy``
   logs both controllers' ServiceAccounts; this process sets ``KARPY_AUDIT_READS=1`` for the clusters it starts,
   so their reads are logged too), its CPU seconds and peak RSS from ``/proc``;
4. every Deployment scaled to 0 and the time until no NodeClaim and no controller Node is left (NodePools
   consolidate ``WhenEmpty`` after 30 s, which is part of it), with the evictions and pod deletes it made.

The lock ``/tmp/karpy-cluster.lock`` (shared with the other live-cluster users) is taken per cluster run by this
process itself (``--lock``): do not wrap the command in ``flock`` on the same file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from benchmarks.live import mix, report
from benchmarks.live.karpenter import KWOK_PROVIDER_PREFIX, exit_on_signal
from benchmarks.live.karpyside import AWS_PROVIDER_PREFIX
from benchmarks.live.runtime import runtime_python
from e2e.audit import json_lines
from e2e.cluster.controlplane import (
    AUDIT_READS_ENV,
    AUDIT_SCHEDULER_ENV,
    KARPENTER_USER,
    KARPY_USER,
    SCHEDULER_QPS_ENV,
)

USERS = {"karpy": KARPY_USER, "karpenter": KARPENTER_USER}
PROVIDER_PREFIX = {"karpy": AWS_PROVIDER_PREFIX, "karpenter": KWOK_PROVIDER_PREFIX}
DEFAULT_LOCK = Path("/tmp/karpy-cluster.lock")


@contextlib.contextmanager
def cluster_lock(path: Path | None) -> Iterator[None]:
    """Hold the shared cluster lock (``flock``, blocking) for one cluster run; no-op for None."""
    if path is None:
        yield
        return
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# -- one controller --------------------------------------------------------------------------------------------------


class Controller:
    """What the measurement needs of a running controller: its process usage and how to stop it."""

    def __init__(self, name: str, pid_of: Any, stop: Any) -> None:
        self.name, self._pid_of, self._stop = name, pid_of, stop

    def usage(self) -> tuple[float, float]:
        """(peak RSS MiB, CPU seconds) so far."""
        from benchmarks.live.karpenter import read_usage

        used = read_usage(self._pid_of())
        return used.peak_rss_bytes / 2**20, used.cpu_seconds

    def stop(self) -> None:
        self._stop()


async def _nodepools_ready(client: Any) -> None:
    from e2e import helpers

    for pool in mix.nodepools("karpy"):
        name = pool["metadata"]["name"]
        await helpers.wait_for(
            lambda n=name: helpers.condition_ready(client, helpers.KINDS["NodePool"], n),
            timeout=120,
            what=f"NodePool {name} Ready",
        )


async def start_karpenter(
    client: Any, env: Mapping[str, str], workdir: Path, binary: Path, types_file: Path
) -> Controller:
    """Karpenter's CRDs, a KWOKNodeClass, the NodePools; Karpenter started and ready."""
    from benchmarks.live import karpenter

    kubeconfig = await karpenter.service_account_kubeconfig(
        client, env["CLUSTER_ENDPOINT"], workdir / "karpenter.kubeconfig"
    )
    await karpenter.apply(client, karpenter.crd_documents())
    await karpenter.apply(client, [karpenter.kwok_nodeclass(), *mix.nodepools("karpenter")])
    proc = karpenter.KarpenterProcess(binary, kubeconfig, workdir / "karpenter.log", instance_types_file=types_file)
    proc.start()
    ctl = Controller("karpenter", lambda: proc.pid, lambda: proc.alive() and proc.stop())
    try:
        await asyncio.to_thread(proc.wait_ready)
        await _nodepools_ready(client)
    except BaseException:
        ctl.stop()
        raise
    return ctl


async def start_karpy(
    client: Any, env: Mapping[str, str], cluster_name: str, workdir: Path, python: Path | None = None
) -> Controller:
    """karpy's CRDs and RBAC, an EC2NodeClass, the NodePools; karpy started (by ``python``, this interpreter
    when None) and ready."""
    from e2e import helpers

    aws_env = {k: v for k, v in env.items() if k.startswith("AWS_")}
    # Leader election off, as Karpenter runs here (its Lease renewals would be writes Karpenter does not make).
    karpy = await helpers.karpy_process(
        client, env["CLUSTER_ENDPOINT"], cluster_name, workdir, aws_env, DISABLE_LEADER_ELECTION="true"
    )
    if python is not None:
        karpy.python = str(python)
    await helpers.apply(client, [helpers.ec2nodeclass("default", cluster_name), *mix.nodepools("karpy")])
    karpy.start()

    def pid() -> int:
        assert karpy.proc is not None
        return karpy.proc.pid

    ctl = Controller("karpy", pid, karpy.stop)
    try:
        await helpers.wait_for(
            lambda: asyncio.to_thread(lambda: karpy.probe() == 200), timeout=120, what="karpy /readyz"
        )
        await _nodepools_ready(client)
    except BaseException:
        ctl.stop()
        raise
    return ctl


async def _ready_replicas(client: Any) -> int:
    from e2e import helpers

    items, _ = await client.list(helpers.KINDS["Deployment"], "default", query={"labelSelector": "bench=bench"})
    return sum(int((d.get("status") or {}).get("readyReplicas") or 0) for d in items)


async def _controller_objects(client: Any, prefix: str) -> tuple[list[Any], list[Any]]:
    from e2e import helpers
    from karpy.kube import resources as r

    claims, _ = await client.list(helpers.KINDS["NodeClaim"])
    nodes, _ = await client.list(r.NODES)
    return claims, [n for n in nodes if str((n.get("spec") or {}).get("providerID", "")).startswith(prefix)]


async def measure(
    client: Any,
    controller: Controller,
    audit_log: Path,
    pods: int,
    *,
    timeout: float,
    down_timeout: float,
    log: Any,
) -> dict[str, Any]:
    """Steps 2–4 of the module docstring on a started controller; the figures (keys of
    :data:`benchmarks.live.report.METRICS` and more)."""
    from benchmarks.live.catalogue import karpy_prices
    from e2e import helpers
    from karpy.kube import resources as r

    user, prefix = USERS[controller.name], PROVIDER_PREFIX[controller.name]
    t0 = time.time()
    await helpers.apply(client, mix.workload(pods))
    ready, complete = 0, True
    while ready < pods:
        if time.time() - t0 > timeout:
            complete = False
            break
        await asyncio.sleep(1.0)
        ready = await _ready_replicas(client)
    observed = time.time()
    _, cpu_up = controller.usage()
    items, _ = await client.list(r.PODS, "default", query={"labelSelector": "bench=bench"})
    claims, nodes = await _controller_objects(client, prefix)
    times = report.pod_times(items)
    types: dict[str, int] = {}
    for node in nodes:
        name = node["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type", "?")
        types[name] = types.get(name, 0) + 1
    events = report.unique_events(json_lines(audit_log))
    marked = report.marked_times(events, t0)
    rows = report.timeline(t0, claims, nodes, items, marked=marked)
    print(report.timeline_text(rows), file=log, flush=True)
    up_writes = report.count_writes(events, user, t0, observed)
    up_requests = report.count_requests(events, user, t0, observed)
    up_scheduler = report.scheduler_writes(events, t0, observed)

    # The scale-down window starts where the scale-up one ended: what the controller does while the figures above
    # are read counts in it, not in neither.
    t1 = time.time()
    for deployment in mix.workload(pods):
        await helpers.scale(client, deployment["metadata"]["name"], 0)
    gone: float | None = None
    left_claims, left_nodes = claims, nodes
    while time.time() - t1 < down_timeout:
        left_claims, left_nodes = await _controller_objects(client, prefix)
        if not left_claims and not left_nodes:
            gone = time.time() - t1
            break
        await asyncio.sleep(1.0)
    t2 = time.time()
    rss, cpu = controller.usage()  # peak RSS (VmHWM) only rises: this one covers the scale-up too
    events = report.unique_events(json_lines(audit_log))
    down_writes = report.count_writes(events, user, observed, t2)
    down_requests = report.count_requests(events, user, observed, t2)
    return {
        "controller": controller.name,
        "pods": pods,
        "complete": complete,
        "ready_pods": times.ready,
        "total_s": round(times.last_ready - t0, 2) if complete else None,
        "created_s": round(max((report.created(p) for p in items), default=t0) - t0, 2),
        "marked_s": round(marked[-1] - t0, 2) if marked else None,
        "p50_s": times.p50,
        "p99_s": times.p99,
        "nodeclaims": up_writes["nodeclaim_creates"],
        "nodes": len(nodes),
        "instance_types": dict(sorted(types.items())),
        "cost_per_h": round(report.hourly_cost(types, karpy_prices()), 4),
        "peak_rss_mib": round(rss, 1),
        "cpu_s_up": round(cpu_up, 2),
        "cpu_s": round(cpu, 2),
        "requests_up": up_requests,
        "writes_up": up_writes["writes"],
        "writes_per_pod": round(up_writes["writes"] / pods, 3),
        "scheduler_writes_up": up_scheduler["writes"],
        "system_writes_per_pod": round((up_writes["writes"] + up_scheduler["writes"]) / pods, 3),
        "down_s": None if gone is None else round(gone, 1),
        # What was still there when the scale-down wait ended (0 when it reached nothing).
        "down_left_nodeclaims": len(left_claims),
        "down_left_nodes": len(left_nodes),
        "evictions": down_writes["evictions"] + down_writes["pod_deletes"],
        "requests_down": down_requests,
        "writes_down": down_writes["writes"],
        "writes_detail": {
            "up": report.write_breakdown(events, user, t0, observed),
            "scheduler_up": up_scheduler,
            "down": report.write_breakdown(events, user, observed, t2),
        },
        "timeline": rows,
    }


async def _run(
    controller: str,
    env: Mapping[str, str],
    cluster_name: str,
    audit_log: Path,
    workdir: Path,
    pods: int,
    *,
    binary: Path | None,
    types_file: Path,
    timeout: float,
    down_timeout: float,
    log: Any,
    python: Path | None = None,
) -> dict[str, Any]:
    from karpy.kube.client import KubeClient

    kubeconfig = Path(env["KUBECONFIG"])
    client = await KubeClient.from_environment(str(kubeconfig))
    try:
        if controller == "karpenter":
            assert binary is not None
            ctl = await start_karpenter(client, env, workdir, binary, types_file)
        else:
            ctl = await start_karpy(client, env, cluster_name, workdir, python)
        try:
            return await measure(
                client,
                ctl,
                audit_log,
                pods,
                timeout=timeout,
                down_timeout=down_timeout,
                log=log,
            )
        finally:
            ctl.stop()
    finally:
        await client.close()


def run_one(
    controller: str,
    pods: int,
    workdir: Path,
    *,
    binary: Path | None,
    types_file: Path,
    timeout: float,
    down_timeout: float,
    lock: Path | None,
    log: Any = sys.stderr,
    python: Path | None = None,
) -> dict[str, Any]:
    """``controller`` (``karpy`` or ``karpenter``) measured on a fresh local cluster under ``workdir`` (the lock
    held for the whole cluster run); karpy runs under ``python`` (this interpreter when None)."""
    from e2e.cluster import launcher

    with cluster_lock(lock):
        cluster = launcher.start(workdir / "cluster", f"{controller}-live")
        try:
            return asyncio.run(
                _run(
                    controller,
                    cluster.env,
                    cluster.cluster_name,
                    cluster.audit_log,
                    workdir,
                    pods,
                    binary=binary,
                    types_file=types_file,
                    timeout=timeout,
                    down_timeout=down_timeout,
                    log=log,
                    python=python,
                )
            )
        finally:
            cluster.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.live [--sizes 1000,5000,10000] [--runs N] [--controllers karpy,karpenter]``: the
    side-by-side table (medians over runs) on stdout; per-run JSON lines and timelines on stderr."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.live", description=main.__doc__)
    parser.add_argument("--sizes", default="1000,5000,10000", help="comma-separated pod counts")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--controllers", default="karpy,karpenter", help="comma-separated: karpy, karpenter")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds to wait for all pods Running")
    parser.add_argument("--down-timeout", type=float, default=900.0, help="seconds to wait for the scale-down")
    parser.add_argument("--json", type=Path, default=None, help="write every run's figures and the table here")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the cluster workdirs (default: temp)")
    parser.add_argument(
        "--scheduler-qps",
        type=int,
        default=None,
        help="kube-scheduler's client QPS (burst 2x) on every cluster; default: kube-scheduler's own (50, burst 100)",
    )
    parser.add_argument(
        "--lock", default=str(DEFAULT_LOCK), help="cluster lock file taken per cluster run ('' for none)"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, exit_on_signal)
    # The clusters started from here log the controllers' reads too, so their requests can be counted, and
    # kube-scheduler's writes (its Bindings under Karpenter, its Unschedulable marks under both).
    os.environ[AUDIT_READS_ENV] = "1"
    os.environ[AUDIT_SCHEDULER_ENV] = "1"
    if args.scheduler_qps is not None:
        os.environ[SCHEDULER_QPS_ENV] = str(args.scheduler_qps)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    controllers = [c for c in args.controllers.split(",") if c]
    unknown = set(controllers) - set(USERS)
    if unknown:
        parser.error(f"unknown controllers {sorted(unknown)}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="karpy-live-"))
    workdir.mkdir(parents=True, exist_ok=True)
    types_file = workdir / "instance-types.json"
    from benchmarks.live.catalogue import karpy_prices

    types_file.write_text(json.dumps(mix.fair_kwok_types(mix.moto_instance_types(), karpy_prices())))
    binary = None
    if "karpenter" in controllers:
        from benchmarks.live.karpenter import ensure_binary

        binary = ensure_binary()
    # karpy as the image runs it: its own dependencies only (benchmarks/live/runtime.py says why).
    python = runtime_python() if "karpy" in controllers else None
    lock = Path(args.lock) if args.lock else None
    results: dict[int, dict[str, list[dict[str, Any]]]] = {}
    for size in sizes:
        for run in range(args.runs):
            order = controllers if run % 2 == 0 else list(reversed(controllers))
            for controller in order:
                print(f"== {size} pods, run {run + 1}, {controller} ({workdir})", file=sys.stderr, flush=True)
                result = run_one(
                    controller,
                    size,
                    workdir / f"{size}-{run + 1}-{controller}",
                    binary=binary,
                    types_file=types_file,
                    timeout=args.timeout,
                    down_timeout=args.down_timeout,
                    lock=lock,
                    python=python,
                )
                results.setdefault(size, {}).setdefault(controller, []).append({**result, "run": run + 1})
                brief = {k: v for k, v in result.items() if k not in ("timeline", "writes_detail")}
                print(json.dumps(brief), file=sys.stderr, flush=True)
                if args.json is not None:
                    args.json.write_text(json.dumps({"results": results}, indent=1))
    text = report.table(results)
    print(text, flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"results": results, "table": text}, indent=1))
    return 0
