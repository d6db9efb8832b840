"""The binder: binds the pods the provisioner planned onto a NodeClaim to its Node as soon as it registers.

karpy launches a node for specific pods, so it binds them itself through the ``pods/binding`` subresource
instead of waiting for kube-scheduler's next retry (which can take its unschedulable-pod backoff, up to
minutes). A Binding skips kube-scheduler, so before each one the binder asks what kube-scheduler's filters would
say for the pod on that node, with the pods now on the nodes (:mod:`karpy.scheduling.predicate`, the scheduling
engine's own existing-node check): resources, taints, nodeSelector and required node affinity, the node affinity
of the pod's bound volumes, host ports, pod (anti-)affinity and topology spread. A pod any of them refuses is left
to kube-scheduler, with a log line and a ``LeftToScheduler`` event naming the filter. A pod that is gone or
already bound is skipped; a 409 whose pod already sits on that node counts as done; any other failure is left to
kube-scheduler. So is a pod with a PVC not bound yet (WaitForFirstConsumer): kube-scheduler's volume binding must
pick its node. Keyed by NodeClaim name; enqueued by the plan owner (:class:`~karpy.state.plans.Plans`) when pods
are planned onto a NodeClaim, and by its Node's changes. A pod left to kube-scheduler is released from its plan.
A node's admitted pods are bound concurrently (``BIND_CONCURRENCY`` at a time), each counted for the checks of
the pods after it before its Binding is sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog

from karpy.apis import labels as wk
from karpy.apis.taints import Taint
from karpy.controllers.provisioner import bound_nodes, node_capacity, with_volume_terms
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import PODS
from karpy.metrics import PODS_BOUND
from karpy.runtime.controller import Result
from karpy.scheduling.model import Pod
from karpy.scheduling.predicate import BindingCheck, has_topology
from karpy.scheduling.translate import EPHEMERAL_TAINT_KEYS
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans
from karpy.state.views import NodeInfo

log = structlog.get_logger("karpy.binder")
# Bindings of one node in flight at once (the client's KUBE_CLIENT_QPS/BURST limiter paces them): a node's pods
# are bound together, as kube-scheduler's binding cycles run in parallel, not one round trip after another.
BIND_CONCURRENCY = 32


def binding_taints(node: NodeInfo) -> tuple[Taint, ...]:
    """The Node's taints a Binding must respect: all but the boot-time ephemeral ones (a registered Node's
    remaining not-ready taint is NoSchedule, which kubelet does not enforce). Startup taints do count: the pod
    is left to kube-scheduler until whatever owns them removes them."""
    return tuple(t for t in node.taints if t.key not in EPHEMERAL_TAINT_KEYS)


class Binder:
    """Keyed by NodeClaim name."""

    name = "binder"

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        plans: Plans,
        *,
        events: EventRecorder | None = None,
    ) -> None:
        self.client = client
        self.state = state
        self.plans = plans
        self.events = events

    async def reconcile(self, key: str) -> Result:
        """Bind the NodeClaim's planned, still-unbound pods to its registered Node."""
        claim = self.state.nodeclaim_view(key)
        if claim is None or claim.deleting:
            return Result()
        node = self.state.node_for_nodeclaim(claim)
        # The lifecycle labels the Node registered in the same patch that turns the unregistered taint into
        # NoSchedule: from then on a Binding is safe (no NoExecute eviction) and kube-scheduler cannot race it.
        if node is None or node.deleting or node.labels.get(wk.LABEL_REGISTERED) != "true":
            return Result()
        todo: list[Pod] = []
        for info in self.plans.pods_of(key):
            pod_key = info.key
            if self.state.waits_for_volume_binding(pod_key):
                # Left to kube-scheduler but kept planned: the provisioner must not launch for it again.
                log.debug("leaving pod to kube-scheduler", pod=pod_key, node=node.name, reason="volume binding")
                continue
            pod, error = with_volume_terms(self.state, info, keep_hostname=True)
            if error is not None:
                self._leave(pod, node.name, error)
                continue
            todo.append(pod)
        if not todo:
            return Result()
        check = self._check(node, todo)
        admitted: list[Pod] = []
        for pod in todo:
            reason = check.refusal(pod)
            if reason is not None:
                self._leave(pod, node.name, reason)
                continue
            # Counted for the next pods' checks before its Binding is sent: the Bindings go out together. A
            # Binding that then fails only made the later checks stricter (a pod left to kube-scheduler).
            check.assume(pod)
            admitted.append(pod)
        limit = asyncio.Semaphore(BIND_CONCURRENCY)
        await asyncio.gather(*(self._bind_within(limit, pod, node.name) for pod in admitted))
        return Result()

    async def _bind_within(self, limit: asyncio.Semaphore, pod: Pod, node_name: str) -> bool:
        async with limit:
            return await self._bind(pod, node_name)

    def _check(self, node: NodeInfo, pods: Sequence[Pod]) -> BindingCheck:
        """The binding predicate over the Node as it is now. The rest of the cluster is only built when a pod to
        bind has topology constraints or a bound pod has required anti-affinity (that could exclude this node)."""
        target = node_capacity(node, list(self.state.pods_on(node.name)), binding_taints(node))
        topology = any(has_topology(p) for p in pods) or any(
            info.pod.pod_anti_affinity and info.node_name for info in self.state.pods.values()
        )
        cluster = bound_nodes(self.state) if topology else []
        return BindingCheck(target, cluster, pods, self.state.namespace_labels())

    def _leave(self, pod: Pod, node_name: str, reason: str) -> None:
        """Leave the pod to kube-scheduler: drop the plan, say why in the log and on the pod."""
        self.plans.release(pod.uid)
        log.info("leaving pod to kube-scheduler", pod=pod.key, node=node_name, reason=reason)
        if self.events is not None:
            ref = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            }
            self.events.publish(
                ref, WARNING, "LeftToScheduler", f"karpy did not bind the pod to node {node_name}: {reason}"
            )

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
