"""Who wrote, and who held the leader Lease when they did: "never two writers", judged from the logs.

Two sources record every write karpy makes, each with its arrival time and the writer's User-Agent, which karpy
stamps with its leader-election identity (``<hostname>_<uuid>``, as client-go's elector names itself):

- the apiserver's audit log (``LocalCluster.audit_log``; ``audit.k8s.io/v1`` Events at ``Metadata`` level, one
  JSON object per line, for karpy's create/update/patch/delete/deletecollection only — see
  ``e2e.cluster.controlplane.audit_policy``), time ``requestReceivedTimestamp``;
- moto's request log (``LocalCluster.aws_request_log``; ``{t, service, action, user_agent, status}`` per line for
  every mutating AWS request — see ``e2e.cluster.aws.RequestLog``), time ``t``.

The Lease's holder history is read from the same audit log: each successful (2xx) create/update/patch of the
Lease by identity X at ``t`` means X held it from ``t`` on (a renewal repeats the holder; client-go's elector only
ever writes itself as holder, or ``""`` on release, which this log cannot tell apart from a renewal at Metadata
level: a released lease reads as still held by its last writer until someone else acquires it).

:func:`two_writer_violations` then says whether any write (any response code: an attempt that the apiserver or
AWS refused still shows a process that believed it could write) came from a process that did not hold the lease at
that moment. Both logs use this host's clock (the apiserver and moto run on it), so their times compare.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

LEASE_GROUP = "coordination.k8s.io"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# The static-token user of the local cluster's admin kubeconfig, which kube-controller-manager, kube-scheduler and
# KWOK use (``e2e.cluster.controlplane``).
ADMIN_USER = "admin"
# Stages an audit event of a finished request is written at (RequestReceived is omitted by the policy).
FINAL_STAGES = frozenset({"ResponseComplete", "Panic"})
_AWS_ID = re.compile(r"karpy-id/(\S+)")


@dataclass(frozen=True)
class Write:
    """One write attempt: ``t`` its arrival time (epoch seconds), ``identity`` the writer ("" when the User-Agent
    names no known identity), ``source`` ``"apiserver"`` or ``"aws"``, ``what`` e.g. ``"create nodeclaims
    default-x7k"`` or ``"ec2 CreateFleet"``, ``code`` the response status, ``lease`` True for a write of the
    leader Lease itself (the election's own traffic), ``end`` when the server answered (None: unknown, taken as
    ``t``): the write took effect somewhere in ``[t, end]``."""

    t: float
    identity: str
    source: str
    what: str
    code: int
    lease: bool = False
    end: float | None = None

    @property
    def done(self) -> float:
        """When the server answered (``t`` when unknown), epoch seconds."""
        return self.t if self.end is None else self.end


def parse_time(stamp: str) -> float:
    """An RFC 3339 timestamp (``2026-11-24T22:10:46.123456Z``, the audit log's MicroTime) as epoch seconds."""
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def json_lines(path: Path) -> list[dict[str, Any]]:
    """Every JSON line of ``path`` (the audit log: all stages of every request); [] when the file does not exist."""
    out: list[dict[str, Any]] = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def load_audit(path: Path) -> list[dict[str, Any]]:
    """The audit log's events of finished requests (``ResponseComplete``/``Panic``), one per request (by
    ``auditID``), in the file's order; [] when the file does not exist."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for event in json_lines(path):
        if event.get("stage") not in FINAL_STAGES:
            continue
        audit_id = str(event.get("auditID") or "")
        if audit_id and audit_id in seen:
            continue
        seen.add(audit_id)
        out.append(event)
    return out


def load_aws_requests(path: Path) -> list[dict[str, Any]]:
    """moto's request log: ``{t, service, action, user_agent, status}`` dicts; [] when the file does not exist."""
    return json_lines(path)


def identity_of(user_agent: str, identities: Iterable[str] = ()) -> str:
    """The leader-election identity a User-Agent names: the longest of ``identities`` it contains, else the value
    of a ``karpy-id/<identity>`` token (karpy's AWS ``user_agent_extra``), else ""."""
    found = [i for i in identities if i and i in user_agent]
    if found:
        return max(found, key=len)
    match = _AWS_ID.search(user_agent)
    return match.group(1) if match else ""


def _is_lease(event: Mapping[str, Any], namespace: str, name: str) -> bool:
    ref = event.get("objectRef") or {}
    return bool(
        ref.get("resource") == "leases"
        and ref.get("apiGroup") == LEASE_GROUP
        and ref.get("namespace") == namespace
        and ref.get("name") == name
        and not ref.get("subresource")
    )


def response_code(event: Mapping[str, Any]) -> int:
    """An audit event's response status code (0 when it has none)."""
    return int((event.get("responseStatus") or {}).get("code") or 0)


def holder_history(
    events: Iterable[Mapping[str, Any]], namespace: str, name: str, identities: Iterable[str] = ()
) -> list[tuple[float, str]]:
    """[(t, identity)] sorted by t: each successful (2xx) create/update/patch of the Lease ``namespace/name``,
    its ``requestReceivedTimestamp`` and its writer (:func:`identity_of` the User-Agent, "" when unknown). The
    holder at any moment is the identity of the last entry at or before it (:func:`holder_at`)."""
    known = list(identities)
    out = [
        (parse_time(e["requestReceivedTimestamp"]), identity_of(str(e.get("userAgent") or ""), known))
        for e in events
        if e.get("verb") in ("create", "update", "patch")
        and 200 <= response_code(e) < 300
        and _is_lease(e, namespace, name)
    ]
    return sorted(out, key=lambda entry: entry[0])


def holder_at(history: Sequence[tuple[float, str]], t: float) -> str | None:
    """Who held the lease at ``t`` (epoch seconds): the identity of the last ``history`` entry at or before
    ``t``; None before the first."""
    index = bisect_right([entry[0] for entry in history], t)
    return history[index - 1][1] if index else None


def acquisitions(history: Sequence[tuple[float, str]]) -> list[tuple[float, str]]:
    """The entries of ``history`` where the holder changed (the first one included): [(t, new holder)]."""
    out: list[tuple[float, str]] = []
    for t, identity in history:
        if not out or out[-1][1] != identity:
            out.append((t, identity))
    return out


def _what(event: Mapping[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    resource = str(ref.get("resource") or "?")
    if ref.get("subresource"):
        resource += f"/{ref['subresource']}"
    where = "/".join(str(p) for p in (ref.get("namespace"), ref.get("name")) if p)
    return f"{event.get('verb')} {resource} {where}".rstrip()


def writes_by_identity(
    events: Iterable[Mapping[str, Any]],
    aws_requests: Iterable[Mapping[str, Any]],
    identities: Iterable[str],
    *,
    lease: tuple[str, str],
    since: float = float("-inf"),
) -> dict[str, list[Write]]:
    """Every write attempt at or after ``since`` (epoch seconds), apiserver and AWS, any response code, grouped by
    the writer's identity (:func:`identity_of` its User-Agent; "" collects writes naming no known identity, e.g.
    the test's own AWS calls) and sorted by time. ``lease`` is the leader Lease's (namespace, name): its writes are
    marked :attr:`Write.lease`."""
    known = list(identities)
    out: dict[str, list[Write]] = {}
    for e in events:
        if e.get("verb") not in WRITE_VERBS:
            continue
        t = parse_time(e["requestReceivedTimestamp"])
        if t < since:
            continue
        who = identity_of(str(e.get("userAgent") or ""), known)
        end = parse_time(e["stageTimestamp"]) if e.get("stageTimestamp") else None
        out.setdefault(who, []).append(
            Write(t, who, "apiserver", _what(e), response_code(e), _is_lease(e, *lease), end)
        )
    for req in aws_requests:
        t = float(req["t"])
        if t < since:
            continue
        who = identity_of(str(req.get("user_agent") or ""), known)
        what = f"{req.get('service') or '?'} {req.get('action')}"
        end = float(req["t_end"]) if req.get("t_end") is not None else None
        out.setdefault(who, []).append(Write(t, who, "aws", what, int(req.get("status") or 0), end=end))
    for writes in out.values():
        writes.sort(key=lambda w: w.t)
    return out


def two_writer_violations(
    history: Sequence[tuple[float, str]], writes: Mapping[str, Iterable[Write]] | Iterable[Write]
) -> list[Write]:
    """The writes made by a process that did not hold the lease at that moment: every write that is not the
    Lease's own (:attr:`Write.lease`) by X must have X as the holder both when it arrived (``t``) and when it was
    answered (:attr:`Write.done`): a write that arrived in X's tenure but was still being carried out when another
    process took the lease overlapped two writers too (a process paused after sending its request headers). An
    attempt counts whatever its response code; a write naming no identity ("") never matches a holder, so it is a
    violation too. Returns the offending writes, by time ([] means never two writers)."""
    flat = [w for ws in writes.values() for w in ws] if isinstance(writes, Mapping) else list(writes)
    bad = [
        w
        for w in flat
        if not w.lease and (holder_at(history, w.t) != w.identity or holder_at(history, w.done) != w.identity)
    ]
    return sorted(bad, key=lambda w: w.t)
