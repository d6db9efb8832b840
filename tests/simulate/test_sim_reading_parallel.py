"""Large inputs are parsed by worker processes (karpy.simulate.reading.iter_sources): the objects, their order and
the first error are what reading the files one by one gives."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest
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


def _read(sources: list[str], parallel: bool, monkeypatch: pytest.MonkeyPatch, stdin: str = "") -> Any:
    monkeypatch.setattr(reading, "PARALLEL_MIN_BYTES", 0 if parallel else 10**15)
    monkeypatch.setattr(reading, "idle_cpus", lambda: 2)
    out: list[tuple[str, Any]] = []
    try:
        for doc in reading.iter_sources(sources, io.StringIO(stdin)):
            out.append((doc.origin, doc.obj))
    except ManifestError as err:
        return out, str(err)
    return out, None


def test_workers_are_used_for_large_inputs_of_two_files_or_more_with_idle_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = [str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml"), str(tmp_path / "c.yaml")]
    for f in files:
        Path(f).write_text("x: 1\n")
    monkeypatch.setattr(reading, "PARALLEL_MIN_BYTES", 8)
    monkeypatch.setattr(reading, "idle_cpus", lambda: 2)
    assert reading._workers(files) == 2
    assert reading._workers(files[:1]) == 1
    monkeypatch.setattr(reading, "idle_cpus", lambda: 8)
    assert reading._workers(files) == 3  # no more workers than files
    monkeypatch.setattr(reading, "idle_cpus", lambda: 1)
    assert reading._workers(files) == 1  # busy CPUs: read here
    monkeypatch.setattr(reading, "idle_cpus", lambda: 2)
    monkeypatch.setattr(reading, "PARALLEL_MIN_BYTES", 6 * 3 + 1)
    assert reading._workers(files) == 1


def test_idle_cpus_subtracts_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (1.4, 0.0, 0.0))
    assert reading.idle_cpus() == 3
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert reading.idle_cpus() == 0


def test_parallel_reading_gives_what_serial_reading_gives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = [*_files(tmp_path), "-"]
    stdin = yaml.safe_dump(_pod("from-stdin"))
    serial = _read(sources, False, monkeypatch, stdin)
    parallel = _read(sources, True, monkeypatch, stdin)
    assert serial == parallel
    assert serial[1] is None and len(serial[0]) == 2 + 12 + 1 + 1
    assert serial[0][-1][0] == "<stdin>#1"


def test_first_error_in_reading_order_after_the_objects_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = _files(tmp_path)
    # An invalid document in the middle of the second pods file, and an invalid YAML file later.
    bad = tmp_path / "pods" / "p1.yaml"
    bad.write_text(yaml.safe_dump(_pod("ok-1")) + "---\nkind: Pod\n---\n" + yaml.safe_dump(_pod("never")))
    (tmp_path / "pods" / "p2.yaml").write_text("a: [unclosed\n")
    serial = _read([*sources, str(tmp_path / "missing.yaml")], False, monkeypatch)
    parallel = _read([*sources, str(tmp_path / "missing.yaml")], True, monkeypatch)
    assert serial == parallel
    docs, error = serial
    assert error is not None and "p1.yaml#2: missing apiVersion" in error
    assert docs[-1][1]["metadata"]["name"] == "ok-1"


def test_a_missing_source_is_reported_after_the_sources_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = [*_files(tmp_path), str(tmp_path / "missing.yaml"), "-"]
    for parallel in (False, True):
        docs, error = _read(sources, parallel, monkeypatch, "kind: [")
        assert len(docs) == 2 + 12 + 1
        assert error is not None and error.endswith("missing.yaml: no such file or directory")


def _dying_worker(path: str) -> Any:
    if path.endswith("p1.yaml") and os.getpid() != _TEST_PID:
        os._exit(1)  # a worker killed mid-file (out of memory, a signal)
    return _REAL_READ_FILE(path)


_REAL_READ_FILE = reading.read_file
_TEST_PID = os.getpid()


def test_a_file_whose_worker_died_is_read_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = _files(tmp_path)
    serial = _read(sources, False, monkeypatch)
    monkeypatch.setattr(reading, "read_file", _dying_worker)
    assert _read(sources, True, monkeypatch) == serial
