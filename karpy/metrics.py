"""Prometheus metrics with Karpenter v1.15's names, label names and label values (``karpenter_*``), plus a few
karpy-only ones (``karpy_*``), in prometheus-client's default registry; served on ``METRICS_PORT`` by karpy's
aiohttp server (:mod:`karpy.health`).

The metrics incremented or observed where something happens live here (counters, histograms, summaries and the
gauges a reconciler sets); the ones rendered from cluster state on each scrape live in their own collectors.
Sources: Karpenter core ``pkg/metrics/{metrics,labels,constants}.go``, ``pkg/controllers/disruption/metrics.go``,
``pkg/controllers/node/termination/{metrics.go,terminator/metrics.go}``,
``pkg/controllers/nodeclaim/lifecycle/metrics.go``, ``pkg/controllers/provisioning/scheduling/metrics.go``,
``pkg/controllers/state/metrics.go``, ``pkg/controllers/metrics/pod/controller.go``, ``pkg/operator/operator.go``
(``karpenter_build_info``); AWS provider ``pkg/controllers/interruption/metrics.go``.

Label values follow Karpenter's: NodeClaim reasons are lower snake case (``provisioned``, ``expired``,
``garbage_collected``, ``insufficient_capacity``, ``nodeclass_not_ready``, ``launch_timeout``,
``registration_timeout``, and the voluntary-disruption reasons lower-cased: ``empty``, ``underutilized``,
``drifted``); ``consolidation_type`` is ``empty``, ``single``, ``multi`` or ``""`` (drift);
``consolidation_policy`` the NodePool's policy in snake case for consolidation, ``""`` otherwise;
``termination_mode`` is ``graceful`` (no ``terminationGracePeriod``), ``eventual`` (> 0) or ``forceful`` (0).

Differences: prometheus-client's ``Summary`` exposes ``_count`` and ``_sum`` only, without Karpenter's quantiles
(0, 0.5, 0.9, 0.99, 1) — ``karpenter_nodes_termination_duration_seconds`` and
``karpenter_pods_startup_duration_seconds``.
"""

from __future__ import annotations

import platform
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import Any, Final

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, Summary
from prometheus_client.registry import Collector

from karpy import __version__
from karpy.apis import labels as wk
from karpy.apis.hashing import go_duration_ns
from karpy.apis.nodeclaim import NodeClaim
from karpy.cloudprovider.metrics import DURATION_BUCKETS  # defined once, in the lowest layer that uses it
from karpy.scheduling import model

# ``prometheus.ExponentialBuckets(1, 2, n)``.
_EXP_11: Final = tuple(float(2**i) for i in range(11))  # 1 … 1024
_EXP_12: Final = tuple(float(2**i) for i in range(12))  # 1 … 2048
_HOUR: Final = 3600.0
_DAY: Final = 24 * _HOUR
# ``karpenter_nodes_lifetime_duration_seconds``: 15 min … 30 days.
_LIFETIME_BUCKETS: Final = (
    900.0, 1800.0, 2700.0, _HOUR, 2 * _HOUR, 4 * _HOUR, 6 * _HOUR, 8 * _HOUR, 10 * _HOUR, 12 * _HOUR, 16 * _HOUR,
    20 * _HOUR, _DAY, 2 * _DAY, 3 * _DAY, 5 * _DAY, 10 * _DAY, 15 * _DAY, 20 * _DAY, 25 * _DAY, 30 * _DAY,
)  # fmt: skip

# NodeClaim created/disrupted reasons (Karpenter core ``pkg/metrics/constants.go``).
PROVISIONED: Final = "provisioned"
EXPIRED: Final = "expired"
UNHEALTHY: Final = "unhealthy"  # node repair
GARBAGE_COLLECTED: Final = "garbage_collected"
INSUFFICIENT_CAPACITY: Final = "insufficient_capacity"
NODECLASS_NOT_READY: Final = "nodeclass_not_ready"
LAUNCH_TIMEOUT: Final = "launch_timeout"
REGISTRATION_TIMEOUT: Final = "registration_timeout"
# ``termination_mode`` values.
GRACEFUL: Final = "graceful"
EVENTUAL: Final = "eventual"
FORCEFUL: Final = "forceful"
# ``controller`` values of the scheduler metrics (Karpenter's controller names).
PROVISIONER: Final = "provisioner"
DISRUPTION: Final = "disruption"
# ``reason`` of ``karpenter_pods_drained_total`` when the NodeClaim has no DisruptionReason condition.
FORCEFUL_TERMINATION: Final = "Forceful Termination"

