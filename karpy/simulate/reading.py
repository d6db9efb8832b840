"""Reading ``karpy simulate`` input: files, directories or stdin → Kubernetes objects, each with where it came from.

A ``-f`` argument is a file, a directory read recursively (``*.yaml``, ``*.yml``, ``*.json``, sorted, as
``kubectl apply -R -f`` reads them) or ``-`` for stdin. A file holds multi-document YAML (JSON is YAML);
``kind: List`` objects (``kubectl get -o yaml``) are flattened into their items. Each object is checked to be a
Kubernetes object (:mod:`karpy.simulate.validation`) and named from ``generateName`` if it has no name
(:mod:`karpy.simulate.defaulting`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import attrs
import yaml

from karpy.apis.meta import JSON
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


def parse_documents(text: str, origin: str) -> list[Document]:
    """Every object of a multi-document YAML (or JSON) text; ``kind: List`` objects are flattened.

    Raises:
        ManifestError: invalid YAML, or a document that is not a Kubernetes object.
    """
    try:
        raw = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ManifestError(f"{origin}: invalid YAML{where}: {problem}") from err
    docs: list[Document] = []
    for i, obj in enumerate(raw, start=1):
        items = obj.get("items") if isinstance(obj, dict) and str(obj.get("kind", "")).endswith("List") else None
        for j, item in enumerate(items if isinstance(items, list) else [obj], start=1):
            where = f"{origin}#{i}" + (f".items[{j - 1}]" if items is not None else "")
            docs.append(Document(where, to_object(item, where)))
    return docs


def read_sources(sources: Sequence[str], stdin: TextIO | None = None) -> list[Document]:
    """All objects of the ``-f`` arguments in order (``-`` reads stdin once).

    Raises:
        ManifestError: a path is missing or unreadable, or a document is invalid.
    """
    docs: list[Document] = []
    for source in sources:
        if source == "-":
            docs.extend(parse_documents((stdin or sys.stdin).read(), "<stdin>"))
            continue
        for path in manifest_files(source):
            try:
                text = path.read_text()
            except (OSError, UnicodeDecodeError) as err:
                raise ManifestError(f"{path}: cannot read: {err}") from err
            docs.extend(parse_documents(text, str(path)))
    return docs
