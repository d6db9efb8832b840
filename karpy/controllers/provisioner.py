"""The provisioner: batches unschedulable pods, runs the scheduling simulation, creates NodeClaims.

Karpenter core ``provisioning/provisioner.go`` (C1–C3): pods that kube-scheduler marked
``PodScheduled=False/Unschedulable`` open a batch window (``BATCH_IDLE_DURATION``/``BATCH_MAX_DURATION``);
once the window closes and cluster state is synced, the simulation places them on existing and in-flight
capacity first, then on new NodeClaims from Ready NodePools in weight order.

Never a second launch for the same pods: every NodeClaim records the pods planned onto it (annotation
``karpy.sh/planned-pods``); cluster state indexes those and ``pending_pods`` skips them, and the created
NodeClaim is applied to cluster state immediately (read-your-writes), before the watch delivers it. After a
restart the annotations rebuild the same index from the LIST.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.apis.hashing import nodepool_hash
from karpy.apis.quantity import QuantityError, format_resource_list, parse_resource_list
from karpy.apis.resources import add
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, InstanceType
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import NORMAL, WARNING, EventRecorder
from karpy.kube.resources import NODECLAIMS
from karpy.metrics import NODECLAIMS_CREATED, UNSCHEDULABLE_PODS
from karpy.runtime.batcher import Batcher
from karpy.scheduling import model
from karpy.scheduling.scheduler import solve
from karpy.state.cluster import ClusterState, condition_true, deleting, planned_pods, provider_id
from karpy.state.views import NodeInfo, PodInfo, taints, taints_json

log = structlog.get_logger("karpy.provisioner")
JSON = dict[str, Any]

# Taints a node carries while it boots; ignored on uninitialized managed nodes (Karpenter C11).
EPHEMERAL_TAINT_KEYS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        wk.TAINT_UNREGISTERED_KEY,
    }
)
RECHECK_SECONDS = 10.0


def requirement_from_json(req: Mapping[str, Any]) -> model.Requirement:
    """A NodeSelectorRequirement (+minValues) from JSON; legacy keys normalised."""
    key = str(req.get("key", ""))
    return model.Requirement(
        key=wk.NORMALIZED_LABELS.get(key, key),
        operator=str(req.get("operator", "")),
        values=tuple(str(v) for v in req.get("values") or ()),
        min_values=req.get("minValues"),
    )


def requirement_to_json(req: model.Requirement) -> JSON:
    """A requirement back to NodeClaim JSON."""
    out: JSON = {"key": req.key, "operator": req.operator}
    if req.values or req.operator in (model.IN, model.NOT_IN):
        out["values"] = list(req.values)
    if req.min_values is not None:
        out["minValues"] = req.min_values
    return out


def nodeclass_name(obj: Mapping[str, Any]) -> str:
    """``nodeClassRef.name`` of a NodePool (under the template) or a NodeClaim."""
    spec = obj.get("spec") or {}
    ref = spec.get("nodeClassRef") or ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    return str(ref.get("name", ""))


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Ready condition True."""
    return condition_true(obj, wk.COND_READY)


def scheduling_nodepool(
    nodepool: JSON, usage: Mapping[str, int], instance_types: Sequence[InstanceType]
) -> model.NodePool:
    """The scheduling view of a NodePool JSON object."""
    spec = nodepool.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    try:
        limits = parse_resource_list(spec.get("limits"))
    except QuantityError:
        limits = {}
    return model.NodePool(
        name=str(nodepool["metadata"]["name"]),
        weight=int(spec.get("weight") or 0),
        requirements=tuple(requirement_from_json(r) for r in tspec.get("requirements") or []),
        labels=dict((template.get("metadata") or {}).get("labels") or {}),
        taints=taints(tspec.get("taints")),
        startup_taints=taints(tspec.get("startupTaints")),
        limits=limits,
        usage=usage,
        instance_types=tuple(instance_types),
    )


