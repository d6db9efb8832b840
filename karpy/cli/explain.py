"""``karpy explain POD``: why each NodePool can or cannot host a pending pod of a live cluster, and the plan for it.

The cluster is read once (kubeconfig as ``karpy run`` finds it: ``$KUBECONFIG``, ``~/.kube/config`` or the in-cluster
service account) and handed to :func:`karpy.simulate.plan.simulate`, the engine of ``karpy simulate``, which is the
provisioner's (:func:`karpy.scheduling.scheduler.solve` over the inputs :mod:`karpy.scheduling.translate` builds). No
second scheduler: every reason printed is a message of that engine or of its NodePool checks.

* **Per NodePool**: the pod alone, with that one NodePool, over the cluster's nodes and bound pods. The engine's
  reason names what stops it (an untolerated taint, incompatible requirements, a NodePool limit, no instance type
  with enough allocatable or an available offering); a NodePool that cannot launch at all says why (being deleted,
  its EC2NodeClass missing or not Ready, and, as the provisioner skips them, a NodePool whose Ready condition is not
  True: ``Provisioner._nodepools`` in karpy/controllers/provisioner.py, core ``pkg/controllers/provisioning/
  provisioner.go``).
* **The plan**: every pending pod with every usable NodePool, as the provisioner batches them, and where the pod
  lands: the NodeClaim (NodePool, candidate instance types, the instance type, capacity type and zone the AWS launch
  would pick, its price), an existing node, or the engine's reason it stays pending.

Instance types come from the catalogue ``karpy simulate`` uses: the built-in EC2 catalogue of a region (``--region``,
default ``$AWS_REGION`` or us-east-1; static on-demand prices, spot only with ``--spot-price-ratio``) or
``--catalogue FILE.json``. Zones are the EC2NodeClass's resolved subnets (``status.subnets``). NodeClaims not yet
registered as Nodes are not counted as capacity (``karpy simulate`` reads Nodes), so right after a scale-up the plan
may show a NodeClaim the provisioner already launched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import attrs

from karpy.apis import labels as wk
from karpy.apis.conditions import condition
from karpy.apis.meta import JSON
from karpy.apis.quantity import format_resource_list
from karpy.kube import resources as r
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource
from karpy.simulate.catalogue import DEFAULT_VM_MEMORY_OVERHEAD_PERCENT, Catalogue, CatalogueError, choose_catalogue
from karpy.simulate.manifests import Manifests, collect
from karpy.simulate.plan import Plan, PlannedNode, simulate
from karpy.simulate.reading import Document
from karpy.simulate.validation import ManifestError

PRIORITY_CLASSES = Resource("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False)
# What the simulation reads of the cluster (the kinds ``karpy simulate`` takes, bar the workloads: their pods are
# listed as they are).
CLUSTER_KINDS: tuple[Resource, ...] = (
    r.NODEPOOLS,
    r.EC2NODECLASSES,
    r.PODS,
    r.NODES,
    r.DAEMONSETS,
    r.PERSISTENTVOLUMES,
    r.PERSISTENTVOLUMECLAIMS,
    r.STORAGECLASSES,
    PRIORITY_CLASSES,
    r.NAMESPACES,
)


class ExplainError(Exception):
    """The pod cannot be explained (not found, already bound, finished): one line, exit 1."""


@attrs.frozen
class PoolVerdict:
    """One NodePool's answer for the pod: ``fits`` and either the engine's ``reason`` it cannot, or the NodeClaim
    (``node``) it would launch for the pod alone, or the existing node it fits on (``existing``)."""

    nodepool: str
    fits: bool
    reason: str = ""
    node: PlannedNode | None = None
    existing: str = ""


@attrs.frozen
class Explanation:
    """``karpy explain``'s answer for ``pod`` (``namespace/name``): a verdict per NodePool (by name) and the plan of
    every pending pod (``plan``), in which the pod is on ``node``, on the ``existing`` node, or ``unschedulable``
    with the engine's reason."""

    pod: str
    requests: Mapping[str, int]
    verdicts: tuple[PoolVerdict, ...]
    plan: Plan
    node: PlannedNode | None
    existing: str
    unschedulable: str


# ---------------------------------------------------------------------------------------------------------
# Reading the cluster


