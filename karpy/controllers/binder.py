"""The binder: binds the pods the provisioner planned onto a NodeClaim to its Node as soon as it registers.

karpy launches a node for specific pods, so it binds them itself through the ``pods/binding`` subresource
instead of waiting for kube-scheduler's next retry (which can take its unschedulable-pod backoff, up to
minutes). A pod that is gone or already bound is skipped; a 409 whose pod already sits on that node counts
as done; any other failure, or a pod that no longer fits or tolerates the node, is left to kube-scheduler. So
is a pod with a PVC not bound yet (WaitForFirstConsumer): kube-scheduler's volume binding must pick its node.
Keyed by NodeClaim name; enqueued by the plan owner (:class:`~karpy.state.plans.Plans`) when pods are planned
onto a NodeClaim, and by its Node's changes. A pod left to kube-scheduler is released from its plan.
"""

from __future__ import annotations

from typing import Any

import structlog

from karpy.apis import labels as wk
from karpy.apis.resources import add, fits, subtract
from karpy.controllers.provisioner import EPHEMERAL_TAINT_KEYS
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import PODS
from karpy.metrics import PODS_BOUND
from karpy.runtime.controller import Result
from karpy.scheduling.model import Pod, Taint
from karpy.scheduling.taints import tolerates
from karpy.state.cluster import ClusterState, deleting
from karpy.state.plans import Plans
from karpy.state.views import NodeInfo

log = structlog.get_logger("karpy.binder")
JSON = dict[str, Any]


def blocking_taint(pod: Pod, node: NodeInfo) -> Taint | None:
    """A NoSchedule/NoExecute taint the pod does not tolerate (boot-time ephemeral taints ignored)."""
    for taint in node.taints:
        if taint.effect == "PreferNoSchedule" or taint.key in EPHEMERAL_TAINT_KEYS:
            continue
        if not tolerates(pod.tolerations, taint):
            return taint
    return None


class Binder:
    """Keyed by NodeClaim name."""

    name = "binder"

    def __init__(self, client: KubeClient, state: ClusterState, plans: Plans | None = None) -> None:
        self.client = client
        self.state = state
        self.plans = plans if plans is not None else Plans(state)

    async def reconcile(self, key: str) -> Result:
        """Bind the NodeClaim's planned, still-unbound pods to its registered Node."""
        claim = self.state.nodeclaims.get(key)
        if claim is None or deleting(claim):
            return Result()
        node = self.state.node_for_nodeclaim(claim)
        # The lifecycle labels the Node registered in the same patch that turns the unregistered taint into
        # NoSchedule: from then on a Binding is safe (no NoExecute eviction) and kube-scheduler cannot race it.
        if node is None or node.deleting or node.labels.get(wk.LABEL_REGISTERED) != "true":
            return Result()
        used = add(*(p.pod.requests for p in self.state.pods_on(node.name)))
        for info in self.plans.pods_of(key):
            pod_key = info.key
            if self.state.waits_for_volume_binding(pod_key):
                # Left to kube-scheduler but kept planned: the provisioner must not launch for it again.
                log.debug("leaving pod to kube-scheduler", pod=pod_key, node=node.name, reason="volume binding")
                continue
            free = subtract(node.allocatable, used)
            taint = blocking_taint(info.pod, node)
            if not fits(info.pod.requests, free) or taint is not None:
                log.info(
                    "leaving pod to kube-scheduler",
                    pod=pod_key,
                    node=node.name,
                    reason=f"taint {taint.key}" if taint else "does not fit",
                )
                self.plans.release(info.pod.uid)
                continue
            if await self._bind(info.pod, node.name):
                used = add(used, info.pod.requests)
        return Result()

    async def _bind(self, pod: Pod, node_name: str) -> bool:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        try:
            await self.client.create_subresource(PODS, pod.name, "binding", body, pod.namespace)
        except ApiError as err:
            if err.conflict:
                current = await self._current_node(pod)
                if current == node_name:
                    return True  # our own earlier Binding, not yet seen through the watch: the plan holds
                self.plans.release(pod.uid)
                log.info("pod already bound elsewhere", pod=pod.key, node=current)
                return False
            self.plans.release(pod.uid)
            if err.not_found:
                return False
            log.warning("binding failed, leaving pod to kube-scheduler", pod=pod.key, error=str(err))
            return False
        PODS_BOUND.inc()
        log.info("bound pod", pod=pod.key, node=node_name)
        return True

    async def _current_node(self, pod: Pod) -> str:
        """The pod's node as the apiserver has it now; the answer is applied to cluster state (read-your-writes)."""
        try:
            obj = await self.client.get(PODS, pod.name, pod.namespace)
        except ApiError:
            return ""
        self.state.apply("Pod", "MODIFIED", obj)
        return str((obj.get("spec") or {}).get("nodeName") or "")
