"""A thin JSON client over kubernetes-asyncio's transport.

kubernetes-asyncio gives us authentication (kubeconfig or in-cluster service account), TLS and the aiohttp
pool; we call its ``ApiClient.call_api`` with ``_preload_content=False`` and parse JSON ourselves, so no
generated model objects are built on hot paths (a 20,000-pod list stays plain dicts). Its generated API and
model classes are never imported (:mod:`karpy.kube.transport`: ~32 MiB less resident memory).
"""

from __future__ import annotations

import base64
import builtins
import contextvars
import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

import aiohttp

import karpy.metrics_runtime as runtime_metrics
from karpy.apis.meta import JSON
from karpy.kube.errors import ApiError
from karpy.kube.ratelimit import PerKindRateLimiter, TokenBucket, client_rate_limiter
from karpy.kube.resources import Resource
from karpy.kube.transport import load as load_transport
from karpy.runtime.fence import Fence

# Connections for requests; watch streams have a pool of their own (one connection each, unlimited). aiohttp speaks
# HTTP/1.1, one request per connection at a time, and under uvloop every TLS connection holds a 256 KiB read buffer:
# with kubernetes-asyncio's default pool of 100, a burst of writes (a batch's bindings and events) opened ~100
# connections, 25 MiB of the controller's peak RSS (client-go multiplexes everything on one HTTP/2 connection).
# 32 requests in flight still carry the default client rate (KUBE_CLIENT_QPS 200) at 150 ms per request; more
# requests wait in the pool's queue.
REQUEST_CONNECTIONS = 32

# The verbs that change the cluster: every one of them is fenced (a standby may only read and watch).
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# The HTTP status of the request in flight (:meth:`KubeClient._send` appends it), for client_go_request_total.
_STATUS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("karpy_kube_status", default=None)
# client-go's verb for the latency histogram (operatorpkg ``LatencyAdapter.Observe``); GET and PUT depend on the path.
_VERBS = {"POST": "CREATE", "PATCH": "PATCH", "DELETE": "DELETE"}


def request_labels(method: str, path: str) -> tuple[str, str, str, str, str]:
    """(verb, group, version, kind, subresource) of a request, as operatorpkg's ``LatencyAdapter`` derives them
    from client-go's URL template (``parsePath``): ``kind`` is the resource's plural, ``group`` "" for the core
    group; GET of a collection is ``LIST``, of one object ``GET``; POST ``CREATE``; PUT ``UPDATE``. A path outside
    ``/api`` and ``/apis`` (``/version``) gives ``("", …)``."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        group_idx = 0
    elif parts[0] == "apis":
        group_idx = 1
    else:
        return ("", "", "", "", "")
    if len(parts) < group_idx + 3:
        return ("", "", "", "", "")
    version_idx = group_idx + 1
    namespaced = parts[group_idx + 2] == "namespaces" and len(parts) > group_idx + 4
    kind_idx = version_idx + 3 if namespaced else version_idx + 1
    named = len(parts) > kind_idx + 1
    subresource = parts[kind_idx + 2] if len(parts) == kind_idx + 3 else ""
    verb = _VERBS.get(method) or ("UPDATE" if method == "PUT" else ("GET" if named else "LIST"))
    if method == "PUT" and not named:
        verb = "CREATE"
    group = "" if group_idx == 0 else parts[1]
    return (verb, group, parts[version_idx], parts[kind_idx], subresource)


def observe_request(method: str, path: str, code: str, seconds: float) -> None:
    """Count one apiserver request (``client_go_request_total{code, method}``) and, for API paths, its latency
    (``client_go_request_duration_seconds``), as client-go's ``RequestResult``/``RequestLatency`` hooks."""
    runtime_metrics.CLIENT_REQUESTS.labels(code, method).inc()
    labels = request_labels(method, path)
    if labels[0]:
        runtime_metrics.CLIENT_DURATION.labels(*labels).observe(seconds)


# kubernetes-asyncio's Configuration, ApiClient and config loaders, without its generated API and models.
_TRANSPORT = load_transport()


