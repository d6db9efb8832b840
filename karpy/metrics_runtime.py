"""The process-level metric families a Karpenter dashboard reads besides ``karpenter_*``: controller-runtime's
reconcile and workqueue families, client-go's apiserver request families, and the AWS provider's per-instance
launch/termination failure counters, with the names, label names and buckets Karpenter v1.15 registers
(prometheus-client's default registry, served on ``METRICS_PORT`` with the rest).

Sources followed: controller-runtime v0.24.1 ``pkg/internal/controller/metrics/metrics.go`` (reconcile families),
``pkg/internal/metrics/workqueue.go`` (workqueue families, ``name`` and ``controller`` both the controller's name,
``priority`` "" on ``workqueue_depth``), ``pkg/webhook/conversion/metrics/metrics.go``; operatorpkg
``metrics/metrics.go`` ``RegisterClientMetrics`` (client-go families); the AWS provider's
``pkg/providers/instance/metrics.go``. The CloudProvider call families
(``karpenter_cloudprovider_{duration_seconds,errors_total}``) live with their decorator in
:mod:`karpy.cloudprovider.metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import Protocol, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from karpy.cloudprovider.metrics import DURATION_BUCKETS

# controller-runtime's reconcile-time buckets, seconds: Karpenter's DurationBuckets without its 120 … 600 s.
RECONCILE_BUCKETS = DURATION_BUCKETS[:-5]
# client-go workqueue: ExponentialBuckets(10e-9, 10, 12) = 1e-8 … 1e3 seconds.
WORKQUEUE_BUCKETS = tuple(1e-8 * 10**i for i in range(12))
# operatorpkg RegisterClientMetrics: ExponentialBuckets(0.001, 1.5, 20).
CLIENT_BUCKETS = tuple(0.001 * 1.5**i for i in range(20))

# --- controller-runtime reconcile families (label ``controller`` = the reconciler's name) -----------------------
RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller",
    ["controller", "result"],
)
"""``result``: ``success``, ``error``, ``requeue`` (``Result(requeue_after=0)``), ``requeue_after``."""
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller", ["controller"]
)
TERMINAL_RECONCILE_ERRORS = Counter(
    "controller_runtime_terminal_reconcile_errors_total",
    "Total number of terminal reconciliation errors per controller",
    ["controller"],
)
"""Always 0: every karpy reconcile error is retried with backoff (controller-runtime counts here only errors
wrapped as ``reconcile.TerminalError``, which are not retried)."""
RECONCILE_PANICS = Counter(
    "controller_runtime_reconcile_panics_total", "Total number of reconciliation panics per controller", ["controller"]
)
"""Always 0: Python has no panics; an exception a reconciler raises is a reconcile error."""
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller",
    ["controller"],
    buckets=RECONCILE_BUCKETS,
)
RECONCILE_TIMEOUTS = Counter(
    "controller_runtime_reconcile_timeouts_total",
    "Total number of reconciliation timeouts per controller",
    ["controller"],
)
"""Always 0: karpy sets no reconcile timeout (controller-runtime's ``ReconciliationTimeout`` is off by default)."""
MAX_CONCURRENT_RECONCILES = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller",
    ["controller"],
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers", "Number of currently used workers per controller", ["controller"]
)
CONVERSION_WEBHOOK_PANICS = Counter(
    "controller_runtime_conversion_webhook_panics_total", "Total number of conversion webhook panics"
)
"""Always 0, as controller-runtime initialises it: karpy serves no conversion webhook (Karpenter v1 has none
either since the v1beta1 → v1 conversion was removed)."""

# --- workqueue families (client-go workqueue via controller-runtime's provider) ---------------------------------
WORKQUEUE_DEPTH = Gauge(
    "workqueue_depth", "Current depth of workqueue by workqueue and priority", ["name", "controller", "priority"]
)
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue", ["name", "controller"])
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long in seconds an item stays in workqueue before being requested",
    ["name", "controller"],
    buckets=WORKQUEUE_BUCKETS,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long in seconds processing an item from workqueue takes.",
    ["name", "controller"],
    buckets=WORKQUEUE_BUCKETS,
)
WORKQUEUE_UNFINISHED_WORK = Gauge(
    "workqueue_unfinished_work_seconds",
    "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large "
    "values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this "
    "increases.",
    ["name", "controller"],
)
WORKQUEUE_LONGEST_RUNNING = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How many seconds has the longest running processor for workqueue been running.",
    ["name", "controller"],
)
WORKQUEUE_RETRIES = Counter(
    "workqueue_retries_total",
    "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit "
    "RequeueAfter or AddAfter calls)",
    ["name", "controller"],
)

