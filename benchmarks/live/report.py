"""The live benchmark's arithmetic: pod timings from the objects' own timestamps, the controller's apiserver
requests from the audit log, a timeline, medians over runs and the side-by-side table.

Pure (no I/O), unit-tested in ``tests/unit/test_bench_live.py``. Times are epoch seconds (float), durations
seconds, prices USD/hour.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from e2e.audit import ADMIN_USER, WRITE_VERBS, parse_time, response_code

# How kube-scheduler's requests are told from the other components' that share the admin user.
SCHEDULER_AGENT: Final = "kube-scheduler/"


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``values`` by the nearest-rank method; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    # round() first: q × n can land just above a whole number in floating point (0.07 × 100 = 7.000000000000001).
    rank = max(1, min(len(ordered), math.ceil(round(q * len(ordered), 9))))
    return ordered[rank - 1]


def condition_time(obj: Mapping[str, Any], kind: str) -> float | None:
    """``lastTransitionTime`` of ``obj``'s condition ``kind`` when it is True, else None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True" and cond.get("lastTransitionTime"):
            return parse_time(str(cond["lastTransitionTime"]))
    return None


def created(obj: Mapping[str, Any]) -> float:
    """``metadata.creationTimestamp`` as epoch seconds."""
    return parse_time(str(obj["metadata"]["creationTimestamp"]))


@dataclass(frozen=True)
class PodTimes:
    """Per-pod seconds from creation to Ready (``p50``/``p99``; the timestamps' own 1 s resolution), how many
    pods are Ready, and when the last one became Ready (epoch seconds, 0.0 when none)."""

    ready: int
    p50: float
    p99: float
    last_ready: float


def pod_times(pods: Iterable[Mapping[str, Any]]) -> PodTimes:
    """:class:`PodTimes` of ``pods`` (creationTimestamp → Ready condition's lastTransitionTime)."""
    seconds, last = [], 0.0
    for pod in pods:
        ready = condition_time(pod, "Ready")
        if ready is None:
            continue
        seconds.append(max(0.0, ready - created(pod)))
        last = max(last, ready)
    return PodTimes(len(seconds), percentile(seconds, 0.5), percentile(seconds, 0.99), last)


def timeline(
    start: float,
    claims: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    step: float = 15.0,
    marked: Sequence[float] = (),
) -> list[dict[str, float | int]]:
    """Cumulative counts at ``start + k·step`` (k = 1, 2, … until everything is counted): pods created, pods marked
    unschedulable by kube-scheduler (``marked``: epoch seconds, :func:`marked_times`), NodeClaims created, Nodes
    created (registered), pods scheduled (PodScheduled=True) and Ready; each row ``{"t": seconds, "created",
    "marked", "claims", "nodes", "scheduled", "ready"}``."""
    pods = list(pods)
    series = {
        "created": sorted(created(p) - start for p in pods),
        "marked": sorted(t - start for t in marked),
        "claims": sorted(created(c) - start for c in claims),
        "nodes": sorted(created(n) - start for n in nodes),
        "scheduled": sorted(t - start for p in pods if (t := condition_time(p, "PodScheduled")) is not None),
    }
    series["ready"] = sorted(t - start for p in pods if (t := condition_time(p, "Ready")) is not None)
    end = max((s[-1] for s in series.values() if s), default=0.0)
    rows: list[dict[str, float | int]] = []
    t = step
    while True:
        rows.append({"t": t, **{k: sum(1 for v in s if v <= t) for k, s in series.items()}})
        if t >= end:
            return rows
        t += step


# -- apiserver requests ------------------------------------------------------------------------------------------------


