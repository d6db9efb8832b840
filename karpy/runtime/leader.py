"""Leader election on a ``coordination.k8s.io/v1`` Lease, as Karpenter runs it (controller-runtime's manager over
client-go's ``tools/leaderelection``), with karpy's write fence (:mod:`karpy.runtime.fence`).

What is followed, and from where:

* The lock is one Lease (``LEADER_ELECTION_NAME`` in ``LEADER_ELECTION_NAMESPACE``), written with
  ``resourceVersion``-guarded PUTs (client-go ``resourcelock/leaselock.go``). Its spec carries ``holderIdentity``,
  ``leaseDurationSeconds``, ``acquireTime``/``renewTime`` (MicroTime) and ``leaseTransitions``.
* Durations are controller-runtime's defaults, which Karpenter keeps: lease 15 s, renew deadline 10 s, retry
  period 2 s (``pkg/manager/internal.go``); client-go requires ``renew_deadline > 1.2 × retry_period`` and
  ``lease_duration > renew_deadline`` (``leaderelection.go`` ``NewLeaderElector``).
* ``tryAcquireOrRenew`` (client-go ``leaderelection.go``): GET (create on 404); a record that changed since the
  last look restarts ``observed_at``; another holder's lease is respected until ``observed_at +
  leaseDurationSeconds``; taking it over sets ``acquireTime`` and adds one to ``leaseTransitions``; renewing keeps
  both. The renew fast path is an optimistic PUT on the last record (``leader_election_slowpath_total`` counts
  the times it had to fall back to GET + PUT).
* Acquire is watch-driven (an improvement over client-go's 2–4.4 s polling, which keeps running as a fallback):
  a standby watches its one Lease (``fieldSelector=metadata.name=<name>``, which needs only ``get``/``watch`` as
  Karpenter's Role grants), restarts ``observed_at`` on every change, and tries exactly when the observed lease
  expires, or at once when it was released. After a leader dies, the standby takes over ``last renew + 15 s``.
* Leadership is lost when renewals keep failing until the renew deadline: the fence is revoked first (synchronously,
  so no write passes after that instant), then :attr:`LeaderElector.lost` is set and ``leader election lost`` is
  logged; the operator exits with code 1 as controller-runtime's manager does (``OnStoppedLeading``). No renew is
  ever sent once the fence's deadline has passed: a leader that was paused (SIGSTOP) past it does not even write
  its Lease when it runs again.
* ``release()`` (``ReleaseOnCancel``, as Karpenter sets it): on a clean shutdown the Lease is rewritten with an
  empty holder and ``leaseDurationSeconds: 1``, keeping ``leaseTransitions``, so a standby takes over at once.
* Events on the Lease: Normal, reason ``LeaderElection``, ``"<identity> became leader"`` and, on release,
  ``"<identity> stopped leading"`` (client-go ``LeaseLock.RecordEvent``). On a *loss* karpy posts no Event:
  the process no longer holds the lease, and it makes no write at all once its fence is closed.
* Metrics ``leader_election_master_status{name}`` (1 while leading) and ``leader_election_slowpath_total{name}``
  (client-go ``leaderelection/metrics.go``).

Fencing: every successful acquire or renew grants the fence until ``attempt_start + renew_deadline``, where
``attempt_start`` is the monotonic time taken before the request was sent. A standby that saw that write respects
the lease until at least ``its observe time + lease_duration`` ≥ ``attempt_start + lease_duration``, which leaves
``lease_duration - renew_deadline`` (5 s) for a write that passed the fence to land.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import attrs
import structlog
from prometheus_client import Counter, Gauge

from karpy.apis.meta import JSON
from karpy.runtime.clock import Clock, Timer
from karpy.runtime.fence import Fence

log = structlog.get_logger("karpy.leader")

JITTER_FACTOR = 1.2
"""client-go's ``JitterFactor``: the acquire poll waits ``retry_period × [1, 2.2)``; ``renew_deadline`` must exceed
``JITTER_FACTOR × retry_period``."""
REASON = "LeaderElection"
WATCH_TIMEOUT_SECONDS = 300
"""Server-side timeout of one Lease watch; it is simply re-opened."""

MASTER_STATUS = Gauge(
    "leader_election_master_status",
    "1 while this process leads the named lease, 0 otherwise (client-go leaderelection metrics).",
    ["name"],
)
SLOWPATH = Counter(
    "leader_election_slowpath_total",
    "Renewals that could not take the optimistic fast path and re-read the lease first (client-go).",
    ["name"],
)


LEASE_API_VERSION = "coordination.k8s.io/v1"
NORMAL = "Normal"


class LeaseClient(Protocol):
    """What the elector needs of :class:`karpy.kube.client.KubeClient` (the runtime layer does not import the
    kube layer): one request, raising an error with an HTTP ``status`` on a non-2xx answer, and a watch stream."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60.0,
    ) -> JSON: ...

    def stream_lines(self, path: str, query: Mapping[str, Any], *, read_timeout: float) -> AsyncIterator[bytes]: ...

    async def close(self) -> None: ...