# --- client-go families (operatorpkg RegisterClientMetrics) -----------------------------------------------------
CLIENT_REQUESTS = Counter(
    "client_go_request_total", "Number of HTTP requests, partitioned by status code and method.", ["code", "method"]
)
"""``code``: the HTTP status as a string, ``<error>`` when no answer came (client-go ``sanitize``); ``method``:
the HTTP method (GET, POST, PATCH, PUT, DELETE)."""
CLIENT_DURATION = Histogram(
    "client_go_request_duration_seconds",
    "Request latency in seconds. Broken down by verb, group, version, kind, and subresource.",
    ["verb", "group", "version", "kind", "subresource"],
    buckets=CLIENT_BUCKETS,
)
"""``verb``: GET (one object), LIST, CREATE (POST), UPDATE (PUT), PATCH, DELETE; ``kind``: the resource's plural
name (``pods``, ``nodeclaims``); ``group`` "" for the core group."""

# --- AWS provider families -----------------------------------------------------------------------------------
INSTANCE_LAUNCH_FAILURES = Counter(
    "karpenter_cloudprovider_instance_launch_failures_total",
    "Total number of per-offering CreateFleet launch failures, by zone, zone ID, capacity type and reason.",
    ["zone", "zone_id", "capacity_type", "reason"],
)
INSTANCE_TERMINATION_FAILURES = Counter(
    "karpenter_cloudprovider_instance_termination_failures_total",
    "Total number of failed TerminateInstances calls, by the instance's zone and zone ID.",
    ["zone", "zone_id"],
)


# --- the reconcile accounting (controller-runtime ``initMetrics``/``reconcileHandler``) -------------------------


class ReconcileOutcome(Protocol):
    """What a reconcile returns (:class:`karpy.runtime.controller.Result`): its ``result`` label."""

    @property
    def metric_result(self) -> str:
        """``success``, ``requeue`` or ``requeue_after``."""
        ...


R = TypeVar("R", bound=ReconcileOutcome)


def init_reconcile_metrics(controller: str, workers: int) -> None:
    """Export ``controller``'s reconcile families at zero with its worker count (controller-runtime ``initMetrics``)."""
    for result in ("error", "requeue_after", "requeue", "success"):
        RECONCILE_TOTAL.labels(controller, result).inc(0)
    for counter in (RECONCILE_ERRORS, TERMINAL_RECONCILE_ERRORS, RECONCILE_PANICS, RECONCILE_TIMEOUTS):
        counter.labels(controller).inc(0)
    MAX_CONCURRENT_RECONCILES.labels(controller).set(workers)
    ACTIVE_WORKERS.labels(controller).set(0)


def observe_reconcile(controller: str, result: str, seconds: float) -> None:
    """Count one reconcile of ``controller`` with its ``result`` label and duration (seconds)."""
    RECONCILE_TOTAL.labels(controller, result).inc()
    if result == "error":
        RECONCILE_ERRORS.labels(controller).inc()
    RECONCILE_TIME.labels(controller).observe(seconds)


async def metered(controller: str, reconcile: Awaitable[R], *, uncounted: tuple[type[BaseException], ...] = ()) -> R:
    """Await one reconcile of ``controller`` while it holds an active worker, counted as controller-runtime's
    ``reconcileHandler`` counts it: its result, or ``error`` when it raised. An ``uncounted`` exception (the leader
    fence's ``NotLeader``: the process is stepping down, as controller-runtime stops its controllers when
    leadership is lost) and a cancellation are not counted."""
    active = ACTIVE_WORKERS.labels(controller)
    active.inc()
    start = time.perf_counter()
    try:
        result = await reconcile
    except Exception as err:
        if not isinstance(err, uncounted):
            observe_reconcile(controller, "error", time.perf_counter() - start)
        raise
    finally:
        active.dec()
    observe_reconcile(controller, result.metric_result, time.perf_counter() - start)
    return result
