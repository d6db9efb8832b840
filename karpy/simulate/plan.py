"""``karpy simulate``: run the controller's scheduling engine on manifests and describe the plan.

The inputs are translated as the provisioner translates them (:mod:`karpy.scheduling.translate`) and handed to
the same :func:`karpy.scheduling.scheduler.solve`. Each new NodeClaim
is then "launched" as the AWS provider would launch it (:func:`karpy.aws.instancefilters.choose_capacity_type` and
:func:`~karpy.aws.instancefilters.launch_candidates`: reserved > spot > on-demand, exotic types only when nothing
else fits, cheapest candidate first) and priced at that offering.

Differences from a live cluster, all deliberate: every NodePool is treated as Ready and every EC2NodeClass
without a status as resolved (no AWS to resolve subnets, AMIs and security groups); all unbound pods are
pending (kube-scheduler would first try existing nodes, which the engine does too); NodePool usage counts the
capacity of the manifests' Nodes that carry the NodePool label.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from karpy.apis import labels as wk
from karpy.apis.meta import JSON
from karpy.apis.quantity import format_resource_list
from karpy.apis.resources import add
from karpy.apis.taints import taints
from karpy.aws.instancefilters import choose_capacity_type, launch_candidates
from karpy.scheduling import buffers as cb
from karpy.scheduling import model
from karpy.scheduling.daemons import with_live_pods
from karpy.scheduling.gcpause import pausing_gc
from karpy.scheduling.instancetypes import pod_matches_labels
from karpy.scheduling.scheduler import solve
from karpy.scheduling.taints import NO_SCHEDULE, untolerated
from karpy.scheduling.translate import (
    EPHEMERAL_TAINT_KEYS,
    SpecMemo,
    controller_owner,
    daemonset_view,
    node_resources,
    nodeclass_name,
    requirement_to_json,
    scheduling_nodepool,
    scheduling_pod,
)
from karpy.scheduling.volumes import volume_topology
from karpy.simulate.buffers import GATE_NOTE, BufferPlan, buffer_pods
from karpy.simulate.catalogue import Catalogue
from karpy.simulate.manifests import Manifests
from karpy.simulate.overlays import OVERLAY_NOTE, OverlayReport, overlaid, report_json, report_lines

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# Taints the DaemonSet controller tolerates on every DaemonSet pod (Kubernetes ``AddOrUpdateDaemonPodTolerations``).
DAEMONSET_TOLERATED = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/network-unavailable",
        UNSCHEDULABLE_TAINT,
    }
)
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@attrs.frozen
class PlannedNode:
    """A NodeClaim the engine wants, with what the launch would pick.

    ``instance_type``/``zone``/``capacity_type``/``price`` are the cheapest launchable offering among the
    NodeClaim's candidates (empty and None when nothing can be launched: ``launch_error`` says why);
    ``candidates`` is how many instance types the NodeClaim allows and ``instance_types`` their names (cheapest
    available offering first, as the NodeClaim's ``node.kubernetes.io/instance-type`` requirement lists them);
    ``requests`` the pods' requests plus DaemonSet overhead (canonical units).
    """

    name: str
    nodepool: str
    instance_type: str
    zone: str
    capacity_type: str
    price: float | None
    pods: tuple[str, ...]
    candidates: int
    requests: Mapping[str, int]
    launch_error: str = ""
    instance_types: tuple[str, ...] = ()
    buffer_pods: tuple[str, ...] = ()  # CapacityBuffer virtual pods (headroom) planned here, not in ``pods``


@attrs.frozen
class Plan:
    """The outcome of one simulation (see :func:`simulate`)."""

    catalogue: str
    spot_note: str
    preference_policy: str
    solve_seconds: float
    pods: int
    nodes: tuple[PlannedNode, ...]
    existing: Mapping[str, tuple[str, ...]]
    unschedulable: Mapping[str, str]
    unusable_nodepools: Mapping[str, str]
    notes: tuple[str, ...] = ()
    # CapacityBuffers: how each resolved, the virtual pods on existing nodes (by node) and those placed nowhere.
    buffers: tuple[BufferPlan, ...] = ()
    existing_buffer_pods: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    unschedulable_buffer_pods: Mapping[str, str] = attrs.field(factory=dict)
    overlays: tuple[OverlayReport, ...] = ()

    @property
    def total_price(self) -> float:
        """USD/hour of all new nodes."""
        return round(sum(n.price or 0.0 for n in self.nodes), 6)


# ---------------------------------------------------------------------------------------------------------
# Inputs


@attrs.frozen
class NodeView:
    """What the simulation reads of a Node manifest (resources canonical, see :func:`node_view`)."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[model.Taint, ...]
    allocatable: Mapping[str, int]
    capacity: Mapping[str, int]
    deleting: bool


def node_view(obj: Mapping[str, Any]) -> NodeView:
    """A Node manifest translated as cluster state translates a watched Node (:mod:`karpy.scheduling.translate`)."""
    meta = obj.get("metadata") or {}
    allocatable, capacity = node_resources(obj)
    return NodeView(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        taints=taints((obj.get("spec") or {}).get("taints")),
        allocatable=allocatable,
        capacity=capacity,
        deleting=bool(meta.get("deletionTimestamp")),
    )


def _ready_false(obj: Mapping[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == wk.COND_READY and c.get("status") == "False" for c in conditions)


def usable_nodeclass(nodepool: Mapping[str, Any], nodeclasses: Mapping[str, JSON]) -> JSON | str:
    """The NodePool's EC2NodeClass, or why the NodePool cannot launch (being deleted, static, missing or not Ready
    NodeClass).

    A NodeClass without status counts as resolved: the simulation has no AWS to resolve it against.
    """
    if (nodepool.get("metadata") or {}).get("deletionTimestamp"):
        return "NodePool is being deleted"
    if (nodepool.get("spec") or {}).get("replicas") is not None:
        # Karpenter never provisions for pods from a static NodePool (core provisioner.go NewScheduler).
        return "a static NodePool (spec.replicas): not provisioned for pods (it keeps its own node count)"
    ref = (((nodepool.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    kind, group = ref.get("kind", "EC2NodeClass"), ref.get("group", wk.AWS_GROUP)
    if kind != "EC2NodeClass" or group != wk.AWS_GROUP:
        return f"nodeClassRef {group}/{kind} is not an EC2NodeClass"
    name = nodeclass_name(nodepool)
    if not name:
        return "no nodeClassRef"
    nodeclass = nodeclasses.get(name)
    if nodeclass is None:
        return f'EC2NodeClass "{name}" not found'
    if _ready_false(nodeclass):
        return f'EC2NodeClass "{name}" is not Ready'
    return nodeclass


def daemonset_runs_on(ds: model.DaemonSet, labels: Mapping[str, str], node_taints: Sequence[model.Taint]) -> bool:
    """Whether the DaemonSet controller would place a pod on a node (selector, affinity, taints; the node
    condition taints every DaemonSet pod tolerates are skipped)."""
    relevant = [t for t in node_taints if t.key not in DAEMONSET_TOLERATED]
    return untolerated(ds.pod.tolerations, relevant) is None and pod_matches_labels(ds.pod, labels)


def existing_nodes(
    manifests: Manifests,
    bound: Mapping[str, list[model.Pod]],
    daemonsets: Sequence[model.DaemonSet],
    startup_taints: Mapping[str, Sequence[model.Taint]],
) -> tuple[list[model.ExistingNode], list[str]]:
    """Existing capacity from Node manifests, with the pods bound to each (``spec.nodeName``).

    A DaemonSet that would run on a node but has no pod bound there gets one, as its controller would create
    it. Cordoned nodes get the ``node.kubernetes.io/unschedulable`` taint; on managed nodes not yet
    initialized, the taints a booting node carries and the NodePool's startup taints are ignored, as Karpenter
    ignores them until initialization (core ``pkg/scheduling/taints.go``,
    ``pkg/controllers/nodeclaim/lifecycle/initialization.go``). Deleting nodes are skipped.
    Returns the nodes and notes about what was adjusted.
    """
    out, notes = [], []
    for obj in manifests.nodes:
        info = node_view(obj)
        if info.deleting:
            continue
        node_taints = list(info.taints)
        if (obj.get("spec") or {}).get("unschedulable") and all(t.key != UNSCHEDULABLE_TAINT for t in node_taints):
            node_taints.append(model.Taint(UNSCHEDULABLE_TAINT, NO_SCHEDULE))
        nodepool = info.labels.get(wk.LABEL_NODEPOOL, "")
        if nodepool and info.labels.get(wk.LABEL_INITIALIZED) != "true":
            ignored = EPHEMERAL_TAINT_KEYS | {t.key for t in startup_taints.get(nodepool, ())}
            node_taints = [t for t in node_taints if t.key not in ignored]
        pods = list(bound.get(info.name, []))
        running = {p.owner for p in pods}
        for ds in daemonsets:
            if f"DaemonSet/{ds.pod.uid}" not in running and daemonset_runs_on(ds, info.labels, info.taints):
                pods.append(attrs.evolve(ds.pod, name=f"{ds.name}-{info.name}", node_name=info.name))
                notes.append(f"node {info.name}: added a pod of DaemonSet {ds.namespace}/{ds.name}")
        out.append(
            model.ExistingNode(
                name=info.name,
                nodepool=nodepool,
                labels=info.labels,
                taints=tuple(node_taints),
                allocatable=info.allocatable or info.capacity,
                requested=add(*(p.requests for p in pods)),
                host_ports=tuple(hp for p in pods for hp in p.host_ports),
                pods=len(pods),
                bound_pods=tuple(pods),
                initialized=not nodepool or info.labels.get(wk.LABEL_INITIALIZED) == "true",
            )
        )
    return out, notes


def daemonset_pods(manifests: Manifests) -> list[model.Pod]:
    """The manifests' pods a DaemonSet controls: the newest stands for its DaemonSet (Karpenter uses the live pod,
    whose requests a LimitRange or webhook may have changed, over the template)."""
    out = []
    for obj in manifests.pods:
        owner = controller_owner(obj.get("metadata") or {})
        if owner is not None and owner.get("kind") == "DaemonSet":
            out.append(scheduling_pod(obj))
    return out


def nodepool_usage(manifests: Manifests) -> dict[str, dict[str, int]]:
    """Per NodePool, the summed capacity (and count, ``nodes``) of the Nodes labelled with it."""
    usage: dict[str, dict[str, int]] = {}
    for obj in manifests.nodes:
        info = node_view(obj)
        pool = info.labels.get(wk.LABEL_NODEPOOL)
        if pool and not info.deleting:
            usage[pool] = add(usage.get(pool, {"nodes": 0}), {"nodes": 1}, info.capacity or info.allocatable)
    return usage


def split_pods(manifests: Manifests) -> tuple[list[model.Pod], dict[str, list[model.Pod]], list[str]]:
    """Pending pods, pods bound per node name, and notes about pods left out.

    Terminal and DaemonSet-owned unbound pods are not provisionable (Karpenter ``IsProvisionable``); pods bound
    to a deleting Node are rescheduled; pods bound to a Node that is not in the manifests are left out. A pod
    being deleted (``metadata.deletionTimestamp``) is never planned: kube-scheduler skips it and its controller
    makes a replacement (Karpenter ``IsReschedulable``); bound to a live node it still holds its resources.
    """
    nodes = {n["metadata"]["name"]: n for n in manifests.nodes}
    pending: list[model.Pod] = []
    bound: dict[str, list[model.Pod]] = {}
    notes: list[str] = []
    memo: SpecMemo = {}  # a workload's replicas share their spec (karpy.simulate.workloads.expand)
    for obj in manifests.pods:
        if (obj.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        pod = scheduling_pod(obj, memo)
        if pod.node_name:
            node = nodes.get(pod.node_name)
            if node is None:
                notes.append(f"pod {pod.key} is bound to node {pod.node_name}, which is not in the manifests")
                continue
            if not (node["metadata"].get("deletionTimestamp")):
                bound.setdefault(pod.node_name, []).append(pod)
                continue
            pod = attrs.evolve(pod, node_name="")
        if pod.owner.startswith("DaemonSet/"):
            continue
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            notes.append(f"pod {pod.key} is being deleted: not planned")
            continue
        pending.append(pod)
    return pending, bound, notes


def with_volume_topology(manifests: Manifests, pending: Sequence[model.Pod]) -> tuple[list[model.Pod], dict[str, str]]:
    """``pending`` with ``volume_terms`` from their volumes (the provisioner's
    :meth:`~karpy.controllers.provisioner.Provisioner.scheduling_pods` rule), and the pods left out because a
    PVC, PV or StorageClass is missing or an unbound PVC binds Immediate (pod key → reason)."""
    claimed = {p.key for p in pending if p.volume_claims}
    if not claimed:
        return list(pending), {}
    objs = {f"{o['metadata'].get('namespace') or ''}/{o['metadata']['name']}": o for o in manifests.pods}
    pvcs = {f"{c['metadata'].get('namespace') or ''}/{c['metadata']['name']}": c for c in manifests.claims}
    pvs = {pv["metadata"]["name"]: pv for pv in manifests.persistent_volumes}
    classes = {sc["metadata"]["name"]: sc for sc in manifests.storage_classes}
    out, errors = [], {}
    for pod in pending:
        obj = objs.get(pod.key) if pod.key in claimed else None
        if obj is None:
            out.append(pod)
            continue
        topology = volume_topology(obj, pvcs, pvs, classes)
        if topology.error is not None:
            errors[pod.key] = f"waiting for volumes: {topology.error}"
        else:
            out.append(attrs.evolve(pod, volume_terms=topology.terms) if topology.terms else pod)
    return out, errors


def namespace_labels(manifests: Manifests) -> dict[str, dict[str, str]]:
    """Namespace → labels (with ``kubernetes.io/metadata.name``, as the API server sets it) for the
    namespaceSelector of pod affinity terms; namespaces without a manifest are left to the engine's default."""
    out = {}
    for ns in manifests.namespaces:
        name = str(ns["metadata"]["name"])
        out[name] = {**(ns["metadata"].get("labels") or {}), "kubernetes.io/metadata.name": name}
    return out


def input_notes(manifests: Manifests) -> list[str]:
    """What the reader should know about the input: kinds not simulated, workloads that run no pod."""
    notes = [f"ignored {n} {kind} object{'s' if n > 1 else ''}" for kind, n in sorted(manifests.ignored.items())]
    idle = [f"{w.kind} {w.namespace}/{w.name}" for w in manifests.workloads if w.pods == 0]
    if idle:
        notes.append(f"no pods from {', '.join(idle)} (0 replicas or suspended; --scale NAME=N runs N)")
    return notes


# ---------------------------------------------------------------------------------------------------------
# Simulation


def launch(plan: model.NewNodeClaim, zones: Sequence[str]) -> tuple[str, str, str, float | None, str]:
    """(instance type, zone, capacity type, price, error) the AWS launch would pick for a NodeClaim."""
    reqs = [requirement_to_json(r) for r in plan.requirements]
    capacity_type = choose_capacity_type(plan.instance_types, reqs, zones)
    if capacity_type is None:
        return "", "", "", None, f"no available offering in zones {', '.join(zones)}"
    candidates = launch_candidates(plan.instance_types, reqs, zones, capacity_type)
    it, offerings = candidates[0]
    offering = min(offerings, key=lambda o: (o.price, o.zone))
    return it.name, offering.zone, capacity_type, offering.price, ""


@pausing_gc
def simulate(
    manifests: Manifests,
    catalogue: Catalogue,
    *,
    preference_policy: str = "Respect",
    phases: dict[str, float] | None = None,
) -> Plan:
    """Plan the manifests' pending pods with the controller's engine (``preference_policy`` Respect or Ignore).

    ``phases``, when given, gets the seconds of ``prepare`` (translating the manifests for the engine),
    ``solve`` and ``launch`` (choosing each NodeClaim's offering and building the plan) added.
    Never raises for unschedulable input: reasons are in :attr:`Plan.unschedulable`.
    """
    prepared = time.perf_counter()
    nodeclasses = {nc["metadata"]["name"]: nc for nc in manifests.nodeclasses}
    usage = nodepool_usage(manifests)
    usable, unusable, zones_of = [], {}, {}
    for np_obj in manifests.nodepools:
        name = np_obj["metadata"]["name"]
        nodeclass = usable_nodeclass(np_obj, nodeclasses)
        if isinstance(nodeclass, str):
            unusable[name] = nodeclass
            continue
        zones_of[name] = catalogue.zones(nodeclass)
        usable.append((np_obj, catalogue.instance_types(nodeclass)))
    # NodeOverlays, as the controller applies them to every NodePool's instance types (gate NodeOverlay).
    types_of, overlay_reports = overlaid(manifests.nodeoverlays, usable)
    pools = [
        scheduling_nodepool(o, usage.get(o["metadata"]["name"], {"nodes": 0}), types_of[o["metadata"]["name"]])
        for o, _ in usable
    ]
    pending, bound, notes = split_pods(manifests)
    if manifests.nodeoverlays:
        notes.append(OVERLAY_NOTE)
    daemonsets = with_live_pods([daemonset_view(ds) for ds in manifests.daemonsets], daemonset_pods(manifests))
    notes += input_notes(manifests)
    pending, volume_errors = with_volume_topology(manifests, pending)
    startup = {p.name: p.startup_taints for p in pools}
    existing, ds_notes = existing_nodes(manifests, bound, daemonsets, startup)
    virtual, buffers = buffer_pods(manifests.capacity_buffers, manifests.pod_templates, manifests.scalables)
    if buffers:
        notes.append(GATE_NOTE)
    started = time.perf_counter()
    result = solve(
        pending + virtual,
        pools,
        existing,
        daemonsets,
        preference_policy=preference_policy,
        namespace_labels=namespace_labels(manifests),
    )
    solved = time.perf_counter()
    elapsed = solved - started
    nodes = []
    numbers: dict[str, int] = {}
    launches: dict[tuple[object, ...], tuple[str, str, str, float | None, str]] = {}
    for claim in result.new_nodeclaims:
        it, zone, ct, price, error = _launch_once(launches, claim, zones_of.get(claim.nodepool, []))
        numbers[claim.nodepool] = numbers.get(claim.nodepool, 0) + 1
        nodes.append(
            PlannedNode(
                name=f"{claim.nodepool}-{numbers[claim.nodepool]}",
                nodepool=claim.nodepool,
                instance_type=it,
                zone=zone,
                capacity_type=ct,
                price=price,
                pods=tuple(p.key for p in claim.pods if not cb.is_virtual(p)),
                candidates=len(claim.instance_types),
                requests=dict(claim.requests),
                launch_error=error,
                instance_types=tuple(t.name for t in claim.instance_types),
                buffer_pods=tuple(p.key for p in claim.pods if cb.is_virtual(p)),
            )
        )
    virtual_keys = {p.key for p in virtual}
    plan = Plan(
        catalogue=catalogue.description,
        spot_note=catalogue.spot_note,
        preference_policy=preference_policy,
        solve_seconds=elapsed,
        pods=len(pending) + len(volume_errors),
        nodes=tuple(nodes),
        existing={k: real for k, v in sorted(result.existing.items()) if (real := tuple(p.key for p in cb.real(v)))},
        unschedulable=dict(
            sorted(
                {
                    **volume_errors,
                    **{k: _reason(v, unusable) for k, v in result.errors.items() if k not in virtual_keys},
                }.items()
            )
        ),
        unusable_nodepools=unusable,
        notes=tuple(notes + ds_notes),
        buffers=tuple(buffers),
        existing_buffer_pods={
            k: held for k, v in sorted(result.existing.items()) if (held := tuple(p.key for p in v if cb.is_virtual(p)))
        },
        unschedulable_buffer_pods={
            k: _reason(v, unusable) for k, v in sorted(result.errors.items()) if k in virtual_keys
        },
        overlays=tuple(overlay_reports),
    )
    if phases is not None:
        for name, seconds in (
            ("prepare", started - prepared),
            ("solve", elapsed),
            ("launch", time.perf_counter() - solved),
        ):
            phases[name] = phases.get(name, 0.0) + seconds
    return plan


def _launch_once(
    memo: dict[tuple[object, ...], tuple[str, str, str, float | None, str]],
    claim: model.NewNodeClaim,
    zones: Sequence[str],
) -> tuple[str, str, str, float | None, str]:
    """:func:`launch`, once per distinct (requirements, candidate types, zones): many NodeClaims of a large plan
    share them (the pods of one workload), and the choice depends on nothing else."""
    key = (tuple(claim.requirements), tuple(id(t) for t in claim.instance_types), tuple(zones))
    if key not in memo:
        memo[key] = launch(claim, zones)
    return memo[key]


def _reason(message: str, unusable: Mapping[str, str]) -> str:
    """The engine's reason, plus the NodePools the simulation could not offer (instead of "no nodepools")."""
    extra = "; ".join(f'nodepool "{n}" not usable: {why}' for n, why in sorted(unusable.items()))
    if not extra:
        return message
    if message == "no nodepools":
        return extra
    return f"{message}; {extra}"


# ---------------------------------------------------------------------------------------------------------
# Output


def plan_to_json(plan: Plan) -> JSON:
    """The plan as JSON (``karpy simulate --output json``); prices USD/hour, solve time seconds."""
    by_pool: dict[str, JSON] = {}
    for node in plan.nodes:
        entry = by_pool.setdefault(node.nodepool, {"nodes": 0, "pods": 0, "pricePerHour": 0.0})
        entry["nodes"] += 1
        entry["pods"] += len(node.pods)
        entry["pricePerHour"] = round(entry["pricePerHour"] + (node.price or 0.0), 6)
    return {
        "catalogue": plan.catalogue,
        "spot": plan.spot_note,
        "preferencePolicy": plan.preference_policy,
        "solveSeconds": round(plan.solve_seconds, 6),
        "summary": {
            "pendingPods": plan.pods,
            "newNodes": len(plan.nodes),
            "podsOnNewNodes": sum(len(n.pods) for n in plan.nodes),
            "podsOnExistingNodes": sum(len(p) for p in plan.existing.values()),
            "unschedulablePods": len(plan.unschedulable),
            "pricePerHour": plan.total_price,
            **_buffer_summary(plan),
        },
        "nodePools": by_pool,
        "newNodes": [
            {
                "name": n.name,
                "nodePool": n.nodepool,
                "instanceType": n.instance_type,
                "zone": n.zone,
                "capacityType": n.capacity_type,
                "pricePerHour": n.price,
                "instanceTypeCandidates": n.candidates,
                "requests": format_resource_list(dict(n.requests)),
                "pods": list(n.pods),
                **({"bufferPods": list(n.buffer_pods)} if n.buffer_pods else {}),
                **({"launchError": n.launch_error} if n.launch_error else {}),
            }
            for n in plan.nodes
        ],
        "existingNodes": [
            {
                "name": k,
                "pods": list(plan.existing.get(k, ())),
                **({"bufferPods": list(plan.existing_buffer_pods[k])} if k in plan.existing_buffer_pods else {}),
            }
            for k in sorted({*plan.existing, *plan.existing_buffer_pods})
        ],
        "unschedulable": [{"pod": k, "reason": v} for k, v in plan.unschedulable.items()],
        "unusableNodePools": [{"nodePool": k, "reason": v} for k, v in sorted(plan.unusable_nodepools.items())],
        **({"nodeOverlays": report_json(plan.overlays)} if plan.overlays else {}),
        "notes": list(plan.notes),
        **_buffers_json(plan),
    }


def _buffer_summary(plan: Plan) -> JSON:
    """The CapacityBuffer counts of the JSON summary (none without buffers)."""
    if not plan.buffers:
        return {}
    return {
        "bufferPods": sum(b.replicas for b in plan.buffers),
        "bufferPodsOnNewNodes": sum(len(n.buffer_pods) for n in plan.nodes),
        "bufferPodsOnExistingNodes": sum(len(v) for v in plan.existing_buffer_pods.values()),
        "unschedulableBufferPods": len(plan.unschedulable_buffer_pods),
    }


def _buffers_json(plan: Plan) -> JSON:
    """``capacityBuffers`` (how each resolved) and ``unschedulableBufferPods`` (none without buffers)."""
    if not plan.buffers:
        return {}
    return {
        "capacityBuffers": [
            {
                "buffer": b.key,
                "replicas": b.replicas,
                **({"reason": b.reason, "message": b.message} if b.reason else {}),
            }
            for b in plan.buffers
        ],
        "unschedulableBufferPods": [{"pod": k, "reason": v} for k, v in plan.unschedulable_buffer_pods.items()],
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _pod_list(keys: Sequence[str], limit: int = 4) -> str:
    names = [k.split("/", 1)[-1] for k in keys]
    shown = ", ".join(names[:limit])
    return shown + (f", … (+{len(names) - limit})" if len(names) > limit else "")


def _pods_cell(pods: Sequence[str], buffer_pods: Sequence[str]) -> str:
    """``N: names`` of a node's pods, then its CapacityBuffer virtual pods as ``+ N buffer (names)``."""
    cell = f"{len(pods)}: {_pod_list(pods)}" if pods or not buffer_pods else "0"
    return cell + _buffer_list(buffer_pods)


def _buffer_list(keys: Sequence[str]) -> str:
    """`` + N buffer (names)``: the CapacityBuffer virtual pods of a node, "" when none."""
    return f" + {len(keys)} buffer ({_pod_list(keys, 2)})" if keys else ""


def _table(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def render_text(plan: Plan) -> str:
    """A human-readable plan: summary, new nodes by NodePool, existing nodes, unschedulable pods, notes."""
    placed_new = sum(len(n.pods) for n in plan.nodes)
    placed_old = sum(len(p) for p in plan.existing.values())
    lines = [
        f"{_count(plan.pods, 'pending pod')}: {placed_new} on {_count(len(plan.nodes), 'new node')} "
        f"(${plan.total_price:.4f}/hour), "
        f"{placed_old} on existing nodes, {len(plan.unschedulable)} unschedulable; "
        f"solved in {plan.solve_seconds:.3f} s",
        f"catalogue: {plan.catalogue}; {plan.spot_note}; preferences: {plan.preference_policy}",
    ]
    if plan.buffers:
        on_new = sum(len(n.buffer_pods) for n in plan.nodes)
        on_old = sum(len(v) for v in plan.existing_buffer_pods.values())
        lines.append(
            f"CapacityBuffer headroom: {_count(sum(b.replicas for b in plan.buffers), 'buffer pod')}: {on_new} on new "
            f"nodes, {on_old} on existing nodes, {len(plan.unschedulable_buffer_pods)} unschedulable"
        )
    for pool in sorted({n.nodepool for n in plan.nodes}):
        nodes = [n for n in plan.nodes if n.nodepool == pool]
        price = sum(n.price or 0.0 for n in nodes)
        lines += ["", f"NodePool {pool}: {_count(len(nodes), 'node')}, ${price:.4f}/hour"]
        rows = [["NODE", "INSTANCE TYPE", "ZONE", "CAPACITY", "$/HOUR", "CANDIDATES", "PODS"]]
        for n in nodes:
            rows.append(
                [
                    n.name,
                    n.instance_type or f"(not launchable: {n.launch_error})",
                    n.zone or "-",
                    n.capacity_type or "-",
                    f"{n.price:.4f}" if n.price is not None else "-",
                    str(n.candidates),
                    _pods_cell(n.pods, n.buffer_pods),
                ]
            )
        lines += _table(rows)
    if plan.existing or plan.existing_buffer_pods:
        lines += ["", "Existing nodes:"]
        rows = [["NODE", "PODS"]]
        for k in sorted({*plan.existing, *plan.existing_buffer_pods}):
            pods = plan.existing.get(k, ())
            rows.append([k, _pods_cell(pods, plan.existing_buffer_pods.get(k, ()))])
        lines += _table(rows)
    if plan.unschedulable:
        lines += ["", f"Unschedulable pods ({len(plan.unschedulable)}):"]
        by_reason: dict[str, list[str]] = {}
        for key, reason in plan.unschedulable.items():
            by_reason.setdefault(reason, []).append(key)
        for reason, keys in by_reason.items():
            if len(keys) == 1:
                lines.append(f"  {keys[0]}: {reason}")
            else:
                lines.append(f"  {len(keys)} pods ({_pod_list(keys, 3)}): {reason}")
    if plan.buffers:
        lines += ["", "CapacityBuffers:"]
        for b in plan.buffers:
            state = (
                f"{_count(b.replicas, 'buffer pod')}" if not b.reason else f"0 buffer pods ({b.reason}: {b.message})"
            )
            lines.append(f"  {b.key}: {state}")
        for key, reason in plan.unschedulable_buffer_pods.items():
            lines.append(f"  {key} (buffer) unschedulable: {reason}")
    if plan.unusable_nodepools:
        lines += ["", "NodePools not usable:"]
        lines += [f"  {k}: {v}" for k, v in sorted(plan.unusable_nodepools.items())]
    if plan.overlays:
        lines += ["", "NodeOverlays:", *report_lines(plan.overlays)]
    if plan.notes:
        lines += ["", "Notes:"] + [f"  {n}" for n in plan.notes]
    return "\n".join(lines) + "\n"
