"""Karpenter itself as the live reference: its KWOK provider run against the local control plane.

What runs: ``sigs.k8s.io/karpenter/kwok`` at :data:`KARPENTER_VERSION` (Karpenter core's own ``main`` with the
KWOK cloud provider), built by ``build_karpenter.sh`` next to this file from Go modules into
``~/.cache/karpy-karpenter-kwok`` (see README.md here). It is a plain process on this machine talking to the
apiserver through a kubeconfig, configured by environment variables as Karpenter's KWOK Helm chart
(``kwok/charts/templates/deployment.yaml``) configures its container, with leader election off.

Functions, each usable on its own (the side-by-side ``python -m benchmarks.live``, ``run.py``, builds on them):

- :func:`ensure_binary` builds (once) and returns the binary; :func:`module_dir` finds Karpenter's sources.
- :func:`crd_documents` Karpenter's CRDs as its KWOK chart installs them (``kwok/charts/crds``: the
  ``pkg/apis/crds`` CRDs plus the ``karpenter.kwok.sh`` restricted-label rule) and the ``KWOKNodeClass`` CRD
  (``kwok/apis/crds``), whose schema defaults ``status`` to ``Ready=True``: the KWOK provider has no NodeClass
  controller, and a NodePool is only provisioned for once its NodeClass is Ready.
- :func:`kwok_nodeclass`, :func:`nodepool`, :func:`deployment`: the objects a benchmark applies.
- :class:`KarpenterProcess`: start against a kubeconfig, wait for ``/readyz``, scrape ``/metrics``, and
  :meth:`KarpenterProcess.stop`, which returns the controller's :class:`Usage` (peak RSS from ``VmHWM`` of
  ``/proc/<pid>/status``, CPU seconds from ``utime + stime`` of ``/proc/<pid>/stat``) read just before SIGTERM.
- :func:`provision` applies a Deployment and measures time from creation to all pods Running (the single-controller
  proof run below, polling pod phases each second; the side-by-side benchmark measures from the pods' own timestamps
  instead).

How nodes appear: the provider's ``Create`` writes a Node itself (``providerID: kwok://<name>``, label and
annotation ``kwok.x-k8s.io/node: fake``, the ``karpenter.sh/unregistered:NoExecute`` taint, phase Pending), after
the KWOKNodeClass's ``nodeRegistrationDelay``. KWOK (``--manage-all-nodes`` in ``e2e.cluster.controlplane``) then
runs its default node stages on it (Ready, heartbeat leases) and runs the pods bound to it; Karpenter's own
registration controller removes the taint. No extra KWOK stages are needed. The karpy node agent only acts on
Nodes whose providerID is ``aws:///…`` (``e2e.cluster.nodeagent.instance_of_provider_id``) and on moto's
instances, so it leaves Karpenter's Nodes alone; the cluster is started as for every e2e.

Run (needs the cluster lock, like every local-cluster run; ``nice`` keeps it out of the way of others)::

    flock /tmp/karpy-cluster.lock nice -n 19 .venv/bin/python -m benchmarks.live.karpenter --pods 500
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.live import report
from benchmarks.live.mix import KWOK_GROUP

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build_karpenter.sh"
KARPENTER_VERSION = "v1.15.0"
MODULE = "sigs.k8s.io/karpenter"
KWOK_PROVIDER_PREFIX = "kwok://"
# The KWOK chart's FEATURE_GATES value with its default values.yaml (v1.15.0).
CHART_FEATURE_GATES = (
    "StaticCapacity=false,SpotToSpotConsolidation=false,NodeRepair=false,CapacityBuffer=false,"
    "PodDeletionCostManagement=false"
)


class KarpenterError(RuntimeError):
    """The build failed, or Karpenter exited or was not ready in time (the message ends with its log's tail)."""


# -- build ---------------------------------------------------------------------------------------------------------


def ensure_binary(log: Path | None = None, version: str = KARPENTER_VERSION) -> Path:
    """Build Karpenter's KWOK provider if it is not cached yet (``build_karpenter.sh`` under ``nice -n 19``:
    minutes of CPU on first use) and return the binary's path. The build's progress goes to ``log`` (default:
    this process's stderr).

    Raises:
        KarpenterError: the build failed.
    """
    env = {**os.environ, "KARPENTER_CORE_VERSION": version}
    with contextlib.ExitStack() as stack:
        err = stack.enter_context(log.open("ab")) if log is not None else None
        done = subprocess.run(
            ["nice", "-n", "19", "bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=err, env=env, check=False
        )
    if done.returncode != 0:
        raise KarpenterError(f"{BUILD_SCRIPT} failed with code {done.returncode} (log: {log or 'stderr'})")
    return Path(done.stdout.decode().strip().splitlines()[-1])


def module_dir(version: str = KARPENTER_VERSION) -> Path:
    """Karpenter core's sources in the Go module cache (downloaded by the go command if missing)."""
    env = {**os.environ, "GOTOOLCHAIN": "auto", "GOFLAGS": "-mod=mod", "GOWORK": "off"}
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{MODULE}@{version}"],
        stdout=subprocess.PIPE,
        check=True,
        env=env,
        cwd=tempfile.gettempdir(),  # outside any module: the download needs no go.mod
    )
    return Path(json.loads(done.stdout)["Dir"])


# -- manifests -----------------------------------------------------------------------------------------------------


def crd_documents(source: Path | None = None) -> list[dict[str, Any]]:
    """The CRDs Karpenter's KWOK provider needs, parsed from Karpenter's module (``source``: its root; default
    :func:`module_dir`): NodePool, NodeClaim, NodeOverlay, CapacityBuffer (``kwok/charts/crds``, which the
    controller watches whether or not their gates are on) and KWOKNodeClass (``kwok/apis/crds``)."""
    from e2e.helpers import load_documents

    root = source or module_dir()
    return load_documents(root / "kwok" / "charts" / "crds", root / "kwok" / "apis" / "crds")


def kwok_nodeclass(name: str = "default", registration_delay: str | None = None) -> dict[str, Any]:
    """A ``karpenter.kwok.sh/v1alpha1`` KWOKNodeClass; ``registration_delay`` (a Go duration, e.g. ``"5s"``) is
    how long the provider waits after Create before it writes the Node (default: the CRD's, none)."""
    spec: dict[str, Any] = {} if registration_delay is None else {"nodeRegistrationDelay": registration_delay}
    return {"apiVersion": f"{KWOK_GROUP}/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": name}, "spec": spec}