_CONSOLIDATION_TYPES: Final = {"emptiness": "empty", "single-node": "single", "multi-node": "multi"}
_GOARCH: Final = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "i386": "386"}

# --- General -------------------------------------------------------------------------------------------------

BUILD_INFO = Gauge(
    "karpenter_build_info",
    "A metric with a constant '1' value labeled by version from which karpenter was built.",
    ["version", "goversion", "goarch", "commit"],
)

# --- NodeClaims (core ``pkg/metrics/metrics.go``, ``nodeclaim/lifecycle/metrics.go``) --------------------------

NODECLAIMS_CREATED = Counter(
    "karpenter_nodeclaims_created_total",
    "Number of nodeclaims created in total by Karpenter. Labeled by reason the nodeclaim was created, the owning "
    "nodepool, and if min values was relaxed for this nodeclaim.",
    ["reason", "nodepool", "min_values_relaxed"],
)
NODECLAIMS_TERMINATED = Counter(
    "karpenter_nodeclaims_terminated_total",
    "Number of nodeclaims terminated in total by Karpenter. Labeled by the owning nodepool, capacity type, and zone.",
    ["nodepool", "capacity_type", "zone"],
)
NODECLAIMS_DISRUPTED = Counter(
    "karpenter_nodeclaims_disrupted_total",
    "Number of nodeclaims disrupted in total by Karpenter. Labeled by reason the nodeclaim was disrupted, the owning "
    "nodepool, the capacity type, the consolidation policy, and the termination mode.",
    ["reason", "nodepool", "capacity_type", "consolidation_policy", "termination_mode"],
)
NODECLAIMS_UNHEALTHY_DISRUPTED = Counter(
    "karpenter_nodeclaims_unhealthy_disrupted_total",
    "Number of unhealthy nodeclaims disrupted in total by node repair. Labeled by the condition the node was disrupted "
    "on, the owning nodepool, the capacity type, the image ID, and the termination mode.",
    ["condition", "nodepool", "capacity_type", "image_id", "termination_mode"],
)
NODECLAIMS_TERMINATION_DURATION = Histogram(
    "karpenter_nodeclaims_termination_duration_seconds",
    "Duration of NodeClaim termination in seconds.",
    ["nodepool"],
    buckets=_EXP_12,
)
NODECLAIMS_INSTANCE_TERMINATION_DURATION = Histogram(
    "karpenter_nodeclaims_instance_termination_duration_seconds",
    "Duration of CloudProvider Instance termination in seconds.",
    ["nodepool"],
    buckets=_EXP_11,
)
NODECLAIMS_LAUNCH_FAILED = Counter(
    "karpy_nodeclaims_launch_failed_total",
    "NodeClaim launches that failed, by NodePool and reason (InsufficientCapacityError, NodeClassNotReady, "
    "LaunchFailed).",
    ["nodepool", "reason"],
)

# --- Nodes (core ``pkg/metrics/metrics.go``, ``node/termination/metrics.go``) ----------------------------------

NODES_CREATED = Counter(
    "karpenter_nodes_created_total",
    "Number of nodes created in total by Karpenter. Labeled by owning nodepool and zone.",
    ["nodepool", "zone"],
)
NODES_TERMINATED = Counter(
    "karpenter_nodes_terminated_total",
    "Number of nodes terminated in total by Karpenter. Labeled by owning nodepool and zone.",
    ["nodepool", "zone"],
)
NODES_TERMINATION_DURATION = Summary(
    "karpenter_nodes_termination_duration_seconds",
    "The time taken between a node's deletion request and the removal of its finalizer",
    ["nodepool"],
)
NODES_DRAINED = Counter("karpenter_nodes_drained_total", "The total number of nodes drained by Karpenter", ["nodepool"])
NODES_LIFETIME = Histogram(
    "karpenter_nodes_lifetime_duration_seconds",
    "The lifetime duration of the nodes since creation.",
    ["nodepool"],
    buckets=_LIFETIME_BUCKETS,
)

