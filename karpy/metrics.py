"""Prometheus metrics with Karpenter's names (``karpenter_*``), in prometheus-client's default registry; served on
``METRICS_PORT`` by karpy's aiohttp server (:mod:`karpy.health`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

NODECLAIMS_CREATED = Counter(
    "karpenter_nodeclaims_created_total", "NodeClaims created, by NodePool.", ["nodepool", "reason"]
)
NODECLAIMS_TERMINATED = Counter(
    "karpenter_nodeclaims_terminated_total", "NodeClaims terminated, by NodePool.", ["nodepool"]
)
NODECLAIMS_DISRUPTED = Counter(
    "karpenter_nodeclaims_disrupted_total", "NodeClaims disrupted, by reason.", ["reason", "nodepool"]
)
NODECLAIMS_LAUNCH_FAILED = Counter(
    "karpy_nodeclaims_launch_failed_total",
    "NodeClaim launches that failed, by NodePool and reason (InsufficientCapacityError, NodeClassNotReady, "
    "LaunchFailed).",
    ["nodepool", "reason"],
)
PODS_BOUND = Counter("karpy_pods_bound_total", "Pods bound by karpy's binder.")
CLUSTER_STATE_SYNCED = Gauge("karpenter_cluster_state_synced", "1 when cluster state has synced.")
CLUSTER_STATE_NODE_COUNT = Gauge("karpenter_cluster_state_node_count", "Nodes in cluster state.")
UNSCHEDULABLE_PODS = Gauge("karpenter_scheduler_unschedulable_pods_count", "Pods the last solve could not place.")

# Interruption (Karpenter AWS ``pkg/controllers/interruption/metrics.go``) and garbage collection.
INTERRUPTION_RECEIVED = Counter(
    "karpenter_interruption_received_messages_total",
    "Interruption messages received from the queue, by message type.",
    ["message_type"],
)
INTERRUPTION_DELETED = Counter(
    "karpenter_interruption_deleted_messages_total", "Interruption messages deleted from the queue.", ["message_type"]
)
INTERRUPTION_QUEUE_DURATION = Histogram(
    "karpenter_interruption_message_queue_duration_seconds",
    "Seconds from the event's time to its handling.",
    buckets=(1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
GC_INSTANCES_TERMINATED = Counter(
    "karpy_garbage_collection_instances_terminated_total", "Leaked instances terminated by garbage collection."
)
GC_LAUNCH_TEMPLATES_DELETED = Counter(
    "karpy_garbage_collection_launch_templates_deleted_total", "Unused launch templates deleted."
)


# Voluntary disruption (Karpenter core ``pkg/controllers/disruption/metrics.go``) and karpy's evaluation counter.
DISRUPTION_EVALUATIONS = Counter("karpy_disruption_evaluations_total", "Disruption evaluations (loop passes).")
DISRUPTION_DECISIONS = Counter(
    "karpenter_voluntary_disruption_decisions_total",
    "Disruption commands carried out.",
    ["decision", "reason", "consolidation_type"],
)
DISRUPTION_ELIGIBLE = Gauge(
    "karpenter_voluntary_disruption_eligible_nodes", "Nodes eligible for disruption, by reason.", ["reason"]
)
DISRUPTION_QUEUE_FAILURES = Counter(
    "karpenter_voluntary_disruption_queue_failures_total",
    "Disruption commands abandoned (replacement failed, blocked at execution).",
    ["decision", "reason", "consolidation_type"],
)
DISRUPTION_FAILED_VALIDATIONS = Counter(
    "karpenter_voluntary_disruption_failed_validations_total",
    "Disruption commands dropped by the re-validation after the validation delay.",
    ["consolidation_type"],
)
DISRUPTION_ALLOWED = Gauge(
    "karpenter_nodepools_allowed_disruptions", "Disruptions the budgets allow now.", ["nodepool", "reason"]
)


# Interruption queue health (karpy's): 0 while the queue cannot be read, so an outage or a
# deleted queue is visible, not just silently retried.
INTERRUPTION_QUEUE_HEALTHY = Gauge(
    "karpy_interruption_queue_healthy", "1 when the last read of the interruption queue succeeded, else 0."
)
INTERRUPTION_QUEUE_ERRORS = Counter(
    "karpy_interruption_queue_receive_errors_total", "Failed reads (ReceiveMessage/GetQueueUrl) of the queue."
)