def nodepool(
    name: str = "default",
    *,
    nodeclass: str = "default",
    requirements: Iterable[Mapping[str, Any]] | None = None,
    cpu_limit: str = "100000",
    consolidation_policy: str = "WhenEmpty",
    consolidate_after: str = "30s",
) -> dict[str, Any]:
    """A ``karpenter.sh/v1`` NodePool on a KWOKNodeClass. Default requirements: linux/amd64 on-demand (as karpy's
    benchmark pools, so both controllers choose among on-demand offerings)."""
    reqs = (
        list(requirements)
        if requirements is not None
        else [
            {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
            {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        ]
    )
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "requirements": reqs,
                    "nodeClassRef": {"group": KWOK_GROUP, "kind": "KWOKNodeClass", "name": nodeclass},
                    "expireAfter": "Never",
                }
            },
            "limits": {"cpu": cpu_limit},
            "disruption": {"consolidationPolicy": consolidation_policy, "consolidateAfter": consolidate_after},
        },
    }


def deployment(name: str, replicas: int, *, cpu: str = "500m", memory: str = "256Mi") -> dict[str, Any]:
    """A Deployment of ``replicas`` pause pods requesting ``cpu`` and ``memory``, labelled ``app=<name>``."""
    container = {
        "name": "pause",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": cpu, "memory": memory}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
        },
    }


