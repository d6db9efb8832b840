"""EventBridge interruption messages → :class:`~karpy.cloudprovider.types.InterruptionMessage` (pure, no I/O).

Karpenter AWS ``pkg/controllers/interruption/parser.go`` and ``messages/*``, which route on
``(version, source, detail-type)`` and treat anything unknown as a no-op to delete. The body is an EventBridge
envelope ``{"version","id","detail-type","source","account","time","region","resources","detail"}``; only
``version``, ``source`` and ``detail-type`` route it and ``time`` feeds the latency metric. Every parser
expects ``version "0"``. Routes:

====================================================  ==============  =================================
detail-type (source)                                  detail read     kind
====================================================  ==============  =================================
EC2 Spot Instance Interruption Warning (aws.ec2)      instance-id     ``spot_interrupted``
EC2 Instance Rebalance Recommendation (aws.ec2)       instance-id     ``rebalance_recommendation``
EC2 Capacity Reservation Instance Interruption        instance-id     ``capacity_reservation_interrupted``
Warning (aws.ec2)
AWS Health Event (aws.health)                         service=EC2,    ``scheduled_change``
                                                      category=
                                                      scheduledChange,
                                                      affectedEntities
EC2 Instance State-change Notification (aws.ec2)      instance-id,    ``instance_stopped`` (stopping,
                                                      state           stopped) / ``instance_terminated``
                                                                      (shutting-down, terminated)
====================================================  ==============  =================================

Anything else that is a well-formed envelope (another version, source or detail-type, a filtered-out state
or Health event) is ``no_op``; an empty body is ``no_op`` (Karpenter); a body that is not JSON, not an
object, or a routed event missing its instance id is ``invalid``. Nothing here raises.

Deliberate difference from Karpenter: the state-change kind is chosen on the lower-cased state, so
``"Stopping"`` is ``instance_stopped`` (Karpenter compares case-sensitively and would call it terminated;
AWS only sends lower-case states, so the two agree on every real message).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from karpy.cloudprovider.types import InterruptionKind, InterruptionMessage

SOURCE_EC2: Final = "aws.ec2"
SOURCE_HEALTH: Final = "aws.health"
DETAIL_SPOT: Final = "EC2 Spot Instance Interruption Warning"
DETAIL_REBALANCE: Final = "EC2 Instance Rebalance Recommendation"
DETAIL_HEALTH: Final = "AWS Health Event"
DETAIL_STATE_CHANGE: Final = "EC2 Instance State-change Notification"
DETAIL_CAPACITY_RESERVATION: Final = "EC2 Capacity Reservation Instance Interruption Warning"
STOPPED_STATES: Final = frozenset({"stopping", "stopped"})
TERMINATED_STATES: Final = frozenset({"shutting-down", "terminated"})
CLIP: Final = 100  # characters of a message field quoted in a reason


def parse(body: str | bytes | None) -> InterruptionMessage:
    """Parse one SQS message body (see the module docstring for the routes). Never raises."""
    if body is None or not body.strip():
        return InterruptionMessage(kind=InterruptionKind.NO_OP, reason="empty body")
    try:
        envelope = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        return InterruptionMessage(kind=InterruptionKind.INVALID, reason=f"not JSON: {err}"[:200])
    if not isinstance(envelope, dict):
        return InterruptionMessage(
            kind=InterruptionKind.INVALID, reason=f"not a JSON object but {type(envelope).__name__}"
        )
    return _route(envelope)


def _route(envelope: Mapping[str, Any]) -> InterruptionMessage:
    version = _text(envelope.get("version"))
    source = _text(envelope.get("source"))
    detail_type = _text(envelope.get("detail-type"))
    base: dict[str, Any] = {
        "detail_type": detail_type,
        "event_id": _text(envelope.get("id")),
        "time": _time(envelope.get("time")),
    }
    detail = envelope.get("detail")
    known = (source, detail_type) in _PARSERS
    if not known or version != "0":
        why = f"unhandled event version={_clip(version)!r} source={_clip(source)!r} detail-type={_clip(detail_type)!r}"
        return InterruptionMessage(kind=InterruptionKind.NO_OP, reason=why, **base)
    if not isinstance(detail, dict):
        return InterruptionMessage(
            kind=InterruptionKind.INVALID, reason=f"{detail_type}: detail is not an object", **base
        )
    return _PARSERS[(source, detail_type)](detail, base)


Parser = Callable[[Mapping[str, Any], Mapping[str, Any]], InterruptionMessage]


def _instance_event(kind: InterruptionKind) -> Parser:
    def parse_detail(detail: Mapping[str, Any], base: Mapping[str, Any]) -> InterruptionMessage:
        instance_id = _text(detail.get("instance-id"))
        if not instance_id:
            return InterruptionMessage(
                kind=InterruptionKind.INVALID, reason=f"{base['detail_type']}: no instance-id", **base
            )
        return InterruptionMessage(kind=kind, instance_ids=(instance_id,), **base)

    return parse_detail


def _state_change(detail: Mapping[str, Any], base: Mapping[str, Any]) -> InterruptionMessage:
    instance_id = _text(detail.get("instance-id"))
    state = _text(detail.get("state")).lower()
    if not instance_id:
        return InterruptionMessage(
            kind=InterruptionKind.INVALID, reason=f"{base['detail_type']}: no instance-id", **base
        )
    if state in STOPPED_STATES:
        kind = InterruptionKind.INSTANCE_STOPPED
    elif state in TERMINATED_STATES:
        kind = InterruptionKind.INSTANCE_TERMINATED
    else:
        return InterruptionMessage(
            kind=InterruptionKind.NO_OP,
            instance_ids=(instance_id,),
            state=state,
            reason=f"state {_clip(state)!r} not acted on",
            **base,
        )
    return InterruptionMessage(kind=kind, instance_ids=(instance_id,), state=state, **base)


def _health(detail: Mapping[str, Any], base: Mapping[str, Any]) -> InterruptionMessage:
    service = _text(detail.get("service"))
    category = _text(detail.get("eventTypeCategory"))
    if service != "EC2" or category != "scheduledChange":
        why = f"health event service={_clip(service)!r} category={_clip(category)!r} not acted on"
        return InterruptionMessage(kind=InterruptionKind.NO_OP, reason=why, **base)
    entities = detail.get("affectedEntities")
    ids: list[str] = []
    for entity in entities if isinstance(entities, list) else []:
        value = _text(entity.get("entityValue")) if isinstance(entity, dict) else ""
        if value and value not in ids:
            ids.append(value)
    if not ids:
        return InterruptionMessage(
            kind=InterruptionKind.INVALID, reason="scheduled change without affected entities", **base
        )
    return InterruptionMessage(kind=InterruptionKind.SCHEDULED_CHANGE, instance_ids=tuple(ids), **base)


_PARSERS: Final[dict[tuple[str, str], Parser]] = {
    (SOURCE_EC2, DETAIL_SPOT): _instance_event(InterruptionKind.SPOT_INTERRUPTED),
    (SOURCE_EC2, DETAIL_REBALANCE): _instance_event(InterruptionKind.REBALANCE_RECOMMENDATION),
    (SOURCE_HEALTH, DETAIL_HEALTH): _health,
    (SOURCE_EC2, DETAIL_STATE_CHANGE): _state_change,
    # Karpenter AWS messages/capacityreservationinterruption: an interruptible reservation is being reclaimed.
    (SOURCE_EC2, DETAIL_CAPACITY_RESERVATION): _instance_event(InterruptionKind.CAPACITY_RESERVATION_INTERRUPTED),
}


def _clip(text: str, limit: int = CLIP) -> str:
    """``text`` cut to ``limit`` characters (a field of an unknown event can be the whole 256 KB body)."""
    return text if len(text) <= limit else text[:limit] + "…"


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _time(value: Any) -> datetime | None:
    """RFC 3339 ``time`` of the envelope as aware UTC; None when absent or malformed."""
    text = _text(value)
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(UTC) if parsed.tzinfo else parsed.replace(tzinfo=UTC)