# --- Pods (core ``node/termination/terminator/metrics.go``, ``metrics/pod/controller.go``, ``state/metrics.go``) --

PODS_EVICTION_REQUESTS = Counter(
    "karpenter_pods_eviction_requests_total",
    "The total number of pod eviction requests made by Karpenter, labeled by response code",
    ["code"],
)
PODS_DRAINED = Counter(
    "karpenter_pods_drained_total",
    "The total number of pods drained during node termination by Karpenter, labeled by reason",
    ["reason"],
)
PODS_STARTUP_DURATION = Summary(
    "karpenter_pods_startup_duration_seconds", "The time from pod creation until the pod is running."
)
PODS_BOUND_DURATION = Histogram(
    "karpenter_pods_bound_duration_seconds",
    "The time from pod creation until the pod is bound.",
    ["dynamic_resources"],
    buckets=DURATION_BUCKETS,
)
PODS_PROVISIONING_BOUND_DURATION = Histogram(
    "karpenter_pods_provisioning_bound_duration_seconds",
    "The time from when Karpenter first thinks the pod can schedule until it binds. Note: this calculated from a "
    "point in memory, not by the pod creation timestamp.",
    ["dynamic_resources"],
    buckets=DURATION_BUCKETS,
)
PODS_PROVISIONING_STARTUP_DURATION = Histogram(
    "karpenter_pods_provisioning_startup_duration_seconds",
    "The time from when Karpenter first thinks the pod can schedule until the pod is running. Note: this calculated "
    "from a point in memory, not by the pod creation timestamp.",
    buckets=DURATION_BUCKETS,
)
PODS_SCHEDULING_DECISION_DURATION = Histogram(
    "karpenter_pods_scheduling_decision_duration_seconds",
    "The time it takes for Karpenter to first try to schedule a pod after it's been seen.",
    buckets=DURATION_BUCKETS,
)
PODS_BOUND = Counter("karpy_pods_bound_total", "Pods bound by karpy's binder.")

# --- Cluster state (core ``pkg/controllers/state/metrics.go``) -------------------------------------------------

CLUSTER_STATE_SYNCED = Gauge(
    "karpenter_cluster_state_synced",
    "Returns 1 if cluster state is synced and 0 otherwise. Synced checks that nodeclaims and nodes that are stored "
    "in the APIServer have the same representation as Karpenter's cluster state",
)
CLUSTER_STATE_NODE_COUNT = Gauge("karpenter_cluster_state_node_count", "Current count of nodes in cluster state")
CLUSTER_STATE_UNSYNCED_TIME = Gauge(
    "karpenter_cluster_state_unsynced_time_seconds", "The time for which cluster state is not synced"
)

# --- Scheduler (core ``pkg/controllers/provisioning/scheduling/metrics.go``) ------------------------------------

SCHEDULING_DURATION = Histogram(
    "karpenter_scheduler_scheduling_duration_seconds",
    "Duration of scheduling simulations used for deprovisioning and provisioning in seconds.",
    ["controller"],
    buckets=DURATION_BUCKETS,
)
SCHEDULER_QUEUE_DEPTH = Gauge(
    "karpenter_scheduler_queue_depth",
    "The number of pods currently waiting to be scheduled.",
    ["controller", "scheduling_id"],
)
SCHEDULER_UNFINISHED_WORK = Gauge(
    "karpenter_scheduler_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by "
    "scheduling_duration_seconds.",
    ["controller", "scheduling_id"],
)
SCHEDULER_IGNORED_PODS = Gauge(
    "karpenter_scheduler_ignored_pods_count", "Number of pods ignored during scheduling by Karpenter"
)
UNSCHEDULABLE_PODS = Gauge(
    "karpenter_scheduler_unschedulable_pods_count", "The number of unschedulable Pods.", ["controller"]
)
PENDING_PODS_BY_ZONE = Gauge(
    "karpenter_scheduler_pending_pods_by_effective_zone_count",
    "Pending pods dimensioned by effective zone constraint: a zone name, 'flexible' (multiple zones), or 'none' "
    "(no valid intersection).",
    ["controller", "zone"],
)

# --- Interruption (AWS ``pkg/controllers/interruption/metrics.go``) and garbage collection ----------------------

