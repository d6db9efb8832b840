"""An in-memory apiserver behind :class:`~karpy.kube.client.KubeClient`'s transport, for unit tests.

:class:`FakeKube` *is* a ``KubeClient`` (every convenience verb — ``get``, ``list``, ``create``,
``merge_patch``, ``json_patch``, ``replace``, ``delete``, ``create_subresource`` — and ``request``'s and
``stream_lines``' client-side rate limiting run unchanged); only the transport under them (``_send`` and
``_stream``) is replaced, so it is a test double at the HTTP boundary, not a second apiserver. It follows the
apiserver where karpy depends on it:

* objects are stored per collection path (``/api/v1/pods``, ``/apis/karpenter.sh/v1/nodeclaims``), namespace
  and name; every write takes the next cluster-wide ``resourceVersion``;
* POST creates (``generateName`` honoured, 409 AlreadyExists), with ``uid``, ``creationTimestamp``,
  ``generation``; POST to ``pods/<name>/binding`` sets ``spec.nodeName`` (409 when already bound), POST to
  ``pods/<name>/eviction`` deletes the pod unless a PodDisruptionBudget selecting it has
  ``status.disruptionsAllowed`` < 1 (429 TooManyRequests, as the eviction API answers);
* PATCH merge (RFC 7386) and JSON patch (RFC 6902; a failed ``test`` is 422 Invalid), PUT; a
  ``metadata.resourceVersion`` in the body that is not the stored one is 409 Conflict; the ``status``
  subresource changes ``status`` only (the main resource, leniently, changes everything);
* DELETE of an object with finalizers sets ``deletionTimestamp`` and keeps it until a write removes the last
  finalizer; a pod bound to a node is deleted gracefully the same way (unless ``gracePeriodSeconds: 0``);
  missing objects are 404 NotFound;
* LIST honours ``labelSelector`` and ``fieldSelector`` (equality and set-based), ``limit``/``continue``;
  items of built-in kinds come without ``kind``/``apiVersion``, as the apiserver sends them;
* WATCH (``stream_lines``, never rate limited) replays the changes after ``resourceVersion`` and then follows
  new ones until cancelled (``timeoutSeconds`` is not enforced); from before :meth:`FakeKube.compact` it
  answers an ERROR event with code 410 Gone.

Every request is recorded in ``requests`` (as sent: after its rate-limiter token); Events posted by
:class:`~karpy.kube.events.EventRecorder` land in the store (``events()``); ``fail()`` injects an
:class:`ApiError` into the next matching calls; an optional ``sink`` (the cluster state) receives every change
as a watch event, synchronously.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import itertools
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from karpy.apis.meta import JSON
from karpy.kube import resources
from karpy.kube.client import JSON_PATCH, KubeClient
from karpy.kube.errors import ApiError
from karpy.kube.ratelimit import PerKindRateLimiter, TokenBucket
from karpy.kube.resources import EVENTS, PDBS, Resource
from karpy.kube.watch import WatchSink

# Custom resources: their LIST items keep kind/apiVersion (unstructured); built-in kinds' items do not.
CRD_GROUPS: Final = frozenset({"karpenter.sh", "karpenter.k8s.aws"})
_KNOWN: Final = {r.kind: r for r in vars(resources).values() if isinstance(r, Resource)}


@attrs.frozen(slots=True)
class Request:
    """One recorded request: verb, path, query parameters, body (as sent) and content type."""

    method: str
    path: str
    query: Mapping[str, Any]
    body: Any
    content_type: str


@attrs.frozen(slots=True)
class _Path:
    """A parsed REST path: ``collection`` is the prefix plus plural (``/api/v1/pods``)."""

    collection: str
    group: str
    plural: str
    namespace: str
    name: str
    subresource: str


@attrs.define(slots=True)
class _Failure:
    verb: str
    error: ApiError
    collection: str | None
    name: str | None
    subresource: str | None
    times: int | None


def _parse(path: str) -> _Path:
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    if parts[:1] == ["api"]:
        group, prefix, rest = "", "/" + "/".join(parts[:2]), parts[2:]
    elif parts[:1] == ["apis"]:
        group, prefix, rest = parts[1], "/" + "/".join(parts[:3]), parts[3:]
    else:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if not rest:
        raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    return _Path(f"{prefix}/{plural}", group, plural, namespace, name, sub)


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


def _pointer(doc: Any, pointer: str) -> tuple[Any, str]:
    """The container a JSON pointer's last token lives in, and that token (RFC 6901 unescaped)."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]
    for token in tokens[:-1]:
        doc = doc[int(token)] if isinstance(doc, list) else doc[token]
    return doc, tokens[-1]


