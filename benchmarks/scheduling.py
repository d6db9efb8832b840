"""Scheduling benchmark: Karpenter's ``BenchmarkScheduling*`` workload, and a mixed one, through karpy's solve.

Run from the repository root::

    .venv/bin/python -m benchmarks.scheduling                 # the full table (about a minute on 2 cores)
    .venv/bin/python -m benchmarks.scheduling --sizes 100,2000 --repeat 1
    .venv/bin/python -m benchmarks.scheduling --json          # one JSON object per row
    .venv/bin/python -m benchmarks.scheduling --go 3          # and Karpenter's Go benchmark here, 3 runs each

``--go COUNT`` runs Karpenter's own ``BenchmarkScheduling*`` (``sigs.k8s.io/karpenter`` v1.15.0,
``scheduling_benchmark_test.go``, build tag ``test_performance``) from the Go module cache through a throwaway
module in ``~/.cache/karpy-gobench``, ``-benchtime=1x`` (one fresh ``Solve`` per run; Go's setup, which
builds the instance types, is untimed, as karpy's catalogue tables are kept across solves), and prints
karpy's pods/s over Go's median pods/sec for the ``diverse`` and ``preference`` rows. It takes about
15-20 minutes on 2 cores (the 20,000-pod and RespectPreferences inputs dominate).

Inputs. ``../shared/tools/karpenter_bench_inputs.py`` (relative to the repository; override with the
``KARPY_BENCH_INPUTS`` environment variable) re-creates Karpenter's inputs bit for bit: Go's ``math/rand``
seeded 42, ``fake.InstanceTypes(400)``, the benchmark NodePool, ``makeDiversePods(n)`` and
``makePreferencePods(4000)``. Each size is generated as if its Go benchmark ran alone
(``-benchtime=1x -count=1``). Without that file the benchmark prints why and exits with status 2.

Workloads (rows):

* ``diverse``: ``makeDiversePods(n)`` — generic pods, zone and hostname topology spread, zone self-affinity,
  hostname self-anti-affinity — under both preference policies. The n/5 pods with hostname anti-affinity
  need a node each; the plan must use exactly n/5 NodeClaims (checked).
* ``preference``: ``makePreferencePods(4000)`` — preferred zone anti-affinity (w10), hostname anti-affinity
  (w1) and node affinity; ``Respect`` relaxes to one pod per node, ``Ignore`` bin-packs.
* ``generic``: the generic pods alone (``makeGenericPods``); nothing forces the node count, so the cost shows
  packing quality (target: within 3 % of the lower bound).
* ``mixed``: karpy's own workload: three NodePools (general on-demand/spot, a tainted GPU pool, a spot batch
  pool), GPU training and inference pods (``nvidia.com/gpu``, inference with hostname anti-affinity), web
  deployments with zone spread, stateful pods whose bound zonal PVs pin their zone (derived with
  :func:`karpy.scheduling.volumes.volume_topology`), batch pods with preferred anti-affinity, and a DaemonSet.

Columns: ``pods/s`` = pods / median wall time of ``solve`` alone (input conversion excluded, as Go excludes
setup); ``nodes`` = NodeClaims in the plan; ``$/h`` = sum over NodeClaims of the cheapest
candidate type's cheapest offering; ``LB $/h`` and ``over`` = the lower bound from the reference (integer
bound of the fake catalogue with n/5 forced nodes; a per-pool single-resource bound for ``mixed``); ``cpu``
and ``mem`` = mean utilisation of the NodeClaims (requests / allocatable of that cheapest type). Every row also
checks the plan (:mod:`benchmarks.plan_checks`): every pod placed exactly once and none unschedulable, every
NodeClaim's requests fit its cheapest type, required pod anti-affinity across all NodeClaims (any topology
key, ``matchLabels`` and ``matchExpressions``), required pod affinity (each zone-affinity group shares one
zone), ``DoNotSchedule`` topology spread within ``maxSkew``, and for ``diverse`` the n/5 node count; a failed
check is printed and the exit status is 1.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from benchmarks.optimum import Optimum, available, optimum
from benchmarks.plan_checks import plan_checks
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling.model import (
    DaemonSet,
    LabelSelector,
    NewNodeClaim,
    NodePool,
    Pod,
    PodAffinityTerm,
    Requirement,
    SchedulingResult,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)
from karpy.scheduling.scheduler import solve
from karpy.scheduling.volumes import volume_topology

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
CT = "karpenter.sh/capacity-type"
GIB = 2**30
MIB = 2**20
DEFAULT_SIZES = (100, 500, 1000, 2000, 5000, 10000, 20000)
POLICIES = ("Respect", "Ignore")


# -- inputs --------------------------------------------------------------------------------------------------


def load_inputs() -> ModuleType:
    """Import ``karpenter_bench_inputs.py`` from ``../shared/tools`` (exit 2 when it is missing)."""
    default = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "karpenter_bench_inputs.py"
    path = Path(os.environ.get("KARPY_BENCH_INPUTS", str(default)))
    if not path.is_file():
        print(f"benchmark inputs not found: {path} (set KARPY_BENCH_INPUTS)", file=sys.stderr)
        raise SystemExit(2)
    spec = importlib.util.spec_from_file_location("karpenter_bench_inputs", path)
    if spec is None or spec.loader is None:
        print(f"cannot load {path}", file=sys.stderr)
        raise SystemExit(2)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def fake_catalogue(kbi: ModuleType) -> tuple[InstanceType, ...]:
    """``fake.InstanceTypes(400)``: KubeReserved 100m/10Mi, five offerings at one price."""
    out = []
    for t in kbi.fake_instance_types(400):
        out.append(
            InstanceType(
                name=t.name,
                labels=dict(t.labels),
                capacity={"cpu": t.cpu_m, "memory": t.mem, "pods": t.pods},
                overhead={"cpu": kbi.KUBE_RESERVED_CPU_M, "memory": kbi.KUBE_RESERVED_MEM},
                offerings=tuple(Offering(zone, ct, t.price) for ct, zone in t.offerings),
            )
        )
    return tuple(out)


def bench_nodepool(catalogue: tuple[InstanceType, ...]) -> NodePool:
    """The benchmark NodePool: no requirements, template label, effectively unlimited."""
    return NodePool(
        name="default",
        labels={"testing/cluster": "unspecified"},
        limits={"cpu": 10_000_000 * 1000, "memory": 10_000_000 * GIB},
        instance_types=catalogue,
    )


def _selector(labels: dict[str, str]) -> LabelSelector:
    return LabelSelector(tuple(sorted(labels.items())))


def to_pod(p: Any) -> Pod:
    """A ``karpenter_bench_inputs.Pod`` as the scheduling model (creation order = generation order)."""
    return Pod(
        uid=f"uid-{p.idx}",
        namespace=p.namespace,
        name=f"{p.kind}-{p.idx:06d}",
        labels=dict(p.labels),
        requests={"cpu": p.cpu_m, "memory": p.mem, "pods": 1},
        created=float(p.idx),
        topology_spread=tuple(
            TopologySpreadConstraint(
                c["topologyKey"], c["maxSkew"], c["whenUnsatisfiable"], _selector(c["labelSelector"])
            )
            for c in p.topology_spread
        ),
        pod_affinity=tuple(
            PodAffinityTerm(c["topologyKey"], _selector(c["labelSelector"])) for c in p.pod_affinity_required
        ),
        pod_anti_affinity=tuple(
            PodAffinityTerm(c["topologyKey"], _selector(c["labelSelector"])) for c in p.pod_anti_affinity_required
        ),
        preferred_terms=tuple(
            (
                c["weight"],
                tuple(Requirement(e["key"], e["operator"], tuple(e["values"])) for e in c["matchExpressions"]),
            )
            for c in p.node_affinity_preferred
        ),
        preferred_pod_anti_affinity=tuple(
            PodAffinityTerm(c["topologyKey"], _selector(c["labelSelector"]), weight=c["weight"])
            for c in p.pod_anti_affinity_preferred
        ),
    )


# -- the mixed workload --------------------------------------------------------------------------------------

ZONES = ("us-west-2a", "us-west-2b", "us-west-2c")
GPU_TAINT = Taint("nvidia.com/gpu", "NoSchedule", "true")


def _ec2(name: str, cpu: int, mem_gib: int, price: float, gpu: int = 0) -> InstanceType:
    family = name.split(".")[0]
    capacity = {"cpu": cpu * 1000, "memory": mem_gib * GIB, "pods": min(234, 8 * cpu + 10)}
    labels = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-cpu": str(cpu),
    }
    if gpu:
        capacity["nvidia.com/gpu"] = gpu
        labels["karpenter.k8s.aws/instance-gpu-count"] = str(gpu)
    # kube-reserved as EKS computes it (simplified): 60m + 10m per core, 255Mi + 11Mi per pod slot.
    overhead = {"cpu": 60 + 10 * cpu, "memory": (255 + 11 * capacity["pods"]) * MIB}
    offerings = tuple(Offering(z, "on-demand", price) for z in ZONES) + tuple(
        Offering(z, "spot", round(price * (0.35 + 0.05 * i), 4)) for i, z in enumerate(ZONES)
    )
    return InstanceType(name, labels, capacity, overhead, offerings)


def mixed_catalogue() -> tuple[InstanceType, ...]:
    out = []
    for family, gib_per_cpu, base in (("c6i", 2, 0.085), ("m6i", 4, 0.096), ("r6i", 8, 0.126)):
        for size, cpu in (("large", 2), ("xlarge", 4), ("2xlarge", 8), ("4xlarge", 16), ("8xlarge", 32)):
            out.append(_ec2(f"{family}.{size}", cpu, cpu * gib_per_cpu, round(base * cpu / 2, 4)))
    out += [
        _ec2("g5.xlarge", 4, 16, 1.006, gpu=1),
        _ec2("g5.2xlarge", 8, 32, 1.212, gpu=1),
        _ec2("g5.12xlarge", 48, 192, 5.672, gpu=4),
        _ec2("g5.48xlarge", 192, 768, 16.288, gpu=8),
    ]
    return tuple(out)


def mixed_nodepools() -> list[NodePool]:
    catalogue = mixed_catalogue()
    cpu_only = tuple(t for t in catalogue if "nvidia.com/gpu" not in t.capacity)
    gpus = tuple(t for t in catalogue if "nvidia.com/gpu" in t.capacity)
    return [
        NodePool(
            "general",
            weight=10,
            requirements=(Requirement(CT, "In", ("on-demand", "spot")),),
            instance_types=cpu_only,
        ),
        NodePool(
            "gpu",
            weight=20,
            taints=(GPU_TAINT,),
            requirements=(Requirement(CT, "In", ("on-demand",)),),
            limits={"nvidia.com/gpu": 4096},
            instance_types=gpus,
        ),
        NodePool(
            "batch",
            weight=30,
            labels={"workload": "batch"},
            requirements=(Requirement(CT, "In", ("spot",)),),
            instance_types=cpu_only,
        ),
    ]


def _pv(name: str, zone: str) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "topology.ebs.csi.aws.com/zone", "operator": "In", "values": [zone]}]}
    return {"metadata": {"name": name}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}}}


def mixed_pods(n: int, seed: int = 7) -> list[Pod]:
    """``n`` pods: 40 % web, 10 % stateful with zonal PVs, 10 % GPU, 40 % batch (deterministic)."""
    rng = random.Random(seed)
    out: list[Pod] = []

    def add(kind: str, cpu: int, mem: int, **kw: Any) -> None:
        i = len(out)
        requests = {"cpu": cpu, "memory": mem, "pods": 1, **kw.pop("extra", {})}
        out.append(
            Pod(
                uid=f"m-{i}",
                namespace=kw.pop("ns", "apps"),
                name=f"{kind}-{i:05d}",
                requests=requests,
                created=float(i),
                **kw,
            )
        )

    tolerate_gpu = (Toleration("nvidia.com/gpu", "Exists"),)
    for _ in range(n * 4 // 10):
        app = f"web-{rng.randrange(6)}"
        sel = _selector({"app": app})
        add(
            "web",
            rng.choice((250, 500, 1000)),
            rng.choice((512, 1024, 2048)) * MIB,
            labels={"app": app},
            topology_spread=(TopologySpreadConstraint(ZONE, 1, "DoNotSchedule", sel),),
        )
    for _ in range(n // 10):
        i = len(out)
        zone = ZONES[rng.randrange(3)]
        obj = {
            "metadata": {"name": f"db-{i}", "namespace": "data"},
            "spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{i}"}}]},
        }
        pvc = {"metadata": {"name": f"data-{i}", "namespace": "data"}, "spec": {"volumeName": f"pv-{i}"}}
        topo = volume_topology(obj, {f"data/data-{i}": pvc}, {f"pv-{i}": _pv(f"pv-{i}", zone)}, {})
        add("db", 1000, 4 * GIB, ns="data", labels={"app": "db"}, volume_terms=topo.terms)
    for _ in range(n // 20):
        add(
            "train",
            8000,
            30 * GIB,
            ns="ml",
            extra={"nvidia.com/gpu": rng.choice((1, 2, 4))},
            tolerations=tolerate_gpu,
            labels={"app": "train"},
        )
    infer = _selector({"app": "infer"})
    for _ in range(n // 20):
        add(
            "infer",
            2000,
            8 * GIB,
            ns="ml",
            extra={"nvidia.com/gpu": 1},
            tolerations=tolerate_gpu,
            labels={"app": "infer"},
            pod_anti_affinity=(PodAffinityTerm(HOST, infer),),
        )
    batch = _selector({"app": "batch"})
    while len(out) < n:
        add(
            "batch",
            rng.choice((500, 1000, 2000)),
            rng.choice((1, 2, 4)) * GIB,
            ns="batch",
            labels={"app": "batch"},
            node_selector={"workload": "batch"},
            preferred_pod_anti_affinity=(PodAffinityTerm(HOST, batch, weight=10),),
        )
    return out


def mixed_daemonsets() -> list[DaemonSet]:
    agent = Pod(
        uid="ds",
        namespace="kube-system",
        name="agent",
        requests={"cpu": 100, "memory": 128 * MIB, "pods": 1},
        tolerations=(Toleration(operator="Exists"),),
    )
    return [DaemonSet("kube-system", "agent", agent)]


def mixed_lower_bound(pods: Sequence[Pod], pools: Sequence[NodePool], daemon: dict[str, int]) -> float:
    """A valid $/h lower bound: pods split into classes that use disjoint NodePools (GPU, batch, the rest);
    per class ``max_r Σ_shapes R_{s,r} · min_{t fits s} price_t / allocatable_{t,r}`` (the
    single-resource bound tightened by fit constraints; allocatable net of the DaemonSet)."""
    classes: dict[str, list[Pod]] = {}
    for p in pods:
        name = "gpu" if "nvidia.com/gpu" in p.requests else "batch" if p.node_selector else "general"
        classes.setdefault(name, []).append(p)
    by_name = {p.name: p for p in pools}
    total = 0.0
    for name, members in classes.items():
        pool = by_name[name]
        allowed = {r.key: r.values for r in pool.requirements}.get(CT)
        types = []
        for t in pool.instance_types:
            prices = [o.price for o in t.offerings if allowed is None or o.capacity_type in allowed]
            alloc = {k: v - daemon.get(k, 0) for k, v in t.allocatable.items()}
            if prices:
                types.append((min(prices), alloc))
        shapes: dict[tuple[tuple[str, int], ...], int] = {}
        for p in members:
            key = tuple(sorted(p.requests.items()))
            shapes[key] = shapes.get(key, 0) + 1
        best = 0.0
        for resource in ("cpu", "memory", "nvidia.com/gpu", "pods"):
            bound = 0.0
            for shape, count in shapes.items():
                need = dict(shape)
                if not need.get(resource):
                    continue
                fitting = [
                    price / alloc[resource]
                    for price, alloc in types
                    if alloc.get(resource, 0) > 0 and all(alloc.get(k, 0) >= v for k, v in need.items())
                ]
                bound += count * need[resource] * min(fitting)
            best = max(best, bound)
        total += best
    return total


# -- measuring -----------------------------------------------------------------------------------------------


@attrs.frozen
class Row:
    workload: str
    pods: int
    policy: str
    pods_per_second: float
    seconds: float
    nodes: int
    errors: int
    cost: float
    lower_bound: float
    cpu_util: float
    mem_util: float
    checks: tuple[str, ...]
    optimum: Optimum | None = None

    @property
    def over(self) -> float:
        return self.cost / self.lower_bound - 1 if self.lower_bound else 0.0


def price(claim: NewNodeClaim) -> float:
    """The NodeClaim's launch price: cheapest allowed offering of its cheapest candidate type (USD/hour)."""
    return claim.cheapest_price or 0.0


