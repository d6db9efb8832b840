"""Reading ``karpy simulate`` input: files, directories or stdin → Kubernetes objects, each with where it came from.

A ``-f`` argument is a file, a directory read recursively (``*.yaml``, ``*.yml``, ``*.json``, sorted, as
``kubectl apply -R -f`` reads them) or ``-`` for stdin. A file holds multi-document YAML (JSON is YAML);
``kind: List`` objects (``kubectl get -o yaml``) are flattened into their items. Each object is checked to be a
Kubernetes object (:mod:`karpy.simulate.validation`) and named from ``generateName`` if it has no name
(:mod:`karpy.simulate.defaulting`).

YAML is loaded by :mod:`karpy.simulate.yamlload`: the objects ``yaml.safe_load_all`` gives, parsed by libyaml's
C parser when PyYAML has it (PyYAML's pure-Python scanner took most of a 20,000-pod simulation), else by
PyYAML's own. Documents are streamed: one file's text and one document's nodes at a time, each object handed on
as it is read. Large inputs (:data:`PARALLEL_MIN_BYTES` in two files or more, such as a cluster dump split per
namespace) are parsed ahead by forked worker processes, one per idle CPU and a file each, which send the objects back
pickled (unpickling is several times faster than parsing); they are handed on in the same order, and the first
error is the same.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
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


# Large inputs are parsed by worker processes, one file each, when there are at least two files and this many bytes
# in all (and two idle CPUs): below that, starting the workers costs more than they save.
PARALLEL_MIN_BYTES = 4 * 2**20


def iter_sources(sources: Sequence[str], stdin: TextIO | None = None) -> Iterator[Document]:
    """All objects of the ``-f`` arguments in order (``-`` reads stdin once), streamed.

    Small inputs are read a file at a time, when the previous one's objects have been consumed. Large ones
    (:data:`PARALLEL_MIN_BYTES`, two files or more) are parsed ahead by one worker process per idle CPU (``fork``),
    a file each; the objects still come in order, and the first error is still the first in reading order, raised
    after the objects before it: the result is what reading them one by one gives. A file whose worker died
    (killed, out of memory) is read here instead.

    Raises:
        ManifestError: a path is missing or unreadable, or a document is invalid (when it is reached).
    """
    tasks = _tasks(sources)
    files = [item for kind, item in tasks if kind == "file"]
    workers = _workers(files)
    if workers <= 1:
        for kind, item in tasks:
            if kind == "stdin":
                yield from iter_documents((stdin or sys.stdin).read(), "<stdin>")
            elif kind == "file":
                yield from iter_documents(_read_text(item), item)
            else:
                raise ManifestError(item)
        return
    executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        parsed = [executor.submit(read_file, path) for path in files]
        for kind, item in tasks:
            if kind == "stdin":
                yield from iter_documents((stdin or sys.stdin).read(), "<stdin>")
            elif kind == "file":
                try:
                    docs, error = parsed.pop(0).result()
                except BrokenProcessPool:  # a worker died (killed, out of memory): read the file here instead
                    docs, error = read_file(item)
                yield from docs
                if error is not None:
                    raise ManifestError(error)
            else:
                raise ManifestError(item)
    finally:
        # On an error, files not started are dropped; the worker busy with one finishes it and exits.
        executor.shutdown(wait=False, cancel_futures=True)


def read_file(path: str) -> tuple[list[Document], str | None]:
    """The objects of one manifest file, and the message of the error that stopped reading it (None when none):
    what a worker of :func:`iter_sources` sends back (picklable)."""
    docs: list[Document] = []
    try:
        docs.extend(iter_documents(_read_text(path), path))
    except ManifestError as err:
        return docs, str(err)
    return docs, None


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


def _workers(files: Sequence[str]) -> int:
    """How many worker processes to parse ``files`` with (1: none, read them here): one per idle CPU
    (:func:`idle_cpus`), when that is two or more. On busy CPUs workers only add the cost of pickling (measured on
    a loaded two-CPU machine: slower than reading here)."""
    if len(files) < 2 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    try:
        size = sum(os.path.getsize(f) for f in files)
    except OSError:
        return 1  # read here, where the error is reported in order
    if size < PARALLEL_MIN_BYTES:
        return 1
    idle = idle_cpus()
    return min(len(files), idle) if idle >= 2 else 1


def idle_cpus() -> int:
    """CPUs this process may use minus the one-minute load average, rounded (0 when unknown)."""
    try:
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        return max(0, round(cpus - os.getloadavg()[0]))
    except OSError:
        return 0


def read_sources(sources: Sequence[str], stdin: TextIO | None = None) -> list[Document]:
    """:func:`iter_sources` as a list.

    Raises:
        ManifestError: a path is missing or unreadable, or a document is invalid.
    """
    return list(iter_sources(sources, stdin))
