"""grpc's own log records, made safe to keep.

grpc's Cython layer logs a request header it cannot decode as UTF-8 with the value and a
traceback (`Invalid encoding on b'Bearer mdk_…'`, once per place the metadata is read):
a full credential in the log, about 14 KB a request, as often as a client likes. Such a
record becomes one short warning without the value, at most one per interval.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

# The logger of grpc/_cython/_cygrpc/grpc_string.pyx.pxi's `_decode`.
CYGRPC_LOGGER = "grpc._cython.cygrpc"
WITHHELD = "a request header value is not valid UTF-8 (value withheld; the call goes on)"


class WithheldHeaderValues(logging.Filter):
    """On grpc's Cython logger: a record carrying raw peer bytes (a header value) is
    rewritten to WITHHELD, without its arguments or traceback; rate-limited."""

    def __init__(self, interval_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self._interval = interval_s
        self._clock = clock
        self._last = -math.inf
        self._suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else (record.args,)
        peer_bytes = any(isinstance(a, bytes | bytearray) for a in args)
        if not (peer_bytes or str(record.msg).startswith("Invalid encoding")):
            return True
        now = self._clock()
        if now - self._last < self._interval:
            self._suppressed += 1
            return False
        record.msg, record.args = WITHHELD, ()
        if self._suppressed:
            record.msg += " (and %d more like it since the last such line)"
            record.args = (self._suppressed,)
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        self._last, self._suppressed = now, 0
        return True


def withhold_header_values() -> None:
    """Install the filter on grpc's Cython logger, once per process."""
    logger = logging.getLogger(CYGRPC_LOGGER)
    if not any(isinstance(f, WithheldHeaderValues) for f in logger.filters):
        logger.addFilter(WithheldHeaderValues())