def _by_user(user: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda event: (event.get("user") or {}).get("username") == user


def _is_scheduler(event: Mapping[str, Any]) -> bool:
    """kube-scheduler's requests: the admin user (shared by the control-plane components) with its User-Agent."""
    return _by_user(ADMIN_USER)(event) and str(event.get("userAgent", "")).startswith(SCHEDULER_AGENT)


def _writes(
    events: Iterable[Mapping[str, Any]], who: Callable[[Mapping[str, Any]], bool], since: float, until: float
) -> Iterator[tuple[Mapping[str, Any], str, str, str]]:
    """The writes ``who`` accepts received in ``[since, until)``: (event, verb, resource, subresource or "")."""
    for event in events:
        if not who(event) or event.get("verb") not in WRITE_VERBS:
            continue
        if not since <= parse_time(str(event["requestReceivedTimestamp"])) < until:
            continue
        ref = event.get("objectRef") or {}
        yield event, str(event.get("verb")), str(ref.get("resource")), str(ref.get("subresource") or "")


def _ok(event: Mapping[str, Any]) -> bool:
    return 200 <= response_code(event) < 300


def count_writes(
    events: Iterable[Mapping[str, Any]], user: str, since: float, until: float = float("inf")
) -> dict[str, int]:
    """The writes of ``user`` received in ``[since, until)`` in audit events (``audit.k8s.io/v1`` Event dicts):
    ``writes`` (all, any response code), ``nodeclaim_creates`` (2xx), ``evictions`` (create of ``pods/eviction``,
    any code: an eviction refused by a PDB is still one attempted), ``pod_deletes`` and ``node_deletes``."""
    out = {"writes": 0, "nodeclaim_creates": 0, "evictions": 0, "pod_deletes": 0, "node_deletes": 0}
    for event, verb, resource, sub in _writes(events, _by_user(user), since, until):
        out["writes"] += 1
        if resource == "nodeclaims" and not sub and verb == "create" and _ok(event):
            out["nodeclaim_creates"] += 1
        elif resource == "pods" and sub == "eviction" and verb == "create":
            out["evictions"] += 1
        elif resource == "pods" and not sub and verb == "delete":
            out["pod_deletes"] += 1
        elif resource == "nodes" and not sub and verb == "delete":
            out["node_deletes"] += 1
    return out


def write_breakdown(
    events: Iterable[Mapping[str, Any]], user: str, since: float, until: float = float("inf")
) -> dict[str, int]:
    """The writes of ``user`` received in ``[since, until)`` counted per ``"<verb> <resource>[/<subresource>]"``,
    most frequent first (where a controller's writes per pod go)."""
    counts: dict[str, int] = {}
    for _, verb, resource, sub in _writes(events, _by_user(user), since, until):
        what = f"{verb} {resource}" + (f"/{sub}" if sub else "")
        counts[what] = counts.get(what, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def scheduler_writes(events: Iterable[Mapping[str, Any]], since: float, until: float = float("inf")) -> dict[str, int]:
    """kube-scheduler's writes received in ``[since, until)`` (logged when the cluster runs with
    ``KARPY_AUDIT_SCHEDULER=1``: the admin user, User-Agent ``kube-scheduler/…``): ``writes`` (all, any code),
    ``bindings`` (2xx creates of ``pods/binding``), ``status`` (pod status writes: PodScheduled=False
    ``Unschedulable``) and ``events`` (FailedScheduling, Scheduled)."""
    out = {"writes": 0, "bindings": 0, "status": 0, "events": 0}
    for event, _, resource, sub in _writes(events, _is_scheduler, since, until):
        out["writes"] += 1
        if resource == "pods" and sub == "binding":
            out["bindings"] += _ok(event)
        elif resource == "pods" and sub == "status":
            out["status"] += 1
        elif resource == "events":
            out["events"] += 1
    return out


def marked_times(
    events: Iterable[Mapping[str, Any]], since: float = float("-inf"), until: float = float("inf")
) -> list[float]:
    """Per pod, when kube-scheduler first wrote its status in ``[since, until)`` (epoch seconds, sorted): the moment
    it marked the pod PodScheduled=False ``Unschedulable``, which is when either controller may first consider the
    pod (Karpenter's ``IsProvisionable``). Pods kube-scheduler bound at its first attempt have none."""
    first: dict[str, float] = {}
    for event, _, resource, sub in _writes(events, _is_scheduler, since, until):
        if resource == "pods" and sub == "status" and _ok(event):
            ref = event.get("objectRef") or {}
            key = f"{ref.get('namespace')}/{ref.get('name')}"
            t = parse_time(str(event["requestReceivedTimestamp"]))
            first[key] = min(t, first.get(key, t))
    return sorted(first.values())


def unique_events(events: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Audit events one per request (by ``auditID``, the last stage seen: ``ResponseComplete`` of a finished
    request, ``ResponseStarted`` of a watch still open), in first-seen order."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for event in events:
        by_id[str(event.get("auditID") or id(event))] = event
    return list(by_id.values())


def count_requests(events: Iterable[Mapping[str, Any]], user: str, since: float, until: float = float("inf")) -> int:
    """Requests of ``user`` received in ``[since, until)`` (every verb the audit policy logs for it: with
    ``reads``, get/list/watch too), one per ``auditID``."""
    return sum(
        1
        for event in unique_events(events)
        if (event.get("user") or {}).get("username") == user
        and since <= parse_time(str(event["requestReceivedTimestamp"])) < until
    )


# -- price -------------------------------------------------------------------------------------------------------------


def hourly_cost(instance_types: Mapping[str, int], prices: Mapping[str, float]) -> float:
    """USD/hour of ``instance_types`` (name -> node count) at ``prices`` (on-demand; unknown names cost 0)."""
    return sum(prices.get(name, 0.0) * count for name, count in instance_types.items())


# -- the table ---------------------------------------------------------------------------------------------------------

# (key in a result, label, format); lower is better for all of them.
METRICS: Final = (
    ("total_s", "all Running (s)", "{:.1f}"),
    ("created_s", "last pod created (s)", "{:.1f}"),
    ("marked_s", "last pod marked Unschedulable by kube-scheduler (s)", "{:.1f}"),
    ("p50_s", "per pod p50 (s)", "{:.1f}"),
    ("p99_s", "per pod p99 (s)", "{:.1f}"),
    ("nodeclaims", "NodeClaims created", "{:.0f}"),
    ("nodes", "nodes", "{:.0f}"),
    ("cost_per_h", "$/h (on-demand)", "{:.2f}"),
    ("peak_rss_mib", "controller peak RSS (MiB)", "{:.0f}"),
    ("cpu_s_up", "controller CPU s (scale-up)", "{:.1f}"),
    ("cpu_s", "controller CPU s (all)", "{:.1f}"),
    ("requests_up", "apiserver requests (scale-up)", "{:.0f}"),
    ("writes_up", "apiserver writes (scale-up)", "{:.0f}"),
    ("writes_per_pod", "writes per pod", "{:.2f}"),
    ("scheduler_writes_up", "kube-scheduler writes (scale-up)", "{:.0f}"),
    ("system_writes_per_pod", "controller + kube-scheduler writes per pod", "{:.2f}"),
    ("down_s", "scale-down to nothing (s)", "{:.1f}"),
    ("down_left_nodes", "nodes left when the scale-down wait ended", "{:.0f}"),
    ("evictions", "evictions (scale-down)", "{:.0f}"),
    ("writes_down", "apiserver writes (scale-down)", "{:.0f}"),
)


def median_result(runs: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Per metric of :data:`METRICS`, the median over ``runs`` of the values present (None when none is)."""
    out: dict[str, float | None] = {}
    for key, *_ in METRICS:
        values = [float(r[key]) for r in runs if r.get(key) is not None]
        out[key] = statistics.median(values) if values else None
    return out


def _cell(value: float | None, fmt: str) -> str:
    return "—" if value is None else fmt.format(value)


def table(results: Mapping[int, Mapping[str, Sequence[Mapping[str, Any]]]]) -> str:
    """One Markdown table: per size (pods) and metric, karpy's and Karpenter's medians over their runs and the
    ratio karpy/Karpenter. ``results[size][controller]`` is that controller's list of run results."""
    lines = ["| pods | metric | karpy | Karpenter | karpy/Karpenter |", "|---:|---|---:|---:|---:|"]
    for size in sorted(results):
        karpy = median_result(results[size].get("karpy", []))
        karpenter = median_result(results[size].get("karpenter", []))
        for key, label, fmt in METRICS:
            a, b = karpy[key], karpenter[key]
            ratio = "—" if a is None or b is None or b == 0 else f"{a / b:.2f}"
            lines.append(f"| {size:,} | {label} | {_cell(a, fmt)} | {_cell(b, fmt)} | {ratio} |")
    return "\n".join(lines)


def timeline_text(rows: Sequence[Mapping[str, float | int]]) -> str:
    """A timeline (:func:`timeline`) as aligned text lines."""
    out = ["    t(s)  created  marked  claims   nodes  scheduled   ready"]
    for row in rows:
        out.append(
            f"  {row['t']:6.0f}  {row.get('created', 0):7d}  {row.get('marked', 0):6d}  {row['claims']:6d}"
            f"  {row['nodes']:6d}  {row['scheduled']:9d}  {row['ready']:6d}"
        )
    return "\n".join(out)
