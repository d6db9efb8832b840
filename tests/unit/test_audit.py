"""e2e/audit.py on canned audit and moto logs: the holder history, attribution of writes, and the "never two
writers" judgement (with violating cases, so the check can fail); and moto's request-log middleware."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from e2e.audit import (
    Write,
    acquisitions,
    holder_at,
    holder_history,
    identity_of,
    load_audit,
    load_aws_requests,
    parse_time,
    two_writer_violations,
    writes_by_identity,
)
from e2e.cluster.aws import RequestLog, is_read_action, request_action
from e2e.cluster.controlplane import KARPY_USER, audit_policy

A = "host_aaaaaaaa-1111-4111-8111-111111111111"
B = "host_bbbbbbbb-2222-4222-8222-222222222222"
NS, NAME = "karpy", "karpenter-leader-election"
LEASE = (NS, NAME)
T0 = parse_time("2026-11-24T22:00:00.000000Z")


def stamp(seconds: float) -> str:
    """T0 + ``seconds`` as the apiserver writes requestReceivedTimestamp (microseconds, UTC)."""
    from datetime import UTC, datetime

    return datetime.fromtimestamp(T0 + seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def event(
    seconds: float,
    who: str,
    verb: str,
    resource: str,
    name: str,
    *,
    code: int = 200,
    namespace: str | None = None,
    group: str = "",
    subresource: str = "",
    audit_id: str | None = None,
    stage: str = "ResponseComplete",
) -> dict[str, Any]:
    ref: dict[str, Any] = {"resource": resource, "name": name, "apiGroup": group, "apiVersion": "v1"}
    if namespace:
        ref["namespace"] = namespace
    if subresource:
        ref["subresource"] = subresource
    return {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "Metadata",
        "auditID": audit_id or f"{who}-{verb}-{resource}-{name}-{seconds}",
        "stage": stage,
        "verb": verb,
        "user": {"username": KARPY_USER},
        "userAgent": f"karpy/0.1 ({who})" if who else "karpy/0.1",
        "objectRef": ref,
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": stamp(seconds),
        "stageTimestamp": stamp(seconds + 0.002),
    }


def lease_write(seconds: float, who: str, verb: str = "update", code: int = 200) -> dict[str, Any]:
    return event(seconds, who, verb, "leases", NAME, code=code, namespace=NS, group="coordination.k8s.io")


def aws(seconds: float, who: str, action: str = "CreateFleet", status: int = 200) -> dict[str, Any]:
    ua = f"aiobotocore/2.0 Botocore/1.0 karpy-id/{who}" if who else "Boto3/1.0 Botocore/1.0"
    return {"t": T0 + seconds, "service": "ec2", "action": action, "user_agent": ua, "status": status}


def failover(extra_events: Iterable[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """A leads from 0 s (create, renewals every 2 s); B's attempts at 4 s and 16 s fail (409); A is killed at 7 s;
    B acquires at 22 s and renews at 24 s."""
    return [
        lease_write(0.0, A, "create", 201),
        lease_write(2.0, A),
        lease_write(4.0, B, code=409),
        lease_write(4.01, A),
        lease_write(6.0, A),
        lease_write(16.0, B, code=409),
        lease_write(22.0, B),
        lease_write(24.0, B),
        *extra_events,
    ]


def test_holder_history_keeps_successful_lease_writes_by_identity() -> None:
    history = holder_history(failover(), NS, NAME, [A, B])
    assert [who for _, who in history] == [A, A, A, A, B, B]
    assert acquisitions(history) == [(T0, A), (parse_time(stamp(22.0)), B)]
    assert holder_at(history, T0 - 1) is None
    assert holder_at(history, T0 + 21.9) == A
    assert holder_at(history, T0 + 22.0) == B
    # Another namespace's Lease of the same name, and a subresource, are not the leader Lease.
    other = [
        {**lease_write(30.0, A), "objectRef": {**lease_write(30.0, A)["objectRef"], "namespace": "other"}},
        event(31.0, A, "update", "leases", NAME, namespace=NS, group="coordination.k8s.io", subresource="status"),
    ]
    assert holder_history(failover(other), NS, NAME, [A, B]) == history


def test_no_violation_when_each_writes_only_in_its_tenure() -> None:
    events = failover(
        [
            event(1.0, A, "create", "nodeclaims", "default-a1", group="karpenter.sh", code=201),
            event(5.0, A, "patch", "nodeclaims", "default-a1", group="karpenter.sh"),
            event(23.0, B, "create", "pods", "inflate-1", namespace="default", subresource="binding", code=201),
        ]
    )
    requests = [aws(5.5, A), aws(22.5, B, "TerminateInstances"), aws(23.0, "", "RunInstances")]
    history = holder_history(events, NS, NAME, [A, B])
    writes = writes_by_identity(events, requests, [A, B], lease=LEASE)
    assert two_writer_violations(history, {k: v for k, v in writes.items() if k}) == []
    assert [w.what for w in writes[A] if not w.lease] == [
        "create nodeclaims default-a1",
        "patch nodeclaims default-a1",
        "ec2 CreateFleet",
    ]
    assert [w.what for w in writes[B] if not w.lease] == [
        "ec2 TerminateInstances",
        "create pods/binding default/inflate-1",
    ]
    assert [w.what for w in writes[""]] == ["ec2 RunInstances"]  # not karpy's: no identity in its User-Agent


def test_old_leader_writing_after_take_over_is_a_violation() -> None:
    late_kube = event(22.5, A, "delete", "nodeclaims", "default-a1", group="karpenter.sh", code=200)
    events = failover([late_kube])
    history = holder_history(events, NS, NAME, [A, B])
    writes = writes_by_identity(events, [aws(25.0, A, "TerminateInstances")], [A, B], lease=LEASE)
    bad = two_writer_violations(history, writes)
    assert [(w.identity, w.source, w.what) for w in bad] == [
        (A, "apiserver", "delete nodeclaims default-a1"),
        (A, "aws", "ec2 TerminateInstances"),
    ]


def test_a_write_still_in_flight_when_the_lease_changes_hands_is_a_violation() -> None:
    """Arrived in A's tenure (A paused after sending it), answered after B acquired: two writers overlapped."""
    overlapping = event(21.0, A, "create", "nodeclaims", "late", group="karpenter.sh", code=201)
    overlapping["stageTimestamp"] = stamp(22.5)
    done_in_time = event(21.0, A, "create", "nodeclaims", "quick", group="karpenter.sh", code=201)
    events = failover([overlapping, done_in_time])
    history = holder_history(events, NS, NAME, [A, B])
    requests = [{**aws(21.5, A), "t_end": T0 + 22.1}, {**aws(21.5, A, "CreateTags"), "t_end": T0 + 21.6}]
    bad = two_writer_violations(history, writes_by_identity(events, requests, [A, B], lease=LEASE))
    assert [(w.source, w.what) for w in bad] == [("apiserver", "create nodeclaims late"), ("aws", "ec2 CreateFleet")]