def _json_patch(doc: JSON, ops: Iterable[Mapping[str, Any]]) -> JSON:
    """RFC 6902 on a copy of ``doc``. Raises ApiError 422 on a failed ``test`` or a missing path."""
    out = copy.deepcopy(doc)
    try:
        for op in ops:
            kind, path = op["op"], str(op["path"])
            if kind in ("move", "copy"):
                parent, token = _pointer(out, str(op["from"]))
                value = parent[int(token)] if isinstance(parent, list) else parent[token]
                if kind == "move":
                    _remove(parent, token)
                _add(out, path, copy.deepcopy(value))
            elif kind == "add":
                _add(out, path, copy.deepcopy(op["value"]))
            elif kind == "remove":
                _remove(*_pointer(out, path))
            elif kind == "replace":
                parent, token = _pointer(out, path)
                _remove(parent, token)
                _add(out, path, copy.deepcopy(op["value"]))
            elif kind == "test":
                parent, token = _pointer(out, path)
                if op["value"] is None and isinstance(parent, dict):
                    actual = parent.get(token)  # the apiserver's JSON patch: null matches a missing member
                else:
                    actual = parent[int(token)] if isinstance(parent, list) else parent[token]
                if actual != op["value"]:
                    raise ApiError(422, "Invalid", f"the test operation on {path} failed")
    except (KeyError, IndexError, ValueError, TypeError) as err:
        raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {err!r}") from err
    return out


def _add(doc: Any, path: str, value: Any) -> None:
    parent, token = _pointer(doc, path)
    if isinstance(parent, list):
        parent.insert(len(parent) if token == "-" else int(token), value)
    else:
        parent[token] = value


def _remove(parent: Any, token: str) -> None:
    if isinstance(parent, list):
        del parent[int(token)]
    else:
        del parent[token]


# --- selectors ---------------------------------------------------------------------------------------------------