INTERRUPTION_RECEIVED = Counter(
    "karpenter_interruption_received_messages_total",
    "Count of messages received from the SQS queue. Broken down by message type and whether the message was "
    "actionable.",
    ["message_type"],
)
INTERRUPTION_DELETED = Counter(
    "karpenter_interruption_deleted_messages_total", "Count of messages deleted from the SQS queue."
)
INTERRUPTION_QUEUE_DURATION = Histogram(
    "karpenter_interruption_message_queue_duration_seconds",
    "Amount of time an interruption message is on the queue before it is processed by karpenter.",
    buckets=DURATION_BUCKETS,
)
GC_INSTANCES_TERMINATED = Counter(
    "karpy_garbage_collection_instances_terminated_total", "Leaked instances terminated by garbage collection."
)
GC_LAUNCH_TEMPLATES_DELETED = Counter(
    "karpy_garbage_collection_launch_templates_deleted_total", "Unused launch templates deleted."
)

# --- Voluntary disruption (core ``pkg/controllers/disruption/metrics.go``) and karpy's evaluation counter --------

DISRUPTION_EVALUATIONS = Counter("karpy_disruption_evaluations_total", "Disruption evaluations (loop passes).")
DISRUPTION_DECISIONS = Counter(
    "karpenter_voluntary_disruption_decisions_total",
    "Number of disruption decisions performed. Labeled by disruption decision, reason, and consolidation type.",
    ["decision", "reason", "consolidation_type"],
)
DISRUPTION_DECISIONS_BY_NODEPOOL = Counter(
    "karpenter_voluntary_disruption_decisions_by_nodepool_total",
    "Number of disruption decisions performed by nodepool. Labeled by nodepool name, disruption decision, reason, "
    "and consolidation type.",
    ["nodepool", "decision", "reason", "consolidation_type"],
)
DISRUPTION_EVALUATION_DURATION = Histogram(
    "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
    "Duration of the disruption decision evaluation process in seconds. Labeled by method and consolidation type.",
    ["reason", "consolidation_type"],
    buckets=DURATION_BUCKETS,
)
DISRUPTION_ELIGIBLE = Gauge(
    "karpenter_voluntary_disruption_eligible_nodes",
    "Number of nodes eligible for disruption by Karpenter. Labeled by disruption reason.",
    ["reason"],
)
DISRUPTION_CONSOLIDATION_TIMEOUTS = Counter(
    "karpenter_voluntary_disruption_consolidation_timeouts_total",
    "Number of times the Consolidation algorithm has reached a timeout. Labeled by consolidation type.",
    ["consolidation_type"],
)
# Pre-initialised at 0 for the two timed methods, as Karpenter's ``init()`` does.
for _kind in ("multi", "single"):
    DISRUPTION_CONSOLIDATION_TIMEOUTS.labels(consolidation_type=_kind)
# consolidationPolicy: Balanced (Karpenter core disruption/metrics.go, observed by disruption/balanced.go).
CONSOLIDATION_SCORE = Histogram(
    "karpenter_consolidation_score",
    "Score of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
    ["decision", "nodepool", "policy"],
    buckets=(0.1, 0.25, 0.33, 0.5, 1.0, 2.0, 5.0, 10.0),
)
CONSOLIDATION_MOVES = Counter(
    "karpenter_consolidation_moves",
    "Number of balanced consolidation moves. Labeled by decision, NodePool, and policy.",
    ["decision", "nodepool", "policy"],
)
DISRUPTION_QUEUE_FAILURES = Counter(
    "karpenter_voluntary_disruption_queue_failures_total",
    "The number of times that an enqueued disruption decision failed. Labeled by disruption method.",
    ["decision", "reason", "consolidation_type"],
)
DISRUPTION_FAILED_VALIDATIONS = Counter(
    "karpenter_voluntary_disruption_failed_validations_total",
    "Number of candidates that were selected for disruption but failed validation. Labeled by consolidation type.",
    ["consolidation_type"],
)
DISRUPTION_ALLOWED = Gauge(
    "karpenter_nodepools_allowed_disruptions",
    "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time. Labeled by "
    "NodePool. Note that allowed disruptions can change very rapidly, as new nodes may be created and others may be "
    "deleted at any point.",
    ["nodepool", "reason"],
)
NODES_CONSUMING_BUDGETS = Gauge(
    "karpenter_nodepools_nodes_consuming_budgets",
    "The number of nodes consuming the budget of a nodepool at a point in time. Labeled by NodePool.",
    ["nodepool", "reason"],
)


