"""Fast safe YAML loading for ``karpy simulate``: the same objects as ``yaml.safe_load_all``, in a fraction of the
time on large manifest sets (20,000 pods: about 20 MB of YAML).

Two costs dominate PyYAML's safe loading, and each is cut without changing what is loaded:

* scanning, parsing and composing the node graph: libyaml's C parser (``yaml.CSafeLoader``) when PyYAML was
  built with it (``yaml.__with_libyaml__``), else PyYAML's pure-Python one (:data:`PY_LOADER`; same result, about
  ten times slower);
* resolving each node's tag (PyYAML's YAML 1.1 resolver, a Python call per node from the C parser): the tag
  depends on the node kind, the text and its flags alone, so it is remembered (:func:`_resolving`; a manifest
  repeats most of its scalars: ``name``, ``TCP``, ``Always``) in a C-level memo, and so is the value of the
  common implicit scalars (ints, bools, nulls: immutable objects);
* constructing Python objects: PyYAML's constructor goes through a generic dispatch, a generator per mapping and
  per-document bookkeeping for every node; plain maps, sequences and strings — nearly every node of a manifest —
  are built directly here, anything else (ints, bools, nulls, floats, timestamps, ``!!binary``, merge keys
  ``<<``, explicit tags, unhashable keys) by PyYAML's own ``SafeConstructor``, so the result is the same.
  Aliases keep their identity (one object per anchored node), as PyYAML does.

Tags are resolved by PyYAML's YAML 1.1 resolver either way (``yes`` is a bool, ``1e3`` a string), as
``kubectl``'s YAML 1.1 reader does.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.resolver import BaseResolver

STR_TAG = "tag:yaml.org,2002:str"
MAP_TAG = "tag:yaml.org,2002:map"
SEQ_TAG = "tag:yaml.org,2002:seq"
MERGE_TAG = "tag:yaml.org,2002:merge"
# A plain ``=`` key: PyYAML's mapping flattening turns it back into the string "=".
VALUE_TAG = "tag:yaml.org,2002:value"
PY_LOADER: type[yaml.SafeLoader] = yaml.SafeLoader
C_LOADER: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)

LoaderClass = type[yaml.SafeLoader] | type[yaml.CSafeLoader]
# Implicit scalars whose value is an immutable object that depends on the text alone: built once per text.
CACHED_TAGS = frozenset({"tag:yaml.org,2002:int", "tag:yaml.org,2002:bool", "tag:yaml.org,2002:null"})
# Entries of the resolver's memo, and of (tag, text) → value (cleared when it grows past this; memory).
CACHE_LIMIT = 200_000
_values: dict[tuple[str, str], Any] = {}
_subclasses: dict[type, type] = {}
_BASE_RESOLVE: Callable[..., Any] = BaseResolver.resolve


def safe_loader() -> LoaderClass:
    """The libyaml loader when PyYAML has it (``yaml.__with_libyaml__``), else the pure-Python one."""
    loader: LoaderClass | None = getattr(yaml, "CSafeLoader", None)
    return loader or PY_LOADER


def load_all(text: str, loader_class: LoaderClass | None = None) -> Iterator[Any]:
    """The documents of a YAML stream, one at a time (as ``yaml.safe_load_all``; empty documents are None).

    Raises:
        yaml.YAMLError: invalid YAML, when the bad document is reached.
    """
    loader = _resolving(loader_class or safe_loader())(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:  # pragma: no cover - check_node said there is one
                break
            yield _build(loader, node, {})
            # What PyYAML's constructor kept for this document (aliases met by the fallback).
            loader.constructed_objects = {}
            loader.recursive_objects = {}
    finally:
        loader.dispose()


def _resolving(base: LoaderClass) -> LoaderClass:
    """``base`` with its ``resolve`` remembering its answers, when it is PyYAML's and the loader has no path
    resolvers (SafeLoader has none): the tag then depends on the node kind, the text and its ``implicit`` flags
    alone (YAML 1.1 implicit rules for plain scalars; ``!!str`` for quoted ones). The memo is a C-level
    :func:`functools.lru_cache` (:data:`CACHE_LIMIT` entries), which answers the parser's call per node
    without running Python code; ``descend_resolver``/``ascend_resolver`` likewise become builtins."""
    sub = _subclasses.get(base)
    if sub is not None:
        return sub
    methods: dict[str, Any] = {}
    if not base.yaml_path_resolvers and base.resolve is BaseResolver.resolve:
        tables = type("Tables", (BaseResolver,), {"yaml_implicit_resolvers": base.yaml_implicit_resolvers})()

        def tag_of(kind: type, value: Any, implicit: Any) -> Any:
            return _BASE_RESOLVE(tables, kind, value, implicit)

        methods["resolve"] = staticmethod(functools.lru_cache(maxsize=CACHE_LIMIT)(tag_of))
        # The parser calls these around every node; without path resolvers PyYAML's return at once. Builtins
        # (which do not bind to the instance) do the same nothing without a Python frame: ``descend_resolver
        # (parent, index)`` → ``operator.is_(parent, index)``, ``ascend_resolver()`` → ``int()``.
        methods["descend_resolver"] = operator.is_
        methods["ascend_resolver"] = int
    sub = _subclasses[base] = type(f"Resolving{base.__name__}", (base,), methods)
    return sub


def _scalar(loader: Any, node: Node) -> Any:
    """A non-``!!str`` scalar's value: ints, bools and nulls remembered per text, the rest by PyYAML."""
    if node.tag not in CACHED_TAGS:
        return loader.construct_object(node, deep=True)
    key = (node.tag, node.value)
    try:
        return _values[key]
    except KeyError:
        if len(_values) >= CACHE_LIMIT:
            _values.clear()
        value = _values[key] = loader.construct_object(node, deep=True)
        return value


def _build(loader: Any, node: Node, anchored: dict[int, Any]) -> Any:
    """The Python object of ``node``: plain maps, sequences and strings built here (string scalars inline, the
    common case), the rest by PyYAML's constructor. ``anchored``: node id → object, so an alias is the same object."""
    cls = node.__class__
    if cls is ScalarNode:
        return node.value if node.tag == STR_TAG else _scalar(loader, node)
    done = anchored.get(id(node))
    if done is not None:
        return done
    if cls is MappingNode and node.tag == MAP_TAG:
        return _build_mapping(loader, node, anchored)
    if cls is SequenceNode and node.tag == SEQ_TAG:
        items: list[Any] = []
        anchored[id(node)] = items
        for item in node.value:
            plain = item.__class__ is ScalarNode and item.tag == STR_TAG
            items.append(item.value if plain else _build(loader, item, anchored))
        return items
    return loader.construct_object(node, deep=True)


def _build_mapping(loader: Any, node: Node, anchored: dict[int, Any]) -> Any:
    """A ``!!map`` node as a dict; PyYAML's constructor takes over for merge keys, ``=`` keys and unhashable keys
    (it flattens the first two and raises its own error for the last)."""
    out: dict[Any, Any] = {}
    anchored[id(node)] = out
    for key, value in node.value:
        if key.__class__ is ScalarNode and key.tag == STR_TAG:
            k = key.value
        elif key.tag in (MERGE_TAG, VALUE_TAG):
            del anchored[id(node)]
            return loader.construct_object(node, deep=True)
        else:
            k = _build(loader, key, anchored)
        plain = value.__class__ is ScalarNode and value.tag == STR_TAG
        v = value.value if plain else _build(loader, value, anchored)
        try:
            out[k] = v
        except TypeError:
            del anchored[id(node)]
            return loader.construct_object(node, deep=True)
    return out