_REQUIREMENT = re.compile(r"^\s*(!?)\s*([^\s!=<>,()]+)\s*(?:(==|=|!=)\s*(\S*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def _selector_terms(selector: str) -> builtins.list[tuple[str, str, builtins.list[str]]]:
    """A label/field selector string as (key, operator, values) terms; raises ApiError 400 on bad syntax."""
    terms: builtins.list[tuple[str, str, builtins.list[str]]] = []
    for part in re.split(r",(?![^()]*\))", selector):
        if not part.strip():
            continue
        match = _REQUIREMENT.match(part)
        if match is None:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
        bang, key, eq, value, set_op, values = match.groups()
        if eq:
            terms.append((key, "NotIn" if eq == "!=" else "In", [value]))
        elif set_op:
            terms.append((key, "In" if set_op == "in" else "NotIn", [v.strip() for v in values.split(",")]))
        else:
            terms.append((key, "DoesNotExist" if bang else "Exists", []))
    return terms


def _matches(terms: Iterable[tuple[str, str, builtins.list[str]]], values: Callable[[str], str | None]) -> bool:
    for key, op, wanted in terms:
        value = values(key)
        if (
            (op == "In" and value not in wanted)
            or (op == "NotIn" and value in wanted)
            or (op == "Exists" and value is None)
            or (op == "DoesNotExist" and value is not None)
        ):
            return False
    return True


def _label_selector_terms(selector: Mapping[str, Any]) -> builtins.list[tuple[str, str, builtins.list[str]]]:
    """A metav1.LabelSelector (``matchLabels`` and ``matchExpressions``) as terms."""
    terms = [(str(k), "In", [str(v)]) for k, v in (selector.get("matchLabels") or {}).items()]
    terms += [
        (str(e["key"]), str(e["operator"]), [str(v) for v in e.get("values") or ()])
        for e in selector.get("matchExpressions") or ()
    ]
    return terms


def _field(obj: JSON, path: str) -> str | None:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return None if value is None else str(value)


def _fields_of(obj: JSON) -> Callable[[str], str | None]:
    return lambda path: _field(obj, path)


class FakeKube(KubeClient):
    """An in-memory apiserver usable wherever a :class:`KubeClient` is; see the module docstring.

    Args:
        objects: objects to start with (see :meth:`seed`).
        sink: receives every change as a watch event (``sink.apply(kind, "ADDED"|"MODIFIED"|"DELETED", obj)``),
            e.g. the :class:`~karpy.state.cluster.ClusterState` under test.
        clock: the apiserver's time for ``creationTimestamp``/``deletionTimestamp`` (timezone-aware UTC).
        rate_limiter: client-side throttling of every request but watches, as on a real client.
    """

    def __init__(
        self,
        objects: Iterable[JSON] = (),
        *,
        sink: WatchSink | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        rate_limiter: TokenBucket | PerKindRateLimiter | None = None,
    ) -> None:
        # No transport: KubeClient.__init__ would build a kubernetes-asyncio ApiClient.
        self.rate_limiter = rate_limiter
        self.sink = sink
        self.clock = clock
        self.store: dict[tuple[str, str, str], JSON] = {}
        """(collection path, namespace or "", name) → the stored object."""
        self.requests: builtins.list[Request] = []
        self.bindings: builtins.list[tuple[str, str, str]] = []
        """(namespace, pod, node) of every accepted Binding."""
        self.evictions: builtins.list[tuple[str, str]] = []
        """(namespace, pod) of every accepted Eviction."""
        self._rv = 0
        self._ids = itertools.count(1)
        self._failures: builtins.list[_Failure] = []
        self._history: builtins.list[tuple[int, str, str, str, JSON]] = []
        self._compacted = 0
        self._changed = asyncio.Event()
        self.seed(*objects)

    # --- test controls -----------------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """A placeholder URL (there is no server)."""
        return "https://fake-apiserver"

    async def close(self) -> None:
        """Nothing to close."""

    def seed(self, *objects: JSON, resource: Resource | None = None) -> None:
        """Store objects as they are (no events, no sink): ``kind`` picks the resource unless ``resource`` is
        given; a missing ``resourceVersion`` is assigned, a numeric one is kept (and the counter moves past it)."""
        for obj in objects:
            res = resource or _KNOWN[obj["kind"]]
            stored = copy.deepcopy(obj)
            meta = stored.setdefault("metadata", {})
            namespace = meta.get("namespace") or ("default" if res.namespaced else "")
            if res.namespaced:
                meta["namespace"] = namespace
            rv = str(meta.get("resourceVersion") or "")
            if rv.isdigit():
                self._rv = max(self._rv, int(rv))
            else:
                meta["resourceVersion"] = self._next_rv()
            meta.setdefault("uid", self._uid())
            stored.setdefault("kind", res.kind)
            stored.setdefault("apiVersion", res.api_version)
            self.store[(res.path(), namespace, meta["name"])] = stored

    def fail(
        self,
        verb: str,
        error: ApiError,
        *,
        resource: Resource | None = None,
        name: str | None = None,
        subresource: str | None = None,
        times: int | None = 1,
    ) -> None:
        """Answer the next ``times`` matching calls (every one when None) with ``error`` instead of serving them.

        ``verb`` is Kubernetes' (``get``, ``list``, ``watch``, ``create``, ``update``, ``patch``, ``delete``);
        ``resource``/``name``/``subresource`` narrow the match (``subresource="eviction"`` for evictions).
        """
        collection = resource.path() if resource is not None else None
        self._failures.append(_Failure(verb, error, collection, name, subresource, times))

    def compact(self) -> None:
        """Forget the change history: watches from an older resourceVersion get 410 Gone."""
        self._compacted = self._rv
        self._history.clear()

    def object(self, res: Resource, name: str, namespace: str | None = None) -> JSON | None:
        """A copy of a stored object, None when absent."""
        obj = self.store.get((res.path(), self._namespace_of(res, namespace), name))
        return copy.deepcopy(obj) if obj is not None else None

    def objects(self, res: Resource, namespace: str | None = None) -> builtins.list[JSON]:
        """Copies of the stored objects of ``res`` (in ``namespace``, or all), in creation order."""
        return [
            copy.deepcopy(o)
            for (collection, ns, _), o in self.store.items()
            if collection == res.path() and (namespace is None or ns == namespace)
        ]

    def names(self, res: Resource, namespace: str | None = None) -> builtins.list[str]:
        """The names of the stored objects of ``res``, in creation order."""
        return [o["metadata"]["name"] for o in self.objects(res, namespace)]

    def events(self, reason: str | None = None, *, name: str | None = None) -> builtins.list[JSON]:
        """Events posted so far, oldest first, optionally only those with ``reason`` / about object ``name``."""
        return [
            e
            for e in self.objects(EVENTS)
            if (reason is None or e.get("reason") == reason)
            and (name is None or (e.get("involvedObject") or {}).get("name") == name)
        ]

    def remove(self, res: Resource, name: str, namespace: str | None = None) -> None:
        """Delete at once, ignoring finalizers and grace (what the kubelet or the garbage collector finishes)."""
        key = (res.path(), self._namespace_of(res, namespace), name)
        obj = self.store.pop(key, None)
        if obj is None:
            raise KeyError(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._changed_event(key, "DELETED", obj)

    def requests_to(self, method: str, res: Resource | None = None) -> builtins.list[Request]:
        """Recorded requests with ``method`` (``GET``, ``POST``, …), optionally only to ``res``'s collection."""
        return [
            r for r in self.requests if r.method == method and (res is None or _parse(r.path).collection == res.path())
        ]

    # --- transport ---------------------------------------------------------------------------------------

    async def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        raise AssertionError("FakeKube has no transport: _send() and _stream() serve everything")

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
        """Serve one request from the store. Raises :class:`ApiError` as the apiserver would answer."""
        query = dict(query or {})
        self.requests.append(Request(method, path, query, copy.deepcopy(body), content_type))
        where = _parse(path)
        if method == "GET":
            if where.name:
                self._inject("get", where)
                return copy.deepcopy(self._get(where))
            self._inject("list", where)
            return self._list(where, query)
        if method == "POST":
            self._inject("create", where)
            if where.subresource == "binding":
                return self._bind(where, body)
            if where.subresource == "eviction":
                return self._evict(where)
            return self._create(where, body)
        if method == "PATCH":
            self._inject("patch", where)
            current = self._get(where)
            updated = _json_patch(current, body) if content_type == JSON_PATCH else _merge(current, body)
            return self._update(where, current, updated)
        if method == "PUT":
            self._inject("update", where)
            return self._update(where, self._get(where), copy.deepcopy(body))
        if method == "DELETE":
            self._inject("delete", where)
            return self._delete(where, body or {})
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")

    async def _stream(self, path: str, query: Mapping[str, Any], *, read_timeout: float) -> AsyncIterator[bytes]:
        """A watch on a collection: the changes after ``query["resourceVersion"]``, then new ones as they come."""
        self.requests.append(Request("GET", path, dict(query), None, "application/json"))
        where = _parse(path)
        self._inject("watch", where)
        since = int(query.get("resourceVersion") or 0)
        terms = _selector_terms(str(query.get("labelSelector") or ""))
        if since < self._compacted:
            status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
            yield json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"
            return
        while True:
            changed = self._changed
            for rv, collection, namespace, event_type, obj in builtins.list(self._history):
                if rv <= since or collection != where.collection:
                    continue
                since = rv
                if where.namespace and namespace != where.namespace:
                    continue
                labels = (obj.get("metadata") or {}).get("labels") or {}
                if _matches(terms, labels.get):
                    yield json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
            await changed.wait()

    # --- verbs -------------------------------------------------------------------------------------------

    def _inject(self, verb: str, where: _Path) -> None:
        for failure in self._failures:
            if (
                failure.verb == verb
                and failure.collection in (None, where.collection)
                and failure.name in (None, where.name)
                and failure.subresource in (None, where.subresource)
            ):
                if failure.times is not None:
                    failure.times -= 1
                    if failure.times <= 0:
                        self._failures.remove(failure)
                raise failure.error

    def _key(self, where: _Path) -> tuple[str, str, str]:
        return (where.collection, where.namespace, where.name)

    def _get(self, where: _Path) -> JSON:
        obj = self.store.get(self._key(where))
        if obj is None:
            raise ApiError(404, "NotFound", f'{where.plural} "{where.name}" not found')
        return obj

    def _list(self, where: _Path, query: Mapping[str, Any]) -> JSON:
        labels = _selector_terms(str(query.get("labelSelector") or ""))
        fields = _selector_terms(str(query.get("fieldSelector") or ""))
        items = [
            copy.deepcopy(o)
            for (collection, namespace, _), o in self.store.items()
            if collection == where.collection
            and (not where.namespace or namespace == where.namespace)
            and _matches(labels, ((o.get("metadata") or {}).get("labels") or {}).get)
            and _matches(fields, _fields_of(o))
        ]
        kind = items[0].get("kind", "") if items else ""
        if where.group not in CRD_GROUPS:
            for item in items:
                item.pop("kind", None)
                item.pop("apiVersion", None)
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items)
        meta: JSON = {"resourceVersion": str(self._rv)}
        if start + limit < len(items):
            meta["continue"] = str(start + limit)
        return {"kind": f"{kind}List", "metadata": meta, "items": items[start : start + limit]}

    def _create(self, where: _Path, body: JSON) -> JSON:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(422, "Invalid", "name or generateName is required")
            meta["name"] = f"{meta['generateName']}{next(self._ids):05x}"
        if where.namespace:
            meta["namespace"] = where.namespace
        key = (where.collection, where.namespace, meta["name"])
        if key in self.store:
            raise ApiError(409, "AlreadyExists", f'{where.plural} "{meta["name"]}" already exists')
        meta.update(uid=self._uid(), creationTimestamp=self._now(), generation=1, resourceVersion=self._next_rv())
        known = next((r for r in _KNOWN.values() if r.path() == where.collection), None)
        if known is not None:
            obj.setdefault("kind", known.kind)
            obj.setdefault("apiVersion", known.api_version)
        self.store[key] = obj
        self._changed_event(key, "ADDED", obj)
        return copy.deepcopy(obj)

    def _update(self, where: _Path, current: JSON, updated: JSON) -> JSON:
        if where.subresource not in ("", "status"):
            raise ApiError(404, "NotFound", f"subresource {where.subresource} not supported")
        meta = updated.setdefault("metadata", {})
        want = meta.get("resourceVersion")
        if want and str(want) != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {where.plural} "{where.name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        if where.subresource == "status":
            updated = {**copy.deepcopy(current), "status": updated.get("status")}
            if updated["status"] is None:
                del updated["status"]
        meta = updated["metadata"]
        # Fields the apiserver owns survive any write.
        for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "generation"):
            if field in current["metadata"]:
                meta[field] = current["metadata"][field]
            else:
                meta.pop(field, None)
        if updated.get("spec") != current.get("spec"):
            meta["generation"] = int(current["metadata"].get("generation", 1)) + 1
        meta["resourceVersion"] = self._next_rv()
        key = self._key(where)
        if meta.get("deletionTimestamp") and current["metadata"].get("finalizers") and not meta.get("finalizers"):
            # The last finalizer is gone from an object being deleted: the apiserver deletes it now.
            del self.store[key]
            self._changed_event(key, "DELETED", updated)
        else:
            self.store[key] = updated
            self._changed_event(key, "MODIFIED", updated)
        return copy.deepcopy(updated)

    def _delete(self, where: _Path, options: Mapping[str, Any]) -> JSON:
        obj = self._get(where)
        meta = obj["metadata"]
        preconditions = options.get("preconditions") or {}
        for field in ("uid", "resourceVersion"):
            if preconditions.get(field) and preconditions[field] != meta.get(field):
                raise ApiError(409, "Conflict", f"Precondition failed: {field} mismatch")
        graceful = (
            where.plural == "pods"
            and bool((obj.get("spec") or {}).get("nodeName"))
            and options.get("gracePeriodSeconds") != 0
        )
        if meta.get("deletionTimestamp") and (meta.get("finalizers") or graceful):
            return copy.deepcopy(obj)
        key = self._key(where)
        if meta.get("finalizers") or graceful:
            meta["deletionTimestamp"] = self._now()
            grace = options.get("gracePeriodSeconds")
            spec_grace = (obj.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            meta["deletionGracePeriodSeconds"] = int(grace if grace is not None else spec_grace if graceful else 0)
            meta["resourceVersion"] = self._next_rv()
            self._changed_event(key, "MODIFIED", obj)
        else:
            del self.store[key]
            meta["resourceVersion"] = self._next_rv()
            self._changed_event(key, "DELETED", obj)
        return copy.deepcopy(obj)

    def _bind(self, where: _Path, body: JSON) -> JSON:
        pod = self._get(_Path(where.collection, where.group, where.plural, where.namespace, where.name, ""))
        node = str(((body or {}).get("target") or {}).get("name", ""))
        bound = (pod.get("spec") or {}).get("nodeName")
        if bound:
            raise ApiError(409, "Conflict", f"pod {where.name} is already assigned to node {bound!r}")
        pod.setdefault("spec", {})["nodeName"] = node
        pod["metadata"]["resourceVersion"] = self._next_rv()
        self.bindings.append((where.namespace, where.name, node))
        self._changed_event(self._key(attrs.evolve(where, subresource="")), "MODIFIED", pod)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    def _evict(self, where: _Path) -> JSON:
        pod_path = attrs.evolve(where, subresource="")
        pod = self._get(pod_path)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        for pdb in self.objects(PDBS, where.namespace):
            terms = _label_selector_terms((pdb.get("spec") or {}).get("selector") or {})
            if not _matches(terms, labels.get):
                continue
            allowed = int((pdb.get("status") or {}).get("disruptionsAllowed", 0))
            if allowed < 1:
                raise ApiError(
                    429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."
                )
            pdb_key = (PDBS.path(), where.namespace, pdb["metadata"]["name"])
            self.store[pdb_key].setdefault("status", {})["disruptionsAllowed"] = allowed - 1
        self.evictions.append((where.namespace, where.name))
        self._delete(pod_path, {})
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}

    # --- bookkeeping -------------------------------------------------------------------------------------

    def _namespace_of(self, res: Resource, namespace: str | None) -> str:
        return (namespace or "default") if res.namespaced else ""

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _uid(self) -> str:
        return f"00000000-0000-4000-8000-{next(self._ids):012x}"

    def _now(self) -> str:
        return self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def _changed_event(self, key: tuple[str, str, str], event_type: str, obj: JSON) -> None:
        snapshot = copy.deepcopy(obj)
        self._history.append((self._rv, key[0], key[1], event_type, snapshot))
        self._changed.set()
        self._changed = asyncio.Event()
        # karpy watches no Events: the cluster state has no store for them.
        if self.sink is not None and snapshot.get("kind") not in (None, "Event"):
            self.sink.apply(snapshot["kind"], event_type, copy.deepcopy(snapshot))


__all__ = ["CRD_GROUPS", "FakeKube", "Request"]