# -- the process ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """A process's resource use: ``peak_rss_bytes`` (``VmHWM``), ``cpu_seconds`` (user + system, all threads)."""

    peak_rss_bytes: int
    cpu_seconds: float


def parse_vmhwm(status: str) -> int:
    """Bytes of ``VmHWM`` (peak resident set) in the text of ``/proc/<pid>/status``.

    Raises:
        ValueError: no ``VmHWM`` line (a kernel thread, or a zombie).
    """
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"unexpected VmHWM unit {unit!r}")
            return int(value) * 1024
    raise ValueError("no VmHWM in /proc/<pid>/status")


def parse_cpu_ticks(stat: str) -> int:
    """``utime + stime`` (clock ticks) from the text of ``/proc/<pid>/stat``: fields 14 and 15 (proc(5)), counted
    after the ``)`` that ends ``comm``, which may itself hold spaces and parentheses."""
    fields = stat[stat.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): field n is fields[n - 3].
    return int(fields[14 - 3]) + int(fields[15 - 3])


def read_usage(pid: int) -> Usage:
    """:class:`Usage` of the live process ``pid``.

    Raises:
        OSError: no such process. ValueError: see :func:`parse_vmhwm`.
    """
    proc = Path("/proc") / str(pid)
    ticks = parse_cpu_ticks((proc / "stat").read_text())
    return Usage(parse_vmhwm((proc / "status").read_text()), ticks / os.sysconf("SC_CLK_TCK"))