class EventSink(Protocol):
    """Where the ``LeaderElection`` Events go (:class:`karpy.kube.events.EventRecorder` on the election client)."""

    def publish(self, obj: Mapping[str, Any], event_type: str, reason: str, message: str) -> None: ...

    async def flush(self) -> None: ...


def _status(err: Exception) -> int:
    """The HTTP status of an API error (``ApiError.status``); 0 for anything else (a timeout, a reset)."""
    status = getattr(err, "status", 0)
    return status if isinstance(status, int) else 0


def lease_path(namespace: str, name: str = "") -> str:
    """The REST path of the Leases in ``namespace`` (of one Lease when ``name`` is given)."""
    path = f"/apis/{LEASE_API_VERSION}/namespaces/{namespace}/leases"
    return f"{path}/{name}" if name else path


class LeaderElectionLost(Exception):
    """Leadership was lost (renewals failed until the renew deadline): the process must exit (code 1) without a
    graceful drain and without releasing the lease, as controller-runtime's manager does."""

    def __init__(self, identity: str, name: str) -> None:
        self.identity = identity
        self.name = name
        super().__init__(f"leader election lost: {identity} no longer holds lease {name}")


def new_identity() -> str:
    """``<hostname>_<uuid>``, as controller-runtime builds it (``pkg/leaderelection/leader_election.go``); in a pod
    the hostname is the pod name."""
    return f"{socket.gethostname()}_{uuid.uuid4()}"


@attrs.frozen(slots=True)
class LeaseConfig:
    """Which Lease, who we are, and the durations (seconds).

    Raises:
        ValueError: ``renew_deadline <= 1.2 × retry_period``, ``lease_duration <= renew_deadline``, a duration
            that is not positive, or an empty name/namespace/identity (client-go ``NewLeaderElector``).
    """

    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __attrs_post_init__(self) -> None:
        if not self.name or not self.namespace or not self.identity:
            raise ValueError("leader election needs a lease name, a namespace and an identity")
        if min(self.lease_duration, self.renew_deadline, self.retry_period) <= 0:
            raise ValueError("leader election durations must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError(
                f"lease duration ({self.lease_duration}s) must be greater than renew deadline ({self.renew_deadline}s)"
            )
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError(
                f"renew deadline ({self.renew_deadline}s) must be greater than "
                f"{JITTER_FACTOR} × retry period ({self.retry_period}s)"
            )

    @property
    def request_timeout(self) -> float:
        """Per-request timeout of the election client: ``max(renew_deadline / 2, 1 s)`` (controller-runtime)."""
        return max(self.renew_deadline / 2, 1.0)


