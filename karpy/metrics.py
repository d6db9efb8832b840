"""Prometheus metrics with Karpenter's names (``karpenter_*``), served on ``METRICS_PORT`` by prometheus-client."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, start_http_server

NODECLAIMS_CREATED = Counter(
    "karpenter_nodeclaims_created_total", "NodeClaims created, by NodePool.", ["nodepool", "reason"]
)
NODECLAIMS_TERMINATED = Counter(
    "karpenter_nodeclaims_terminated_total", "NodeClaims terminated, by NodePool.", ["nodepool"]
)
NODECLAIMS_DISRUPTED = Counter(
    "karpenter_nodeclaims_disrupted_total", "NodeClaims disrupted, by reason.", ["reason", "nodepool"]
)
PODS_BOUND = Counter("karpy_pods_bound_total", "Pods bound by karpy's binder.")
CLUSTER_STATE_SYNCED = Gauge("karpenter_cluster_state_synced", "1 when cluster state has synced.")
CLUSTER_STATE_NODE_COUNT = Gauge("karpenter_cluster_state_node_count", "Nodes in cluster state.")
UNSCHEDULABLE_PODS = Gauge(
    "karpenter_scheduler_unschedulable_pods_count", "Pods the last solve could not place."
)


def serve(port: int) -> None:
    """Start the metrics endpoint in a background thread (port 0 disables it)."""
    if port:
        start_http_server(port)
