"""Status conditions and finalizers of NodeClaims, Nodes, NodePools and EC2NodeClasses: operatorpkg's status
controller (``github.com/awslabs/operatorpkg status/controller.go`` and ``status/metrics.go``) as Karpenter v1.15
configures it (core ``pkg/controllers/controllers.go``, AWS ``pkg/controllers/controllers.go``).

Driven by cluster-state deltas (the previous and the new object of every informer event or own write), it
remembers what it last observed of each object and, on every change:

* counts a **transition** when a condition's status differs from the one observed (a condition seen for the first
  time transitions from ``Unknown``): ``operator_<kind>_status_condition_transitions_total{type,status,reason,…}``;
  for a condition observed before, also ``…_transition_seconds{type,status,to_status,…}`` (the time it spent in
  the old status, lastTransitionTime to lastTransitionTime) and a Normal **event** with reason = the condition type
  and message ``Status condition transitioned, Type: T, Status: A -> B, Reason: R[, Message: M]`` — Karpenter's
  Launched, Registered, Initialized, Ready, Drifted, Consolidatable, … events;
* publishes a Normal ``Finalized`` event ``Finalized <finalizer>`` for every finalizer removed (and, when the object
  is gone, for every finalizer it last had), and observes ``operator_<kind>_termination_duration_seconds`` (from
  its deletionTimestamp to its disappearance).

At scrape time it renders ``operator_<kind>_status_condition_count`` (1 per object and condition),
``…_current_status_seconds`` (since the condition's lastTransitionTime) and ``operator_<kind>_termination_current_
time_seconds`` (since the deletionTimestamp, while terminating) from that memory; a deleted object has no series.
NodeClaims, NodePools and EC2NodeClasses also feed the deprecated generic families ``operator_status_condition_*``
and ``operator_termination_*`` (labels without the object's labels, plus ``group`` and ``kind``; Karpenter's
``status.EmitDeprecatedMetrics``); Nodes do not.

The extra labels (``status.WithLabels``) are object labels with ``/ . -`` turned into ``_``: a NodeClaim's
``karpenter.k8s.aws/ec2nodeclass`` and ``karpenter.sh/nodepool`` (``karpenter_k8s_aws_ec2nodeclass``,
``karpenter_sh_nodepool``), a Node's the same plus ``karpenter.sh/initialized``. Histogram buckets are
0.5 s · 2ⁿ (15) for NodeClaims, NodePools and Nodes, Prometheus' defaults for EC2NodeClasses and the deprecated
families.

Karpenter's objects carry their condition set from the first reconcile (operatorpkg ``ConditionTypes.For`` sets
every known condition ``Unknown``, reason ``AwaitingReconciliation``), and its status controller reads them
through that set; karpy's writers set a condition only when they decide it, so the known conditions an object
lacks are read as that ``Unknown`` (a dependent one since the object's creation, the root ``Ready`` since it was
first observed). A NodeClaim's ``Launched=True`` therefore reads as the transition ``Unknown -> True``, as on
Karpenter.

Karpenter runs this controller on the leader only: counters and histograms move only while ``leading()``, gauges
render only while it holds, and events (writes) are published only by :meth:`StatusConditions.run`, the writer
task, which runs on the leader. The memory itself is kept warm on a standby, so a new leader does not count the
whole cluster's conditions as transitions again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

import attrs
import structlog
from prometheus_client import Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

from karpy.apis import labels as wk
from karpy.apis.conditions import Condition, conditions_of
from karpy.apis.times import parse_time
from karpy.kube.events import NORMAL, EventRecorder
from karpy.metrics import RegisteredCollector
from karpy.state.views import NodeInfo

log = structlog.get_logger("karpy.status_conditions")

AWAITING_RECONCILIATION: Final = "AwaitingReconciliation"
AWAITING_RECONCILIATION_MESSAGE: Final = "object is awaiting reconciliation"
# prometheus.ExponentialBuckets(0.5, 2, 15): 0.5, 1, 2, … 8192 (Karpenter's WithHistogramBuckets).
EXPONENTIAL_BUCKETS: Final = tuple(0.5 * 2**i for i in range(15))
# prometheus.DefBuckets (Go client_golang). Kept explicit: prometheus-client's default buckets are not the same (they
# add 0.075, 0.75 and 7.5).
DEFAULT_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def prometheus_label(key: str) -> str:
    """An object label key as a metric label name: ``/``, ``.`` and ``-`` become ``_`` (operatorpkg
    ``toPrometheusLabel``): ``karpenter.sh/nodepool`` → ``karpenter_sh_nodepool``."""
    for char in "/.-":
        key = key.replace(char, "_")
    return key


@attrs.frozen(slots=True)
class KindSpec:
    """How Karpenter configures operatorpkg's status controller for one kind.

    ``labels``: object label keys attached to every metric (``status.WithLabels``); ``deprecated``: also feed the
    generic ``operator_status_condition_*``/``operator_termination_*`` families; ``known``: the condition set,
    root first (empty for Nodes, read through operatorpkg's unstructured adapter: observed conditions only)."""

    kind: str
    api_version: str
    group: str
    labels: tuple[str, ...]
    deprecated: bool
    buckets: tuple[float, ...]
    known: tuple[str, ...]
    # ``labels`` as metric label names, computed once.
    metric_labels: tuple[str, ...] = attrs.field(init=False)

    @metric_labels.default
    def _metric_labels(self) -> tuple[str, ...]:
        return tuple(prometheus_label(k) for k in self.labels)

    @property
    def subsystem(self) -> str:
        """``nodeclaim``, ``node``, ``nodepool``, ``ec2nodeclass`` (operatorpkg: the lower-cased kind)."""
        return self.kind.lower()


SPECS: Final[dict[str, KindSpec]] = {
    spec.kind: spec
    for spec in (
        KindSpec(
            "NodeClaim",
            f"{wk.GROUP}/v1",
            wk.GROUP,
            (wk.LABEL_EC2NODECLASS, wk.LABEL_NODEPOOL),
            True,
            EXPONENTIAL_BUCKETS,
            (wk.COND_READY, wk.COND_LAUNCHED, wk.COND_REGISTERED, wk.COND_INITIALIZED),
        ),
        KindSpec(
            "Node",
            "v1",
            "",
            (wk.LABEL_EC2NODECLASS, wk.LABEL_NODEPOOL, wk.LABEL_INITIALIZED),
            False,
            EXPONENTIAL_BUCKETS,
            (),
        ),
        KindSpec(
            "NodePool",
            f"{wk.GROUP}/v1",
            wk.GROUP,
            (),
            True,
            EXPONENTIAL_BUCKETS,
            (wk.COND_READY, wk.COND_VALIDATION_SUCCEEDED, wk.COND_NODECLASS_READY),
        ),
        KindSpec(
            "EC2NodeClass",
            f"{wk.AWS_GROUP}/v1",
            wk.AWS_GROUP,
            (),
            True,
            DEFAULT_BUCKETS,
            (
                wk.COND_READY,
                wk.COND_AMIS_READY,
                wk.COND_SUBNETS_READY,
                wk.COND_SECURITY_GROUPS_READY,
                wk.COND_INSTANCE_PROFILE_READY,
                wk.COND_VALIDATION_SUCCEEDED,
                wk.COND_PLACEMENT_GROUP_READY,
                # With the ReservedCapacity gate (default on), as Karpenter's set.
                wk.COND_CAPACITY_RESERVATIONS_READY,
            ),
        ),
        # CapacityBuffer gate: Karpenter's GenericObjectController (core controllers.go), deprecated families too;
        # observed conditions only (the upstream type has no operatorpkg condition set).
        KindSpec(
            "CapacityBuffer", "autoscaling.x-k8s.io/v1beta1", "autoscaling.x-k8s.io", (), True, EXPONENTIAL_BUCKETS, ()
        ),
    )
}

COUNT_LABELS: Final = ("namespace", "name", "type", "status", "reason")
TRANSITION_LABELS: Final = ("type", "status", "reason")
DURATION_LABELS: Final = ("type", "status", "to_status")
TERMINATING_LABELS: Final = ("namespace", "name")
GROUP_KIND: Final = ("group", "kind")


@attrs.frozen(slots=True)
class _KindMetrics:
    transitions: Counter
    transition_seconds: Histogram
    termination_seconds: Histogram


def _kind_metrics(spec: KindSpec) -> _KindMetrics:
    prefix = f"operator_{spec.subsystem}"
    extra = list(spec.metric_labels)
    return _KindMetrics(
        Counter(
            f"{prefix}_status_condition_transitions_total",
            "The count of transitions of a given object, type and status.",
            [*TRANSITION_LABELS, *extra],
        ),
        Histogram(
            f"{prefix}_status_condition_transition_seconds",
            "The amount of time a condition was in a given state (status) before transitioning to another state "
            "(to_status).",
            [*DURATION_LABELS, *extra],
            buckets=spec.buckets,
        ),
        Histogram(
            f"{prefix}_termination_duration_seconds",
            "The amount of time taken by an object to terminate completely.",
            extra,
            buckets=spec.buckets,
        ),
    )


KIND_METRICS: Final[dict[str, _KindMetrics]] = {kind: _kind_metrics(spec) for kind, spec in SPECS.items()}
DEPRECATED_TRANSITIONS: Final = Counter(
    "operator_status_condition_transitions_total",
    "The count of transitions of a given object, type and status. Deprecated: read operator_<kind>_….",
    [*TRANSITION_LABELS, *GROUP_KIND],
)
DEPRECATED_TRANSITION_SECONDS: Final = Histogram(
    "operator_status_condition_transition_seconds",
    "The amount of time a condition was in a given state before transitioning. Deprecated: read operator_<kind>_….",
    [*DURATION_LABELS, *GROUP_KIND],
    buckets=DEFAULT_BUCKETS,
)
DEPRECATED_TERMINATION_SECONDS: Final = Histogram(
    "operator_termination_duration_seconds",
    "The amount of time taken by an object to terminate completely. Deprecated: read operator_<kind>_….",
    list(GROUP_KIND),
    buckets=DEFAULT_BUCKETS,
)


def transition_message(type_: str, old_status: str, new: Condition) -> str:
    """operatorpkg's event message for a condition transition."""
    message = (
        f"Status condition transitioned, Type: {type_}, Status: {old_status} -> {new.status}, Reason: {new.reason}"
    )
    return f"{message}, Message: {new.message}" if new.message else message


@attrs.frozen(slots=True)
class Observed:
    """What was last observed of one object: its conditions as operatorpkg's condition set reads them (by type),
    its extra metric labels, deletionTimestamp (seconds since the epoch, 0 when not deleting), finalizers, and the
    reference events are published about."""

    namespace: str
    name: str
    conditions: Mapping[str, Condition]
    labels: Mapping[str, str]
    deletion: float
    finalizers: tuple[str, ...]
    ref: Mapping[str, Any]


@attrs.frozen(slots=True)
class Event:
    """An event to publish about ``ref``."""

    ref: Mapping[str, Any]
    reason: str
    message: str


class StatusConditions(RegisteredCollector):
    """See the module docstring. :meth:`observe` is the cluster-state listener; :meth:`run` the writer task that
    publishes the events (and registers the gauges); ``leading`` gates counters and gauges; ``clock`` returns
    wall-clock seconds since the epoch (condition and deletion times are compared with it)."""

    def __init__(
        self,
        events: EventRecorder | None,
        *,
        leading: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.events = events
        self.leading = leading
        self.clock = clock
        self.observed: dict[tuple[str, str], Observed] = {}
        self._queue: asyncio.Queue[Event] | None = None

    # Observation ----------------------------------------------------------------------------------------

    def observe(self, kind: str, event: str, key: str, old: Any, new: Any) -> None:
        """Cluster-state listener (``(kind, event, key, old, new)``; ``new`` None when the object is gone)."""
        spec = SPECS.get(kind)
        if spec is None:
            return
        previous = self.observed.get((kind, key))
        if new is None:
            self._gone(spec, key, previous)
            return
        current = self._read(spec, new, previous)
        self.observed[(kind, key)] = current
        if previous is not None:
            for finalizer in previous.finalizers:
                if finalizer not in current.finalizers:
                    self._emit(Event(current.ref, "Finalized", f"Finalized {finalizer}"))
        self._transitions(spec, previous, current)

    def _gone(self, spec: KindSpec, key: str, previous: Observed | None) -> None:
        self.observed.pop((spec.kind, key), None)
        if previous is None:
            return
        if previous.deletion and self.leading():
            seconds = max(0.0, self.clock() - previous.deletion)
            histogram = KIND_METRICS[spec.kind].termination_seconds
            if previous.labels:
                histogram.labels(*previous.labels.values()).observe(seconds)
            else:
                histogram.observe(seconds)
            if spec.deprecated:
                DEPRECATED_TERMINATION_SECONDS.labels(spec.group, spec.kind).observe(seconds)
        for finalizer in previous.finalizers:
            self._emit(Event(previous.ref, "Finalized", f"Finalized {finalizer}"))

    def _transitions(self, spec: KindSpec, previous: Observed | None, current: Observed) -> None:
        metrics = KIND_METRICS[spec.kind]
        extra = list(current.labels.values())
        for cond in current.conditions.values():
            before = previous.conditions.get(cond.type) if previous is not None else None
            before_status = before.status if before is not None else "Unknown"
            if before_status == cond.status:
                continue
            if self.leading():
                metrics.transitions.labels(cond.type, cond.status, cond.reason, *extra).inc()
                if spec.deprecated:
                    DEPRECATED_TRANSITIONS.labels(cond.type, cond.status, cond.reason, spec.group, spec.kind).inc()
            if before is None:
                continue
            if self.leading():
                seconds = cond.last_transition_time - before.last_transition_time
                metrics.transition_seconds.labels(before.type, before.status, cond.status, *extra).observe(seconds)
                if spec.deprecated:
                    DEPRECATED_TRANSITION_SECONDS.labels(
                        before.type, before.status, cond.status, spec.group, spec.kind
                    ).observe(seconds)
            self._emit(Event(current.ref, cond.type, transition_message(cond.type, before.status, cond)))

    def _read(self, spec: KindSpec, obj: Any, previous: Observed | None) -> Observed:
        """The object as operatorpkg's condition set reads it (see the module docstring)."""
        if isinstance(obj, NodeInfo):
            namespace, name, labels = "", obj.name, obj.labels
            conditions: Iterable[Condition] = obj.conditions
            deletion, finalizers, created = obj.deletion_timestamp, obj.finalizers, obj.created
            ref: dict[str, Any] = {
                "apiVersion": spec.api_version,
                "kind": spec.kind,
                "metadata": {"name": obj.name, "uid": obj.uid, "resourceVersion": obj.resource_version},
            }
        else:
            meta = obj.get("metadata") or {}
            namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
            labels = meta.get("labels") or {}
            conditions = conditions_of(obj)
            deletion = parse_time(meta.get("deletionTimestamp"))
            finalizers = tuple(meta.get("finalizers") or ())
            created = parse_time(meta.get("creationTimestamp"))
            ref = {
                "apiVersion": spec.api_version,
                "kind": spec.kind,
                "metadata": {
                    k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if meta.get(k) is not None
                },
            }
        by_type = {c.type: c for c in conditions}
        for index, type_ in enumerate(spec.known):
            if type_ in by_type:
                continue
            earlier = previous.conditions.get(type_) if previous is not None else None
            if earlier is not None and earlier.reason == AWAITING_RECONCILIATION and earlier.status == "Unknown":
                by_type[type_] = earlier
                continue
            since = created if index > 0 and created else self.clock()
            by_type[type_] = Condition(
                type_, "Unknown", AWAITING_RECONCILIATION, AWAITING_RECONCILIATION_MESSAGE, since
            )
        return Observed(
            namespace=namespace,
            name=name,
            conditions=by_type,
            labels={prometheus_label(k): str(labels.get(k) or "") for k in spec.labels},
            deletion=deletion,
            finalizers=finalizers,
            ref=ref,
        )

    def _emit(self, event: Event) -> None:
        """Queue ``event`` for the writer task; dropped when it is not running (a standby writes nothing)."""
        if self._queue is not None and self.leading():
            self._queue.put_nowait(event)

    # Writer task ----------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Register the gauges and publish queued events until cancelled (the leader's writer task)."""
        self.register()
        self._queue = asyncio.Queue()
        try:
            while True:
                event = await self._queue.get()
                if self.events is not None:
                    self.events.publish(event.ref, NORMAL, event.reason, event.message)
        finally:
            self._queue = None
            self.unregister()

    # Collector ------------------------------------------------------------------------------------------

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """``operator_<kind>_status_condition_{count,current_status_seconds}``, ``operator_<kind>_termination_
        current_time_seconds`` and their deprecated generic forms; nothing while not leading."""
        if not self.leading():
            return
        now = self.clock()
        deprecated = _gauges("operator", (), GROUP_KIND)
        by_kind = {kind: _gauges(f"operator_{spec.subsystem}", spec.metric_labels, ()) for kind, spec in SPECS.items()}
        for (kind, _), obs in list(self.observed.items()):
            spec = SPECS[kind]
            extra = list(obs.labels.values())
            count, current, terminating = by_kind[kind]
            for cond in obs.conditions.values():
                base = [obs.namespace, obs.name, cond.type, cond.status, cond.reason]
                seconds = max(0.0, now - cond.last_transition_time) if cond.last_transition_time else 0.0
                count.add_metric([*base, *extra], 1.0)
                current.add_metric([*base, *extra], seconds)
                if spec.deprecated:
                    deprecated[0].add_metric([*base, spec.group, spec.kind], 1.0)
                    deprecated[1].add_metric([*base, spec.group, spec.kind], seconds)
            if obs.deletion:
                seconds = max(0.0, now - obs.deletion)
                terminating.add_metric([obs.namespace, obs.name, *extra], seconds)
                if spec.deprecated:
                    deprecated[2].add_metric([obs.namespace, obs.name, spec.group, spec.kind], seconds)
        for families in by_kind.values():
            yield from families
        yield from deprecated


def _gauges(prefix: str, extra: Iterable[str], tail: tuple[str, ...]) -> tuple[GaugeMetricFamily, ...]:
    extra = tuple(extra)
    return (
        GaugeMetricFamily(
            f"{prefix}_status_condition_count",
            "The number of a condition for a given object, type and status.",
            labels=(*COUNT_LABELS, *extra, *tail),
        ),
        GaugeMetricFamily(
            f"{prefix}_status_condition_current_status_seconds",
            "The current amount of time in seconds that a status condition has been in a specific state.",
            labels=(*COUNT_LABELS, *extra, *tail),
        ),
        GaugeMetricFamily(
            f"{prefix}_termination_current_time_seconds",
            "The current amount of time in seconds that an object has been in terminating state.",
            labels=(*TERMINATING_LABELS, *extra, *tail),
        ),
    )


__all__ = [
    "SPECS",
    "KindSpec",
    "Observed",
    "StatusConditions",
    "prometheus_label",
    "transition_message",
]
