"""karpy's JSON log lines reach stdout whole: one write per line, so a SIGKILL never leaves half a line."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import structlog

from karpy import logs

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class RecordingBuffer(io.RawIOBase):
    """A raw stream that records every write call."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        chunk = bytes(data)
        self.writes.append(chunk)
        return len(chunk)


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    structlog.reset_defaults()


@pytest.mark.parametrize("size", [10, 5_000, 40_000])
def test_each_line_is_one_write_with_its_newline(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    # Patched in the test body: pytest's capture re-installs its own sys.stdout between setup and call.
    stdout = RecordingBuffer()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(stdout), encoding="utf-8"))
    logs.configure("info")
    structlog.get_logger("t").info("provisioned", pods="p" * size)
    structlog.get_logger("t").info("second")
    assert len(stdout.writes) == 2, [len(w) for w in stdout.writes]
    first = stdout.writes[0]
    assert first.endswith(b"\n") and first.count(b"\n") == 1
    assert json.loads(first)["pods"] == "p" * size
    assert json.loads(stdout.writes[1])["message"] == "second"


def test_library_logs_are_json_lines_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stdlib record (asyncio's multi-line "Fatal error on SSL protocol", with a traceback) is one JSON line
    with level, timestamp and message, as karpy's own lines (e2e test_06_logs_are_json reads every line)."""
    stdout = RecordingBuffer()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(io.BufferedWriter(stdout), encoding="utf-8"))
    handler = logs._StdlibHandler(logs.Sinks.open(["stdout"], ["stderr"]))
    try:
        raise OSError("closed")
    except OSError:
        record = logging.getLogger("asyncio").makeRecord(
            "asyncio",
            logging.ERROR,
            __file__,
            1,
            "Fatal error on SSL protocol\nprotocol: %s",
            ("<p>",),
            sys.exc_info(),
        )
    handler.handle(record)
    (line,) = stdout.writes
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    entry = json.loads(line)
    assert entry["level"] == "error" and entry["logger"] == "asyncio"
    assert entry["message"] == "Fatal error on SSL protocol\nprotocol: <p>"
    assert entry["timestamp"].endswith("Z") and "OSError: closed" in entry["exception"]
