"""EventBridge interruption message parsing: every kind Karpenter handles, in the exact shapes its EventBridge
rules deliver (spot interruption warning, rebalance recommendation, AWS Health scheduled change, instance state
change; Karpenter AWS ``pkg/controllers/interruption/{parser.go,messages/*}`` and their ``suite_test.go``
fixtures), plus no-op, empty and malformed bodies."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from karpy.aws.messages import parse
from karpy.cloudprovider.types import InterruptionKind

IID = "i-0123456789abcdef0"


def envelope(detail_type: str, detail: Any, source: str = "aws.ec2", version: str = "0") -> dict[str, Any]:
    return {
        "version": version,
        "id": "7e2f0000-1111-2222-3333-444455556666",
        "detail-type": detail_type,
        "source": source,
        "account": "123456789012",
        "time": "2026-01-01T00:00:00Z",
        "region": "us-west-2",
        "resources": [f"arn:aws:ec2:us-west-2:instance/{IID}"],
        "detail": detail,
    }


def test_spot_interruption_warning() -> None:
    body = envelope("EC2 Spot Instance Interruption Warning", {"instance-id": IID, "instance-action": "terminate"})
    msg = parse(json.dumps(body))
    assert msg.kind == InterruptionKind.SPOT_INTERRUPTED
    assert msg.instance_ids == (IID,)
    assert msg.time == datetime(2026, 1, 1, tzinfo=UTC)
    assert msg.event_id.startswith("7e2f") and msg.detail_type == "EC2 Spot Instance Interruption Warning"


def test_rebalance_recommendation() -> None:
    msg = parse(json.dumps(envelope("EC2 Instance Rebalance Recommendation", {"instance-id": IID})))
    assert (msg.kind, msg.instance_ids) == (InterruptionKind.REBALANCE_RECOMMENDATION, (IID,))


def health(**detail: Any) -> dict[str, Any]:
    base = {
        "eventArn": "arn:aws:health:us-west-2::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x",
        "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
        "service": "EC2",
        "eventTypeCategory": "scheduledChange",
        "startTime": "Sat, 01 Jan 2026 00:00:00 GMT",
        "endTime": "Sat, 01 Jan 2026 01:00:00 GMT",
        "eventDescription": [{"latestDescription": "retirement", "language": "en_US"}],
        "affectedEntities": [{"entityValue": IID}, {"entityValue": "i-0fedcba9876543210"}, {"entityValue": IID}],
    }
    return envelope("AWS Health Event", {**base, **detail}, source="aws.health")


def test_capacity_reservation_interruption_warning() -> None:
    """Karpenter AWS ``messages/capacityreservationinterruption``: an interruptible reservation reclaims its
    instance."""
    body = envelope("EC2 Capacity Reservation Instance Interruption Warning", {"instance-id": IID})
    msg = parse(json.dumps(body))
    assert msg.kind == InterruptionKind.CAPACITY_RESERVATION_INTERRUPTED and msg.instance_ids == (IID,)


def test_scheduled_change_lists_every_affected_instance_once() -> None:
    msg = parse(json.dumps(health()))
    assert msg.kind == InterruptionKind.SCHEDULED_CHANGE
    assert msg.instance_ids == (IID, "i-0fedcba9876543210")


@pytest.mark.parametrize(
    "detail", [{"service": "RDS"}, {"eventTypeCategory": "issue"}, {"eventTypeCategory": "accountNotification"}]
)
def test_health_events_other_than_ec2_scheduled_change_are_no_ops(detail: dict[str, Any]) -> None:
    assert parse(json.dumps(health(**detail))).kind == InterruptionKind.NO_OP


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        ("stopping", InterruptionKind.INSTANCE_STOPPED),
        ("stopped", InterruptionKind.INSTANCE_STOPPED),
        ("shutting-down", InterruptionKind.INSTANCE_TERMINATED),
        ("terminated", InterruptionKind.INSTANCE_TERMINATED),
        # karpy classifies on the lower-cased state (see the module doc)
        ("Stopping", InterruptionKind.INSTANCE_STOPPED),
        ("running", InterruptionKind.NO_OP),
        ("pending", InterruptionKind.NO_OP),
    ],
)
def test_state_change(state: str, kind: str) -> None:
    msg = parse(json.dumps(envelope("EC2 Instance State-change Notification", {"instance-id": IID, "state": state})))
    assert msg.kind == kind
    if kind != InterruptionKind.NO_OP:
        assert msg.instance_ids == (IID,) and msg.state == state.lower()


@pytest.mark.parametrize(
    "body",
    [
        envelope("EC2 Spot Instance Interruption Warning", {"instance-id": IID}, version="1"),
        envelope("EC2 Spot Instance Interruption Warning", {"instance-id": IID}, source="aws.health"),
        envelope("Some Future Event", {"instance-id": IID}),
        {"hello": "world"},
    ],
)
def test_unknown_events_are_no_ops(body: dict[str, Any]) -> None:
    msg = parse(json.dumps(body))
    assert msg.kind == InterruptionKind.NO_OP
    assert msg.instance_ids == ()
    assert msg.reason


@pytest.mark.parametrize("body", [None, "", "   ", b""])
def test_empty_body_is_a_no_op(body: str | bytes | None) -> None:
    assert parse(body).kind == InterruptionKind.NO_OP


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        b"\xff\xfe",
        "[1, 2, 3]",
        '"a string"',
        json.dumps(envelope("EC2 Spot Instance Interruption Warning", {"instance-action": "terminate"})),
        json.dumps(envelope("EC2 Spot Instance Interruption Warning", "not an object")),
        json.dumps(envelope("EC2 Instance Rebalance Recommendation", {"instance-id": 42})),
        json.dumps(envelope("EC2 Instance State-change Notification", {"state": "stopping"})),
        json.dumps(health(affectedEntities=[])),
        json.dumps(health(affectedEntities="i-1")),
    ],
)
def test_malformed_bodies_are_invalid_never_exceptions(body: str | bytes) -> None:
    msg = parse(body)
    assert msg.kind == InterruptionKind.INVALID
    assert msg.instance_ids == ()
    assert msg.reason


def test_bad_time_does_not_invalidate_a_message() -> None:
    body = envelope("EC2 Spot Instance Interruption Warning", {"instance-id": IID})
    body["time"] = "yesterday"
    msg = parse(json.dumps(body))
    assert msg.kind == InterruptionKind.SPOT_INTERRUPTED and msg.time is None
