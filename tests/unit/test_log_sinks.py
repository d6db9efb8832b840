"""LOG_OUTPUT_PATHS and LOG_ERROR_OUTPUT_PATHS: JSON lines to every sink, a failing sink reported on the error
sinks (as zap reports sink errors on its ErrorOutput, Karpenter core pkg/operator/logging/logging.go)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from karpy import logs


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    structlog.reset_defaults()


def test_lines_go_to_every_output_path(tmp_path: Path) -> None:
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    logs.configure("info", [str(first), f"file://{second}"], [str(tmp_path / "errors.log")])
    structlog.get_logger("t").info("hello", n=1)
    structlog.get_logger("t").debug("not at info")
    for path in (first, second):
        [line] = path.read_text().splitlines()
        assert json.loads(line)["message"] == "hello"
    assert (tmp_path / "errors.log").read_text() == ""


class Broken(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        raise OSError(28, "No space left on device")


def test_a_failing_sink_is_reported_on_the_error_paths() -> None:
    errors, good = io.BytesIO(), io.BytesIO()
    sinks = logs.Sinks([("/full/disk.log", Broken()), ("good", good)], [errors])  # type: ignore[list-item]
    sinks.write(b'{"message": "x"}\n')
    assert good.getvalue() == b'{"message": "x"}\n'
    assert errors.getvalue().decode().startswith("karpy: writing a log line to /full/disk.log failed: ")


def test_an_unopenable_path_raises(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        logs.configure("info", [str(tmp_path / "no" / "such" / "dir.log")])