def test_refused_attempts_count_as_writes() -> None:
    """A 409/403 still shows a process that believed it could write."""
    events = failover([event(23.0, A, "patch", "nodeclaims", "x", group="karpenter.sh", code=409)])
    history = holder_history(events, NS, NAME, [A, B])
    bad = two_writer_violations(history, writes_by_identity(events, [aws(23.5, A, status=400)], [A, B], lease=LEASE))
    assert [(w.what, w.code) for w in bad] == [("patch nodeclaims x", 409), ("ec2 CreateFleet", 400)]


def test_standby_writing_before_it_acquires_is_a_violation() -> None:
    events = failover([event(10.0, B, "create", "events", "x.1", namespace="default", code=201)])
    history = holder_history(events, NS, NAME, [A, B])
    bad = two_writer_violations(history, writes_by_identity(events, [aws(21.9, B)], [A, B], lease=LEASE))
    assert [(round(w.t - T0, 3), w.identity, w.source) for w in bad] == [(10.0, B, "apiserver"), (21.9, B, "aws")]


def test_writes_before_any_lease_and_unattributed_writes_are_violations() -> None:
    events = [event(-1.0, A, "create", "nodeclaims", "early", group="karpenter.sh"), *failover()]
    events.append(event(3.0, "", "patch", "nodes", "n1"))
    history = holder_history(events, NS, NAME, [A, B])
    bad = two_writer_violations(history, writes_by_identity(events, [], [A, B], lease=LEASE))
    assert [(w.what, w.identity) for w in bad] == [("create nodeclaims early", A), ("patch nodes n1", "")]


def test_lease_writes_are_not_judged_but_are_reported() -> None:
    """The standby's failed acquire attempts are the election itself, not a second writer."""
    events = failover()
    history = holder_history(events, NS, NAME, [A, B])
    writes = writes_by_identity(events, [], [A, B], lease=LEASE)
    assert [(round(w.t - T0, 3), w.code) for w in writes[B]] == [(4.0, 409), (16.0, 409), (22.0, 200), (24.0, 200)]
    assert all(w.lease for w in writes[B])
    assert two_writer_violations(history, writes) == []


def test_since_drops_earlier_writes() -> None:
    events = failover([event(1.0, A, "create", "nodeclaims", "a", group="karpenter.sh")])
    writes = writes_by_identity(events, [aws(1.0, A)], [A, B], lease=LEASE, since=T0 + 10)
    assert {round(w.t - T0, 3) for ws in writes.values() for w in ws} == {16.0, 22.0, 24.0}