def utilisation(claims: Sequence[NewNodeClaim], resource: str) -> float:
    values = [
        c.requests.get(resource, 0) / c.instance_types[0].allocatable[resource]
        for c in claims
        if c.instance_types and c.instance_types[0].allocatable.get(resource)
    ]
    return statistics.fmean(values) if values else 0.0


def checks(result: SchedulingResult, pods: Sequence[Pod], expected_nodes: int | None = None) -> tuple[str, ...]:
    """Failed invariants of a plan (empty when all hold): :func:`benchmarks.plan_checks.plan_checks`, and for
    ``makeDiversePods(n)`` the node count ``expected_nodes`` (n/5: its n/5 pods with hostname anti-affinity
    need a node each, and its other pods fit beside them)."""
    failed = list(plan_checks(result, pods))
    if expected_nodes is not None and len(result.new_nodeclaims) != expected_nodes:
        failed.append(f"{len(result.new_nodeclaims)} NodeClaims, expected {expected_nodes}")
    return tuple(failed)


def measure(
    workload: str,
    pods: list[Pod],
    run: Callable[[list[Pod]], SchedulingResult],
    repeat: int,
    lower_bound: float,
    policy: str,
    expected_nodes: int | None,
) -> Row:
    times = []
    result: SchedulingResult | None = None
    for _ in range(repeat):
        start = time.perf_counter()
        result = run(pods)
        times.append(time.perf_counter() - start)
    assert result is not None
    seconds = statistics.median(times)
    claims = result.new_nodeclaims
    return Row(
        workload=workload,
        pods=len(pods),
        policy=policy,
        pods_per_second=len(pods) / seconds,
        seconds=seconds,
        nodes=len(claims),
        errors=len(result.errors),
        cost=sum(price(c) for c in claims),
        lower_bound=lower_bound,
        cpu_util=utilisation(claims, "cpu"),
        mem_util=utilisation(claims, "memory"),
        checks=checks(result, pods, expected_nodes),
    )


