"""Kubernetes Events with Karpenter's de-duplication and rate limits (core ``pkg/events/recorder.go``).

:meth:`EventRecorder.record` publishes :class:`Event` values as Karpenter's ``Recorder.Publish`` does: an event
with ``dedupe_values`` is dropped while one with the same key — its lower-cased reason and those values, usually
the object's UID (not its message) — was published within ``dedupe_timeout`` seconds (2 minutes unless the
event says otherwise); then an event with a ``rate_limiter`` is dropped when the shared token bucket is empty
(client-go ``flowcontrol.NewTokenBucketRateLimiter``). Events without ``dedupe_values`` are never de-duplicated.
:meth:`EventRecorder.publish` (karpy's own events) records one such event keyed on the object and its message.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs
import structlog

from karpy.kube.client import KubeClient
from karpy.kube.resources import EVENTS

log = structlog.get_logger("karpy.events")
DEDUPE_SECONDS = 120.0
NORMAL = "Normal"
WARNING = "Warning"


class TokenBucket:
    """client-go's token-bucket rate limiter (``flowcontrol.NewTokenBucketRateLimiter(qps, burst)``): starts
    full with ``burst`` tokens, refills ``qps`` tokens per second; ``clock`` gives seconds (monotonic)."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.qps = qps
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def try_accept(self) -> bool:
        """Take one token if there is one (``TryAccept``); False when the bucket is empty."""
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.qps)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


@attrs.frozen
class Event:
    """One event as Karpenter builds it (core ``pkg/events/recorder.go`` ``Event``).

    Attributes:
        involved: the object's reference JSON (apiVersion, kind, metadata with name, namespace, uid).
        type: ``Normal`` or ``Warning``.
        reason / message: as ``kubectl describe`` shows them.
        dedupe_values: the de-duplication key after the reason (usually the object's UID); empty: never deduped.
        dedupe_timeout: seconds a same-key event is suppressed (Karpenter's default: 2 minutes).
        rate_limiter: a bucket shared by all events of a kind (Nominated, InsufficientCapacityError on pods).
    """

    involved: Mapping[str, Any]
    type: str
    reason: str
    message: str
    dedupe_values: tuple[str, ...] = ()
    dedupe_timeout: float = DEDUPE_SECONDS
    rate_limiter: TokenBucket | None = attrs.field(default=None, eq=False)

    def dedupe_key(self) -> str:
        """Karpenter's ``dedupeKey``: ``<lower-case reason>-<values joined by ->``."""
        return f"{self.reason.lower()}-{'-'.join(self.dedupe_values)}"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Publishes core/v1 Events; cluster-scoped objects' events go to namespace ``default`` (as kubectl shows)."""

    def __init__(
        self, client: KubeClient, component: str = "karpy", *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.client = client
        self.component = component
        self.clock = clock
        self._until: dict[str, float] = {}  # Karpenter dedupe key → monotonic time its suppression ends
        self._tasks: set[asyncio.Task[None]] = set()

    def record(self, *events: Event) -> None:
        """Publish ``events`` as Karpenter's ``Recorder.Publish`` does (see the module docstring)."""
        for event in events:
            if event.dedupe_values and not self._first_within(event.dedupe_key(), event.dedupe_timeout):
                continue
            if event.rate_limiter is not None and not event.rate_limiter.try_accept():
                continue
            self._post(event.involved, event.type, event.reason, event.message)

    def _first_within(self, key: str, timeout: float) -> bool:
        """False while ``key`` is suppressed; else remember it for ``timeout`` seconds (go-cache ``Set``)."""
        now = self.clock()
        if self._until.get(key, -1e18) > now:
            return False
        self._until[key] = now + timeout
        if len(self._until) > 10000:  # bound memory: forget expired keys
            self._until = {k: t for k, t in self._until.items() if t > now}
        return True

    def publish(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (its JSON: apiVersion, kind, metadata) without waiting: one
        :meth:`record` of an :class:`Event` de-duplicated for 2 minutes on its reason, the object's UID (its name
        when it has none) and the message."""
        meta = obj.get("metadata") or {}
        ident = str(meta.get("uid") or meta.get("name"))
        self.record(Event(obj, event_type, reason, message, dedupe_values=(ident, message)))

    def _post(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        task = asyncio.get_running_loop().create_task(self._create(obj, event_type, reason, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self) -> None:
        """Wait until every Event published so far has been posted (or failed): shutdown and tests."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _create(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        stamp = _now()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": meta.get("name", ""),
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "eventTime": None,
            "count": 1,
        }
        try:
            await self.client.create(EVENTS, body, namespace)
        except Exception as err:  # events are best effort
            log.debug("event not recorded", reason=reason, error=str(err))