def test_identity_of_user_agents() -> None:
    assert identity_of(f"karpy/0.1 ({A})", [A, B]) == A
    assert identity_of(f"karpy/leader-election ({B})", [A, B]) == B
    assert identity_of(f"aiobotocore/2 md/x karpy-id/{B} cfg/retry-mode#legacy", []) == B
    assert identity_of("karpy/0.1", [A, B]) == ""
    # the longest known identity wins when one contains another
    assert identity_of("ua (host_1_x)", ["host_1", "host_1_x"]) == "host_1_x"


def test_load_audit_keeps_final_stages_once(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    started = event(1.0, A, "create", "nodeclaims", "a", group="karpenter.sh", stage="ResponseStarted", audit_id="1")
    done = event(1.0, A, "create", "nodeclaims", "a", group="karpenter.sh", audit_id="1")
    log.write_text("\n".join(json.dumps(e) for e in (started, done, done)) + "\n")
    assert load_audit(log) == [done]
    assert load_audit(tmp_path / "missing.log") == []
    requests = tmp_path / "aws.jsonl"
    requests.write_text(json.dumps(aws(1.0, A)) + "\n\n")
    assert load_aws_requests(requests) == [aws(1.0, A)]


def test_write_is_hashable_record() -> None:
    w = Write(1.0, A, "aws", "ec2 CreateFleet", 200)
    assert w in {w} and not w.lease


# -- the harness: apiserver audit policy and moto's request log ------------------------------------------------


def test_audit_policy_logs_only_karpys_writes() -> None:
    policy = audit_policy()
    assert policy["omitStages"] == ["RequestReceived"]
    first, last = policy["rules"]  # type: ignore[misc]
    assert first == {
        "level": "Metadata",
        "users": [KARPY_USER],
        "verbs": ["create", "update", "patch", "delete", "deletecollection"],
    }
    assert last == {"level": "None"}


def environ(body: bytes = b"", **extra: str) -> dict[str, Any]:
    env: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "CONTENT_TYPE": "application/x-www-form-urlencoded; charset=utf-8",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "HTTP_USER_AGENT": f"aiobotocore/2.0 karpy-id/{A}",
        "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 Credential=testing/20261124/us-east-1/ec2/aws4_request, X=y",
    }
    env.update(extra)
    return env


def test_request_action_from_every_protocol() -> None:
    body = b"Action=CreateFleet&Version=2016-11-15&Type=instant"
    env = environ(body)
    assert request_action(env) == "CreateFleet"
    assert env["wsgi.input"].read() == body  # put back for moto
    assert request_action(environ(b"{}", HTTP_X_AMZ_TARGET="AmazonSQS.ReceiveMessage")) == "ReceiveMessage"
    assert request_action(environ(QUERY_STRING="Action=DescribeInstances")) == "DescribeInstances"
    assert request_action(environ(REQUEST_METHOD="GET", CONTENT_TYPE="", PATH_INFO="/clusters/x")) == "Get /clusters/x"
    assert request_action(environ(REQUEST_METHOD="DELETE", CONTENT_TYPE="", PATH_INFO="/clusters/x")) == (
        "DELETE /clusters/x"
    )
    assert not is_read_action("CreateFleet") and not is_read_action("ReceiveMessage")
    assert is_read_action("DescribeInstances") and is_read_action("GetParameter") and is_read_action("ListRoles")


def test_request_log_appends_mutating_requests_only(tmp_path: Path) -> None:
    log = tmp_path / "aws-requests.jsonl"
    seen: list[bytes] = []

    def app(env: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(env["wsgi.input"].read())
        start_response("412 Precondition Failed" if b"Terminate" in seen[-1] else "200 OK", [])
        return [b"ok"]

    wrapped = RequestLog(app, log)
    for body in (b"Action=DescribeInstances", b"Action=CreateFleet&X=1", b"Action=TerminateInstances"):
        assert wrapped(environ(body), lambda *a: None) == [b"ok"]
    assert seen == [b"Action=DescribeInstances", b"Action=CreateFleet&X=1", b"Action=TerminateInstances"]
    wrapped(environ(b"", PATH_INFO="/moto-api/reset"), lambda *a: None)
    lines = load_aws_requests(log)
    assert [(r["service"], r["action"], r["status"]) for r in lines] == [
        ("ec2", "CreateFleet", 200),
        ("ec2", "TerminateInstances", 412),
    ]
    assert all(identity_of(r["user_agent"]) == A and 0 < r["t"] <= r["t_end"] for r in lines)
