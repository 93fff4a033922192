"""A log line that a client (or a stuck loop) could repeat at will, written at most once
per interval: the ones in between are counted and reported with the next line."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable


class EveryFewSeconds:
    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._interval = interval_s
        self._clock = clock
        self._last = -math.inf
        self._suppressed = 0

    def warning(self, message: str, *args: object) -> bool:
        """Log now, or count the line if one was logged within the interval; True if logged."""
        now = self._clock()
        if now - self._last < self._interval:
            self._suppressed += 1
            return False
        if self._suppressed:
            message += " (and %d more like it since the last such line)"
            args = (*args, self._suppressed)
        self._log.warning(message, *args)
        self._last = now
        self._suppressed = 0
        return True