async def read_cluster(client: KubeClient) -> list[Document]:
    """Every object of :data:`CLUSTER_KINDS` as a simulation input document (list items carry no
    ``apiVersion``/``kind``: they are set from the list's resource).

    Raises:
        ApiError: a list failed (a missing CRD is a 404).
    """
    docs: list[Document] = []
    for res in CLUSTER_KINDS:
        items, _ = await client.list(res)
        api_version = f"{res.group}/{res.version}" if res.group else res.version
        for item in items:
            item["apiVersion"], item["kind"] = api_version, res.kind
            (item.get("metadata") or {}).pop("managedFields", None)
            docs.append(Document(f"cluster {res.kind}", item))
    return docs


def nodepool_not_ready(nodepool: Mapping[str, Any]) -> str:
    """Why the provisioner skips a NodePool whose Ready condition is not True ("" when it is True)."""
    cond = condition(nodepool, wk.COND_READY)
    if cond is None:
        return "NodePool has no Ready condition yet (the provisioner launches only from Ready NodePools)"
    if cond.get("status") == "True":
        return ""
    why = cond.get("message") or cond.get("reason") or ""
    return f"NodePool is not Ready{': ' + str(why) if why else ''}"


# ---------------------------------------------------------------------------------------------------------
# The explanation


def _pod_obj(manifests: Manifests, key: str) -> JSON | None:
    for pod in manifests.pods:
        meta = pod["metadata"]
        if f"{meta.get('namespace') or ''}/{meta['name']}" == key:
            return pod
    return None


def _check_pending(pod: JSON | None, key: str) -> JSON:
    if pod is None:
        raise ExplainError(f"pod {key} not found")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        raise ExplainError(f"pod {key} has finished ({phase}): nothing to provision")
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        raise ExplainError(f"pod {key} is not pending: it is bound to node {node}")
    owners = (pod.get("metadata") or {}).get("ownerReferences") or []
    if any(o.get("kind") == "DaemonSet" and o.get("controller") for o in owners):
        # Karpenter's IsProvisionable: a DaemonSet pod waits for its node, it never asks for one.
        raise ExplainError(f"pod {key} belongs to a DaemonSet: NodePools are not provisioned for DaemonSet pods")
    return pod


def _bound_or(manifests: Manifests, pod: JSON) -> list[JSON]:
    """The cluster's bound pods (they hold capacity and count for topology) plus ``pod``: no other pending pod."""
    return [p for p in manifests.pods if (p.get("spec") or {}).get("nodeName") or p is pod]


def _where(plan: Plan, key: str) -> tuple[PlannedNode | None, str, str]:
    """Where ``plan`` puts the pod: (new NodeClaim, existing node, reason it is unschedulable)."""
    for node in plan.nodes:
        if key in node.pods:
            return node, "", ""
    for name, pods in plan.existing.items():
        if key in pods:
            return None, name, ""
    return None, "", plan.unschedulable.get(key, "not planned")


def pool_verdict(
    manifests: Manifests, catalogue: Catalogue, nodepool: JSON, pod: JSON, key: str, policy: str
) -> PoolVerdict:
    """One NodePool's verdict: the engine on the pod alone with only this NodePool."""
    name = str(nodepool["metadata"]["name"])
    not_ready = nodepool_not_ready(nodepool)
    if not_ready and not (nodepool.get("metadata") or {}).get("deletionTimestamp"):
        return PoolVerdict(name, False, reason=not_ready)
    alone = attrs.evolve(manifests, nodepools=[nodepool], pods=_bound_or(manifests, pod))
    plan = simulate(alone, catalogue, preference_policy=policy)
    if name in plan.unusable_nodepools:
        return PoolVerdict(name, False, reason=plan.unusable_nodepools[name])
    node, existing, reason = _where(plan, key)
    if node is not None and node.launch_error:
        return PoolVerdict(name, False, reason=f"not launchable: {node.launch_error}", node=node)
    if node is not None or existing:
        return PoolVerdict(name, True, node=node, existing=existing)
    return PoolVerdict(name, False, reason=reason)


def explain(manifests: Manifests, catalogue: Catalogue, key: str, *, preference_policy: str = "Respect") -> Explanation:
    """Explain the pending pod ``key`` (``namespace/name``) of ``manifests`` (read from a cluster).

    Raises:
        ExplainError: no such pod, or it is bound or finished.
    """
    pod = _check_pending(_pod_obj(manifests, key), key)
    verdicts = tuple(
        pool_verdict(manifests, catalogue, np, pod, key, preference_policy)
        for np in sorted(manifests.nodepools, key=lambda np: str(np["metadata"]["name"]))
    )
    ready = [np for np in manifests.nodepools if not nodepool_not_ready(np)]
    plan = simulate(attrs.evolve(manifests, nodepools=ready), catalogue, preference_policy=preference_policy)
    node, existing, reason = _where(plan, key)
    requests = _requests(pod)
    return Explanation(key, requests, verdicts, plan, node, existing, reason)


