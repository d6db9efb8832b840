"""Builders for scheduling tests: small, explicit, canonical units (cpu millicores, memory bytes)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from karpy.apis.quantity import to_canonical
from karpy.cloudprovider.types import InstanceType, Offering
from karpy.scheduling.model import (
    DaemonSet,
    ExistingNode,
    HostPort,
    LabelSelector,
    NodePool,
    Pod,
    PodAffinityTerm,
    Requirement,
    Taint,
    Toleration,
    TopologySpreadConstraint,
)

GIB = 2**30
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
_seq = itertools.count()


def res(cpu: str | None = None, mem: str | None = None, pods: int | None = 1, **extra: int) -> dict[str, int]:
    out: dict[str, int] = {}
    if cpu is not None:
        out["cpu"] = to_canonical("cpu", cpu)
    if mem is not None:
        out["memory"] = to_canonical("memory", mem)
    if pods is not None:
        out["pods"] = pods
    out.update({k.replace("__", "/").replace("_", "."): v for k, v in extra.items()})
    return out


def pod(
    name: str | None = None,
    cpu: str | None = "500m",
    mem: str | None = None,
    *,
    namespace: str = "default",
    gpu: int = 0,
    node_selector: Mapping[str, str] | None = None,
    terms: Sequence[Sequence[Requirement]] = (),
    tolerations: Sequence[Toleration] = (),
    ports: Sequence[int] = (),
    priority: int = 0,
    created: float | None = None,
    labels: Mapping[str, str] | None = None,
    spread: Sequence[TopologySpreadConstraint] = (),
    affinity: Sequence[PodAffinityTerm] = (),
    anti: Sequence[PodAffinityTerm] = (),
    pref_affinity: Sequence[PodAffinityTerm] = (),
    pref_anti: Sequence[PodAffinityTerm] = (),
    pref_terms: Sequence[tuple[int, Sequence[Requirement]]] = (),
    volume_terms: Sequence[Sequence[Requirement]] = (),
    extended: Mapping[str, int] | None = None,
) -> Pod:
    n = next(_seq)
    requests = res(cpu, mem)
    requests.update(extended or {})
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    return Pod(
        uid=f"uid-{n}",
        namespace=namespace,
        name=name or f"pod-{n:05d}",
        requests=requests,
        node_selector=dict(node_selector or {}),
        required_terms=tuple(tuple(t) for t in terms),
        tolerations=tuple(tolerations),
        host_ports=tuple(HostPort(p) for p in ports),
        priority=priority,
        created=float(n) if created is None else created,
        labels=dict(labels or {}),
        topology_spread=tuple(spread),
        pod_affinity=tuple(affinity),
        pod_anti_affinity=tuple(anti),
        preferred_pod_affinity=tuple(pref_affinity),
        preferred_pod_anti_affinity=tuple(pref_anti),
        preferred_terms=tuple((w, tuple(t)) for w, t in pref_terms),
        volume_terms=tuple(tuple(t) for t in volume_terms),
    )


def selector(**labels: str) -> LabelSelector:
    return LabelSelector(tuple(sorted(labels.items())))


def spread(
    key: str, *, max_skew: int = 1, anyway: bool = False, sel: LabelSelector | None = None, **kw: Any
) -> TopologySpreadConstraint:
    return TopologySpreadConstraint(
        key,
        max_skew,
        "ScheduleAnyway" if anyway else "DoNotSchedule",
        sel,
        **kw,
    )


def term(key: str, sel: LabelSelector | None, *, weight: int = 0, **kw: Any) -> PodAffinityTerm:
    return PodAffinityTerm(key, sel, weight=weight, **kw)


def pods(count: int, cpu: str = "1", mem: str | None = "1536Mi", **kw: Any) -> list[Pod]:
    return [pod(cpu=cpu, mem=mem, **kw) for _ in range(count)]


def req(key: str, op: str, *values: str, min_values: int | None = None) -> Requirement:
    return Requirement(key, op, tuple(values), min_values)


def instance_type(
    name: str,
    cpu: int,
    mem_gib: float,
    price: float,
    *,
    max_pods: int = 110,
    zones: Sequence[str] = ZONES,
    capacity_types: Sequence[str] = ("on-demand",),
    spot_price: float | None = None,
    unavailable: Sequence[tuple[str, str]] = (),
    gpu: int = 0,
    arch: str = "amd64",
    labels: Mapping[str, str] | None = None,
    overhead_cpu: int = 0,
    overhead_mem: int = 0,
) -> InstanceType:
    family, _, size = name.partition(".")
    lab = {
        "node.kubernetes.io/instance-type": name,
        "kubernetes.io/arch": arch,
        "kubernetes.io/os": "linux",
        "karpenter.k8s.aws/instance-category": family[0],
        "karpenter.k8s.aws/instance-family": family,
        "karpenter.k8s.aws/instance-size": size,
        "karpenter.k8s.aws/instance-cpu": str(cpu),
        "karpenter.k8s.aws/instance-generation": "".join(ch for ch in family if ch.isdigit()) or "1",
    }
    capacity = {"cpu": cpu * 1000, "memory": int(mem_gib * GIB), "pods": max_pods}
    if gpu:
        capacity["nvidia.com/gpu"] = gpu
        lab["karpenter.k8s.aws/instance-gpu-count"] = str(gpu)
    lab.update(labels or {})
    offerings = []
    for ct in capacity_types:
        for z in zones:
            p = spot_price if ct == "spot" and spot_price is not None else price
            offerings.append(Offering(z, ct, p, available=(z, ct) not in unavailable))
    return InstanceType(
        name=name,
        labels=lab,
        capacity=capacity,
        overhead={"cpu": overhead_cpu, "memory": overhead_mem},
        offerings=tuple(offerings),
    )


def catalogue() -> tuple[InstanceType, ...]:
    """A small m5/c5/r5 catalogue with us-east-1 on-demand prices."""
    return (
        instance_type("c5.large", 2, 4, 0.085),
        instance_type("c5.xlarge", 4, 8, 0.17),
        instance_type("c5.2xlarge", 8, 16, 0.34),
        instance_type("c5.4xlarge", 16, 32, 0.68),
        instance_type("m5.large", 2, 8, 0.096),
        instance_type("m5.xlarge", 4, 16, 0.192),
        instance_type("m5.2xlarge", 8, 32, 0.384),
        instance_type("m5.4xlarge", 16, 64, 0.768),
        instance_type("r5.large", 2, 16, 0.126),
        instance_type("r5.xlarge", 4, 32, 0.252),
    )


def linear_pool(largest: int, name: str = "default") -> NodePool:
    """Karpenter's fake catalogue in miniature: type ``it-k`` (k = 1 … ``largest``) has k vCPU, 2k GiB and 10k pods at
    0.3·k $/h, 100m kube-reserved, on-demand in zones z1 and z2."""
    types = tuple(
        InstanceType(
            f"it-{k}",
            {"node.kubernetes.io/instance-type": f"it-{k}"},
            {"cpu": 1000 * k, "memory": 2 * GIB * k, "pods": 10 * k},
            {"cpu": 100},
            (Offering("z1", "on-demand", 0.3 * k), Offering("z2", "on-demand", 0.3 * k)),
        )
        for k in range(1, largest + 1)
    )
    return NodePool(name, instance_types=types)


def nodepool(
    name: str = "default",
    *,
    types: Sequence[InstanceType] | None = None,
    requirements: Sequence[Requirement] = (),
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    startup_taints: Sequence[Taint] = (),
    weight: int = 0,
    limits: Mapping[str, int] | None = None,
    usage: Mapping[str, int] | None = None,
) -> NodePool:
    return NodePool(
        name=name,
        weight=weight,
        requirements=tuple(requirements),
        labels=dict(labels or {}),
        taints=tuple(taints),
        startup_taints=tuple(startup_taints),
        limits=dict(limits or {}),
        usage=dict(usage or {}),
        instance_types=tuple(catalogue() if types is None else types),
    )


def existing(
    name: str,
    cpu: int = 4,
    mem_gib: float = 16,
    *,
    max_pods: int = 110,
    used_cpu: str = "0",
    used_pods: int = 0,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    ports: Sequence[int] = (),
    nodeclaim: str = "",
    bound: Sequence[Pod] = (),
    initialized: bool | None = None,
) -> ExistingNode:
    """An existing node; an in-flight NodeClaim (``nodeclaim/<name>``) is uninitialized unless told otherwise."""
    return ExistingNode(
        name=name,
        nodeclaim=nodeclaim,
        nodepool="default" if nodeclaim else "",
        labels={"kubernetes.io/hostname": name, **(labels or {})},
        taints=tuple(taints),
        allocatable={"cpu": cpu * 1000, "memory": int(mem_gib * GIB), "pods": max_pods},
        requested={"cpu": to_canonical("cpu", used_cpu), "pods": used_pods},
        host_ports=tuple(HostPort(p) for p in ports),
        pods=used_pods,
        bound_pods=tuple(bound),
        initialized=not name.startswith("nodeclaim/") if initialized is None else initialized,
    )


def daemonset(
    name: str,
    cpu: str = "100m",
    mem: str = "128Mi",
    *,
    node_selector: Mapping[str, str] | None = None,
    terms: Sequence[Sequence[Requirement]] = (),
    tolerations: Sequence[Toleration] = (),
    ports: Sequence[int] = (),
) -> DaemonSet:
    template = Pod(
        uid=f"ds-{name}",
        namespace="kube-system",
        name=f"{name}-template",
        requests=res(cpu, mem),
        node_selector=dict(node_selector or {}),
        required_terms=tuple(tuple(t) for t in terms),
        tolerations=tuple(tolerations),
        host_ports=tuple(HostPort(p) for p in ports),
    )
    return DaemonSet(namespace="kube-system", name=name, pod=template)


def requirement_map(reqs: Sequence[Requirement]) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {r.key: (r.operator, r.values) for r in reqs}
