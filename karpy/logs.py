"""structlog configured for JSON lines on stdout (``LOG_OUTPUT_PATHS``), one object per event, with ISO timestamps.

Each line, newline included, reaches stdout in one ``write`` of the binary stream: a process killed between two
writes (SIGKILL, OOM) leaves only whole lines behind, never half a line that the next process's first line is
glued onto. ``print`` to the text stream writes the message and the newline separately, and splits lines longer
than its buffer.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping, Sequence
from typing import IO, Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}


class Sinks:
    """The binary streams of ``LOG_OUTPUT_PATHS`` (``stdout``, ``stderr`` or file paths, appended to), each line
    written to each in one ``write`` and flushed; a sink that fails to take a line is reported on the
    ``LOG_ERROR_OUTPUT_PATHS`` streams, as zap reports sink errors on its ErrorOutput (Karpenter core
    ``pkg/operator/logging/logging.go``), and the line still goes to the other sinks.
    """

    def __init__(self, outputs: Sequence[tuple[str, IO[bytes]]], errors: Sequence[IO[bytes]]) -> None:
        self.outputs = list(outputs)
        self.errors = list(errors)

    @classmethod
    def open(cls, output_paths: Sequence[str], error_output_paths: Sequence[str]) -> Sinks:
        """Open every path (``stdout``/``stderr`` are the process's streams).

        Raises:
            OSError: a file cannot be opened for appending (the message names it).
        """
        return cls([(p, _open(p)) for p in output_paths], [_open(p) for p in error_output_paths])

    def write(self, data: bytes) -> int:
        for path, stream in self.outputs:
            try:
                stream.write(data)
                stream.flush()
            except (OSError, ValueError) as err:
                self._report(f"karpy: writing a log line to {path} failed: {err}\n".encode())
        return len(data)

    def flush(self) -> None:
        """Every :meth:`write` flushed already."""

    def _report(self, message: bytes) -> None:
        for stream in self.errors:
            try:
                stream.write(message)
                stream.flush()
            except (OSError, ValueError):
                continue  # nowhere left to report to


def _open(path: str) -> IO[bytes]:
    if path == "stdout":
        return sys.stdout.buffer
    if path == "stderr":
        return sys.stderr.buffer
    return open(path.removeprefix("file://"), "ab")  # kept open for the process's lifetime


# Rendering shared by karpy's own lines and library records: level, ISO timestamp (UTC), traceback, "message".
_TIMESTAMP = structlog.processors.TimeStamper(fmt="iso", utc=True)
_RENDER: tuple[Any, ...] = (
    structlog.processors.StackInfoRenderer(),
    structlog.processors.format_exc_info,
    structlog.processors.EventRenamer("message"),
    structlog.processors.JSONRenderer(),
)


class _StdlibHandler(logging.Handler):
    """Library warnings and errors (stdlib ``logging``: asyncio, aiohttp, botocore…) to the same sinks, as JSON
    lines like karpy's own, rendered by structlog's ``ProcessorFormatter`` with the same processors (plus the
    logger's name): a multi-line message such as asyncio's "Fatal error on SSL protocol" report stays one line a
    log pipeline can parse."""

    def __init__(self, sinks: Sinks) -> None:
        super().__init__()
        self.sinks = sinks
        self.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=[structlog.stdlib.add_log_level, structlog.stdlib.add_logger_name, _TIMESTAMP],
                processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *_RENDER],
            )
        )

    def emit(self, record: logging.LogRecord) -> None:
        self.sinks.write((self.format(record) + "\n").encode())


def configure(
    level: str = "info", output_paths: Sequence[str] = ("stdout",), error_output_paths: Sequence[str] = ("stderr",)
) -> None:
    """JSON logs at ``level`` (``debug`` | ``info`` | ``error``, Karpenter's LOG_LEVEL values) to
    ``output_paths`` (``LOG_OUTPUT_PATHS``), write failures reported on ``error_output_paths``
    (``LOG_ERROR_OUTPUT_PATHS``); see :class:`Sinks`.

    Raises:
        OSError: a log file cannot be opened.
    """
    numeric = _LEVELS.get(level, logging.INFO)
    sinks = Sinks.open(output_paths, error_output_paths)
    handler = _StdlibHandler(sinks)
    logging.basicConfig(handlers=[handler], level=max(numeric, logging.WARNING))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            _TIMESTAMP,
            *_RENDER,
            _encode,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.BytesLoggerFactory(file=sinks),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )


def _encode(_logger: Any, _method: str, rendered: str | MutableMapping[str, Any]) -> bytes:
    """The rendered JSON line as UTF-8 bytes for :class:`structlog.BytesLogger` (which appends the newline and
    writes both at once)."""
    return str(rendered).encode()
