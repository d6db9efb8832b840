"""structlog configured for JSON lines on stdout, one object per event, with ISO timestamps."""

from __future__ import annotations

import logging
import sys

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
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=True,
    )