def environment(
    kubeconfig: Path,
    *,
    metrics_port: int,
    health_port: int,
    log_level: str = "info",
    instance_types_file: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Karpenter's settings as environment variables, as the KWOK chart sets them with its default values
    (batch windows 10 s / 1 s, Respect preferences, Strict minValues, its feature gates), plus what running
    outside a pod needs: ``KUBECONFIG`` and leader election off. ``instance_types_file`` sets
    ``INSTANCE_TYPES_FILE_PATH`` (the provider's instance-type catalogue; default: its embedded one)."""
    env = {
        "KUBECONFIG": str(kubeconfig),
        "KUBERNETES_MIN_VERSION": "1.19.0-0",
        "DISABLE_LEADER_ELECTION": "true",
        "LOG_LEVEL": log_level,
        "METRICS_PORT": str(metrics_port),
        "HEALTH_PROBE_PORT": str(health_port),
        "SYSTEM_NAMESPACE": "kube-system",
        "FEATURE_GATES": CHART_FEATURE_GATES,
        "BATCH_MAX_DURATION": "10s",
        "BATCH_IDLE_DURATION": "1s",
        "PREFERENCE_POLICY": "Respect",
        "MIN_VALUES_POLICY": "Strict",
    }
    if instance_types_file is not None:
        env["INSTANCE_TYPES_FILE_PATH"] = str(instance_types_file)
    return {**env, **(extra or {})}


def _free_port() -> int:
    from e2e.helpers import free_port

    return free_port()


@dataclass
class KarpenterProcess:
    """Karpenter's KWOK provider as a child process (its own process group, killed by the kernel if this process
    dies: ``setpriv --pdeathsig``), logging JSON lines to ``log``."""

    binary: Path
    kubeconfig: Path
    log: Path
    log_level: str = "info"
    instance_types_file: Path | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    metrics_port: int = field(default_factory=_free_port)
    health_port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    def start(self) -> None:
        """Spawn the controller (returns at once; see :meth:`wait_ready`)."""
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR")}
        env.update(
            environment(
                self.kubeconfig,
                metrics_port=self.metrics_port,
                health_port=self.health_port,
                log_level=self.log_level,
                instance_types_file=self.instance_types_file,
                extra=self.extra_env,
            )
        )
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["setpriv", "--pdeathsig", "TERM", "--", str(self.binary)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise KarpenterError("Karpenter is not started")
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, lines: int = 30) -> str:
        from e2e.cluster.controlplane import tail_of

        return tail_of(self.log, lines)

    def probe(self, path: str = "/readyz") -> int:
        """HTTP status of ``path`` on the health port (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}{path}", timeout=2) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return 0

    def wait_ready(self, timeout: float = 120.0) -> float:
        """Wait for ``/readyz`` (caches synced, CRDs mapped); seconds since start.

        Raises:
            KarpenterError: it exited or was not ready within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while self.probe() != 200:
            if not self.alive():
                raise KarpenterError(f"Karpenter exited with code {self.proc and self.proc.returncode}\n{self.tail()}")
            if time.monotonic() > deadline:
                raise KarpenterError(f"Karpenter not ready after {timeout:.0f}s\n{self.tail()}")
            time.sleep(0.2)
        return time.monotonic() - self.started_at

    def metrics(self) -> dict[str, float]:
        """``/metrics`` summed per sample name over label sets (Prometheus text format)."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
        sums: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
        return sums

    def usage(self) -> Usage:
        """Resource use so far (the process must be running)."""
        return read_usage(self.pid)

    def stop(self, timeout: float = 30.0) -> Usage:
        """Read :class:`Usage` (peak RSS, CPU seconds), then SIGTERM the process group and wait (SIGKILL after
        ``timeout`` seconds).

        Raises:
            KarpenterError: it had already exited, so its usage is unknown (log tail in the message).
        """
        if not self.alive():
            raise KarpenterError(f"Karpenter exited early (code {self.proc and self.proc.returncode})\n{self.tail()}")
        from e2e.cluster.controlplane import terminate_group

        used = self.usage()
        assert self.proc is not None
        terminate_group(self.proc, timeout)
        return used


# -- applying and measuring ----------------------------------------------------------------------------------------


async def apply(client: Any, docs: Iterable[Mapping[str, Any]]) -> None:
    """Server-side apply ``docs`` (``e2e.helpers.apply``, which waits for CRDs to be Established), with the
    KWOKNodeClass kind known too."""
    from e2e import helpers
    from karpy.kube.resources import Resource

    kinds = {
        **helpers.KINDS,
        "KWOKNodeClass": Resource(KWOK_GROUP, "v1alpha1", "kwoknodeclasses", "KWOKNodeClass", False),
    }
    for doc in docs:
        res = kinds[doc["kind"]]
        if doc["kind"] in helpers.KINDS:
            await helpers.apply(client, [doc])
            continue
        await client.request(
            "PATCH",
            res.path(None, doc["metadata"]["name"]),
            body=dict(doc),
            content_type=helpers.APPLY_PATCH,
            query={"fieldManager": "karpy-bench", "force": "true"},
        )


async def install(client: Any, source: Path | None = None, *, pool: Mapping[str, Any] | None = None) -> None:
    """Apply Karpenter's CRDs (:func:`crd_documents`), a KWOKNodeClass ``default`` and ``pool`` (default:
    :func:`nodepool`)."""
    await apply(client, crd_documents(source))
    await apply(client, [kwok_nodeclass(), dict(pool or nodepool())])


async def service_account_kubeconfig(client: Any, server: str, path: Path) -> Path:
    """A kubeconfig for the ServiceAccount ``karpenter/karpenter`` (created, bound to ``cluster-admin``), so the
    apiserver's audit log can tell Karpenter's requests (``e2e.cluster.controlplane.KARPENTER_USER``) from
    others'."""
    from e2e import helpers

    await apply(
        client,
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "karpenter"}},
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "karpenter", "namespace": "karpenter"},
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "karpenter-live-benchmark"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                "subjects": [{"kind": "ServiceAccount", "name": "karpenter", "namespace": "karpenter"}],
            },
        ],
    )
    return await helpers.service_account_kubeconfig(client, server, "karpenter", "karpenter", path)


