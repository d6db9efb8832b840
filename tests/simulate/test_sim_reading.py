"""Reading ``-f`` sources (karpy.simulate.reading.iter_sources): the objects in reading order, and the first error
raised after the objects before it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml
from sim_helpers import deployment, nodeclass, nodepool

from karpy.simulate import reading
from karpy.simulate.validation import ManifestError


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": []}}


def _files(tmp_path: Path) -> list[str]:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([nodepool(), nodeclass()]))
    sub = tmp_path / "pods"
    sub.mkdir()
    for n in range(3):
        (sub / f"p{n}.yaml").write_text(yaml.safe_dump_all([_pod(f"p{n}-{i}") for i in range(4)]))
    (tmp_path / "z.yaml").write_text(yaml.safe_dump(deployment("web", 2)))
    return [str(tmp_path)]


def _read(sources: list[str], stdin: str = "") -> Any:
    out: list[tuple[str, Any]] = []
    try:
        for doc in reading.iter_sources(sources, io.StringIO(stdin)):
            out.append((doc.origin, doc.obj))
    except ManifestError as err:
        return out, str(err)
    return out, None


def test_files_of_a_directory_then_stdin_in_order(tmp_path: Path) -> None:
    sources = [*_files(tmp_path), "-"]
    serial = _read(sources, yaml.safe_dump(_pod("from-stdin")))
    assert serial[1] is None and len(serial[0]) == 2 + 12 + 1 + 1
    assert serial[0][-1][0] == "<stdin>#1"


def test_first_error_in_reading_order_after_the_objects_before_it(tmp_path: Path) -> None:
    sources = _files(tmp_path)
    # An invalid document in the middle of the second pods file, and an invalid YAML file later.
    bad = tmp_path / "pods" / "p1.yaml"
    bad.write_text(yaml.safe_dump(_pod("ok-1")) + "---\nkind: Pod\n---\n" + yaml.safe_dump(_pod("never")))
    (tmp_path / "pods" / "p2.yaml").write_text("a: [unclosed\n")
    docs, error = _read([*sources, str(tmp_path / "missing.yaml")])
    assert error is not None and "p1.yaml#2: missing apiVersion" in error
    assert docs[-1][1]["metadata"]["name"] == "ok-1"


def test_a_missing_source_is_reported_after_the_sources_before_it(tmp_path: Path) -> None:
    sources = [*_files(tmp_path), str(tmp_path / "missing.yaml"), "-"]
    docs, error = _read(sources, "kind: [")
    assert len(docs) == 2 + 12 + 1
    assert error is not None and error.endswith("missing.yaml: no such file or directory")
