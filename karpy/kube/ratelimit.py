"""Client-side rate limiting of apiserver requests, as client-go does it (``KUBE_CLIENT_QPS``/``KUBE_CLIENT_BURST``).

client-go's REST client (``k8s.io/client-go/rest/config.go`` ``RESTClientFor``) throttles every request through
``flowcontrol.NewTokenBucketRateLimiter(qps, burst)`` (``golang.org/x/time/rate``): a bucket of ``burst``
tokens, full at start, refilled at ``qps`` tokens per second; each request takes one token or waits for it
(``Request.tryThrottle`` in ``rest/request.go``, called by ``Do``/``DoRaw``/``Stream``, so every page of a LIST
counts). Watches are not throttled ("We specifically don't want to rate limit watches", ``Request.Watch``): a
watch is one long-lived request and throttling it would delay the stream controllers depend on. A QPS of 0
means client-go's defaults (5 QPS, burst 10); a negative QPS disables the limiter.

One bucket per resource kind, as Karpenter has them: its controller-runtime client builds one REST client — and so
one token bucket of ``QPS``/``Burst`` — per GroupVersionKind (``pkg/client/apiutil`` ``RESTClientForGVK`` →
``rest.RESTClientForConfigAndClient``, which makes a limiter whenever ``config.RateLimiter`` is unset, as
Karpenter's ``operator.go`` leaves it), and its event recorder has a client of its own. So NodeClaim status
patches, Node patches, pod Bindings and events do not queue behind each other: :class:`PerKindRateLimiter`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

DEFAULT_QPS = 5.0  # client-go rest.DefaultQPS
DEFAULT_BURST = 10  # client-go rest.DefaultBurst


class TokenBucket:
    """``golang.org/x/time/rate.Limiter`` semantics for one token per request: callers reserve a token in
    arrival order (the bucket may go negative: each later caller waits one more ``1/qps`` seconds), then sleep
    until it is theirs. A waiter cancelled before its turn gives its token back, less the tokens reserved after
    it (``Reservation.CancelAt``, which ``Limiter.Wait`` calls when its context ends first).

    Args:
        qps: tokens added per second (> 0).
        burst: bucket capacity, and the tokens available at start (≥ 1).
        now: monotonic clock, seconds; sleep: waits that many seconds (both injectable for tests).
    """

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"token bucket needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self.qps = qps
        self.burst = burst
        self._now = now
        self._sleep = sleep
        self._tokens = float(burst)
        self._last: float | None = None
        self._last_event = float("-inf")  # the time the latest reservation may act (x/time/rate lastEvent)

    def fresh(self) -> TokenBucket:
        """A new, full bucket with this one's qps, burst and clock."""
        return TokenBucket(self.qps, self.burst, now=self._now, sleep=self._sleep)

    def _advance(self, now: float) -> None:
        """Refill for the time since the last update, up to ``burst``."""
        if self._last is not None:
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def reserve(self) -> float:
        """Take a token; the seconds to wait before using it (0: at once)."""
        now = self._now()
        self._advance(now)
        self._tokens -= 1.0
        delay = 0.0 if self._tokens >= 0 else -self._tokens / self.qps
        self._last_event = now + delay
        return delay

    def cancel(self, time_to_act: float) -> None:
        """Give back the token of a reservation that will not be used (``Reservation.CancelAt``): nothing once
        its time came; otherwise one token less those reserved after it (their waits stay as they are)."""
        now = self._now()
        if time_to_act < now:
            return
        restore = 1.0 - (self._last_event - time_to_act) * self.qps
        if restore <= 0:
            return
        self._advance(now)
        self._tokens = min(float(self.burst), self._tokens + restore)
        if time_to_act == self._last_event:
            previous = time_to_act - 1.0 / self.qps
            if previous >= now:
                self._last_event = previous

    async def wait(self) -> None:
        """Wait for a token (client-go ``Request.tryThrottle``); cancelled while waiting, give it back."""
        delay = self.reserve()
        if delay <= 0:
            return
        time_to_act = self._last_event
        try:
            await self._sleep(delay)
        except asyncio.CancelledError:
            self.cancel(time_to_act)
            raise


class PerKindRateLimiter:
    """A :class:`TokenBucket` per resource kind, each a fresh copy of ``template`` (its qps, burst and clock) made on
    first use (see the module docstring).

    The kind of a request is its API group, version and resource read from the path (``/api/v1/namespaces/default/
    pods/p/binding`` → ``("", "v1", "pods")``; ``/apis/karpenter.sh/v1/nodeclaims/c/status`` → ``("karpenter.sh",
    "v1", "nodeclaims")``): a subresource shares its resource's bucket, as controller-runtime's ``SubResource``
    client uses the object's REST client. Paths outside ``/api`` and ``/apis`` (``/version``) share one bucket.
    """

    def __init__(self, template: TokenBucket) -> None:
        self.qps, self.burst = template.qps, template.burst
        self._template = template
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}

    def bucket(self, path: str) -> TokenBucket:
        """The bucket of the resource kind ``path`` (an apiserver request path, no query) addresses."""
        key = resource_kind(path)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = self._template.fresh()
        return bucket

    async def wait(self, path: str) -> None:
        """Wait for a token of ``path``'s kind (:meth:`TokenBucket.wait`)."""
        await self.bucket(path).wait()


def resource_kind(path: str) -> tuple[str, str, str]:
    """(API group, version, resource) of an apiserver request path; ``("", "", "")`` outside ``/api(s)``."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return ("", "", "")
    # /namespaces/<ns>/<resource>/… is a namespaced resource; /namespaces and /namespaces/<ns>[/status] are
    # Namespaces themselves.
    if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        return (group, version, rest[2])
    return (group, version, rest[0])


def client_rate_limiter(
    qps: float,
    burst: int,
    *,
    now: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> TokenBucket | None:
    """The limiter client-go builds for ``QPS``/``Burst`` (0 → its defaults 5/10; QPS < 0 → None, unlimited); wrap
    it in :class:`PerKindRateLimiter` for one such bucket per resource kind."""
    qps = DEFAULT_QPS if qps == 0 else qps
    burst = DEFAULT_BURST if burst == 0 else burst
    if qps < 0:
        return None
    return TokenBucket(qps, burst, now=now, sleep=sleep)