async def nodepool_ready(client: Any, name: str = "default") -> bool:
    """Whether NodePool ``name`` has ``Ready=True`` (Karpenter provisions only for Ready pools)."""
    from e2e import helpers

    return await helpers.condition_ready(client, helpers.KINDS["NodePool"], name)


@dataclass
class Provisioned:
    """What :func:`provision` saw: ``total_seconds`` from the Deployment's creation until every pod was Running,
    per-pod seconds to Running (``p50``/``p99``, at the polling granularity), and the NodeClaims and KWOK
    Nodes that exist at that moment."""

    pods: int
    total_seconds: float
    p50_seconds: float
    p99_seconds: float
    nodeclaims: int
    nodes: int
    instance_types: dict[str, int]


async def provision(
    client: Any,
    name: str,
    pods: int,
    *,
    provider_prefix: str = KWOK_PROVIDER_PREFIX,
    timeout: float = 900.0,
    interval: float = 1.0,
) -> Provisioned:
    """Create Deployment ``name`` of ``pods`` pods and poll its pods every ``interval`` seconds until all are
    Running; Nodes are counted when their providerID starts with ``provider_prefix`` (``kwok://`` for Karpenter's
    KWOK provider, ``aws://`` for karpy).

    Raises:
        TimeoutError: not all Running within ``timeout`` seconds.
    """
    from e2e import helpers
    from karpy.kube import resources as r

    started = time.monotonic()
    await helpers.apply(client, [deployment(name, pods)])
    running_at: dict[str, float] = {}
    while len(running_at) < pods:
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{len(running_at)}/{pods} pods Running after {timeout:.0f}s")
        await asyncio.sleep(interval)
        items, _ = await client.list(r.PODS, "default", query={"labelSelector": f"app={name}"})
        now = time.monotonic() - started
        for pod in items:
            uid = pod["metadata"]["uid"]
            if uid not in running_at and (pod.get("status") or {}).get("phase") == "Running":
                running_at[uid] = now
    total = time.monotonic() - started
    claims, _ = await client.list(helpers.KINDS["NodeClaim"])
    nodes, _ = await client.list(r.NODES)
    kwok_nodes = [n for n in nodes if str((n.get("spec") or {}).get("providerID", "")).startswith(provider_prefix)]
    types: dict[str, int] = {}
    for node in kwok_nodes:
        it = node["metadata"].get("labels", {}).get("node.kubernetes.io/instance-type", "?")
        types[it] = types.get(it, 0) + 1
    seconds = list(running_at.values())
    return Provisioned(
        pods=pods,
        total_seconds=total,
        p50_seconds=statistics.median(seconds),
        p99_seconds=report.percentile(seconds, 0.99),
        nodeclaims=len(claims),
        nodes=len(kwok_nodes),
        instance_types=dict(sorted(types.items())),
    )


# -- the proof run ---------------------------------------------------------------------------------------------------


async def _measure(
    cluster_env: Mapping[str, str],
    binary: Path,
    workdir: Path,
    pods: int,
    timeout: float = 900.0,
    instance_types_file: Path | None = None,
) -> dict[str, Any]:
    from e2e import helpers
    from karpy.kube.client import KubeClient

    client = await KubeClient.from_environment(cluster_env["KUBECONFIG"])
    kubeconfig = await service_account_kubeconfig(
        client, cluster_env["CLUSTER_ENDPOINT"], workdir / "karpenter.kubeconfig"
    )
    karpenter = KarpenterProcess(binary, kubeconfig, workdir / "karpenter.log", instance_types_file=instance_types_file)
    try:
        source = module_dir()
        await install(client, source)
        karpenter.start()
        ready_seconds = await asyncio.to_thread(karpenter.wait_ready)
        await helpers.wait_for(lambda: nodepool_ready(client), timeout=60, what="NodePool default Ready")
        result = await provision(client, "inflate", pods, timeout=timeout)
        metrics = await asyncio.to_thread(karpenter.metrics)
        used = karpenter.stop()
        return {
            "controller": f"karpenter-kwok {KARPENTER_VERSION}",
            "ready_seconds": round(ready_seconds, 2),
            **asdict(result),
            "nodeclaims_created_total": metrics.get("karpenter_nodeclaims_created_total", 0.0),
            "peak_rss_mib": round(used.peak_rss_bytes / 2**20, 1),
            "cpu_seconds": round(used.cpu_seconds, 2),
        }
    finally:
        if karpenter.alive():
            karpenter.stop()
        await client.close()


