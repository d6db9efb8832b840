"""structlog configured for JSON lines on stdout, one object per event, with ISO timestamps.

Each line, newline included, reaches stdout in one ``write`` of the binary stream: a process killed between two
writes (SIGKILL, OOM) leaves only whole lines behind, never half a line that the next process's first line is
glued onto. ``print`` to the text stream writes the message and the newline separately, and splits lines longer
than its buffer.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}


def configure(level: str = "info") -> None:
    """JSON logs at ``level`` (``debug`` | ``info`` | ``error``, Karpenter's LOG_LEVEL values)."""
    numeric = _LEVELS.get(level, logging.INFO)
    logging.basicConfig(stream=sys.stdout, level=max(numeric, logging.WARNING), format="%(message)s")
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.EventRenamer("message"),
            structlog.processors.JSONRenderer(),
            _encode,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.BytesLoggerFactory(file=sys.stdout.buffer),
        cache_logger_on_first_use=True,
    )


def _encode(_logger: Any, _method: str, rendered: str | MutableMapping[str, Any]) -> bytes:
    """The rendered JSON line as UTF-8 bytes for :class:`structlog.BytesLogger` (which appends the newline and
    writes both at once)."""
    return str(rendered).encode()
