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

The registered nodes of one batch (one provisioning decision) are bound in one pass, their pods interleaved, so
a spread the plan made over their domains stays within its skew as they are admitted. A pod refused by a filter
that depends on other pods (PodTopologySpread, InterPodAffinity) while NodeClaims of its batch with planned pods
have not registered and settled yet keeps its plan (no event): the reconcile that follows their settle binds it
with them; it is left to kube-scheduler once its Node's bind hold (``BIND_HOLD``) is over and no peer is settling.
A pod whose Binding was sent is neither bound again nor left before the watch shows it bound; it counts on its
node meanwhile.

No Binding goes to a Node before the binder has seen it registered for ``BIND_SETTLE`` seconds (again after a
restart): the taint lifted just before (``karpenter.sh/unregistered`` NoExecute → NoSchedule) must reach
kube-controller-manager's taint-eviction controller before the pod does, or it deletes the pod (see
``BIND_SETTLE``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import structlog

from karpy.apis import labels as wk
from karpy.apis.taints import Taint
from karpy.controllers.nodeclaim_lifecycle import bind_hold_left
from karpy.controllers.provisioner import node_capacity, with_volume_terms
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.events import WARNING, EventRecorder
from karpy.kube.resources import PODS
from karpy.metrics import PODS_BOUND
from karpy.runtime.controller import Result
from karpy.scheduling.model import Pod
from karpy.scheduling.predicate import BindingCheck, has_topology
from karpy.scheduling.state import INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD
from karpy.scheduling.translate import EPHEMERAL_TAINT_KEYS
from karpy.state.cluster import ClusterState
from karpy.state.plans import Plans
from karpy.state.views import NodeInfo, PodInfo

log = structlog.get_logger("karpy.binder")
# Bindings of one node in flight at once (the client's KUBE_CLIENT_QPS/BURST limiter paces them): a node's pods
# are bound together, as kube-scheduler's binding cycles run in parallel, not one round trip after another.
BIND_CONCURRENCY = 32
# The filters whose answer depends on where other pods are: a pod they refuse may pass once its planned peers on
# the batch's other nodes are bound.
PEER_FILTERS = (f"{POD_TOPOLOGY_SPREAD}:", f"{INTER_POD_AFFINITY}:")
# Seconds a Node must have been registered in this binder's view (registration turned its karpenter.sh/unregistered
# taint from NoExecute into NoSchedule) before any Binding to it. kube-controller-manager's taint-eviction
# controller reads Nodes and pods through two informers: when a pod's binding reaches it before the Node update
# that lifted the NoExecute taint, it finds the pod on a Node whose taint it does not tolerate and deletes it at
# once — a bare pod is lost (kubernetes/kubernetes#119862 and #139992: the same race follows kube-scheduler's
# binding after a NoExecute startup taint is removed). Binding within milliseconds of the lift hit it on a loaded
# 2-core machine (the Binding ~50 ms after the Node was created); this margin is 20 times that, which makes the
# race unlikely, not impossible (upstream's live re-check before eviction, kubernetes#140198, is not merged). It
# delays only the pods bound in a Node's first second in this process.
BIND_SETTLE = 1.0


def binding_taints(node: NodeInfo) -> tuple[Taint, ...]:
    """The Node's taints a Binding must respect: all but the boot-time ephemeral ones (a registered Node's
    remaining not-ready taint is NoSchedule, which kubelet does not enforce). Startup taints do count: the pod
    is left to kube-scheduler until whatever owns them removes them."""
    return tuple(t for t in node.taints if t.key not in EPHEMERAL_TAINT_KEYS)


