"""The live benchmark's problem, identical for karpy and Karpenter: the workload mix, two NodePools, one catalogue.

Pure (no I/O beyond reading moto's bundled instance data and karpy's price table), unit-tested in
``tests/unit/test_bench_live.py``.

- :func:`workload` — the Deployments for ``n`` pods: plain Deployments of three sizes, one with zone topology
  spread (``DoNotSchedule`` on ``topology.kubernetes.io/zone``), one with required hostname pod anti-affinity
  (~1 % of the pods: one node per pod), and one pinned to the second NodePool by nodeSelector + toleration.
- :func:`nodepools` — the NodePools ``general`` (families :data:`GENERAL_FAMILIES`) and ``memory`` (families
  :data:`MEMORY_FAMILIES`, tainted :data:`MEMORY_TAINT`), restricted to the same instance-type names on both
  sides (``node.kubernetes.io/instance-type In [...]``), linux/amd64 on-demand, ``WhenEmpty`` after 30 s; only
  ``nodeClassRef`` differs (EC2NodeClass for karpy, KWOKNodeClass for Karpenter).
- :func:`fair_kwok_types` — Karpenter KWOK's instance-type file for exactly those names, carrying karpy's own
  model of each type (``karpy.aws.instancetypes.build_instance_type`` on moto's DescribeInstanceTypes entry, the
  data karpy sees on the local cluster): KWOK's allocatable is its file's ``resources`` minus a flat 100m CPU /
  10Mi memory kube-reserved (``kwok/cloudprovider/helpers.go`` ``newInstanceType``), so the file says karpy's
  allocatable plus that flat amount, and karpy's max pods; the price is karpy's on-demand price in every zone of
  the local cluster. Both controllers then see the same names, allocatable, pods and prices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

ZONES: Final = ("us-east-1a", "us-east-1b", "us-east-1c")
# The API group of Karpenter KWOK's NodeClass (``kwok/apis``).
KWOK_GROUP: Final = "karpenter.kwok.sh"
SIZES: Final = ("large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge")
GENERAL_FAMILIES: Final = ("c6a", "c6i", "m6a", "m6i")
MEMORY_FAMILIES: Final = ("r6a", "r6i")
MEMORY_TAINT: Final = "bench.karpy.dev/memory"
# Karpenter KWOK's fixed kube-reserved per node (kwok/cloudprovider/helpers.go newInstanceType).
KWOK_RESERVED_CPU_MILLI: Final = 100
KWOK_RESERVED_MEMORY: Final = 10 * 2**20
PAUSE_IMAGE: Final = "registry.k8s.io/pause:3.10"


def type_names(families: Sequence[str]) -> list[str]:
    """``<family>.<size>`` for every family and size of :data:`SIZES`."""
    return [f"{family}.{size}" for family in families for size in SIZES]


def all_type_names() -> list[str]:
    """Every instance type either NodePool may choose."""
    return type_names(GENERAL_FAMILIES) + type_names(MEMORY_FAMILIES)


# -- the workload ----------------------------------------------------------------------------------------------------

# (name, share of the pods, cpu, memory, kind); the shares add up to 1. "anti" needs one node per pod: kept ~1 %.
MIX: Final = (
    ("web", 0.35, "500m", "512Mi", "plain"),
    ("api", 0.20, "1", "1Gi", "plain"),
    ("worker", 0.15, "250m", "256Mi", "plain"),
    ("spread", 0.19, "500m", "1Gi", "zone-spread"),
    ("anti", 0.01, "2", "4Gi", "hostname-anti-affinity"),
    ("cache", 0.10, "1", "4Gi", "memory-pool"),
)


def replicas(n: int) -> dict[str, int]:
    """Pods per Deployment of :data:`MIX` for ``n`` pods in all (rounded; the remainder goes to ``web``)."""
    counts = {name: max(1, round(n * share)) for name, share, *_ in MIX if name != "web"}
    counts["web"] = n - sum(counts.values())
    if counts["web"] < 1:
        raise ValueError(f"{n} pods are too few for the mix")
    return {name: counts[name] for name, *_ in MIX}


def _pod_spec(name: str, cpu: str, memory: str, kind: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "pause", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ],
    }
    selector = {"matchLabels": {"app": name}}
    if kind == "zone-spread":
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        ]
    elif kind == "hostname-anti-affinity":
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
                ]
            }
        }
    elif kind == "memory-pool":
        spec["nodeSelector"] = {"karpenter.sh/nodepool": "memory"}
        spec["tolerations"] = [{"key": MEMORY_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    else:
        # Plain pods stay off the memory pool by its taint alone; no selector.
        pass
    return spec


def workload(n: int, prefix: str = "bench") -> list[dict[str, Any]]:
    """The Deployments for ``n`` pods (see :data:`MIX`), named ``<prefix>-<name>``, labelled ``app=<that name>``
    and ``bench=<prefix>`` on their pods.

    Raises:
        ValueError: ``n`` too small for every part of the mix to get a pod.
    """
    counts = replicas(n)
    out = []
    for name, _, cpu, memory, kind in MIX:
        app = f"{prefix}-{name}"
        out.append(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": app, "namespace": "default", "labels": {"bench": prefix, "mix": kind}},
                "spec": {
                    "replicas": counts[name],
                    "selector": {"matchLabels": {"app": app}},
                    "template": {
                        "metadata": {"labels": {"app": app, "bench": prefix}},
                        "spec": _pod_spec(app, cpu, memory, kind),
                    },
                },
            }
        )
    return out


# -- NodePools -------------------------------------------------------------------------------------------------------


def _requirements(types: Sequence[str]) -> list[dict[str, Any]]:
    return [
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(types)},
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
    ]


def nodepools(controller: str) -> list[dict[str, Any]]:
    """The two NodePools for ``controller`` (``karpy``: on EC2NodeClass ``default``; ``karpenter``: on
    KWOKNodeClass ``default``): ``general`` and ``memory`` (tainted ``MEMORY_TAINT=true:NoSchedule``)."""
    ref = (
        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        if controller == "karpy"
        else {"group": KWOK_GROUP, "kind": "KWOKNodeClass", "name": "default"}
    )
    pools = []
    for name, families, taints in (
        ("general", GENERAL_FAMILIES, []),
        ("memory", MEMORY_FAMILIES, [{"key": MEMORY_TAINT, "value": "true", "effect": "NoSchedule"}]),
    ):
        template: dict[str, Any] = {
            "requirements": _requirements(type_names(families)),
            "nodeClassRef": ref,
            "expireAfter": "Never",
        }
        if taints:
            template["taints"] = taints
        pools.append(
            {
                "apiVersion": "karpenter.sh/v1",
                "kind": "NodePool",
                "metadata": {"name": name},
                "spec": {
                    "template": {"spec": template},
                    "limits": {"cpu": "100000"},
                    "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"},
                },
            }
        )
    return pools


# -- the fair catalogue ----------------------------------------------------------------------------------------------


def karpy_allocatable(info: Mapping[str, Any]) -> dict[str, int]:
    """karpy's allocatable for one DescribeInstanceTypes entry under an EC2NodeClass without a ``kubelet`` block
    (as the benchmark's): canonical units (cpu millicores, memory/ephemeral-storage bytes, pods a count), from
    ``karpy.aws.instancetypes.build_instance_type`` with karpy's defaults (VM memory overhead 7.5 %, no reserved
    ENIs, the 20Gi AL2023 root volume)."""
    from karpy.aws.instancetypes import DEFAULT_ROOT_VOLUME, build_instance_type

    it = build_instance_type(
        info, {}, DEFAULT_ROOT_VOLUME, ZONES, {}, {}, {}, vm_memory_overhead_percent=0.075, reserved_enis=0
    )
    return it.allocatable


def kwok_entry(info: Mapping[str, Any], price: float, zones: Sequence[str] = ZONES) -> dict[str, Any]:
    """One KWOK instance type (``kwok/cloudprovider/helpers.go`` ``InstanceTypeOptions``) whose allocatable in
    Karpenter KWOK equals karpy's (:func:`karpy_allocatable`): ``resources`` = karpy's allocatable + KWOK's flat
    100m/10Mi; one on-demand offering per zone at ``price`` (USD/hour)."""
    from karpy.aws.instancetypes import architecture

    alloc = karpy_allocatable(info)
    resources = {
        "cpu": f"{alloc['cpu'] + KWOK_RESERVED_CPU_MILLI}m",
        "memory": str(alloc["memory"] + KWOK_RESERVED_MEMORY),
        "pods": str(alloc["pods"]),
        "ephemeral-storage": str(alloc["ephemeral-storage"]),
    }
    offerings = [
        {
            "Price": price,
            "Available": True,
            "Requirements": [
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [zone]},
            ],
        }
        for zone in zones
    ]
    return {
        "name": str(info["InstanceType"]),
        "architecture": architecture(info),
        "operatingSystems": ["linux"],
        "resources": resources,
        "offerings": offerings,
    }


def fair_kwok_types(
    infos: Mapping[str, Mapping[str, Any]], prices: Mapping[str, float], names: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """:func:`kwok_entry` for each of ``names`` (default :func:`all_type_names`).

    Raises:
        KeyError: a name missing from ``infos`` (moto's data) or ``prices`` (karpy's table).
    """
    return [kwok_entry(infos[name], prices[name]) for name in (names or all_type_names())]


def moto_instance_types() -> dict[str, dict[str, Any]]:
    """moto's DescribeInstanceTypes data (what karpy reads from the local cluster's EC2): name -> entry."""
    from moto.ec2.models.instance_types import INSTANCE_TYPES

    return dict(INSTANCE_TYPES)