class KubeClient:
    """Raw JSON access to kube-apiserver.

    Build with :meth:`from_environment`; close with :meth:`close`. Every method raises :class:`ApiError` on a
    non-2xx answer. ``api`` (a kubernetes-asyncio ``ApiClient``) sends requests; ``watch_api`` (default: ``api``)
    opens the watch streams, so long-lived streams never hold the request pool's connections. With a
    ``rate_limiter`` every request but a watch first takes a token from it (client-go's client-side throttling,
    :mod:`karpy.kube.ratelimit`): from the one bucket, or from its resource kind's bucket of a
    :class:`~karpy.kube.ratelimit.PerKindRateLimiter` (as Karpenter's controller-runtime client has them).

    With a ``fence`` (:class:`karpy.runtime.fence.Fence`) every write (POST, PUT, PATCH, DELETE: creates, patches,
    replaces, deletes and subresources such as ``binding`` and ``eviction``) is checked right before it is sent and
    raises :class:`karpy.runtime.fence.NotLeader` without sending anything when the fence does not hold. Reads and
    watches are never fenced, so a standby keeps its cache warm. ``None`` means no check (a single writer, or the
    leader-election client, which must write its Lease while not yet leading).
    """

    # A class default too, so a test double that skips __init__ (karpy.kube.fake.FakeKube) is unfenced.
    fence: Fence | None = None

    def __init__(
        self,
        api: Any,
        *,
        user_agent: str = "karpy",
        rate_limiter: TokenBucket | PerKindRateLimiter | None = None,
        fence: Fence | None = None,
        watch_api: Any = None,
    ) -> None:
        self._api = api
        self._api.user_agent = user_agent
        self._watch_api = api if watch_api is None else watch_api
        self._watch_api.user_agent = user_agent
        self.rate_limiter = rate_limiter
        self.fence = fence
        self._fence_at_connection()

    def _fence_at_connection(self) -> None:
        """Check the fence again inside aiohttp, right before a write's bytes leave.

        :meth:`request` checks before the transport, but aiohttp may still wait for a free connection or open a
        new one (TCP and TLS handshakes: several event-loop turns), and it writes a body from a task of its own
        (scheduled, so another turn). A process paused in between (SIGSTOP, a stopped VM) past its lease would send
        the write when it resumes. aiohttp's trace hooks run at those points: ``on_connection_create_end`` /
        ``on_connection_reuseconn`` once the connection is in hand (a request without a body is written in the
        same turn), ``on_request_chunk_sent`` at the start of ``StreamWriter.write``, before the buffered headers
        and the first body chunk go to the socket in one synchronous write. Raising there sends nothing (for a
        body, aiohttp wraps the error in a ``ClientConnectionError``). The check reads :attr:`fence` at that
        moment, so a fence set after construction (the operator's) applies.
        """
        session = getattr(getattr(self._api, "rest_client", None), "pool_manager", None)
        if not isinstance(session, aiohttp.ClientSession):
            return

        async def on_request_start(_: Any, ctx: SimpleNamespace, params: aiohttp.TraceRequestStartParams) -> None:
            method = params.method.upper()
            ctx.fenced_action = f"{method} {params.url.path}" if method in WRITE_METHODS else ""

        async def before_send(_: Any, ctx: SimpleNamespace, __: Any) -> None:
            action = getattr(ctx, "fenced_action", "")
            if action and self.fence is not None:
                self.fence.check(action)

        trace = aiohttp.TraceConfig()
        trace.on_request_start.append(on_request_start)
        trace.on_connection_create_end.append(before_send)
        trace.on_connection_reuseconn.append(before_send)
        trace.on_request_chunk_sent.append(before_send)
        trace.freeze()
        session._trace_configs.append(trace)

    @classmethod
    async def from_environment(
        cls,
        kubeconfig: str | None = None,
        *,
        qps: float | None = None,
        burst: int = 0,
        user_agent: str = "karpy",
        fence: Fence | None = None,
    ) -> KubeClient:
        """In-cluster config when running in a pod, else ``kubeconfig`` / ``$KUBECONFIG`` / ``~/.kube/config``.

        ``qps``/``burst``: client-side rate limit as Karpenter applies ``KUBE_CLIENT_QPS``/``KUBE_CLIENT_BURST``:
        a client-go token bucket per resource kind (None: not limited, e.g. a test's admin client). ``user_agent``
        and ``fence``: as the constructor's. Requests share :data:`REQUEST_CONNECTIONS` connections; watches get a
        pool of their own.
        """
        configuration = _TRANSPORT.Configuration()
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if path is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
            _TRANSPORT.load_incluster_config(client_configuration=configuration)
        else:
            await _TRANSPORT.load_kube_config(config_file=path, client_configuration=configuration)
        bucket = None if qps is None else client_rate_limiter(qps, burst)
        limiter = None if bucket is None else PerKindRateLimiter(bucket)
        # One configuration for both pools, so a refreshed credential (exec plugin, service account token) serves
        # both; the pool size is read when each ApiClient is built. 0: no limit (aiohttp).
        configuration.connection_pool_maxsize = 0
        watch_api = _TRANSPORT.ApiClient(configuration=configuration)
        configuration.connection_pool_maxsize = REQUEST_CONNECTIONS
        api = _TRANSPORT.ApiClient(configuration=configuration)
        return cls(api, user_agent=user_agent, rate_limiter=limiter, fence=fence, watch_api=watch_api)

    @property
    def host(self) -> str:
        """The apiserver URL."""
        return str(self._api.configuration.host)

    def ca_bundle(self) -> str:
        """The base64 of the CA certificates this client trusts for the apiserver ("" when none is configured),
        as Karpenter's AWS ``operator.GetCABundle`` takes it from its REST config's CA data.

        Raises:
            OSError: the CA file the kubeconfig loader wrote cannot be read.
        """
        path = getattr(self._api.configuration, "ssl_ca_cert", None)
        if not path:
            return ""
        with open(path, "rb") as f:
            return base64.b64encode(f.read()).decode()

    async def close(self) -> None:
        """Close the connection pools."""
        await self._api.close()
        if self._watch_api is not self._api:
            await self._watch_api.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: Any = 60.0,
        api: Any = None,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        return await (self._api if api is None else api).call_api(
            path,
            method,
            query_params=list((query or {}).items()) or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=timeout,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60.0,
    ) -> JSON:
        """:meth:`_request`, counted in client-go's request families (:func:`observe_request`) with the answer's
        HTTP status, ``<error>`` when none came.

        Raises:
            ApiError: a non-2xx status.
        """
        status = _STATUS.set([])
        start = time.perf_counter()
        code = "<error>"
        try:
            answer = await self._request(
                method, path, query=query, body=body, content_type=content_type, timeout=timeout
            )
            code = str((_STATUS.get() or [201 if method == "POST" else 200])[-1])
            return answer
        except ApiError as err:
            code = str(err.status)
            raise
        finally:
            _STATUS.reset(status)
            observe_request(method, path, code, time.perf_counter() - start)

    async def _request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60.0,
    ) -> JSON:
        """One request, throttled by the rate limiter (client-go ``Request.tryThrottle``); returns the decoded
        JSON body ({} when empty).

        A write is checked against the fence after the rate limiter's wait, with no ``await`` between the check and
        the send: a write that queued behind the limiter while this process led, and whose turn comes after the
        lease was lost (or the process was paused past its renew deadline), is still refused.

        Raises:
            ApiError: a non-2xx status.
            NotLeader: a write while the fence does not hold; nothing was sent.
        """
        if isinstance(self.rate_limiter, PerKindRateLimiter):
            await self.rate_limiter.wait(path)
        elif self.rate_limiter is not None:
            await self.rate_limiter.wait()
        if self.fence is not None and method.upper() in WRITE_METHODS:
            self.fence.check(f"{method.upper()} {path}")
        return await self._send(method, path, query=query, body=body, content_type=content_type, timeout=timeout)

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = 60.0,
    ) -> JSON:
        """The transport under :meth:`request`: send, decode, raise :class:`ApiError` on a non-2xx status."""
        response = await self._call(method, path, query=query, body=body, content_type=content_type, timeout=timeout)
        status = _STATUS.get()
        if status is not None:
            status.append(response.status)
        try:
            text = await response.text()
        finally:
            response.release()
        if response.status >= 300:
            raise ApiError.from_body(response.status, text)
        return json.loads(text) if text else {}

    def stream_lines(self, path: str, query: Mapping[str, Any], *, read_timeout: float) -> AsyncIterator[bytes]:
        """A streaming GET (watch); yields one JSON line at a time. Not rate limited (client-go never throttles
        a watch: ``Request.Watch``).

        ``read_timeout`` bounds the silence between two lines (bookmarks arrive about every minute), so a
        dead connection is noticed instead of hanging forever.

        Raises:
            ApiError: the apiserver refused the watch.
            asyncio.TimeoutError: no line for ``read_timeout`` seconds.
        """
        return self._stream(path, query, read_timeout=read_timeout)

    async def _stream(self, path: str, query: Mapping[str, Any], *, read_timeout: float) -> AsyncIterator[bytes]:
        """The transport under :meth:`stream_lines`."""
        import aiohttp

        response = await self._call(
            "GET",
            path,
            query=query,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=read_timeout),
            api=self._watch_api,
        )
        runtime_metrics.CLIENT_REQUESTS.labels(str(response.status), "GET").inc()  # client-go counts watches too
        try:
            if response.status >= 300:
                raise ApiError.from_body(response.status, await response.text())
            while True:
                line = await response.content.readline()
                if not line:
                    return
                if line.strip():
                    yield line
        finally:
            response.release()

    # Convenience verbs -------------------------------------------------------------------------------

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> JSON:
        """GET one object. Raises :class:`ApiError` (404 when missing)."""
        return await self.request("GET", res.path(namespace, name))

    async def list(
        self, res: Resource, namespace: str | None = None, *, query: Mapping[str, Any] | None = None
    ) -> tuple[builtins.list[JSON], str]:
        """LIST every object (paginated by 500); returns (items, list resourceVersion)."""
        items: builtins.list[JSON] = []
        params: dict[str, Any] = {"limit": 500, **(query or {})}
        while True:
            page = await self.request("GET", res.path(namespace), query=params)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue")
            if not cont:
                return items, str(meta.get("resourceVersion", ""))
            params["continue"] = cont

    async def create(self, res: Resource, body: JSON, namespace: str | None = None) -> JSON:
        """POST an object."""
        return await self.request("POST", res.path(namespace), body=body)

    async def merge_patch(
        self,
        res: Resource,
        name: str,
        patch: JSON,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JSON:
        """JSON merge patch (RFC 7386); include ``metadata.resourceVersion`` for optimistic concurrency."""
        return await self.request("PATCH", res.path(namespace, name, subresource), body=patch, content_type=MERGE_PATCH)

    async def json_patch(
        self,
        res: Resource,
        name: str,
        ops: builtins.list[JSON],
        namespace: str | None = None,
        *,
        subresource: str | None = None,
    ) -> JSON:
        """JSON patch (RFC 6902), for list edits guarded by ``test`` operations."""
        return await self.request("PATCH", res.path(namespace, name, subresource), body=ops, content_type=JSON_PATCH)

    async def replace(self, res: Resource, name: str, body: JSON, namespace: str | None = None) -> JSON:
        """PUT; the body's resourceVersion makes it fail with 409 on a concurrent write."""
        return await self.request("PUT", res.path(namespace, name), body=body)

    async def delete(self, res: Resource, name: str, namespace: str | None = None, *, body: JSON | None = None) -> JSON:
        """DELETE; 404 raised as :class:`ApiError`."""
        return await self.request("DELETE", res.path(namespace, name), body=body)

    async def create_subresource(
        self, res: Resource, name: str, subresource: str, body: JSON, namespace: str | None = None
    ) -> JSON:
        """POST to a subresource (``binding``, ``eviction``)."""
        return await self.request("POST", res.path(namespace, name, subresource), body=body)


async def ignore_not_found(coro: Any) -> Any:
    """Await ``coro``; a 404 answer becomes ``None``."""
    try:
        return await coro
    except ApiError as err:
        if err.not_found:
            return None
        raise


__all__ = ["JSON", "ApiError", "KubeClient", "ignore_not_found"]
