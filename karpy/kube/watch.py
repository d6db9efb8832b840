"""List-then-watch on raw streams (the client-go reflector contract, without client-go).

For one resource: LIST (paginated) → hand the whole set to the sink (``replace``) → WATCH from the list's
resourceVersion with bookmarks → hand each event to the sink (``apply``). A 410 Gone (our resourceVersion was
compacted away) triggers a fresh LIST; a dropped or silent connection reconnects from the last seen
resourceVersion after the runtime's exponential backoff (:class:`~karpy.runtime.backoff.Backoff`: 0.2 s
doubling to 30 s, reset by a watch that ends normally). Source of the rules: client-go ``tools/cache/reflector.go``
and the Kubernetes API concepts page ("Efficient detection of changes", "Watch bookmarks").
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

import structlog

from karpy.apis.meta import JSON
from karpy.kube.client import KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.resources import Resource
from karpy.runtime.backoff import Backoff
from karpy.runtime.clock import Clock, LoopClock

log = structlog.get_logger("karpy.watch")


class WatchSink(Protocol):
    """Where an informer delivers objects (the cluster state)."""

    def replace(self, kind: str, items: list[JSON], resource_version: str = "") -> None:
        """The complete set as of the LIST's ``resource_version`` (objects not in it and not newer are gone)."""

    def apply(self, kind: str, event_type: str, obj: JSON) -> None:
        """One watch event: ``ADDED``, ``MODIFIED`` or ``DELETED``."""


class Informer:
    """Keeps a sink in step with one resource; ``synced`` is set after the first complete LIST.

    Args:
        client: the raw client.
        resource: what to watch.
        sink: receives the LIST and the events.
        watch_timeout: server-side ``timeoutSeconds`` of one watch call (seconds); the watch is then resumed.
        read_timeout: seconds of silence after which the connection is considered dead (bookmarks and
            the server timeout keep a healthy stream talking well within it).
        backoff: the delay before the next watch (0.2 s doubling to 30 s, ±25 % jitter by default).
        clock: where that delay is waited (the event loop's by default; a fake one in tests).
    """

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        sink: WatchSink,
        *,
        watch_timeout: int = 300,
        read_timeout: float = 330.0,
        label_selector: str | None = None,
        backoff: Backoff | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.client = client
        self.resource = resource
        self.sink = sink
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.label_selector = label_selector
        self.backoff = backoff or Backoff(0.2, 30.0, jitter=0.25)
        self.clock = clock or LoopClock()
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._log = log.bind(kind=resource.kind)

    async def run(self) -> None:
        """Run until cancelled."""
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                await self._watch()
                # The server ended the watch (timeoutSeconds): resume after the shortest delay.
                self.backoff.reset()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                if err.gone:
                    self._log.info("watch expired, re-listing", resource_version=self.resource_version)
                    need_list = True
                    continue
                self._log.warning("watch failed", error=str(err))
            except Exception as err:  # connection resets, timeouts, malformed lines
                self._log.warning("watch interrupted", error=repr(err))
            await self.clock.sleep(self.backoff.next())

    def _query(self) -> dict[str, Any]:
        return {"labelSelector": self.label_selector} if self.label_selector else {}

    async def _list(self) -> None:
        items, rv = await self.client.list(self.resource, query=self._query())
        for item in items:
            # LIST items omit kind/apiVersion; the sink and our writers expect them.
            item.setdefault("kind", self.resource.kind)
            item.setdefault("apiVersion", self.resource.api_version)
        self.sink.replace(self.resource.kind, items, rv)
        self.resource_version = rv
        if not self.synced.is_set():
            self._log.info("synced", count=len(items))
        self.synced.set()

    async def _watch(self) -> None:
        query = {
            **self._query(),
            "watch": "1",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self.watch_timeout),
        }
        async for line in self.client.stream_lines(self.resource.path(), query, read_timeout=self.read_timeout):
            event = json.loads(line)
            event_type = event.get("type")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                status = int(obj.get("code") or 500)
                raise ApiError(status, str(obj.get("reason", "")), str(obj.get("message", "")), obj)
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = rv
            if event_type == "BOOKMARK":
                continue
            self.sink.apply(self.resource.kind, str(event_type), obj)