def rows(sizes: Sequence[int], repeat: int, mixed_size: int) -> list[Row]:
    kbi = load_inputs()
    pool = bench_nodepool(fake_catalogue(kbi))
    out: list[Row] = []

    def runner(policy: str) -> Callable[[list[Pod]], SchedulingResult]:
        return lambda pods: solve(pods, [pool], [], [], preference_policy=policy)

    for n in sizes:
        raw = kbi.inputs_for([f"D{n}"])[0]
        pods = [to_pod(p) for p in raw]
        bound = kbi.fake_catalog_integer_lb(raw, n // 5)["lb"]
        for policy in POLICIES:
            out.append(measure("diverse", pods, runner(policy), repeat, bound, policy, max(1, n // 5)))
    raw = kbi.inputs_for(["P4000"])[0]
    pods = [to_pod(p) for p in raw]
    bound = kbi.fake_catalog_integer_lb(raw, 0)["lb"]
    for policy in POLICIES:
        out.append(measure("preference", pods, runner(policy), repeat, bound, policy, None))
    for n in sizes:
        generic: list[Any] = []
        kbi.BenchInputs()._generic(n, generic)
        bound = kbi.fake_catalog_integer_lb(generic, 0)["lb"]
        out.append(measure("generic", [to_pod(p) for p in generic], runner("Respect"), repeat, bound, "Respect", None))
    pools, daemons = mixed_nodepools(), mixed_daemonsets()

    def mixed_runner(policy: str) -> Callable[[list[Pod]], SchedulingResult]:
        return lambda pods: solve(pods, pools, [], daemons, preference_policy=policy)

    pods = mixed_pods(mixed_size)
    bound = mixed_lower_bound(pods, pools, dict(daemons[0].pod.requests))
    for policy in POLICIES:
        out.append(
            measure(
                "mixed",
                pods,
                mixed_runner(policy),
                repeat,
                bound,
                policy,
                None,
            )
        )
    return out


# -- cost against the optimum (benchmarks/optimum.py) -------------------------------------------------------

OPTIMUM_MAX_PODS = 100
MIXED_SMALL = 100


def optimum_inputs(row: Row) -> tuple[list[Pod], list[NodePool], dict[str, dict[str, int]]] | None:
    """The pods, NodePools and DaemonSet overhead per pool of a row, re-created (None: too big or unknown)."""
    if row.pods > OPTIMUM_MAX_PODS:
        return None
    if row.workload in ("diverse", "generic"):
        kbi = load_inputs()
        pool = bench_nodepool(fake_catalogue(kbi))
        if row.workload == "diverse":
            raw = kbi.inputs_for([f"D{row.pods}"])[0]
        else:
            raw = []
            kbi.BenchInputs()._generic(row.pods, raw)
        return [to_pod(p) for p in raw], [pool], {}
    if row.workload == "mixed":
        pools, daemons = mixed_nodepools(), mixed_daemonsets()
        return mixed_pods(row.pods), pools, {p.name: dict(daemons[0].pod.requests) for p in pools}
    return None


def row_optimum(row: Row, seconds: float, cache: dict[tuple[str, int], Optimum]) -> Optimum | None:
    """The MILP optimum of a row's input (both policies share it: preferences are not constraints), with
    up to karpy's node count per NodePool + 2 node slots; None when not computed."""
    key = (row.workload, row.pods)
    if key in cache:  # the other policy's row: the inputs are not built again
        return cache[key]
    inputs = optimum_inputs(row) if available() else None
    if inputs is None:
        return None
    pods, pools, daemon = inputs
    daemons = mixed_daemonsets() if row.workload == "mixed" else []
    plan = solve(pods, pools, [], daemons, preference_policy="Ignore")
    per_pool = {p.name: 2 for p in pools}
    for claim in plan.new_nodeclaims:
        per_pool[claim.nodepool] += 1
    best = optimum(pods, pools, per_pool, daemon, time_limit=seconds)
    if row.lower_bound > best.bound:  # the reference's integer bound may be the tighter one
        proven = best.cost <= row.lower_bound * (1 + 1e-9)
        best = attrs.evolve(best, bound=min(best.cost, row.lower_bound), optimal=best.optimal or proven)
    cache[key] = best
    return best


def with_optimum(table: Sequence[Row], seconds: float) -> list[Row]:
    """``table`` with each small row's optimum, and a small ``mixed`` row pair (``MIXED_SMALL`` pods)."""
    out = list(table)
    if available() and not any(r.workload == "mixed" and r.pods <= OPTIMUM_MAX_PODS for r in out):
        pools, daemons = mixed_nodepools(), mixed_daemonsets()
        pods = mixed_pods(MIXED_SMALL)
        bound = mixed_lower_bound(pods, pools, dict(daemons[0].pod.requests))
        for policy in POLICIES:
            run = functools.partial(_solve_mixed, pools=pools, daemons=daemons, policy=policy)
            out.append(measure("mixed", pods, run, 1, bound, policy, None))
    cache: dict[tuple[str, int], Optimum] = {}
    return [attrs.evolve(r, optimum=row_optimum(r, seconds, cache)) for r in out]


def _solve_mixed(pods: list[Pod], pools: list[NodePool], daemons: list[DaemonSet], policy: str) -> SchedulingResult:
    return solve(pods, pools, [], daemons, preference_policy=policy)


def optimum_ratios(row: Row) -> tuple[float, float] | None:
    """``(cost / best packing found, cost / proven bound)`` — equal when the MILP proved its optimum."""
    best = row.optimum
    if best is None or not math.isfinite(best.cost) or best.cost <= 0:
        return None
    return row.cost / best.cost, row.cost / best.bound if best.bound > 0 else math.inf


def cost_over_optimum(row: Row) -> str:
    """``1.25`` when proven optimal, ``1.25 (<=1.29)`` with the bound's ratio when the MILP timed out."""
    ratios = optimum_ratios(row)
    if row.optimum is not None and not math.isfinite(row.optimum.cost):
        return "none found"  # the MILP found no packing within its time limit
    if ratios is None or row.optimum is None:
        return "-"
    best, bound = ratios
    return f"{best:.3f}" if row.optimum.optimal else f"{best:.3f} (<={bound:.3f})"


def format_table(table: Sequence[Row]) -> str:
    head = (
        f"{'workload':<10} {'pods':>6} {'policy':<7} {'pods/s':>8} {'solve s':>8} {'nodes':>6} "
        f"{'$/h':>9} {'LB $/h':>9} {'over':>7} {'cpu':>5} {'mem':>5} {'cost/opt':>15}"
    )
    lines = [head, "-" * len(head)]
    for r in table:
        lines.append(
            f"{r.workload:<10} {r.pods:>6} {r.policy:<7} {r.pods_per_second:>8,.0f} {r.seconds:>8.3f} {r.nodes:>6} "
            f"{r.cost:>9.2f} {r.lower_bound:>9.2f} {r.over:>+7.1%} {r.cpu_util:>5.0%} {r.mem_util:>5.0%} "
            f"{cost_over_optimum(r):>15}"
        )
        lines += [f"    check failed: {c}" for c in r.checks]
    return "\n".join(lines)


# -- Karpenter's Go benchmark, on this machine -----------------------------------------------------------------

GO_PACKAGE = "sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
GO_MODULE = "sigs.k8s.io/karpenter@v1.15.0"


def go_benchmark_name(row: Row) -> str | None:
    """The Go benchmark measuring the same input as ``row`` (``diverse`` n → ``BenchmarkScheduling<n>``,
    ``preference`` → ``Benchmark{Respect,Ignore}Preferences``), None for karpy's own workloads."""
    if row.workload == "diverse":
        return f"BenchmarkScheduling{row.pods}"
    if row.workload == "preference":
        return f"Benchmark{row.policy}Preferences"
    return None


def go_pods_per_second(names: Sequence[str], count: int) -> dict[str, float]:
    """Run Karpenter's ``BenchmarkScheduling*`` (``scheduling_benchmark_test.go``, build tag ``test_performance``)
    from the Go module cache: median ``pods/sec`` per benchmark name over ``count`` runs of ``-benchtime=1x``
    (a fresh scheduler per run, as karpy's solve). A throwaway module requiring ``sigs.k8s.io/karpenter``
    lives in ``$KARPY_GOBENCH_DIR`` (default ``~/.cache/karpy-gobench``); nothing is copied into the
    repository. Raises ``RuntimeError`` when ``go`` fails."""
    root = Path(os.environ.get("KARPY_GOBENCH_DIR", str(Path.home() / ".cache" / "karpy-gobench"))) / "mod"
    root.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOTOOLCHAIN": "auto", "GOWORK": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}

    def go(*args: str) -> str:
        done = subprocess.run(("go", *args), cwd=root, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"go {' '.join(args)}: {done.stderr.strip()[-2000:]}")
        return done.stdout

    if not (root / "go.mod").is_file():
        go("mod", "init", "karpy.local/gobench")
        (root / "deps.go").write_text(f'package gobench\n\nimport _ "{GO_PACKAGE}"\n')
        go("get", GO_MODULE)
    pattern = "^(" + "|".join(sorted(set(names))) + ")$"
    out = go("test", "-tags", "test_performance", "-run", "^$", "-bench", pattern, "-benchtime=1x",
             f"-count={count}", GO_PACKAGE)  # fmt: skip
    return parse_go_benchmark(out)


def parse_go_benchmark(out: str) -> dict[str, float]:
    """Median ``pods/sec`` per benchmark name (GOMAXPROCS suffix dropped) in ``go test -bench`` output."""
    runs: dict[str, list[float]] = {}
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0].startswith("Benchmark") and "pods/sec" in fields:
            name = fields[0].rsplit("-", 1)[0]  # drop the GOMAXPROCS suffix
            runs.setdefault(name, []).append(float(fields[fields.index("pods/sec") - 1]))
    return {name: statistics.median(values) for name, values in runs.items()}


def format_go_table(table: Sequence[Row], go_rates: dict[str, float]) -> str:
    """karpy's pods/s next to Karpenter's Go benchmark on the same input and machine, and the ratio."""
    head = (
        f"{'workload':<10} {'pods':>6} {'policy':<7} {'karpy pods/s':>12} {'Go benchmark':<28} "
        f"{'Go pods/s':>9} {'ratio':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in table:
        name = go_benchmark_name(r)
        if name is None or name not in go_rates:
            continue
        rate = go_rates[name]
        lines.append(
            f"{r.workload:<10} {r.pods:>6} {r.policy:<7} {r.pods_per_second:>12,.0f} {name:<28} {rate:>9,.0f} "
            f"{r.pods_per_second / rate:>6.1f}x"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scheduling", description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="pod counts, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="solves per row; the median time is reported")
    parser.add_argument("--mixed", type=int, default=5000, help="pods in the mixed workload")
    parser.add_argument("--json", action="store_true", help="print one JSON object per row")
    parser.add_argument(
        "--go",
        type=int,
        default=0,
        metavar="COUNT",
        help="also run Karpenter's Go BenchmarkScheduling* COUNT times per input on this machine (needs go; "
        "median pods/sec) and print karpy's ratio to it",
    )
    parser.add_argument(
        "--optimum",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="MILP time limit per row for cost/opt on rows of at most 100 pods (0: off; needs karpy[bench])",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    table = rows(sizes, max(1, args.repeat), args.mixed)
    if args.optimum > 0:
        table = with_optimum(table, args.optimum)
    if args.json:
        for r in table:
            print(json.dumps({**attrs.asdict(r), "over": r.over, "cost_over_optimum": optimum_ratios(r)}))
    else:
        print(format_table(table))
        slowest = min(r.pods_per_second for r in table)
        print(f"\nslowest row: {slowest:,.0f} pods/s; rows with failed checks: {sum(1 for r in table if r.checks)}")
        if args.optimum > 0 and not available():
            print("optimum: n/a (install karpy[bench])")
    if args.go > 0:
        names = [n for r in table if (n := go_benchmark_name(r)) is not None]
        print("\n" + format_go_table(table, go_pods_per_second(names, args.go)))
    for r in table:
        for c in r.checks:
            print(f"check failed: {r.workload} {r.pods} {r.policy}: {c}", file=sys.stderr)
    return 1 if any(r.checks for r in table) else 0


if __name__ == "__main__":
    raise SystemExit(main())
