"""The informer's reconnects (client-go ``tools/cache/reflector.go``): a failed watch is retried after the runtime's
exponential backoff, waited on an injected clock, from the last resourceVersion."""

from __future__ import annotations

import asyncio

from karpy.kube.errors import ApiError
from karpy.kube.fake import FakeKube
from karpy.kube.resources import NODES
from karpy.kube.watch import Informer
from karpy.runtime.backoff import Backoff
from karpy.runtime.clock import FakeClock, settle

JSON = dict


class Sink:
    """Records what the informer delivers."""

    def __init__(self) -> None:
        self.lists: list[list[str]] = []
        self.events: list[tuple[str, str]] = []

    def replace(self, kind: str, items: list[JSON], resource_version: str = "") -> None:
        self.lists.append([i["metadata"]["name"] for i in items])

    def apply(self, kind: str, event_type: str, obj: JSON) -> None:
        self.events.append((event_type, obj["metadata"]["name"]))


async def test_failed_watches_are_retried_after_a_doubling_backoff() -> None:
    clock = FakeClock()
    kube = FakeKube([{"kind": "Node", "metadata": {"name": "n1"}}])
    kube.fail("watch", ApiError(500, "InternalError", "etcd unavailable"), times=2)
    sink = Sink()
    informer = Informer(kube, NODES, sink, backoff=Backoff(0.2, 30.0, jitter=0.0), clock=clock)

    def watches() -> list[str]:
        return [str(r.query["resourceVersion"]) for r in kube.requests if r.query.get("watch")]

    task = asyncio.create_task(informer.run())
    try:
        await settle()
        assert sink.lists == [["n1"]] and watches() == ["1"], "listed, then the first watch failed"
        assert clock.pending == 1, "waiting out the backoff"
        await clock.advance(0.19)
        assert len(watches()) == 1
        await clock.advance(0.01)
        assert len(watches()) == 2, "retried after 0.2 s; failed again"
        await clock.advance(0.39)
        assert len(watches()) == 2
        await clock.advance(0.01)
        assert watches() == ["1", "1", "1"], "retried after 0.4 s, from the list's resourceVersion, without a LIST"
        assert sink.lists == [["n1"]]
        await kube.create(NODES, {"metadata": {"name": "n2"}})
        await settle()
        assert sink.events == [("ADDED", "n2")], "the third watch streams"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
