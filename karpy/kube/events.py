"""Kubernetes Events, de-duplicated for 2 minutes on (object, reason, message) as Karpenter's recorder does."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from karpy.kube.client import KubeClient
from karpy.kube.resources import EVENTS

log = structlog.get_logger("karpy.events")
DEDUPE_SECONDS = 120.0
NORMAL = "Normal"
WARNING = "Warning"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class EventRecorder:
    """Publishes core/v1 Events; cluster-scoped objects' events go to namespace ``default`` (as kubectl shows)."""

    def __init__(self, client: KubeClient, component: str = "karpy") -> None:
        self.client = client
        self.component = component
        self._seen: dict[tuple[str, str, str], float] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def publish(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record an event about ``obj`` (its JSON: apiVersion, kind, metadata) without waiting."""
        meta = obj.get("metadata") or {}
        key = (str(meta.get("uid") or meta.get("name")), reason, message)
        now = time.monotonic()
        if now - self._seen.get(key, -1e9) < DEDUPE_SECONDS:
            return
        self._seen[key] = now
        if len(self._seen) > 10000:  # bound memory: forget entries past the dedupe window
            self._seen = {k: t for k, t in self._seen.items() if now - t < DEDUPE_SECONDS}
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