def micro_time(moment: datetime) -> str:
    """Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.frozen(slots=True)
class LeaseRecord:
    """A Lease's spec, as client-go's ``LeaderElectionRecord``. ``lease_duration`` is whole seconds."""

    holder: str = ""
    lease_duration: int = 0
    acquire_time: str | None = None
    renew_time: str | None = None
    transitions: int = 0

    @classmethod
    def from_lease(cls, lease: JSON) -> LeaseRecord:
        """The record of a Lease object (missing fields: zero values)."""
        spec = lease.get("spec") or {}
        return cls(
            holder=str(spec.get("holderIdentity") or ""),
            lease_duration=int(spec.get("leaseDurationSeconds") or 0),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
            transitions=int(spec.get("leaseTransitions") or 0),
        )

    def spec(self) -> JSON:
        """The Lease spec for this record."""
        spec: JSON = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.lease_duration,
            "leaseTransitions": self.transitions,
        }
        if self.acquire_time is not None:
            spec["acquireTime"] = self.acquire_time
        if self.renew_time is not None:
            spec["renewTime"] = self.renew_time
        return spec


class LeaseLock:
    """The Lease ``name`` in ``namespace`` (client-go ``resourcelock.LeaseLock``): get, create, guarded update.

    Every call has the per-request ``timeout`` (seconds). Errors are the client's (``ApiError``: 404 on get when
    missing, 409 on create/update when someone else wrote first).
    """

    def __init__(self, client: LeaseClient, namespace: str, name: str, *, timeout: float = 5.0) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.timeout = timeout

    async def get(self) -> JSON:
        """The Lease object."""
        return await self.client.request("GET", lease_path(self.namespace, self.name), timeout=self.timeout)

    async def create(self, record: LeaseRecord) -> JSON:
        """Create the Lease with ``record``."""
        body = {
            "apiVersion": LEASE_API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": record.spec(),
        }
        return await self.client.request("POST", lease_path(self.namespace), body=body, timeout=self.timeout)

    async def update(self, current: JSON, record: LeaseRecord) -> JSON:
        """PUT ``record`` over ``current`` (its ``resourceVersion`` guards the write: 409 when it changed)."""
        body = {**current, "spec": record.spec()}
        body.setdefault("apiVersion", LEASE_API_VERSION)
        body.setdefault("kind", "Lease")
        return await self.client.request("PUT", lease_path(self.namespace, self.name), body=body, timeout=self.timeout)

    def watch(self, resource_version: str, *, read_timeout: float) -> AsyncIterator[bytes]:
        """Watch this one Lease from ``resource_version`` (lines of JSON watch events)."""
        query = {
            "watch": 1,
            "fieldSelector": f"metadata.name={self.name}",
            "resourceVersion": resource_version,
            "timeoutSeconds": WATCH_TIMEOUT_SECONDS,
            "allowWatchBookmarks": "true",
        }
        return self.client.stream_lines(lease_path(self.namespace), query, read_timeout=read_timeout)


class MonotonicClock(Clock):
    """``time.monotonic()`` with event-loop timers: the fence and the elector must read the *current* time (an
    event loop may cache its time for a whole iteration), and it keeps running while the process is stopped."""

    def now(self) -> float:
        return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], None]) -> Timer:
        return asyncio.get_running_loop().call_later(max(0.0, when - time.monotonic()), callback)


def _resource_version(obj: JSON) -> int:
    """The object's resourceVersion as a number (opaque to clients, numeric on etcd; 0 when not a number)."""
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else 0


class LeaseFence(Fence):
    """The fence of the election client's own writes (its Lease and its Events): open while campaigning (a
    candidate must be able to acquire), and once elected exactly as long as the leader's fence holds, plus the
    release itself within the last grant. So a leader that was stopped past its deadline does not even renew: the
    election client checks right before sending, after its rate limiter's wait (:class:`KubeClient`'s fence)."""

    def __init__(self, elector: LeaderElector) -> None:
        super().__init__(elector.identity, elector.clock.now)
        self._elector = elector

    def holds(self) -> bool:
        elector = self._elector
        if not elector.elected.is_set():
            return True
        return self._clock() < max(elector.fence.deadline, elector.release_until)


