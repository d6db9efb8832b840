"""karpy's JSON log lines reach stdout whole: one write per line, so a SIGKILL never leaves half a line."""

from __future__ import annotations

import io
import json
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
