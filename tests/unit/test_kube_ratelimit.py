"""Client-side rate limiting as client-go does it: a token bucket (QPS refill, burst capacity) in front of every
request but watches; on a fake clock."""

from __future__ import annotations

import asyncio
import json

import pytest

from karpy.kube.fake import FakeKube
from karpy.kube.ratelimit import PerKindRateLimiter, TokenBucket, client_rate_limiter, resource_kind
from karpy.runtime.clock import FakeClock, settle


def test_burst_then_one_token_per_interval() -> None:
    """A full bucket serves ``burst`` requests at once; the next ones wait 1/qps more each, in arrival order."""
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, now=clock.now, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(5)] == [0.0, 0.0, 0.0, 0.5, 1.0]


async def test_refill_is_capped_at_burst() -> None:
    """Idle time refills at qps tokens per second, never beyond the burst."""
    clock = FakeClock()
    bucket = TokenBucket(2.0, 3, now=clock.now, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    await clock.advance(1.0)  # two tokens back
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.5]
    await clock.advance(60.0)
    assert [bucket.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]


def test_client_go_defaults() -> None:
    """QPS 0 and burst 0 mean client-go's defaults (5, 10); a negative QPS disables the limiter."""
    limiter = client_rate_limiter(0, 0)
    assert limiter is not None and (limiter.qps, limiter.burst) == (5.0, 10)
    limiter = client_rate_limiter(200, 300)
    assert limiter is not None and (limiter.qps, limiter.burst) == (200, 300)
    assert client_rate_limiter(-1, 0) is None
    with pytest.raises(ValueError):
        TokenBucket(0, 1)


async def test_requests_wait_for_tokens_and_watches_do_not() -> None:
    """With the bucket empty a GET waits for its token, while a watch starts at once (KubeClient's own
    ``request``/``stream_lines`` over the fake apiserver's transport)."""
    clock = FakeClock()
    nodes = [{"kind": "Node", "metadata": {"name": f"n{i}"}} for i in range(3)]
    kube = FakeKube(nodes, rate_limiter=TokenBucket(1.0, 2, now=clock.now, sleep=clock.sleep))
    kube.compact()  # a watch from resourceVersion 0 is answered at once (410 Gone) and ends
    requests = [asyncio.create_task(kube.request("GET", f"/api/v1/nodes/n{i}")) for i in range(3)]
    await settle()
    assert [t.done() for t in requests] == [True, True, False]
    lines = [line async for line in kube.stream_lines("/api/v1/pods", {"watch": "true"}, read_timeout=60)]
    assert [json.loads(line)["object"]["code"] for line in lines] == [410]
    assert kube.requests[-1].path == "/api/v1/pods"
    await clock.advance(0.99)
    assert not requests[2].done()
    await clock.advance(0.01)
    assert requests[2].done()
    sent = [r.path for r in kube.requests]
    assert sent == ["/api/v1/nodes/n0", "/api/v1/nodes/n1", "/api/v1/pods", "/api/v1/nodes/n2"]
    assert [(await t)["metadata"]["name"] for t in requests] == ["n0", "n1", "n2"]


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    """As x/time/rate's ``Reservation.Cancel``: a request cancelled while waiting returns its token, so the next
    one waits as if it had never come; a token later reservations already count on is not returned."""
    clock = FakeClock()
    bucket = TokenBucket(1.0, 1, now=clock.now, sleep=clock.sleep)
    assert bucket.reserve() == 0.0
    waiter = asyncio.create_task(bucket.wait())
    await settle()
    assert clock.pending == 1, "waiting one second for its token"
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled()
    assert bucket.reserve() == 1.0, "the cancelled waiter's token went back (2.0 otherwise)"

    first = asyncio.create_task(bucket.wait())  # its turn at +2 s
    await settle()
    assert bucket.reserve() == 3.0  # a later reservation, at +3 s
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert bucket.reserve() == 4.0, "the later reservation already counts on the cancelled token"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/api/v1/namespaces/default/pods/p/binding", ("", "v1", "pods")),
        ("/api/v1/namespaces/default/pods", ("", "v1", "pods")),
        ("/api/v1/pods", ("", "v1", "pods")),
        ("/api/v1/nodes/n", ("", "v1", "nodes")),
        ("/api/v1/namespaces/default/events", ("", "v1", "events")),
        ("/api/v1/namespaces/kube-system", ("", "v1", "namespaces")),
        ("/api/v1/namespaces/kube-system/status", ("", "v1", "namespaces")),
        ("/apis/karpenter.sh/v1/nodeclaims/c/status", ("karpenter.sh", "v1", "nodeclaims")),
        ("/apis/coordination.k8s.io/v1/namespaces/karpy/leases/l", ("coordination.k8s.io", "v1", "leases")),
        ("/version", ("", "", "")),
    ],
)
def test_resource_kind_of_a_request_path(path: str, kind: tuple[str, str, str]) -> None:
    assert resource_kind(path) == kind


async def test_per_kind_buckets_do_not_queue_bindings_behind_other_kinds() -> None:
    """Karpenter's controller-runtime client has a token bucket per GroupVersionKind: with the NodeClaim bucket
    empty, a pod Binding still goes at once; a second request of the drained kind waits its 1/qps."""
    clock = FakeClock()
    kube = FakeKube(
        [{"kind": "Node", "metadata": {"name": "n"}}],
        rate_limiter=PerKindRateLimiter(TokenBucket(1.0, 1, now=clock.now, sleep=clock.sleep)),
    )
    first = asyncio.create_task(kube.request("GET", "/apis/karpenter.sh/v1/nodeclaims"))
    second = asyncio.create_task(kube.request("GET", "/apis/karpenter.sh/v1/nodeclaims/c/status"))
    other = asyncio.create_task(kube.request("GET", "/api/v1/nodes/n"))
    await settle()
    assert [first.done(), second.done(), other.done()] == [True, False, True]
    await clock.advance(1.0)
    assert second.done()


def test_per_kind_buckets_copy_the_template() -> None:
    """Each kind's bucket has the template's qps and burst and starts full, whatever the template has spent."""
    clock = FakeClock()
    template = TokenBucket(2.0, 3, now=clock.now, sleep=clock.sleep)
    template.reserve()
    limiter = PerKindRateLimiter(template)
    pods, nodes = limiter.bucket("/api/v1/pods"), limiter.bucket("/api/v1/nodes")
    assert pods is not nodes and pods is limiter.bucket("/api/v1/namespaces/a/pods/p/binding")
    assert (limiter.qps, limiter.burst) == (pods.qps, pods.burst) == (2.0, 3)
    assert [pods.reserve() for _ in range(4)] == [0.0, 0.0, 0.0, 0.5]