# Interruption queue health (karpy's): 0 while the queue cannot be read, so an outage or a
# deleted queue is visible, not just silently retried.
INTERRUPTION_QUEUE_HEALTHY = Gauge(
    "karpy_interruption_queue_healthy", "1 when the last read of the interruption queue succeeded, else 0."
)
INTERRUPTION_QUEUE_ERRORS = Counter(
    "karpy_interruption_queue_receive_errors_total", "Failed reads (ReceiveMessage/GetQueueUrl) of the queue."
)


# --- Label values ------------------------------------------------------------------------------------------------


def disruption_reason(reason: str) -> str:
    """The ``reason`` label of a voluntary disruption: Karpenter's ``strings.ToLower`` of the budget reason
    (``Empty`` → ``empty``, ``Underutilized`` → ``underutilized``, ``Drifted`` → ``drifted``)."""
    return reason.lower()


def consolidation_type(method: str) -> str:
    """The ``consolidation_type`` label of a disruption method: ``empty`` (emptiness), ``single`` (single-node),
    ``multi`` (multi-node), ``""`` for drift (Karpenter ``Method.ConsolidationType``)."""
    return _CONSOLIDATION_TYPES.get(method, "")


def consolidation_policy(policy: str) -> str:
    """A NodePool's ``consolidationPolicy`` in snake case, as Karpenter's ``pretty.ToSnakeCase``
    (``WhenEmptyOrUnderutilized`` → ``when_empty_or_underutilized``)."""
    out: list[str] = []
    for i, ch in enumerate(policy):
        if ch.isupper() and i > 0:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)


def termination_mode(claim: NodeClaim) -> str:
    """Karpenter ``nodeclaimutils.DisruptionTerminationMode``: ``graceful`` without ``terminationGracePeriod``,
    ``forceful`` when it is 0 (or negative), ``eventual`` otherwise (an unparsable value counts as eventual)."""
    tgp = claim.termination_grace_period
    if not tgp:
        return GRACEFUL
    try:
        return FORCEFUL if go_duration_ns(tgp) <= 0 else EVENTUAL
    except ValueError:
        return EVENTUAL


def _claim_label(claim: NodeClaim | Mapping[str, Any], key: str) -> str:
    if isinstance(claim, NodeClaim):
        return claim.meta.labels.get(key, "")
    return str(((claim.get("metadata") or {}).get("labels") or {}).get(key, ""))


# --- Recording helpers (one line at each call site) --------------------------------------------------------------


def nodeclaim_created(claim: Mapping[str, Any], reason: str) -> None:
    """Count a NodeClaim created (its JSON, as the apiserver answered) for ``reason`` (``provisioned`` or the
    lower-cased disruption reason); ``min_values_relaxed`` from its ``karpenter.sh/nodeclaim-min-values-relaxed``
    annotation, ``"false"`` when absent (Karpenter core ``provisioning/provisioner.go`` ``Create``)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    NODECLAIMS_CREATED.labels(
        reason=reason,
        nodepool=_claim_label(claim, wk.LABEL_NODEPOOL),
        min_values_relaxed=str(annotations.get(wk.ANNOTATION_MIN_VALUES_RELAXED, "false")),
    ).inc()


def nodeclaim_disrupted(claim: NodeClaim, reason: str, policy: str = "") -> None:
    """Count a NodeClaim whose deletion was requested for ``reason``; ``policy`` is the NodePool's
    ``consolidationPolicy`` for consolidation commands (emptiness, single, multi), "" otherwise."""
    NODECLAIMS_DISRUPTED.labels(
        reason=reason,
        nodepool=claim.nodepool,
        capacity_type=_claim_label(claim, wk.LABEL_CAPACITY_TYPE),
        consolidation_policy=consolidation_policy(policy),
        termination_mode=termination_mode(claim),
    ).inc()


def nodeclaim_unhealthy_disrupted(claim: NodeClaim, condition: str, mode: str) -> None:
    """Count a NodeClaim node repair deleted for Node condition ``condition`` (``NetworkingReady``; labelled in
    snake case, ``networking_ready``, as Karpenter's ``pretty.ToSnakeCase``) with termination mode ``mode``
    (core ``disruption/queue.go`` ``recordCandidateDisrupted`` and ``node/legacyrepair/controller.go``)."""
    NODECLAIMS_UNHEALTHY_DISRUPTED.labels(
        condition=snake_case(condition),
        nodepool=claim.nodepool,
        capacity_type=_claim_label(claim, wk.LABEL_CAPACITY_TYPE),
        image_id=claim.image_id,
        termination_mode=mode,
    ).inc()


def snake_case(text: str) -> str:
    """Karpenter's ``pretty.ToSnakeCase``: ``AcceleratedHardwareReady`` → ``accelerated_hardware_ready``."""
    text = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", text)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", text).lower()


