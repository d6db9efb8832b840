"""Reading ``karpy simulate`` input: files, directories or stdin → Kubernetes objects, each with where it came from.

A ``-f`` argument is a file, a directory read recursively (``*.yaml``, ``*.yml``, ``*.json``, sorted, as
``kubectl apply -R -f`` reads them) or ``-`` for stdin. A file holds multi-document YAML (JSON is YAML);
``kind: List`` objects (``kubectl get -o yaml``) are flattened into their items. Each object is checked to be a
Kubernetes object (:mod:`karpy.simulate.validation`) and named from ``generateName`` if it has no name
(:mod:`karpy.simulate.defaulting`).

YAML is loaded by :mod:`karpy.simulate.yamlload`: the objects ``yaml.safe_load_all`` gives, parsed by libyaml's
C parser when PyYAML has it (PyYAML's pure-Python scanner took most of a 20,000-pod simulation), else by
PyYAML's own. Documents are streamed: one file's text and one document's nodes at a time, each object handed on
as it is read, in this process (so a run's timings do not depend on the machine's load).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import yaml

from karpy.apis.meta import JSON
from karpy.simulate import yamlload
from karpy.simulate.defaulting import generate_name
from karpy.simulate.validation import ManifestError, check_metadata, check_type_fields

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@attrs.define
class Document:
    """One object read from a manifest, with where it came from (``path#index`` or ``<stdin>#index``)."""

    origin: str
    obj: JSON

    @property
    def kind(self) -> str:
        """``kind``."""
        return str(self.obj.get("kind"))

    @property
    def group(self) -> str:
        """The API group of ``apiVersion`` ("" for core)."""
        api = str(self.obj.get("apiVersion"))
        return api.split("/", 1)[0] if "/" in api else ""

    @property
    def name(self) -> str:
        """``metadata.name``."""
        return str(self.obj["metadata"]["name"])

    @property
    def namespace(self) -> str:
        """``metadata.namespace`` (defaulted for namespaced kinds, "" for cluster-scoped ones)."""
        return str(self.obj["metadata"].get("namespace") or "")

    @property
    def ref(self) -> str:
        """``namespace/name``, or ``name`` for a cluster-scoped object (for messages)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def manifest_files(source: str) -> list[Path]:
    """The files of one ``-f`` argument: the file itself, or a directory's ``*.yaml|*.yml|*.json`` (recursive,
    sorted, as ``kubectl apply -R -f`` reads them).

    Raises:
        ManifestError: the path does not exist, or a directory holds no manifest file.
    """
    path = Path(source)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        if not files:
            raise ManifestError(f"{source}: no *.yaml, *.yml or *.json files in this directory")
        return files
    if not path.exists():
        raise ManifestError(f"{source}: no such file or directory")
    return [path]


def to_object(item: Any, where: str) -> JSON:
    """``item`` as a Kubernetes object: a mapping with apiVersion, kind and a name (``generateName`` applied).

    Raises:
        ManifestError: it is not a Kubernetes object.
    """
    return check_metadata(generate_name(check_type_fields(item, where), where), where)


def _yaml_documents(text: str, origin: str, loader: yamlload.LoaderClass | None) -> Iterator[Any]:
    """The non-empty YAML documents of ``text``, one at a time.

    Raises:
        ManifestError: invalid YAML (with its line when the parser knows it), when the bad document is reached.
    """
    try:
        for doc in yamlload.load_all(text, loader):
            if doc is not None:
                yield doc
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        # libyaml marks an error at the end of the stream one line past the last one: report the last line.
        where = f" (line {min(mark.line + 1, max(len(text.splitlines()), 1))})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ManifestError(f"{origin}: invalid YAML{where}: {problem}") from err


def iter_documents(text: str, origin: str, loader: yamlload.LoaderClass | None = None) -> Iterator[Document]:
    """Every object of a multi-document YAML (or JSON) text, in order, as it is parsed; ``kind: List`` objects
    are flattened. ``loader`` defaults to
    :func:`karpy.simulate.yamlload.safe_loader` (libyaml's parser when PyYAML has it).

    Raises:
        ManifestError: invalid YAML, or a document that is not a Kubernetes object (when it is reached).
    """
    for i, obj in enumerate(_yaml_documents(text, origin, loader), start=1):
        items = obj.get("items") if isinstance(obj, dict) and str(obj.get("kind", "")).endswith("List") else None
        for j, item in enumerate(items if isinstance(items, list) else [obj], start=1):
            where = f"{origin}#{i}" + (f".items[{j - 1}]" if items is not None else "")
            yield Document(where, to_object(item, where))


def parse_documents(text: str, origin: str, loader: yamlload.LoaderClass | None = None) -> list[Document]:
    """:func:`iter_documents` as a list.

    Raises:
        ManifestError: invalid YAML, or a document that is not a Kubernetes object.
    """
    return list(iter_documents(text, origin, loader))


def iter_sources(sources: Sequence[str], stdin: TextIO | None = None) -> Iterator[Document]:
    """All objects of the ``-f`` arguments in order (``-`` reads stdin once), streamed: a file is read when the
    previous one's objects have been consumed.

    Raises:
        ManifestError: a path is missing or unreadable, or a document is invalid (when it is reached).
    """
    for kind, item in _tasks(sources):
        if kind == "stdin":
            yield from iter_documents((stdin or sys.stdin).read(), "<stdin>")
        elif kind == "file":
            yield from iter_documents(_read_text(item), item)
        else:
            raise ManifestError(item)


def _read_text(path: str) -> str:
    """A file's text.

    Raises:
        ManifestError: it cannot be read (or decoded).
    """
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ManifestError(f"{path}: cannot read: {err}") from err


def _tasks(sources: Sequence[str]) -> list[tuple[str, str]]:
    """What reading ``sources`` takes, in order: ``("stdin", "-")``, ``("file", path)``, and ``("error",
    message)`` where a source is missing (nothing after it is read)."""
    out: list[tuple[str, str]] = []
    for source in sources:
        if source == "-":
            out.append(("stdin", source))
            continue
        try:
            out += [("file", str(path)) for path in manifest_files(source)]
        except ManifestError as err:
            out.append(("error", str(err)))
            break
    return out


def read_sources(sources: Sequence[str], stdin: TextIO | None = None) -> list[Document]:
    """:func:`iter_sources` as a list.

    Raises:
        ManifestError: a path is missing or unreadable, or a document is invalid.
    """
    return list(iter_sources(sources, stdin))
