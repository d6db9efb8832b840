"""``karpy simulate`` benchmark: wall time and peak RSS of the real CLI on generated manifest sets.

Run from the repository root::

    .venv/bin/python -m benchmarks.simulate                    # 1k, 5k and 20k pods, 3 runs each
    .venv/bin/python -m benchmarks.simulate --sizes 20000 --repeat 5
    .venv/bin/python -m benchmarks.simulate --keep DIR         # also write the manifests to DIR (one dir per size)

Input (built by :func:`write_manifests`, deterministic: ``random.Random(size)``). One directory per size, shaped
like a cluster dump plus the user's own workload files, about the examples in ``manifests/examples/``:

* ``nodepools.yaml``: two NodePools — ``default`` (on-demand, amd64, categories c/m/r, generation > 2) and
  ``spot`` (spot, amd64 and arm64) — and their EC2NodeClass ``default``.
* ``deployments.yaml``: Deployments holding half the pods as ``replicas`` (5 to 120 each): web tiers with a
  zone topology spread (``maxSkew: 1``, ``DoNotSchedule``), batch workers with a ``nodeSelector`` on
  ``karpenter.sh/capacity-type: spot`` (a tenth on ``kubernetes.io/arch: arm64``), and small services with
  required hostname pod anti-affinity (one pod per node; about 1 % of the pods).
* ``pods/pods-NNN.yaml``: the other half as standalone Pod documents, 1,000 per file, as ``kubectl get pods
  -o yaml`` prints pending pods (owner references, labels, annotations, env, probes, a ``status``), in the same
  three shapes and ratios.

Every pod requests 100m–2 CPU and 128Mi–4Gi memory. The CLI runs as a subprocess (``python -m karpy simulate -f
DIR --spot-price-ratio 0.35 --output json --timings``) ``--repeat`` times per size; the table shows the median
wall time and CPU time (user + system of the child, steadier than wall time on a
shared machine), the median of each phase (``--timings`` prints them on stderr), the peak RSS of the child
(``os.wait4`` rusage, largest over the runs) and the plan's node count and price. The machine may be shared:
medians, not minima, are printed. Targets (at 20,000 pods: ≤ 5 s wall, ≤ 400 MB peak RSS) are checked here and
printed as PASS/FAIL; the exit status is 1 when a target is missed or a run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs

TARGET_PODS = 20_000
TARGET_SECONDS = 5.0
TARGET_RSS_MB = 400.0
PODS_PER_FILE = 1_000

NODEPOOLS = """\
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: kubernetes.io/os, operator: In, values: [linux]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["2"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      expireAfter: 720h
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: spot
spec:
  weight: 10
  template:
    metadata:
      labels: {workload: batch}
    spec:
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64, arm64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [spot]}
        - {key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m]}
        - {key: karpenter.k8s.aws/instance-generation, operator: Gt, values: ["4"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole-bench
  amiSelectorTerms:
    - alias: al2023@latest
  subnetSelectorTerms:
    - tags: {karpenter.sh/discovery: bench}
  securityGroupSelectorTerms:
    - tags: {karpenter.sh/discovery: bench}
"""

CPUS = ("100m", "250m", "500m", "750m", "1", "1500m", "2")
MEMORIES = ("128Mi", "256Mi", "512Mi", "1Gi", "1536Mi", "2Gi", "4Gi")


@attrs.frozen
class Shape:
    """One workload: its kind of constraint, pod count, requests, and name (also its ``app`` label)."""

    name: str
    kind: str  # "web" (zone spread), "batch" (spot node selector), "batch-arm" (spot arm64), "solo" (anti-affinity)
    replicas: int
    cpu: str
    memory: str


def shapes(total: int, rng: random.Random, prefix: str) -> list[Shape]:
    """Workloads summing to ``total`` pods: 1 % ``solo`` (anti-affinity, 3–10 replicas), then web/batch."""
    out: list[Shape] = []
    left = total
    solo = max(1, total // 100)
    while solo > 0:
        n = min(solo, rng.randint(3, 10))
        out.append(Shape(f"{prefix}-solo-{len(out)}", "solo", n, rng.choice(CPUS[3:]), rng.choice(MEMORIES[3:])))
        solo -= n
        left -= n
    while left > 0:
        n = min(left, rng.randint(5, 120))
        kind = rng.choices(("web", "batch", "batch-arm"), weights=(6, 3, 1))[0]
        out.append(Shape(f"{prefix}-{kind}-{len(out)}", kind, n, rng.choice(CPUS), rng.choice(MEMORIES)))
        left -= n
    return out


def constraints(shape: Shape) -> dict[str, Any]:
    """The pod spec fields that make ``shape`` what it is (spread, selector or anti-affinity)."""
    selector = {"matchLabels": {"app": shape.name}}
    if shape.kind == "web":
        return {
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": selector,
                }
            ]
        }
    if shape.kind == "solo":
        term = {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
        return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}
    node_selector = {"karpenter.sh/capacity-type": "spot"}
    if shape.kind == "batch-arm":
        node_selector["kubernetes.io/arch"] = "arm64"
    toleration = {"key": "workload", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
    return {"nodeSelector": node_selector, "tolerations": [toleration]}


def container(shape: Shape) -> dict[str, Any]:
    """A realistic container: image, port, env, probes, requests and limits."""
    return {
        "name": "app",
        "image": f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{shape.name}:v1.42.0",
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
        "env": [
            {"name": "APP_NAME", "value": shape.name},
            {"name": "LOG_LEVEL", "value": "info"},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
        ],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "resources": {
            "requests": {"cpu": shape.cpu, "memory": shape.memory},
            "limits": {"memory": shape.memory},
        },
        "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io", "readOnly": True}],
    }


def pod_spec(shape: Shape) -> dict[str, Any]:
    """The pod spec a template or a dumped pod carries."""
    extra = constraints(shape)
    return {
        "containers": [container(shape)],
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30,
        "serviceAccountName": "default",
        "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}}],
        **extra,
        "tolerations": [
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            *extra.get("tolerations", []),
        ],
    }


def deployment(shape: Shape) -> dict[str, Any]:
    """A Deployment of ``shape.replicas`` pods."""
    labels = {"app": shape.name, "tier": shape.kind}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": shape.name, "namespace": "apps", "labels": labels},
        "spec": {
            "replicas": shape.replicas,
            "selector": {"matchLabels": {"app": shape.name}},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(shape)},
        },
    }


def dumped_pods(shape: Shape) -> Iterator[dict[str, Any]]:
    """``shape.replicas`` pending Pods as ``kubectl get pods -o yaml`` prints them (owned by a ReplicaSet)."""
    replicaset = f"{shape.name}-7d9f8c6b5"
    for i in range(shape.replicas):
        yield {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{replicaset}-{i:05x}",
                "namespace": "dump",
                "labels": {"app": shape.name, "tier": shape.kind, "pod-template-hash": "7d9f8c6b5"},
                "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-01T10:00:00Z"},
                "creationTimestamp": "2026-11-25T04:00:00Z",
                "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"pod/{shape.name}/{i}")),
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": replicaset,
                        "uid": str(uuid.uuid5(uuid.NAMESPACE_URL, f"replicaset/{replicaset}")),
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": pod_spec(shape),
            "status": {
                "phase": "Pending",
                "qosClass": "Burstable",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "lastTransitionTime": "2026-11-25T04:00:01Z",
                        "message": "0/3 nodes are available",
                    }
                ],
            },
        }


def write_manifests(directory: Path, pods: int) -> None:
    """Write the manifest set of ``pods`` pods into ``directory`` (see the module docstring)."""
    import yaml

    rng = random.Random(pods)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "nodepools.yaml").write_text(NODEPOOLS)
    deployed = pods // 2
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    docs = [deployment(s) for s in shapes(deployed, rng, "deploy")]
    (directory / "deployments.yaml").write_text(yaml.dump_all(docs, Dumper=dumper, sort_keys=False))
    dump = [p for s in shapes(pods - deployed, rng, "dump") for p in dumped_pods(s)]
    (directory / "pods").mkdir(exist_ok=True)
    for n, start in enumerate(range(0, len(dump), PODS_PER_FILE)):
        chunk = dump[start : start + PODS_PER_FILE]
        text = yaml.dump_all(chunk, Dumper=dumper, sort_keys=False)
        (directory / "pods" / f"pods-{n:03d}.yaml").write_text(text)


@attrs.frozen
class Run:
    """One CLI run: wall seconds, CPU seconds (user + system), peak RSS in MB, phase
    seconds (from ``--timings``) and the plan's summary."""

    wall: float
    rss_mb: float
    phases: dict[str, float]
    nodes: int
    price: float
    placed: int
    cpu: float = 0.0


def run_once(directory: Path) -> Run:
    """``python -m karpy simulate --timings`` on ``directory`` as a subprocess; raises RuntimeError when it fails."""
    cmd = [sys.executable, "-m", "karpy", "simulate", "-f", str(directory), "--spot-price-ratio", "0.35"]
    cmd += ["-o", "json", "--timings"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"karpy simulate exited {proc.returncode}: {stderr.strip()[-2000:]}")
    plan = json.loads(stdout)
    summary = plan["summary"]
    return Run(
        wall=wall,
        rss_mb=usage.ru_maxrss / 1024,  # kilobytes on Linux
        phases=parse_timings(stderr),
        nodes=summary["newNodes"],
        price=summary["pricePerHour"],
        placed=summary["podsOnNewNodes"] + summary["podsOnExistingNodes"],
        cpu=usage.ru_utime + usage.ru_stime,
    )


def parse_timings(stderr: str) -> dict[str, float]:
    """``phase=seconds`` pairs of the ``karpy simulate timings:`` line (empty if the CLI printed none)."""
    for line in stderr.splitlines():
        if line.startswith("karpy simulate timings:"):
            pairs = (item.split("=", 1) for item in line.split(":", 1)[1].split())
            return {k: float(v) for k, v in pairs}
    return {}


def main(argv: list[str] | None = None) -> int:
    """Generate, run and print the table; exit 1 when the 20k targets are missed or a run fails."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,5000,20000", help="comma-separated pod counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size (median shown)")
    parser.add_argument("--keep", metavar="DIR", help="write the manifests under DIR/<size> and keep them")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    failed = False
    with tempfile.TemporaryDirectory(prefix="karpy-bench-simulate-") as tmp:
        root = Path(args.keep) if args.keep else Path(tmp)
        rows = []
        for size in sizes:
            directory = root / str(size)
            write_manifests(directory, size)
            try:
                runs = [run_once(directory) for _ in range(args.repeat)]
            except RuntimeError as err:
                print(f"{size} pods: {err}", file=sys.stderr)
                failed = True
                continue
            rows.append((size, runs))
            print(_row(size, runs), file=sys.stderr, flush=True)
    phases = sorted({k for _, runs in rows for r in runs for k in r.phases}, key=_phase_order)
    header = ["pods", "wall s", "cpu s", "peak MB", *[f"{p} s" for p in phases], "nodes", "$/h", "placed", "target"]
    table = [header]
    for size, runs in rows:
        wall = statistics.median(r.wall for r in runs)
        rss = max(r.rss_mb for r in runs)
        verdict = "-"
        if size == TARGET_PODS:
            ok = wall <= TARGET_SECONDS and rss <= TARGET_RSS_MB
            verdict = f"{'PASS' if ok else 'FAIL'} (≤{TARGET_SECONDS:g} s, ≤{TARGET_RSS_MB:g} MB)"
            failed |= not ok
        table.append(
            [
                str(size),
                f"{wall:.2f}",
                f"{statistics.median(r.cpu for r in runs):.2f}",
                f"{rss:.0f}",
                *[f"{statistics.median(r.phases.get(p, 0.0) for r in runs):.2f}" for p in phases],
                str(runs[0].nodes),
                f"{runs[0].price:.2f}",
                str(runs[0].placed),
                verdict,
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for r in table:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
    print(f"medians of {args.repeat} run(s) per size; peak MB is the largest child ru_maxrss; shared machine: noisy")
    return 1 if failed else 0


def _row(size: int, runs: list[Run]) -> str:
    """A progress line on stderr while the other sizes run."""
    walls = ", ".join(f"{r.wall:.2f}" for r in runs)
    return f"{size} pods: wall {walls} s; peak {max(r.rss_mb for r in runs):.0f} MB"


PHASE_ORDER = ("read", "catalogue", "prepare", "solve", "launch", "output")


def _phase_order(name: str) -> tuple[int, str]:
    return (PHASE_ORDER.index(name) if name in PHASE_ORDER else len(PHASE_ORDER), name)


if __name__ == "__main__":
    sys.exit(main())