def nodeclaim_terminated(claim: NodeClaim, now: float) -> None:
    """Count a NodeClaim whose termination finalizer was released at ``now`` (seconds since the epoch) and observe
    its termination duration since its ``deletionTimestamp`` (Karpenter core ``nodeclaim/lifecycle/controller.go``)."""
    NODECLAIMS_TERMINATED.labels(
        nodepool=claim.nodepool,
        capacity_type=_claim_label(claim, wk.LABEL_CAPACITY_TYPE),
        zone=_claim_label(claim, wk.LABEL_ZONE),
    ).inc()
    if claim.meta.deletion_timestamp > 0:
        NODECLAIMS_TERMINATION_DURATION.labels(nodepool=claim.nodepool).observe(
            max(0.0, now - claim.meta.deletion_timestamp)
        )


def node_terminated(labels: Mapping[str, str], created: float, deleted: float, now: float) -> None:
    """A Node (with ``labels``, created at ``created``, deletion requested at ``deleted``; 0 when unknown) had its
    termination finalizer released at ``now``: ``karpenter_nodes_terminated_total``,
    ``…_termination_duration_seconds`` and ``…_lifetime_duration_seconds`` (core ``node/termination/controller.go``)."""
    pool = labels.get(wk.LABEL_NODEPOOL, "")
    NODES_TERMINATED.labels(nodepool=pool, zone=labels.get(wk.LABEL_ZONE, "")).inc()
    if deleted > 0:
        NODES_TERMINATION_DURATION.labels(nodepool=pool).observe(max(0.0, now - deleted))
    if created > 0:
        NODES_LIFETIME.labels(nodepool=pool).observe(max(0.0, now - created))


def voluntary_decision(decision: str, reason: str, method: str, nodepools: set[str]) -> None:
    """Count one disruption decision performed (``decisions_total``) and one per NodePool of its candidates
    (``decisions_by_nodepool_total``), Karpenter core ``disruption/queue.go`` ``recordDecisionPerformed``."""
    labels = {
        "decision": decision,
        "reason": disruption_reason(reason),
        "consolidation_type": consolidation_type(method),
    }
    for pool in sorted(nodepools):
        DISRUPTION_DECISIONS_BY_NODEPOOL.labels(nodepool=pool, **labels).inc()
    DISRUPTION_DECISIONS.labels(**labels).inc()


class ClusterStateObserver:
    """``karpenter_cluster_state_{synced,node_count,unsynced_time_seconds}`` from periodic observations (Karpenter
    core ``state/cluster.go`` ``Synced``: the unsynced time counts from the first observation found unsynced and
    is 0 while synced)."""

    def __init__(self) -> None:
        self._unsynced_since: float | None = None

    def observe(self, synced: bool, nodes: int, now: float) -> None:
        """Record one observation at ``now`` (seconds, any monotonic or wall clock)."""
        CLUSTER_STATE_SYNCED.set(1 if synced else 0)
        CLUSTER_STATE_NODE_COUNT.set(nodes)
        if synced:
            self._unsynced_since = None
            CLUSTER_STATE_UNSYNCED_TIME.set(0)
            return
        if self._unsynced_since is None:
            self._unsynced_since = now
        CLUSTER_STATE_UNSYNCED_TIME.set(now - self._unsynced_since)


class SchedulingRun:
    """One scheduling simulation being measured (see :func:`scheduling`); set :attr:`left` to the pods the
    simulation could not place before it ends (the queue depth Karpenter's loop leaves behind)."""

    def __init__(self, controller: str, depth: int) -> None:
        self.controller = controller
        self.id = str(uuid.uuid4())
        self.left = depth