def interleave(queues: Sequence[Sequence[tuple[Pod, str]]]) -> list[tuple[Pod, str]]:
    """The queues' entries round-robin (the first of each, then the second of each...): each node of a batch
    gets its share in turn, so a spread over their domains stays within its skew as the pods are admitted."""
    out: list[tuple[Pod, str]] = []
    for i in range(max((len(q) for q in queues), default=0)):
        out.extend(q[i] for q in queues if i < len(q))
    return out


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
        clock: Callable[[], float] = time.time,
        settle: float = BIND_SETTLE,
    ) -> None:
        self.client = client
        self.state = state
        self.plans = plans
        self.events = events
        self.clock = clock
        self.settle = settle
        # Node uid → when (``clock``) this binder first found it registered; its Bindings start ``settle`` later.
        self._registered_since: dict[str, float] = {}
        # Pods whose Binding this binder sent (in flight or answered) and that cluster state does not show bound
        # yet: pod uid → (pod, node name). They are not bound again (a second Binding is a 409) and they count on
        # their node for the checks, as kube-scheduler's cache assumes a pod until the informer confirms it.
        self._sent: dict[str, tuple[PodInfo, str]] = {}

    async def reconcile(self, key: str) -> Result:
        """Bind the planned, still-unbound pods of the NodeClaim and of the registered NodeClaims of its batch."""
        self._prune()
        node = self._registered_node(key)
        if node is None or not any(self.plans.pods_of(name) for name in self.plans.batch_of(key)):
            return Result()
        settling = self._settle_left(node)
        if settling > 0:
            return Result(requeue_after=settling)
        # The batch's other registered nodes are bound in the same pass: the plan spread the batch's pods over
        # their domains together, so a pod refused on one node only because its peers on another are not bound
        # yet (a zone spread's skew) is bound once they are, in an order that keeps every check valid.
        targets = [(key, node)]
        for sibling in sorted(self.plans.batch_of(key) - {key}):
            other = self._bindable_node(sibling)
            if other is not None:
                targets.append((sibling, other))
        queues, infos = self._queues(targets)
        if not queues:
            return Result()
        admitted, refused = self._admit([n.name for _, n in targets], interleave(queues))
        for pod, node_name in admitted:
            self._sent[pod.uid] = (infos[pod.uid], node_name)
        wait = self._wait_for_peers(key, refused, {name for name, _ in targets})
        limit = asyncio.Semaphore(BIND_CONCURRENCY)
        await asyncio.gather(*(self._bind_within(limit, pod, node_name) for pod, node_name in admitted))
        return Result(requeue_after=wait) if wait is not None else Result()

    def _queues(
        self, targets: Sequence[tuple[str, NodeInfo]]
    ) -> tuple[list[list[tuple[Pod, str]]], dict[str, PodInfo]]:
        """Per target (NodeClaim name, Node): its planned pods to check, as (pod with volume terms, node name);
        and pod uid → PodInfo. Pods whose Binding is sent are skipped; pods waiting for volume binding stay
        planned but are not bound; a pod whose volumes cannot be resolved is left to kube-scheduler."""
        queues: list[list[tuple[Pod, str]]] = []
        infos: dict[str, PodInfo] = {}
        for name, target in targets:
            queue = []
            for info in self.plans.pods_of(name):
                if info.pod.uid in self._sent:
                    continue  # its Binding is sent; the watch has not shown it bound yet
                if self.state.waits_for_volume_binding(info.key):
                    # Left to kube-scheduler but kept planned: the provisioner must not launch for it again.
                    log.debug("leaving pod to kube-scheduler", pod=info.key, node=target.name, reason="volume binding")
                    continue
                pod, error = with_volume_terms(self.state, info, keep_hostname=True)
                if error is not None:
                    self._leave(pod, target.name, error)
                    continue
                infos[pod.uid] = info
                queue.append((pod, target.name))
            if queue:
                queues.append(queue)
        return queues, infos

    def _bindable_node(self, nodeclaim: str) -> NodeInfo | None:
        """The NodeClaim's Node once it is registered and settled (:meth:`_settle_left`), else None."""
        node = self._registered_node(nodeclaim)
        return node if node is not None and self._settle_left(node) == 0 else None

    def _registered_node(self, nodeclaim: str) -> NodeInfo | None:
        """The NodeClaim's Node once registration labelled it registered (in the same patch that turned the
        unregistered taint into NoSchedule, which a Binding ignores)."""
        claim = self.state.nodeclaim_view(nodeclaim)
        if claim is None or claim.deleting:
            return None
        node = self.state.node_for_nodeclaim(claim)
        if node is None or node.deleting or node.labels.get(wk.LABEL_REGISTERED) != "true":
            return None
        return node

    def _settle_left(self, node: NodeInfo) -> float:
        """Seconds until ``node`` may get Bindings: ``settle`` after this binder first found it registered
        (``BIND_SETTLE``: kube-controller-manager must have seen the NoExecute taint lifted first). Found by
        Node uid, so a new Node reusing a name (EC2 reuses private IPs) settles afresh."""
        now = self.clock()
        key = node.uid or node.name
        since = self._registered_since.setdefault(key, now)
        if since > now:  # the wall clock stepped back: start again rather than wait out the step
            self._registered_since[key] = since = now
        return max(self.settle - (now - since), 0.0)

    def _prune(self) -> None:
        """Forget the sent Bindings cluster state now shows (or whose pod is gone), and, once they outnumber the
        Nodes, the settle times of Nodes that are gone."""
        for uid, (info, _) in list(self._sent.items()):
            now = self.state.pods.get(info.key)
            if now is None or now.pod.uid != uid or now.node_name or now.deleting or now.terminal:
                del self._sent[uid]
        if len(self._registered_since) > 2 * len(self.state.nodes) + 64:
            live = {n.uid or n.name for n in self.state.nodes.values()}
            self._registered_since = {k: t for k, t in self._registered_since.items() if k in live}

    def _admit(
        self, nodes: Sequence[str], order: Sequence[tuple[Pod, str]]
    ) -> tuple[list[tuple[Pod, str]], list[tuple[Pod, str, str]]]:
        """Check the pods in ``order`` (pod, node), each admitted one counted for the next checks. A pod refused
        by a filter that depends on other pods (spread, pod (anti-)affinity) is tried again after the others, as
        long as a round admits something; any other refusal leaves it to kube-scheduler. Returns the admitted
        (pod, node) and the pods still refused by a peer-dependent filter (pod, node, reason)."""
        check = self._check(nodes, [pod for pod, _ in order])
        admitted: list[tuple[Pod, str]] = []
        pending = list(order)
        reasons: dict[str, str] = {}
        while pending:
            again: list[tuple[Pod, str]] = []
            for pod, node_name in pending:
                reason = check.refusal(pod, node_name)
                if reason is None:
                    # Counted for the next pods' checks before its Binding is sent: the Bindings go out together.
                    # A Binding that then fails only made the later checks stricter.
                    check.assume(pod, node_name)
                    admitted.append((pod, node_name))
                elif reason.startswith(PEER_FILTERS):
                    reasons[pod.uid] = reason
                    again.append((pod, node_name))
                else:
                    self._leave(pod, node_name, reason)
            if len(again) == len(pending):
                break
            pending = again
        return admitted, [(pod, node_name, reasons[pod.uid]) for pod, node_name in pending]

    def _wait_for_peers(self, key: str, refused: Sequence[tuple[Pod, str, str]], targets: set[str]) -> float | None:
        """Keep the plans of pods refused only for want of peers the plan puts on NodeClaims of the batch that
        are not among this pass's ``targets`` (not registered or not settled yet: their Bindings come through
        their own reconcile, which binds this node's pods too), while the Node's bind hold lasts; leave the others.
        Returns the seconds until the first waiting pod's hold ends (its node is looked at again then), None when
        none waits."""
        if not refused:
            return None
        peers, settling = self._peers_in_flight(key, targets)
        wait: float | None = None
        for pod, node_name, reason in refused:
            node = self.state.nodes.get(node_name)
            # A registered peer still settling has its Bindings coming even if the hold ends first.
            left = max(bind_hold_left(node, self.clock()) if node is not None else 0.0, settling)
            if peers and left > 0:
                log.debug("pod waits for its planned peers", pod=pod.key, node=node_name, reason=reason)
                wait = left if wait is None else min(wait, left)
                continue
            self._leave(pod, node_name, reason)
        return None if wait is None else wait + 0.1

    def _peers_in_flight(self, key: str, targets: set[str]) -> tuple[bool, float]:
        """Whether a NodeClaim of ``key``'s batch outside this pass's ``targets`` (not registered or not settled
        when the pass chose them; one that settled since still gets its Bindings from its own reconcile) still has
        pods planned onto it; and the longest settle left among those that are registered (seconds)."""
        in_flight, settling = False, 0.0
        for sibling in self.plans.batch_of(key):
            if sibling in targets:
                continue
            claim = self.state.nodeclaim_view(sibling)
            if claim is None or claim.deleting:
                continue
            if any(not self.state.waits_for_volume_binding(info.key) for info in self.plans.pods_of(sibling)):
                in_flight = True
                node = self._registered_node(sibling)
                if node is not None:
                    settling = max(settling, self._settle_left(node))
        return in_flight, settling

    async def _bind_within(self, limit: asyncio.Semaphore, pod: Pod, node_name: str) -> bool:
        bound = False
        try:
            async with limit:
                bound = await self._bind(pod, node_name)
        finally:
            if not bound:  # failed, or cancelled or raised before an answer: the pod may be bound again
                self._sent.pop(pod.uid, None)
        return bound

    def _check(self, nodes: Sequence[str], pods: Sequence[Pod]) -> BindingCheck:
        """The binding predicate over the target ``nodes`` as they are now, with the pods whose Bindings were
        sent counted where they were sent. The rest of the cluster is only built when a pod to bind has topology
        constraints or a bound pod has required anti-affinity (that could exclude a target)."""
        sent: dict[str, list[PodInfo]] = {}
        for info, node_name in self._sent.values():
            sent.setdefault(node_name, []).append(info)
        targets = []
        for name in nodes:
            node = self.state.nodes[name]
            on = [*self.state.pods_on(name), *sent.get(name, ())]
            targets.append(node_capacity(node, on, binding_taints(node)))
        topology = any(has_topology(p) for p in pods) or any(
            info.pod.pod_anti_affinity and info.node_name for info in self.state.pods.values()
        )
        cluster = []
        if topology:
            for node in self.state.nodes.values():
                if node.name not in nodes:
                    on = [*self.state.pods_on(node.name), *sent.get(node.name, ())]
                    cluster.append(node_capacity(node, on, node.taints))
        return BindingCheck(targets, cluster, pods, self.state.namespace_labels())

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
