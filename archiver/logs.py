"""structlog set-up: readable on a terminal, one JSON object per line otherwise."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def _renderers() -> list[structlog.types.Processor]:
    if sys.stderr.isatty():
        return [structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)]
    # frames without their local variables: those hold connection URLs, payloads and the like
    frames = structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
    return [structlog.processors.ExceptionRenderer(frames), structlog.processors.JSONRenderer()]


_STAMPS: list[structlog.types.Processor] = [
    structlog.processors.add_log_level,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
]


def configure_logging(level: str = "info") -> None:
    """Readable on a terminal; otherwise one JSON object per line, an exception rendered as
    fields (type, message, frames; no local variables) rather than a bare ``exc_info: true``."""
    processors: list[structlog.types.Processor] = [structlog.contextvars.merge_contextvars, *_STAMPS, *_renderers()]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )


def stdlib_log_config(level: str = "info") -> dict[str, Any]:
    """A `logging.config.dictConfig` for libraries that log through the standard library
    (uvicorn): their records rendered like ours, JSON lines when stderr is not a terminal."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "structlog": {
                "()": structlog.stdlib.ProcessorFormatter,
                "foreign_pre_chain": [structlog.stdlib.add_logger_name, *_STAMPS],
                "processors": [structlog.stdlib.ProcessorFormatter.remove_processors_meta, *_renderers()],
            }
        },
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "structlog", "stream": "ext://sys.stderr"}},
        "loggers": {
            name: {"handlers": ["stderr"], "level": level.upper(), "propagate": False}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }
