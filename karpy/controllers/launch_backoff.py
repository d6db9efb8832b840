"""Launch failures: per-pod exponential back-off, events on the pods, and why no instance type can boot them.

Karpenter deletes a NodeClaim that cannot launch (insufficient capacity, NodeClass not ready) and re-plans its
pods on the next batch, with the failed offerings in the unavailable-offerings cache for 3 minutes. A failure
the cache does not capture (the same plan failing again for another reason) would otherwise create and
delete one NodeClaim per batch, about one a second, with nothing on the pods but kube-scheduler's message.
karpy adds three things on top:

* **Back-off per pod**: every pod planned onto a NodeClaim whose launch failed gets its own exponential
  back-off (``BASE_DELAY`` seconds doubling per consecutive failure, at most ``MAX_DELAY``). The pod key
  (``namespace/name``) is the group: the pods planned together share a failure count, a pod that joins a
  later plan does not inherit one, and a recreated pod with the same name (a StatefulSet's) does not start
  from scratch — which is the intent, its plan would fail the same way. The provisioner holds a new NodeClaim
  while *every* pod on it is backing off (a plan that also carries pods without failures is created: a launch
  happens for them anyway). A successful launch resets its pods; entries of deleted pods are pruned.
* **Events on the pods** naming the failure and the back-off (the NodeClaim's own event stays).
* **No compatible AMI**: the cloud provider leaves types no AMI of the NodeClass can boot out of the
  NodeClass's instance types (Karpenter does the same), so such pods are unschedulable and never launched;
  :func:`explain_incompatible` re-runs the scheduling simulation of those pods on the left-out types only, and
  when they would fit there, names the AMI requirements in their ``FailedScheduling`` message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final

import attrs
import structlog

from karpy.apis.meta import JSON
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.types import CloudProvider, CloudProviderError, IncompatibleInstanceTypes
from karpy.controllers import events as ev
from karpy.kube.events import WARNING, EventRecorder
from karpy.metrics import NODECLAIMS_LAUNCH_FAILED
from karpy.scheduling import model
from karpy.scheduling.buffers import is_virtual
from karpy.scheduling.scheduler import solve
from karpy.state.cluster import ClusterState
from karpy.state.plans import planned_pods

log = structlog.get_logger("karpy.launch_backoff")

BASE_DELAY: Final = 5.0
"""Seconds a pod waits for a new NodeClaim after its first failed launch; doubles per consecutive failure."""
MAX_DELAY: Final = 300.0
"""Longest back-off (seconds); also how long after its last one a failure is forgotten."""


@attrs.define
class _Failures:
    count: int
    until: float
    nodeclaim: str = ""


class LaunchBackoff:
    """Per-pod exponential back-off after failed launches (see the module docstring).

    Args:
        clock: monotonic seconds (tests inject one).
        base / cap: first delay and longest delay, seconds.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, base: float = BASE_DELAY, cap: float = MAX_DELAY
    ) -> None:
        self.clock = clock
        self.base = base
        self.cap = cap
        self._pods: dict[str, _Failures] = {}

    def failed(self, pod_keys: Iterable[str], nodeclaim: str = "") -> float:
        """One more consecutive launch failure for each pod; returns the longest back-off now set (seconds).

        A NodeClaim counts once: its launch can be retried before its deletion is seen (a second failure of the
        same ``nodeclaim`` keeps the back-off it set).
        """
        now = self.clock()
        longest = 0.0
        for key in pod_keys:
            entry = self._current(key, now)
            if entry is not None and nodeclaim and entry.nodeclaim == nodeclaim:
                longest = max(longest, min(self.cap, self.base * 2 ** (entry.count - 1)))
                continue
            count = 1 if entry is None else entry.count + 1
            delay = min(self.cap, self.base * 2 ** (count - 1))
            self._pods[key] = _Failures(count, now + delay, nodeclaim)
            longest = max(longest, delay)
        return longest

    def succeeded(self, pod_keys: Iterable[str]) -> None:
        """A launch for these pods worked: their back-off starts over."""
        for key in pod_keys:
            self._pods.pop(key, None)

    def remaining(self, pod_key: str) -> float:
        """Seconds before a new NodeClaim may be planned for the pod (0 when it may now)."""
        entry = self._current(pod_key, self.clock())
        return 0.0 if entry is None else max(0.0, entry.until - self.clock())

    def failures(self, pod_key: str) -> int:
        """Consecutive launch failures recorded for the pod (0 once reset or forgotten)."""
        entry = self._current(pod_key, self.clock())
        return 0 if entry is None else entry.count

    def hold(self, plans: Sequence[model.NewNodeClaim]) -> tuple[list[model.NewNodeClaim], float]:
        """The plans to create now, and the seconds until the first held plan may be retried (0: none held).

        A plan is held while every one of its pods is backing off (CapacityBuffer virtual pods never back off and
        do not count: headroom planned with backing-off pods waits with them).
        """
        create: list[model.NewNodeClaim] = []
        wait = 0.0
        for plan in plans:
            waits = [self.remaining(p.key) for p in plan.pods if not is_virtual(p)]
            if waits and min(waits) > 0:
                shortest = min(waits)
                wait = shortest if wait == 0 else min(wait, shortest)
                log.info(
                    "nodeclaim held after failed launches",
                    nodepool=plan.nodepool,
                    pods=len(plan.pods),
                    retry_in=round(shortest, 1),
                )
                continue
            create.append(plan)
        return create, wait

    def prune(self, live: Collection[str]) -> None:
        """Forget pods that no longer exist (``live``: the existing pod keys)."""
        for key in [k for k in self._pods if k not in live]:
            del self._pods[key]

    def _current(self, key: str, now: float) -> _Failures | None:
        entry = self._pods.get(key)
        if entry is not None and now > entry.until + self.cap:  # no failure for a long time: start over
            del self._pods[key]
            return None
        return entry


def record_launch_failure(
    backoff: LaunchBackoff,
    state: ClusterState,
    events: EventRecorder,
    claim: NodeClaim,
    reason: str,
    message: str,
) -> float:
    """Back off the pods planned onto ``claim`` and publish a Warning ``reason`` event on each naming the failed
    launch and when new capacity will be tried again; counts ``karpy_nodeclaims_launch_failed_total``. Returns
    the back-off in seconds."""
    name = claim.name
    NODECLAIMS_LAUNCH_FAILED.labels(nodepool=claim.nodepool, reason=reason).inc()
    keys = [k for k in planned_pods(claim.meta.annotations) if k in state.pods]
    delay = backoff.failed(keys, name)
    for key in keys:
        info = state.pods[key]
        retry = f"new capacity for this pod is retried in {delay:.0f}s"
        if reason == "InsufficientCapacityError":
            # Karpenter nodeclaim/lifecycle/events.go InsufficientCapacityErrorPodEvent (deduped per pod for 2 min,
            # rate-limited) plus karpy's back-off; NodeClassNotReady and LaunchFailed pod events are karpy's.
            events.record(ev.insufficient_capacity_error_pod(info.pod, name, f"{message}; {retry}"))
            continue
        events.publish(ev.pod_ref(info.pod), WARNING, reason, f"NodeClaim {name} failed to launch: {message}; {retry}")
    if keys:
        log.info("launch failed, pods backing off", nodeclaim=name, pods=len(keys), reason=reason, backoff=delay)
    return delay


async def explain_incompatible(
    cloud: CloudProvider,
    nodeclasses: Mapping[str, JSON],
    pools: Sequence[tuple[model.NodePool, str]],
    pods: Sequence[model.Pod],
    errors: Mapping[str, str],
    daemonsets: Sequence[model.DaemonSet],
    **solve_options: Any,
) -> dict[str, str]:
    """The scheduler's ``errors`` (pod key → message) of the pods only types without a compatible AMI would fit,
    with the AMI requirements put first; the other pods are left out.

    ``pods`` are the pods just scheduled (those without an error are ignored), ``pools`` pairs each Ready
    NodePool's scheduling view with its EC2NodeClass name; ``solve_options`` are passed to
    :func:`karpy.scheduling.scheduler.solve`. The message reads ``incompatible with nodepool "gpu": no instance
    type that fits has a compatible AMI: EC2NodeClass "default" resolves AMIs only for (…); would fit:
    g4dn.xlarge, …; <the scheduler's message>``. A cloud error leaves the pods unexplained.
    """
    pods = [p for p in pods if p.key in errors]
    if not pods:
        return {}
    left_out: dict[str, IncompatibleInstanceTypes] = {}
    alternatives: list[model.NodePool] = []
    for pool, class_name in pools:
        nodeclass = nodeclasses.get(class_name)
        if nodeclass is None:
            continue
        if class_name not in left_out:
            try:
                left_out[class_name] = await cloud.incompatible_instance_types(nodeclass)
            except CloudProviderError as err:
                log.debug("incompatible instance types unknown", ec2nodeclass=class_name, error=str(err))
                left_out[class_name] = IncompatibleInstanceTypes()
        if left_out[class_name].instance_types:
            alternatives.append(attrs.evolve(pool, instance_types=left_out[class_name].instance_types))
    if not alternatives:
        return {}
    reasons = {pool.name: left_out[class_name].reason for pool, class_name in pools if class_name in left_out}
    result = solve(pods, alternatives, [], daemonsets, **solve_options)
    out: dict[str, str] = {}
    for plan in result.new_nodeclaims:
        names = ", ".join(it.name for it in plan.instance_types[:5]) + (", …" if len(plan.instance_types) > 5 else "")
        message = (
            f'incompatible with nodepool "{plan.nodepool}": no instance type that fits has a compatible AMI: '
            f"{reasons.get(plan.nodepool, '')}; would fit: {names}"
        )
        for pod in plan.pods:
            out.setdefault(pod.key, f"{message}; {errors[pod.key]}")
    return out