def nodeclaim_usage(nodeclaims: Sequence[JSON]) -> dict[str, int]:
    """Summed capacity of live NodeClaims (launched ones by status, others by requested instance type)."""
    total: dict[str, int] = {"nodes": 0}
    for nc in nodeclaims:
        if deleting(nc):
            continue
        total["nodes"] += 1
        try:
            total = add(total, parse_resource_list((nc.get("status") or {}).get("capacity")))
        except QuantityError:
            continue
    return total


class Provisioner:
    """Singleton loop (not keyed): ``run`` forever; ``trigger`` on relevant changes."""

    name = "provisioner"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        cloud: CloudProvider,
        events: EventRecorder,
        *,
        batch_idle: float = 1.0,
        batch_max: float = 10.0,
    ) -> None:
        self.client = client
        self.state = state
        self.cloud = cloud
        self.events = events
        self.batcher = Batcher(batch_idle, batch_max)

    def trigger(self) -> None:
        """A pod may need capacity: open or extend the batch window."""
        self.batcher.trigger()

    async def run(self) -> None:
        """Batch, then provision; re-check every 10 s while pods stay pending (Karpenter C1)."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._recheck())
            group.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await self.batcher.wait()
            await self.state.wait_synced()
            try:
                await self.provision_once()
            except (ApiError, CloudProviderError) as err:
                log.warning("provisioning failed, will retry", error=str(err))
                await asyncio.sleep(1.0)
                self.trigger()

    async def _recheck(self) -> None:
        while True:
            await asyncio.sleep(RECHECK_SECONDS)
            if self.state.synced and self.state.pending_pods():
                self.trigger()

    async def provision_once(self) -> list[JSON]:
        """One scheduling decision over every pending pod; returns the NodeClaims created."""
        pending = self.state.pending_pods()
        if not pending:
            return []
        nodepools, nodepool_objs = await self._nodepools()
        existing = self._existing_capacity()
        result = solve([p.pod for p in pending], nodepools, existing, list(self.state.daemonsets.values()))
        await self._plan_onto_existing(result.existing)
        created = await asyncio.gather(*(self._create(nc, nodepool_objs[nc.nodepool]) for nc in result.new_nodeclaims))
        self._report_errors(pending, result.errors)
        made = [c for c in created if c is not None]
        log.info(
            "provisioned",
            pods=len(pending),
            nodeclaims=len(made),
            planned_existing=sum(len(v) for v in result.existing.values()),
            unschedulable=len(result.errors),
        )
        return made

    async def _nodepools(self) -> tuple[list[model.NodePool], dict[str, JSON]]:
        pools, objs = [], {}
        types_by_class: dict[str, list[InstanceType]] = {}
        for name, nodepool in self.state.nodepools.items():
            if deleting(nodepool) or not is_ready(nodepool):
                continue
            class_name = nodeclass_name(nodepool)
            nodeclass = self.state.nodeclasses.get(class_name)
            if nodeclass is None:
                continue
            if class_name not in types_by_class:
                try:
                    types_by_class[class_name] = await self.cloud.get_instance_types(nodeclass)
                except CloudProviderError as err:
                    log.warning("no instance types", ec2nodeclass=class_name, error=str(err))
                    types_by_class[class_name] = []
            usage = nodeclaim_usage(self.state.nodeclaims_of(name))
            pools.append(scheduling_nodepool(nodepool, usage, types_by_class[class_name]))
            objs[name] = nodepool
        return pools, objs

    def _existing_capacity(self) -> list[model.ExistingNode]:
        """Registered nodes and in-flight NodeClaims, with what is bound or planned on each (Karpenter B15)."""
        out: list[model.ExistingNode] = []
        planned_by_claim: dict[str, list[str]] = {}
        for pod_key, claim in self.state.planned.items():
            planned_by_claim.setdefault(claim, []).append(pod_key)
        seen_claims: set[str] = set()
        for node in self.state.nodes.values():
            if node.deleting:
                continue
            owner = self.state.nodeclaim_for_node(node)
            if owner is not None:
                if deleting(owner):
                    continue
                seen_claims.add(owner["metadata"]["name"])
            out.append(self._existing_node(node, owner, planned_by_claim))
        for name, inflight in self.state.nodeclaims.items():
            if name in seen_claims or deleting(inflight):
                continue
            out.append(self._inflight_claim(inflight, planned_by_claim.get(name, [])))
        return out

    def _existing_node(
        self, node: NodeInfo, claim: JSON | None, planned: Mapping[str, list[str]]
    ) -> model.ExistingNode:
        pods = list(self.state.pods_on(node.name))
        node_taints = node.taints
        claim_name = ""
        if claim is not None:
            claim_name = claim["metadata"]["name"]
            pods += self._planned_infos(planned.get(claim_name, []))
            if not condition_true(claim, wk.COND_INITIALIZED):
                startup = {t.key for t in taints((claim.get("spec") or {}).get("startupTaints"))}
                node_taints = tuple(t for t in node.taints if t.key not in EPHEMERAL_TAINT_KEYS | startup)
        return model.ExistingNode(
            name=node.name,
            nodeclaim=claim_name,
            nodepool=node.labels.get(wk.LABEL_NODEPOOL, ""),
            labels=node.labels,
            taints=node_taints,
            allocatable=node.allocatable,
            requested=add(*(p.pod.requests for p in pods)),
            host_ports=tuple(hp for p in pods for hp in p.pod.host_ports),
            pods=len(pods),
        )

    def _inflight_claim(self, claim: JSON, planned: list[str]) -> model.ExistingNode:
        spec = claim.get("spec") or {}
        labels = dict((claim.get("metadata") or {}).get("labels") or {})
        for req in spec.get("requirements") or []:
            values = req.get("values") or []
            if req.get("operator") == "In" and len(values) == 1:
                labels.setdefault(req["key"], values[0])
        try:
            allocatable = parse_resource_list((claim.get("status") or {}).get("allocatable"))
        except QuantityError:
            allocatable = {}
        pods = self._planned_infos(planned)
        return model.ExistingNode(
            name=f"nodeclaim/{claim['metadata']['name']}",
            nodeclaim=claim["metadata"]["name"],
            nodepool=labels.get(wk.LABEL_NODEPOOL, ""),
            labels=labels,
            taints=taints(spec.get("taints")),
            allocatable=allocatable,
            requested=add(*(p.pod.requests for p in pods)),
            host_ports=tuple(hp for p in pods for hp in p.pod.host_ports),
            pods=len(pods),
        )

    def _planned_infos(self, keys: list[str]) -> list[PodInfo]:
        return [p for k in keys if (p := self.state.pods.get(k)) is not None and not p.node_name]

    async def _plan_onto_existing(self, existing: Mapping[str, tuple[model.Pod, ...]]) -> None:
        """Record pods placed on karpy's in-flight or uninitialized capacity on that NodeClaim."""
        by_claim: dict[str, list[str]] = {}
        for node_name, pods in existing.items():
            claim_name = node_name.removeprefix("nodeclaim/") if node_name.startswith("nodeclaim/") else ""
            if not claim_name:
                node = self.state.nodes.get(node_name)
                claim = self.state.nodeclaim_for_node(node) if node else None
                claim_name = claim["metadata"]["name"] if claim else ""
            if claim_name:
                by_claim.setdefault(claim_name, []).extend(p.key for p in pods)
        for claim_name, keys in by_claim.items():
            claim = self.state.nodeclaims.get(claim_name)
            if claim is None:
                continue
            merged = sorted(set(planned_pods(claim)) | set(keys))
            patch = {"metadata": {"annotations": {wk.ANNOTATION_PLANNED_PODS: json.dumps(merged)}}}
            try:
                updated = await self.client.merge_patch(NODECLAIMS, claim_name, patch)
            except ApiError as err:
                if err.not_found:
                    continue
                raise
            self.state.apply("NodeClaim", "MODIFIED", updated)

    async def _create(self, plan: model.NewNodeClaim, nodepool: JSON) -> JSON | None:
        body = nodeclaim_from_plan(plan, nodepool)
        try:
            created = await self.client.create(NODECLAIMS, body)
        except ApiError as err:
            log.warning("nodeclaim not created", nodepool=plan.nodepool, error=str(err))
            for pod in plan.pods:
                self.events.publish(_pod_ref(pod), WARNING, "FailedScheduling", f"nodeclaim not created: {err.message}")
            return None
        self.state.apply("NodeClaim", "ADDED", created)
        NODECLAIMS_CREATED.labels(nodepool=plan.nodepool, reason="provisioning").inc()
        name = created["metadata"]["name"]
        log.info(
            "created nodeclaim",
            nodeclaim=name,
            nodepool=plan.nodepool,
            pods=len(plan.pods),
            instance_types=len(plan.instance_types),
            cheapest=plan.cheapest_price,
            requests=format_resource_list(dict(plan.requests)),
        )
        for pod in plan.pods:
            self.events.publish(_pod_ref(pod), NORMAL, "Nominated", f"Pod should schedule on: nodeclaim/{name}")
        return created

    def _report_errors(self, pending: Sequence[PodInfo], errors: Mapping[str, str]) -> None:
        UNSCHEDULABLE_PODS.set(len(errors))
        by_key = {p.key: p for p in pending}
        for key, message in errors.items():
            info = by_key.get(key)
            if info is not None:
                self.events.publish(_pod_ref(info.pod), WARNING, "FailedScheduling", message)
        if errors:
            log.info("pods unschedulable", count=len(errors), example=next(iter(errors.values())))


def _pod_ref(pod: model.Pod) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
    }


def nodeclaim_from_plan(plan: model.NewNodeClaim, nodepool: JSON) -> JSON:
    """The NodeClaim JSON Karpenter would create for a plan (C3): generateName, labels, annotations,
    NodePool ownerReference, termination finalizer, requirements, requests, nodeClassRef."""
    meta = nodepool.get("metadata") or {}
    template = (nodepool.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    tspec = template.get("spec") or {}
    ref = tspec.get("nodeClassRef") or {}
    labels = {
        **plan.labels,
        wk.LABEL_NODEPOOL: plan.nodepool,
        wk.LABEL_EC2NODECLASS: str(ref.get("name", "")),
    }
    decision = {
        "nodepool": plan.nodepool,
        "pods": len(plan.pods),
        "podKeys": [p.key for p in plan.pods[:20]],
        "instanceTypes": [it.name for it in plan.instance_types[:10]],
        "instanceTypeCount": len(plan.instance_types),
        "cheapestPrice": plan.cheapest_price,
    }
    annotations = {
        **(tmeta.get("annotations") or {}),
        wk.ANNOTATION_NODEPOOL_HASH: nodepool_hash(nodepool),
        wk.ANNOTATION_NODEPOOL_HASH_VERSION: wk.NODEPOOL_HASH_VERSION,
        wk.ANNOTATION_PLANNED_PODS: json.dumps(sorted(p.key for p in plan.pods)),
        wk.ANNOTATION_DECISION: json.dumps(decision),
    }
    spec: JSON = {
        "requirements": [requirement_to_json(r) for r in plan.requirements],
        "resources": {"requests": format_resource_list(dict(plan.requests))},
        "nodeClassRef": {
            "group": ref.get("group", wk.AWS_GROUP),
            "kind": ref.get("kind", "EC2NodeClass"),
            "name": ref.get("name", ""),
        },
    }
    if plan.taints:
        spec["taints"] = taints_json(plan.taints)
    if plan.startup_taints:
        spec["startupTaints"] = taints_json(plan.startup_taints)
    for field in ("expireAfter", "terminationGracePeriod"):
        if tspec.get(field) is not None:
            spec[field] = tspec[field]
    return {
        "apiVersion": f"{wk.GROUP}/{wk.VERSION}",
        "kind": "NodeClaim",
        "metadata": {
            "generateName": f"{plan.nodepool}-",
            "labels": labels,
            "annotations": annotations,
            "finalizers": [wk.FINALIZER_TERMINATION],
            "ownerReferences": [
                {
                    "apiVersion": f"{wk.GROUP}/{wk.VERSION}",
                    "kind": "NodePool",
                    "name": meta.get("name", ""),
                    "uid": meta.get("uid", ""),
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


__all__ = ["Provisioner", "nodeclaim_from_plan", "provider_id"]
