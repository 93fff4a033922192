"""Progress display of the CLI's long commands (export, import, backup, restore, reindex).

One renderer for all of them. A `Progress` is the `(done, total)` callback the core and
backup code already take, and writes to stderr only, so stdout stays clean for data
(`memoryd export > dump.jsonl`, `memoryd usage`):

* on a terminal, a bar redrawn in place (`\\r`), at most ten frames a second:
  `export  50% |█████     | 2,500/5,000 items [0:03<0:03, 812 items/s]`;
* elsewhere (cron, CI, a pipe) no carriage returns, which would fill a log with frames:
  a plain line when a job running for more than a few seconds passes 25, 50 and 75 %;
* in both, one final line: the command's summary (or the final count), with the time
  taken and the rate.

A total of 0 or less means "unknown": the count is shown without percent, bar or ETA.
`-q` / `--no-progress` (see `add_option`) turns all of it off.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

_REDRAW_S = 0.1  # at most ten frames a second: more cannot be read and only cost time
_QUIET_S = 5.0  # off a terminal, a job shorter than this prints only its final line
_MILESTONES = (25, 50, 75)
_BAR_MIN, _BAR_MAX = 10, 30
_STATS_ROOM = 32  # "[0:00:00<0:00:00, 12,345 items/s]": kept free so the bar keeps its width
_DEFAULT_COLUMNS = 80


def add_option(parser: argparse.ArgumentParser) -> None:
    """The switch every long command shares (`args.no_progress`)."""
    parser.add_argument(
        "-q",
        "--no-progress",
        dest="no_progress",
        action="store_true",
        help="no progress bar or summary on stderr (errors are still reported)",
    )


def quiet_library_bars(enabled: bool, stream: TextIO | None = None) -> None:
    """Silence the embedding model loader's own tqdm bar (Hugging Face's) unless bars are
    wanted on a terminal: off one it is the carriage-return spam this module avoids. Call
    before the model is loaded; an explicit HF_HUB_DISABLE_PROGRESS_BARS wins."""
    if not enabled or not is_tty(stream if stream is not None else sys.stderr):
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or file-less stream
        return False


def _columns(stream: TextIO) -> int:
    try:
        return os.get_terminal_size(stream.fileno()).columns or _DEFAULT_COLUMNS
    except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is an OSError
        return _DEFAULT_COLUMNS


def _duration(seconds: float) -> str:
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _number(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


class Progress:
    """A progress display for one command; call it with `(done, total)` as work advances,
    then `close(summary)`. Safe to call from another thread (import's sending thread)."""

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        enabled: bool = True,
        stream: TextIO | None = None,
        tty: bool | None = None,
        columns: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label = label
        self.unit = unit
        self.enabled = enabled
        # Resolved now, not at import, so a redirected or captured stderr is honoured.
        self._stream = stream if stream is not None else sys.stderr
        self._tty = is_tty(self._stream) if tty is None else tty
        self._columns = columns if columns is not None else _columns(self._stream)
        self._clock = clock
        encoding = (getattr(self._stream, "encoding", None) or "").lower()
        self._fill = "█" if "utf" in encoding else "#"  # a block only where it can be encoded
        self._lock = threading.Lock()
        self._started = clock()
        self._first: tuple[float, int] | None = None  # the first report: rates start there
        self._done = 0
        self._total = 0
        self._updated = False
        self._closed = False
        self._drawn = 0  # length of the frame on screen (terminal), 0 when none
        self._last_draw = -math.inf
        self._last_line = self._started  # off a terminal: the start, or the last line printed
        self._milestones_left = list(_MILESTONES)

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._done, self._total, self._updated = done, total, True
            if not self.enabled:
                return  # counted all the same: `total` stays true
            now = self._clock()
            if self._first is None:
                self._first = (now, done)
            if self._tty:
                if now - self._last_draw >= _REDRAW_S:
                    self._last_draw = now
                    self._draw(self._frame(now))
            else:
                self._milestone(now)

    @property
    def total(self) -> int:
        """The last total reported (0 before any report)."""
        return self._total

    def close(self, summary: str | None = None) -> None:
        """Replace the bar by one final line: `summary` (default: the final count), with
        the time taken and the rate. Nothing when disabled, or when there is no summary
        and nothing was ever reported."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if not self.enabled or (summary is None and not self._updated):
                self._end_line()
                return
            now = self._clock()
            line = summary if summary is not None else self._count_text(with_percent=False)
            line = f"{line} [{self._final_stats(now)}]"
            if self._drawn:
                line = "\r" + line.ljust(self._drawn)
                self._drawn = 0
            self._write(line + "\n")

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.close()
            return
        # Failed: leave the last frame as it was, so the error starts on its own line.
        with self._lock:
            self._closed = True
            self._end_line()

    # -- rendering (callers hold the lock) --

    def _known_total(self) -> bool:
        # A total smaller than the count (items added during an export) is no total.
        return self._total > 0 and self._done <= self._total

    def _rate(self, now: float) -> float | None:
        if self._first is not None:
            since, base = self._first
            if now > since and self._done > base:
                return (self._done - base) / (now - since)
        if now > self._started and self._done > 0:
            return self._done / (now - self._started)
        return None

    def _rate_text(self, now: float) -> str:
        rate = self._rate(now)
        return f"{'?' if rate is None else _number(rate)} {self.unit}/s"

    def _eta_text(self, now: float) -> str:
        rate = self._rate(now)
        return "?" if rate is None else _duration((self._total - self._done) / rate)

    def _percent(self) -> int:
        return self._done * 100 // self._total

    def _count_text(self, with_percent: bool) -> str:
        if not self._known_total():
            return f"{self.label}: {self._done:,} {self.unit}"
        text = f"{self.label}: {self._done:,}/{self._total:,} {self.unit}"
        return f"{text} ({self._percent()}%)" if with_percent else text

    def _final_stats(self, now: float) -> str:
        elapsed = _duration(now - self._started)
        rate = self._rate(now)
        return elapsed if rate is None else f"{elapsed}, {self._rate_text(now)}"

    def _frame(self, now: float) -> str:
        elapsed = _duration(now - self._started)
        if not self._known_total():
            text = f"{self.label} {self._done:,} {self.unit} [{elapsed}, {self._rate_text(now)}]"
        else:
            counts = f"{self._done:,}/{self._total:,} {self.unit}"
            stats = f"[{elapsed}<{self._eta_text(now)}, {self._rate_text(now)}]"
            head = f"{self.label} {self._percent():3d}%"
            # The bar takes what the terminal leaves at the widest counts, within bounds,
            # so it does not jump as the numbers grow; the line is cut, never wrapped.
            widest = len(f"{self._total:,}/{self._total:,} {self.unit}")
            room = self._columns - 1 - len(head) - widest - _STATS_ROOM - 4
            width = max(_BAR_MIN, min(_BAR_MAX, room))
            filled = width * self._done // self._total
            bar = self._fill * filled + " " * (width - filled)
            text = f"{head} |{bar}| {counts} {stats}"
        return text[: max(1, self._columns - 1)]

    def _draw(self, frame: str) -> None:
        # Pad over a longer previous frame instead of an ANSI erase: works on any terminal.
        self._write("\r" + frame.ljust(self._drawn))
        self._drawn = len(frame)

    def _milestone(self, now: float) -> None:
        # At 100 % the final line comes next: a milestone line would only repeat it. Lines
        # are _QUIET_S apart at least, so a short job prints only its final line.
        done_yet = self._known_total() and self._done >= self._total
        if not self._known_total() or done_yet or now - self._last_line < _QUIET_S:
            return
        passed = [m for m in self._milestones_left if self._percent() >= m]
        if not passed:
            return
        # Several passed at once (a quick stretch) print one line, not one each.
        self._milestones_left = [m for m in self._milestones_left if m not in passed]
        self._last_line = now
        elapsed = _duration(now - self._started)
        stats = f"[{elapsed}<{self._eta_text(now)}, {self._rate_text(now)}]"
        self._write(f"{self._count_text(with_percent=True)} {stats}\n")

    def _end_line(self) -> None:
        if self._drawn:
            self._write("\n")
            self._drawn = 0

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()
