"""Log output: one JSON object per line, or readable lines on a terminal.

Modules log through the standard library (`logging.getLogger(__name__)`, structured fields
in `extra=`); structlog formats every record, the libraries' too. Each line gets `time`
(ISO 8601, UTC), `level`, `logger`, `event`, its extra fields, and the `request_id` of the
request being served (see core/observe.py), when there is one.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Literal, TextIO

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from memoryd.core.observe import request_id

LogFormat = Literal["auto", "json", "console"]

# Marks the handler this module installs, so configuring again replaces it.
HANDLER_NAME = "memoryd"


def _add_request_id(logger: WrappedLogger, method: str, event: EventDict) -> EventDict:
    if not event.get("request_id") and (rid := request_id()):
        event["request_id"] = rid
    return event


def _shared_processors() -> list[Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _add_request_id,
        structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
    ]


class _Formatter(structlog.stdlib.ProcessorFormatter):
    """structlog's formatter without its per-record overhead for standard-library records
    (every module's, and the per-RPC line): it copies each record and formats it twice
    over to protect other handlers, while its processors only read the record. The
    output is the same; structlog's own records take the general path."""

    def format(self, record: logging.LogRecord) -> str:
        if hasattr(record, "_logger"):  # attached by structlog's wrap_for_formatter
            return super().format(record)
        method = record.levelname.lower()
        event: Any = {"event": record.getMessage(), "_record": record, "_from_structlog": False}
        if record.exc_info:
            event["exc_info"] = record.exc_info
        if record.stack_info:
            event["stack_info"] = record.stack_info
        for processor in (*(self.foreign_pre_chain or ()), *self.processors):
            event = processor(self.logger, method, event)
        return str(event)


def wants_json(fmt: LogFormat, stream: TextIO) -> bool:
    """JSON unless asked otherwise, or `auto` and a person is reading the stream."""
    if fmt == "auto":
        isatty = getattr(stream, "isatty", None)
        return not (isatty is not None and isatty())
    return fmt == "json"


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever `sys.stderr` is at each record, not the one of configuration time
    (a test harness or a daemonising wrapper may replace and close the first one)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:  # the base class assigns it; we always read sys.stderr
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


def configure_logging(
    level: str = "INFO", fmt: LogFormat = "auto", stream: TextIO | None = None
) -> logging.Handler:
    """Send every log record to `stream` (stderr by default) in the chosen format; returns
    the handler installed on the root logger (replacing one installed before)."""
    out = stream if stream is not None else sys.stderr
    renderer: Processor
    if wants_json(fmt, out):
        renderer = structlog.processors.JSONRenderer()
        finish: list[Processor] = [structlog.processors.format_exc_info]
    else:
        isatty = getattr(out, "isatty", None)
        colors = bool(isatty is not None and isatty())
        renderer = structlog.dev.ConsoleRenderer(colors=colors, timestamp_key="time")
        finish = []
    formatter = _Formatter(
        foreign_pre_chain=[*_shared_processors(), structlog.stdlib.ExtraAdder()],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *finish, renderer],
    )
    handler: logging.StreamHandler[TextIO] = (
        logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    )
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # No record field these formats print needs the caller's frame, thread or process:
    # not looking them up saves a good part of each line's cost (the logging HOWTO's
    # "Optimization" section).
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    # Code using structlog's own loggers goes through the same handler.
    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,
            *_shared_processors(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    return handler