_LAST_RUN: dict[str, str] = {}
_LAST_ZONES: dict[str, set[str]] = {}


@contextmanager
def scheduling(controller: str, depth: int) -> Iterator[SchedulingRun]:
    """Measure one scheduling simulation of ``controller`` (``provisioner`` or ``disruption``) over ``depth`` pods:
    ``karpenter_scheduler_scheduling_duration_seconds{controller}`` observed at the end,
    ``…_unfinished_work_seconds{controller,scheduling_id}`` while it runs and
    ``…_queue_depth{controller,scheduling_id}`` = the pods waiting (the previous run's series removed first),
    as Karpenter core ``provisioning/scheduling/scheduler.go`` ``Solve``. karpy's solve is synchronous, so a scrape
    sees the depth a run ended with (its unplaced pods), never one in progress."""
    previous = _LAST_RUN.pop(controller, None)
    if previous is not None:
        _remove(SCHEDULER_QUEUE_DEPTH, controller, previous)
    run = SchedulingRun(controller, depth)
    _LAST_RUN[controller] = run.id
    SCHEDULER_QUEUE_DEPTH.labels(controller=controller, scheduling_id=run.id).set(depth)
    SCHEDULER_UNFINISHED_WORK.labels(controller=controller, scheduling_id=run.id).set(0)
    start = time.perf_counter()
    try:
        yield run
    finally:
        SCHEDULING_DURATION.labels(controller=controller).observe(time.perf_counter() - start)
        _remove(SCHEDULER_UNFINISHED_WORK, controller, run.id)
        SCHEDULER_QUEUE_DEPTH.labels(controller=controller, scheduling_id=run.id).set(run.left)


def _remove(gauge: Gauge, *labels: str) -> None:
    with suppress(KeyError):
        gauge.remove(*labels)


def effective_zone(pod: model.Pod) -> str:
    """The zone a pending pod can land in, Karpenter core ``scheduling/scheduler.go``
    ``computeEffectiveZoneFromPod``: the intersection of its ``nodeSelector``, required node affinity (when
    every term pins zones) and volume topology zones — one zone's name, ``flexible`` when several or none
    constrain it, ``none`` when the intersection is empty. (Topology spread domains are not counted.)"""
    constraints: list[set[str]] = []
    if wk.LABEL_ZONE in pod.node_selector:
        constraints.append({pod.node_selector[wk.LABEL_ZONE]})
    for terms in (pod.required_terms, pod.volume_terms):
        zones = _zones_of(terms)
        if zones is not None:
            constraints.append(zones)
    if not constraints:
        return "flexible"
    allowed = set.intersection(*constraints)
    if not allowed:
        return "none"
    return next(iter(allowed)) if len(allowed) == 1 else "flexible"


def _zones_of(terms: tuple[tuple[model.Requirement, ...], ...]) -> set[str] | None:
    """The union of the zones the ORed ``terms`` allow (``In`` on the zone label); None when a term leaves the
    zone open."""
    if not terms:
        return None
    out: set[str] = set()
    for term in terms:
        ins = [set(r.values) for r in term if r.key == wk.LABEL_ZONE and r.operator == "In"]
        if not ins:
            return None
        out |= set.intersection(*ins)
    return out


def pending_pods_by_zone(controller: str, pods: Iterable[model.Pod]) -> None:
    """``karpenter_scheduler_pending_pods_by_effective_zone_count{controller,zone}`` for the pending pods of one
    scheduling pass (the zones of the previous pass dropped first)."""
    counts: dict[str, int] = {}
    for pod in pods:
        zone = effective_zone(pod)
        counts[zone] = counts.get(zone, 0) + 1
    for zone in _LAST_ZONES.pop(controller, set()) - counts.keys():
        _remove(PENDING_PODS_BY_ZONE, controller, zone)
    for zone, count in counts.items():
        PENDING_PODS_BY_ZONE.labels(controller=controller, zone=zone).set(count)
    _LAST_ZONES[controller] = set(counts)


