"""Progress display of the CLI's long commands (export, import, backup, restore, reindex).

One renderer for all of them. A `Progress` is the `(done, total)` callback the core and
backup code already take, and writes to stderr only, so stdout stays clean for data
(`memoryd export > dump.jsonl`, `memoryd usage`):

* on a terminal, a tqdm bar redrawn in place, at most ten frames a second:
  `export:  50%|█████     | 2500/5000 [00:03<00:03, 812.00items/s]`;
* elsewhere (cron, CI, a pipe) no carriage returns, which would fill a log with frames
  (tqdm always draws with them): a plain line when a job running for more than a few
  seconds passes 25, 50 and 75 %;
* when the counted work is handed over and the command waits on someone else (import:
  every item sent, the server verifying and storing them), `wait` says so at once, on the
  bar's line on a terminal (until the final line replaces it), else as one line;
* in both, one final line: the command's summary (or the final count), with the time
  taken and the rate.

A total of 0 or less means "unknown": the count is shown without percent, bar or ETA.
`-q` / `--no-progress` (see `add_option`) turns all of it off.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from tqdm import tqdm

_REDRAW_S = 0.1  # at most ten frames a second: more cannot be read and only cost time
_QUIET_S = 5.0  # off a terminal, a job shorter than this prints only its final line
_MILESTONES = (25, 50, 75)


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


class _Bar(tqdm):  # type: ignore[type-arg]  # generic in the stubs only
    # No monitor thread: every step is reported to us, and a second thread must not draw.
    monitor_interval = 0
    # tqdm's clock (tqdm's own tests swap it the same way): ours, so that a test's clock
    # drives frames and rates too.
    _time: Callable[[], float]


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
        self._columns = columns  # None: tqdm asks the terminal
        self._clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._first: tuple[float, int] | None = None  # the first report: rates start there
        self._done = 0
        self._total = 0
        self._updated = False
        self._closed = False
        self._bar: _Bar | None = None  # on a terminal, from the first report on
        self._last_line = self._started  # off a terminal: the start, or the last line printed
        self._milestones_left = list(_MILESTONES)
        self._waiting = 0  # on a terminal: the length of the waiting line to overwrite

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
                self._advance_bar()
            else:
                self._milestone(now)

    def wait(self, what: str) -> None:
        """The counted work is done; say what the command now waits for (e.g. "sent;
        memoryd is verifying and storing them"), after the count, until `close`. Without
        it a long wait after the last item would show nothing at all."""
        with self._lock:
            if self._closed or not self.enabled:
                return
            self._milestones_left = []  # the count is final: no milestone line after this
            line = f"{self._count_text(with_percent=False)} {what}"
            if not self._tty:
                self._write(f"{line}\n")
                return
            if self._bar is not None:
                self._bar.leave = False  # erased: the waiting line takes its place
                self._bar.close()
                self._bar = None
            self._write(f"\r{line} ...")
            self._waiting = len(line) + 4

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
            if self._bar is not None:
                self._bar.leave = False  # tqdm erases it; the final line takes its place
                self._bar.close()
            if not self.enabled or (summary is None and not self._updated):
                return
            line = summary if summary is not None else self._count_text(with_percent=False)
            line = f"{line} [{self._stats(self._clock(), eta=False)}]"
            if self._waiting:  # over the waiting line, blanking what it leaves
                line = "\r" + line.ljust(self._waiting)
            self._write(f"{line}\n")

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
        # Failed: leave the last frame on its line, so the error starts on its own line.
        with self._lock:
            self._closed = True
            if self._bar is not None:
                self._bar.close()  # leave=True: the frame stays, followed by a newline
            elif self._waiting:
                self._write("\n")

    # -- rendering (callers hold the lock) --

    def _known_total(self) -> bool:
        # A total smaller than the count (items added during an export) is no total.
        return self._total > 0 and self._done <= self._total

    def _advance_bar(self) -> None:
        total = self._total if self._known_total() else None
        if self._bar is None:
            self._bar = _Bar(
                total=total,
                initial=self._done,
                desc=self.label,
                unit=self.unit,
                file=self._stream,
                ncols=self._columns,
                mininterval=_REDRAW_S,
                miniters=1,
                smoothing=0,  # the average rate since the first report: a steady ETA
            )
            self._bar._time = self._clock
            self._bar.start_t = self._bar.last_print_t = self._clock()
            return
        if total != self._bar.total:
            self._bar.total = total
        self._bar.update(self._done - self._bar.n)  # draws when _REDRAW_S has passed

    def _rate(self, now: float) -> float | None:
        if self._first is not None:
            since, base = self._first
            if now > since and self._done > base:
                return (self._done - base) / (now - since)
        if now > self._started and self._done > 0:
            return self._done / (now - self._started)
        return None

    def _stats(self, now: float, *, eta: bool) -> str:
        elapsed = tqdm.format_interval(now - self._started)
        rate = self._rate(now)
        if rate is None:
            return f"{elapsed}<?" if eta else elapsed
        shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:.1f}"
        if eta:
            elapsed += "<" + tqdm.format_interval((self._total - self._done) / rate)
        return f"{elapsed}, {shown} {self.unit}/s"

    def _count_text(self, with_percent: bool) -> str:
        if not self._known_total():
            return f"{self.label}: {self._done:,} {self.unit}"
        text = f"{self.label}: {self._done:,}/{self._total:,} {self.unit}"
        return f"{text} ({self._done * 100 // self._total}%)" if with_percent else text

    def _milestone(self, now: float) -> None:
        # At 100 % the final line comes next: a milestone line would only repeat it. Lines
        # are _QUIET_S apart at least, so a short job prints only its final line.
        done_yet = self._known_total() and self._done >= self._total
        if not self._known_total() or done_yet or now - self._last_line < _QUIET_S:
            return
        passed = [m for m in self._milestones_left if self._done * 100 // self._total >= m]
        if not passed:
            return
        # Several passed at once (a quick stretch) print one line, not one each.
        self._milestones_left = [m for m in self._milestones_left if m not in passed]
        self._last_line = now
        self._write(f"{self._count_text(with_percent=True)} [{self._stats(now, eta=True)}]\n")

    def _write(self, text: str) -> None:
        self._stream.write(text)
        self._stream.flush()