def exit_on_signal(signum: int, frame: Any) -> None:
    """SIGTERM as SystemExit, so ``finally`` blocks stop the controller and the cluster."""
    raise SystemExit(128 + signum)


def _line(result: Mapping[str, Any]) -> str:
    return (
        f"{result['controller']}: {result['pods']} pods Running in {result['total_seconds']:.1f}s "
        f"(p50 {result['p50_seconds']:.1f}s, p99 {result['p99_seconds']:.1f}s); {result['nodeclaims']} NodeClaims, "
        f"{result['nodes']} nodes {result['instance_types']}; peak RSS {result['peak_rss_mib']} MiB, "
        f"CPU {result['cpu_seconds']} s"
    )


def run_one(
    controller: str,
    pods: int,
    workdir: Path,
    binary: Path | None = None,
    *,
    timeout: float = 900.0,
    instance_types_file: Path | None = None,
) -> dict[str, Any]:
    """``controller`` (``karpenter`` or ``karpy``) on a fresh local cluster under ``workdir``: the figures of
    :func:`_measure` / :func:`benchmarks.live.karpyside.measure`. The caller holds the cluster lock."""
    from benchmarks.live import karpyside
    from e2e.cluster import launcher

    name = f"{controller}-live"
    cluster = launcher.start(workdir / "cluster", name)
    try:
        if controller == "karpenter":
            return asyncio.run(
                _measure(cluster.env, binary or ensure_binary(), workdir, pods, timeout, instance_types_file)
            )
        return asyncio.run(karpyside.measure(cluster.env, name, workdir, pods, timeout))
    finally:
        cluster.stop()


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmarks.live.karpenter --pods N [--controller karpenter|karpy|both]``: for each controller a
    fresh local cluster and a Deployment of N pods; prints one JSON object per controller (time to all Running,
    NodeClaims, Nodes, peak RSS, CPU s) and a summary line each on stderr."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.live.karpenter", description=main.__doc__)
    parser.add_argument("--pods", type=int, default=500)
    parser.add_argument("--controller", choices=("karpenter", "karpy", "both"), default="karpenter")
    parser.add_argument("--workdir", type=Path, default=None, help="parent of the cluster workdirs (default: temp)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for all pods Running")
    parser.add_argument(
        "--instance-types-file",
        type=Path,
        default=None,
        help="Karpenter's INSTANCE_TYPES_FILE_PATH (e.g. from python -m benchmarks.live.catalogue --out FILE)",
    )
    args = parser.parse_args(argv)
    # Cleanup (controller stopped, cluster torn down) on SIGTERM, and on SIGINT even when started in the background
    # by a non-interactive shell, which ignores SIGINT for its children: karpy's process has no pdeathsig.
    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    binary = ensure_binary() if args.controller in ("karpenter", "both") else None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="karpy-live-"))
    controllers = ["karpenter", "karpy"] if args.controller == "both" else [args.controller]
    for controller in controllers:
        result = run_one(
            controller,
            args.pods,
            workdir / controller,
            binary,
            timeout=args.timeout,
            instance_types_file=args.instance_types_file,
        )
        print(json.dumps(result), flush=True)
        print(f"{_line(result)}; logs in {workdir / controller}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