class PodLatencies:
    """The pod latency histograms fed by pod events, as Karpenter core ``metrics/pod/controller.go`` observes them:
    ``karpenter_pods_bound_duration_seconds`` (creation → bound) and ``…_startup_duration_seconds`` (creation →
    ready) for pods first seen unbound / pending, and their ``provisioning_`` twins measured from when karpy
    found the pod schedulable (:meth:`schedulable`, called by the provisioner's decision).

    A cluster state listener (:meth:`on_change`, ``(kind, event, key, old, new)`` with pod views that have
    ``pod.created``, ``pod.node_name``, ``phase``, ``ready`` and ``dynamic_resources``, as
    :class:`karpy.state.views.PodInfo`). The end of each latency is when karpy sees the change on the watch
    (Karpenter reads the PodScheduled/Ready conditions' ``lastTransitionTime``: the same instant up to the watch
    delay), and "started" is the first Ready=True after the pod was seen Pending, as Karpenter (and karpy's
    unstarted gauge) count it.
    ``clock`` gives seconds since the epoch; ``active`` says whether to observe (leader only, as Karpenter's
    metric controllers run only on the leader).
    """

    def __init__(self, clock: Callable[[], float] = time.time, active: Callable[[], bool] = lambda: True) -> None:
        self.clock = clock
        self.active = active
        self._unbound: set[str] = set()
        self._pending: set[str] = set()
        self._schedulable: dict[str, float] = {}

    def schedulable(self, key: str, at: float) -> None:
        """Pod ``key`` (``namespace/name``) was first found schedulable at ``at`` (kept only the first time)."""
        self._schedulable.setdefault(key, at)

    def on_change(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """Observe a pod's binding and start from its views (see the class docstring)."""
        if kind != "Pod":
            return
        if new is None:
            self._forget(key)
            return
        now = self.clock()
        created = float(new.pod.created)
        dynamic = "true" if new.dynamic_resources else "false"
        schedulable = self._schedulable.get(key)
        if not new.pod.node_name and new.phase == "Pending":
            self._unbound.add(key)
        elif key in self._unbound:
            self._unbound.discard(key)
            if self.active():
                PODS_BOUND_DURATION.labels(dynamic_resources=dynamic).observe(max(0.0, now - created))
                if schedulable is not None:
                    PODS_PROVISIONING_BOUND_DURATION.labels(dynamic_resources=dynamic).observe(
                        max(0.0, now - schedulable)
                    )
        if new.phase == "Pending":
            self._pending.add(key)
        elif key in self._pending and (new.ready or new.phase in ("Succeeded", "Failed")):
            # Started once Ready=True; a pod that ends without being ready is dropped unobserved (Karpenter skips
            # terminal pods: their Ready=False would give negative durations).
            self._pending.discard(key)
            if new.ready and self.active():
                PODS_STARTUP_DURATION.observe(max(0.0, now - created))
                if schedulable is not None:
                    PODS_PROVISIONING_STARTUP_DURATION.observe(max(0.0, now - schedulable))
            self._schedulable.pop(key, None)

    def _forget(self, key: str) -> None:
        self._unbound.discard(key)
        self._pending.discard(key)
        self._schedulable.pop(key, None)


def _build_info() -> None:
    """``karpenter_build_info`` = 1: karpy's version, the Python version for ``goversion``, the machine in Go's
    ``GOARCH`` spelling; ``commit`` is "" (a Python package carries no VCS revision)."""
    machine = platform.machine().lower()
    BUILD_INFO.labels(
        version=__version__,
        goversion=f"python{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}",
        goarch=_GOARCH.get(machine, machine),
        commit="",
    ).set(1)


_build_info()

# The process's pod latency tracker: the provisioner records schedulable times into it and the operator subscribes
# it to cluster state.
POD_LATENCIES: Final = PodLatencies()


class RegisteredCollector(Collector):
    """A scrape-time collector that its owner adds to and removes from prometheus-client's default registry while
    it runs (both idempotent), so a stopped operator (a test's, or a standby's after exit) leaves no families."""

    _registered = False

    def describe(self) -> Iterable[Any]:
        """Nothing: the families are rendered at scrape time (no duplicate-name check against the registry)."""
        return []

    def register(self) -> None:
        """Add to prometheus-client's default registry (idempotent)."""
        if not self._registered:
            REGISTRY.register(self)
            self._registered = True

    def unregister(self) -> None:
        """Remove from prometheus-client's default registry (idempotent)."""
        if self._registered:
            with suppress(KeyError):
                REGISTRY.unregister(self)
            self._registered = False