def _requests(pod: JSON) -> dict[str, int]:
    from karpy.scheduling.translate import scheduling_pod

    return dict(scheduling_pod(pod).requests)


# ---------------------------------------------------------------------------------------------------------
# Output


def _price(price: float | None) -> str:
    return f"${price:.4f}/hour" if price is not None else "no price"


def _types(names: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def describe_node(node: PlannedNode) -> str:
    """``NodeClaim a-1 (NodePool a): m5.large, on-demand, us-east-1a, $0.0960/hour; 12 instance types (…); 3 pods``."""
    if node.launch_error:
        launch = f"not launchable: {node.launch_error}"
    else:
        launch = f"{node.instance_type}, {node.capacity_type}, {node.zone}, {_price(node.price)}"
    types = f"{node.candidates} instance type{'s' if node.candidates != 1 else ''}"
    if node.instance_types:
        types += f" ({_types(node.instance_types)})"
    pods = f"{len(node.pods)} pod{'s' if len(node.pods) != 1 else ''}"
    return f"NodeClaim {node.name} (NodePool {node.nodepool}): {launch}; {types}; {pods}"


def render_text(ex: Explanation) -> str:
    """The explanation for a terminal: the pod, one line per NodePool, then the plan."""
    requests = ", ".join(f"{k}={v}" for k, v in format_resource_list(dict(ex.requests)).items()) or "none"
    lines = [
        f"Pod {ex.pod}: pending; requests {requests}",
        f"catalogue: {ex.plan.catalogue}; {ex.plan.spot_note}",
        "",
        "NodePools:",
    ]
    if not ex.verdicts:
        lines.append("  (none: no NodePool in the cluster)")
    for v in ex.verdicts:
        if not v.fits:
            lines.append(f"  {v.nodepool}: cannot host the pod: {v.reason}")
        elif v.existing:
            lines.append(f"  {v.nodepool}: not needed: the pod fits on existing node {v.existing}")
        else:
            assert v.node is not None
            node = v.node
            lines.append(
                f"  {v.nodepool}: can host the pod: {node.instance_type}, {node.capacity_type}, {node.zone}, "
                f"{_price(node.price)} ({node.candidates} compatible instance types)"
            )
    lines += ["", f"Plan (all {ex.plan.pods} pending pods, batched as the provisioner batches them):"]
    if ex.node is not None:
        lines.append(f"  {describe_node(ex.node)}")
    elif ex.existing:
        lines.append(f"  existing node {ex.existing}")
    else:
        lines.append(f"  unschedulable: {ex.unschedulable}")
    return "\n".join(lines) + "\n"


def _node_json(node: PlannedNode | None) -> JSON | None:
    if node is None:
        return None
    return {
        "name": node.name,
        "nodePool": node.nodepool,
        "instanceType": node.instance_type,
        "capacityType": node.capacity_type,
        "zone": node.zone,
        "pricePerHour": node.price,
        "instanceTypes": list(node.instance_types),
        "pods": list(node.pods),
        **({"launchError": node.launch_error} if node.launch_error else {}),
    }


def to_json(ex: Explanation) -> JSON:
    """The explanation as JSON (``-o json``); prices USD/hour."""
    return {
        "pod": ex.pod,
        "requests": format_resource_list(dict(ex.requests)),
        "catalogue": ex.plan.catalogue,
        "nodePools": [
            {
                "nodePool": v.nodepool,
                "fits": v.fits,
                **({"reason": v.reason} if v.reason else {}),
                **({"nodeClaim": _node_json(v.node)} if v.node is not None else {}),
                **({"existingNode": v.existing} if v.existing else {}),
            }
            for v in ex.verdicts
        ],
        "plan": {
            "pendingPods": ex.plan.pods,
            "nodeClaim": _node_json(ex.node),
            "existingNode": ex.existing or None,
            "unschedulable": ex.unschedulable or None,
        },
    }


# ---------------------------------------------------------------------------------------------------------
# The command


def add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``karpy explain``."""
    p = sub.add_parser(
        "explain",
        help="why each NodePool can or cannot host a pending pod of a live cluster, and the plan for it",
        description="Read the cluster (kubeconfig as `karpy run` finds it) and run karpy's scheduling engine, the "
        "same as `karpy simulate`, for one pending pod: per NodePool why it can or cannot host the pod, and the "
        "NodeClaim the plan of all pending pods puts it on. Exit 0 with an explanation, 1 when the pod is not "
        "pending, 2 on invalid input, 3-5 as `karpy run` when the cluster cannot be read.",
    )
    p.add_argument("pod", metavar="POD", help="the pending pod's name")
    p.add_argument("-n", "--namespace", default="default", help="the pod's namespace (default: default)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--catalogue", metavar="FILE.json", help="instance catalogue file (as `karpy simulate`)")
    where.add_argument("--region", help="built-in EC2 catalogue of this region (default: $AWS_REGION or us-east-1)")
    p.add_argument(
        "--spot-price-ratio", type=float, metavar="R", help="built-in catalogue: price spot at R x on-demand"
    )
    p.add_argument(
        "--vm-memory-overhead-percent",
        type=float,
        default=DEFAULT_VM_MEMORY_OVERHEAD_PERCENT,
        help="as the controller setting",
    )
    p.add_argument("--reserved-enis", type=int, default=0, help="as the controller setting")
    p.add_argument("--preference-policy", choices=("Respect", "Ignore"), default="Respect")
    p.add_argument("--output", "-o", choices=("text", "json"), default="text")


def _catalogue(args: argparse.Namespace) -> Catalogue:
    region = args.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return choose_catalogue(
        args.catalogue,
        region,
        spot_price_ratio=args.spot_price_ratio,
        vm_memory_overhead_percent=args.vm_memory_overhead_percent,
        reserved_enis=args.reserved_enis,
    )


async def _read() -> list[Document]:
    """The cluster's objects, connected as ``karpy run`` connects (same kubeconfig search, same start-up errors)."""
    from karpy.operator import _connect
    from karpy.settings import Settings

    client = await _connect(Settings(cluster_name="karpy-explain"))
    try:
        return await read_cluster(client)
    finally:
        await client.close()


def explain_command(args: argparse.Namespace) -> int:
    """``karpy explain``: exit 0 with an explanation, 1 when the pod is not pending or not found, 2 on an invalid
    catalogue or cluster object, 3/4/5 when the kubeconfig, the apiserver or the credentials fail (as ``karpy run``;
    a list the apiserver refuses with 401/403 is 5, any other failed list 4)."""
    from karpy.cli import startup
    from karpy.settings import StartupError

    try:
        catalogue = _catalogue(args)
    except (CatalogueError, ValueError) as err:
        print(f"karpy explain: {err}", file=sys.stderr)
        return 2
    prefix = "karpy explain: cannot read the cluster"
    try:
        docs = asyncio.run(_read())
    except StartupError as err:
        print(startup.message(err, prefix), file=sys.stderr)
        return startup.exit_code(err)
    except ApiError as err:  # a list refused (RBAC) or failed (a CRD not installed: 404)
        print(f"{prefix}: {' '.join(str(err).split())}", file=sys.stderr)
        return startup.EXIT_CREDENTIALS_REJECTED if err.status in (401, 403) else startup.EXIT_APISERVER_UNREACHABLE
    except (
        OSError,
        TimeoutError,
        aiohttp.ClientError,
    ) as err:  # the apiserver went away between the first request and the lists
        print(f"{prefix}: {' '.join(str(err).split()) or type(err).__name__}", file=sys.stderr)
        return startup.EXIT_APISERVER_UNREACHABLE
    try:
        manifests = collect(docs)
        ex = explain(manifests, catalogue, f"{args.namespace}/{args.pod}", preference_policy=args.preference_policy)
    except ManifestError as err:
        print(f"karpy explain: {err}", file=sys.stderr)
        return 2
    except ExplainError as err:
        print(f"karpy explain: {err}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(to_json(ex), indent=2))
    else:
        sys.stdout.write(render_text(ex))
    return 0


__all__ = [
    "ExplainError",
    "Explanation",
    "PoolVerdict",
    "add_explain",
    "explain",
    "explain_command",
    "read_cluster",
    "render_text",
    "to_json",
]