class LeaderElector:
    """Campaigns for the Lease, then renews it until lost or released.

    ``elected`` is set once this process leads; ``lost`` once it lost the lease (the fence is revoked before
    ``lost`` is set). :meth:`run` returns when leadership is lost; cancel it to stop (then :meth:`release`).

    Args:
        client: the election client: its own rate limiter and connection pool, so a scale-up's throttling on the
            main client cannot starve renewals (Karpenter ``pkg/operator/operator.go``).
        config: the Lease and the durations.
        clock: monotonic time and timers (:class:`MonotonicClock` in production; a ``FakeClock`` in tests).
        wall: the wall clock for the Lease's ``acquireTime``/``renewTime``.
        fence: the fence to grant and revoke (default: a new one on ``clock``).
        events: where the ``LeaderElection`` Events go (an ``EventRecorder`` on ``client``).
    """

    def __init__(
        self,
        client: LeaseClient,
        config: LeaseConfig,
        *,
        events: EventSink,
        clock: Clock | None = None,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        fence: Fence | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.clock: Clock = clock or MonotonicClock()
        self.wall = wall
        self.fence = fence or Fence(config.identity, self.clock.now)
        self.events = events
        self.lock = LeaseLock(client, config.namespace, config.name, timeout=config.request_timeout)
        self.elected = asyncio.Event()
        self.lost = asyncio.Event()
        self.leader = ""
        """The holder last observed ("" when none)."""
        self._rng = rng or random.Random()
        self._lease: JSON | None = None  # the Lease as last read or written
        self._record: LeaseRecord | None = None
        self._observed_at = -math.inf
        self._changed = asyncio.Event()  # the watch saw the Lease change
        self._read = asyncio.Event()  # a Lease was read or written
        self._released = False
        self._last_try = -math.inf  # when the last acquire attempt started
        self.release_until = -math.inf
        """While releasing: the last grant's deadline, until which the release may still be written."""
        self.lease_fence = LeaseFence(self)
        """The fence for the election client's own writes (:class:`LeaseFence`)."""

    @property
    def identity(self) -> str:
        """This process's identity."""
        return self.config.identity

    # --- the campaign ---------------------------------------------------------------------------------------

    async def run(self) -> None:
        """Acquire, then renew until leadership is lost (returns; ``lost`` is set) or the task is cancelled."""
        MASTER_STATUS.labels(self.config.name).set(0)
        log.info(
            "attempting to acquire leader lease",
            identity=self.identity,
            lease=f"{self.config.namespace}/{self.config.name}",
        )
        await self._acquire()
        self.elected.set()
        MASTER_STATUS.labels(self.config.name).set(1)
        log.info("successfully acquired lease", identity=self.identity, lease=self.config.name)
        self._event(f"{self.identity} became leader")
        await self._renew()
        self._lose()

    async def _acquire(self) -> None:
        watch = asyncio.get_running_loop().create_task(self._watch(), name="leader-election/watch")
        try:
            while True:
                if await self._bounded(self._try_acquire_or_renew()):
                    return
                await self._wait_for_chance()
        finally:
            watch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await watch

    async def _wait_for_chance(self) -> None:
        """Until the observed lease expires, it changes (the watch), or the jittered retry period passed."""
        retry = self.config.retry_period
        delay = retry * (1 + self._rng.random() * JITTER_FACTOR)
        record = self._record
        if record is not None and record.holder != self.identity:
            # A released lease (no holder) may be taken at once; a held one once it expires as observed. Only
            # once per expiry: after a failed try (an error, a lost race) the jittered retry period applies.
            expires = self._observed_at + (record.lease_duration if record.holder else 0)
            if expires > self._last_try:
                delay = min(delay, expires - self.clock.now())
        self._changed.clear()
        await self.clock.wait_event(self._changed, max(delay, 0.0))

    async def _watch(self) -> None:
        """Follow the Lease so ``observed_at`` restarts the moment it is renewed, and the expiry is tried exactly."""
        while True:
            try:
                if self._lease is None:
                    await self._read.wait()  # the first GET (or one after a 410) gives the resourceVersion
                    self._read.clear()
                    continue
                rv = str((self._lease.get("metadata") or {}).get("resourceVersion") or "")
                read_timeout = WATCH_TIMEOUT_SECONDS + 30.0
                async for line in self.lock.watch(rv, read_timeout=read_timeout):
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    kind = event.get("type")
                    if kind == "ERROR":
                        self._lease = None  # re-read by the next poll (410 Gone: too old)
                        break
                    if kind in ("ADDED", "MODIFIED") and (obj.get("metadata") or {}).get("name") == self.config.name:
                        self._observe(obj)
                        self._changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as err:  # the poll keeps going; re-open the watch after a retry period
                log.debug("lease watch failed", error=str(err))
                await self.clock.sleep(self.config.retry_period)

    def _observe(self, lease: JSON) -> None:
        """Remember the Lease; a changed record restarts ``observed_at`` (client-go ``observedTime``)."""
        if self._lease is not None and _resource_version(lease) < _resource_version(self._lease):
            return  # an older watch event arriving after a fresher read
        record = LeaseRecord.from_lease(lease)
        if record != self._record:
            self._observed_at = self.clock.now()
            self._record = record
        self._lease = lease
        if record.holder != self.leader and record.holder and record.holder != self.identity:
            log.info("new leader observed", leader=record.holder, identity=self.identity)  # client-go's log line
        self.leader = record.holder
        self._read.set()

    async def _try_acquire_or_renew(self) -> bool:
        """One client-go ``tryAcquireOrRenew`` (slow path: GET first). True when this process holds the lease."""
        start = self._last_try = self.clock.now()
        try:
            lease = await self.lock.get()
        except Exception as err:
            if _status(err) != 404:
                log.debug("lease get failed", error=str(err))
                return False
            return await self._create(start)
        self._observe(lease)
        record = self._record
        assert record is not None
        now = self.clock.now()
        if record.holder and record.holder != self.identity and self._observed_at + record.lease_duration > now:
            return False
        return await self._write(lease, self._next_record(record), start)

    async def _create(self, start: float) -> bool:
        stamp = micro_time(self.wall())
        record = LeaseRecord(self.identity, self._lease_seconds(), stamp, stamp, 0)
        if not self.fence.holds() and self.elected.is_set():
            return False
        try:
            lease = await self.lock.create(record)
        except Exception as err:
            log.debug("lease create failed", error=str(err))
            return False
        self._held(lease, start)
        return True

    def _next_record(self, old: LeaseRecord) -> LeaseRecord:
        """Our record over ``old``: renewing keeps ``acquireTime`` and the transitions, taking over adds one."""
        stamp = micro_time(self.wall())
        if old.holder == self.identity:
            return LeaseRecord(self.identity, self._lease_seconds(), old.acquire_time or stamp, stamp, old.transitions)
        return LeaseRecord(self.identity, self._lease_seconds(), stamp, stamp, old.transitions + 1)

    async def _write(self, lease: JSON, record: LeaseRecord, start: float) -> bool:
        # A leader never writes its Lease once its fence's deadline passed (e.g. it was stopped past it).
        if self.elected.is_set() and not self.fence.holds():
            return False
        try:
            written = await self.lock.update(lease, record)
        except Exception as err:
            log.debug("lease update failed", error=str(err), conflict=_status(err) == 409)
            return False
        self._held(written, start)
        return True

    def _held(self, lease: JSON, start: float) -> None:
        self._observe(lease)
        self._observed_at = self.clock.now()
        self.fence.grant(start + self.config.renew_deadline)

    def _lease_seconds(self) -> int:
        return max(1, math.ceil(self.config.lease_duration))

    # --- leading ---------------------------------------------------------------------------------------------

    async def _renew(self) -> None:
        """Renew every retry period; return once the renew deadline passed without a successful renewal."""
        while True:
            await self.clock.sleep(self.config.retry_period)
            while True:
                if not self.fence.holds():
                    return
                if await self._bounded(self._renew_once()):
                    break
                if not self.fence.holds():
                    return
                await self.clock.sleep(min(self.config.retry_period, self.fence.deadline - self.clock.now()))

    async def _renew_once(self) -> bool:
        """The optimistic fast path (PUT on the last record), else the slow path (GET, then PUT)."""
        start = self.clock.now()
        lease, record = self._lease, self._record
        if (
            lease is not None
            and record is not None
            and record.holder == self.identity
            and await self._write(lease, self._next_record(record), start)
        ):
            return True
        if not self.fence.holds():
            return False  # lapsed meanwhile: no slow path runs, so none is counted
        SLOWPATH.labels(self.config.name).inc()
        return await self._try_acquire_or_renew()

    async def _bounded(self, attempt: Awaitable[bool]) -> bool:
        """``attempt``, abandoned (False) when a leader's fence deadline passes first; no bound before election."""
        task = asyncio.ensure_future(attempt)
        try:
            if not self.elected.is_set():
                return await task
            remaining = self.fence.deadline - self.clock.now()
            expired = asyncio.Event()
            timer = self.clock.call_later(max(remaining, 0.0), expired.set)
            waiter = asyncio.ensure_future(expired.wait())
            try:
                await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
            finally:
                timer.cancel()
                waiter.cancel()
            if task.done():
                return task.result()
            return False
        finally:
            # Abandoned, or the campaign itself was cancelled (a SIGTERM): the attempt must not outlive it, or
            # a renewal could land after release() and re-grant the fence release() just revoked.
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _lose(self) -> None:
        """Leadership is lost: close the fence first (synchronously), then tell the operator."""
        self.fence.revoke()
        self.lost.set()
        MASTER_STATUS.labels(self.config.name).set(0)
        log.error("leader election lost", identity=self.identity, lease=self.config.name)

    async def release(self) -> bool:
        """Give the lease up (``ReleaseOnCancel``): holder "", ``leaseDurationSeconds: 1``, transitions kept, so a
        standby takes over at its next look. Only while this process still surely holds it (its fence): the
        ``stopped leading`` Event goes out first (bounded by the request timeout), then the fence is revoked, then
        the Lease is rewritten. Returns True when released; the fence is revoked either way. Call it after every
        leader task has stopped."""
        if self._released or not self.elected.is_set() or self.lost.is_set() or not self.fence.holds():
            self.fence.revoke()
            return False
        self._released = True
        self._event(f"{self.identity} stopped leading")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.events.flush(), self.config.request_timeout)
        # Read after the flush: the Lease as last written (its resourceVersion guards the release's PUT).
        lease, record = self._lease, self._record
        holds = self.fence.holds()
        # No other write from now on; the release itself is the last one, allowed until the last grant's deadline.
        self.release_until = self.fence.deadline if holds else -math.inf
        self.fence.revoke()
        MASTER_STATUS.labels(self.config.name).set(0)
        if lease is None or record is None or not holds:
            return False
        stamp = micro_time(self.wall())
        try:
            self._lease = await self.lock.update(lease, LeaseRecord("", 1, stamp, stamp, record.transitions))
        except Exception as err:
            log.warning("leader lease not released", identity=self.identity, error=str(err))
            return False
        finally:
            self.release_until = -math.inf
        log.info("leader lease released", identity=self.identity, lease=self.config.name)
        return True

    def _event(self, message: str) -> None:
        if self._lease is None:
            return
        self.events.publish(self._lease, NORMAL, REASON, message)


__all__ = [
    "JITTER_FACTOR",
    "MASTER_STATUS",
    "SLOWPATH",
    "LeaderElectionLost",
    "LeaderElector",
    "LeaseConfig",
    "LeaseFence",
    "LeaseLock",
    "LeaseRecord",
    "MonotonicClock",
    "micro_time",
    "new_identity",
]
