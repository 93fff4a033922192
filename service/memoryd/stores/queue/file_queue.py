"""Embedded write-behind queue: an append-only JSONL journal under the data directory.

Each entry is written and flushed to the OS before `put` returns, so it survives the
process being killed (not a power cut: there is no fsync per entry, which would cost
milliseconds on every short-term Add). Acks are recorded as the highest contiguous
sequence number; the journal is truncated whenever everything in it is acked, and
`compact` rewrites it with only the entries still pending (an erasure).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from memoryd.stores.queue.port import QueueDown, QueueEntry


class FileQueue:
    def __init__(self, directory: Path, name: str = "messages") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._journal_path = directory / f"{name}.jsonl"
        self._acked_path = directory / f"{name}.acked"
        self._acked = self._read_acked()
        self._pending: dict[int, dict[str, Any]] = {}
        self._put_at: dict[int, float] = {}
        self._taken: set[int] = set()
        self._done: set[int] = set()
        self._next = self._acked + 1
        for seq, put_at, body in self._read_journal():
            if seq > self._acked:
                self._pending[seq] = body
                self._put_at[seq] = put_at
            self._next = max(self._next, seq + 1)
        self._journal = self._journal_path.open("a", encoding="utf-8")
        self._arrived = asyncio.Event()
        if self._pending:
            self._arrived.set()

    def _read_acked(self) -> int:
        try:
            return int(self._acked_path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0

    def _read_journal(self) -> list[tuple[int, float, dict[str, Any]]]:
        entries = []
        # Entries journaled before put times were recorded count as put on opening.
        opened_at = time.time()
        good = 0
        try:
            with self._journal_path.open("rb") as journal:
                for line in journal:
                    if not line.endswith(b"\n"):
                        break
                    try:
                        doc = json.loads(line)
                        put_at = float(doc.get("at", opened_at))
                        entries.append((int(doc["seq"]), put_at, doc["body"]))
                    except (ValueError, KeyError):
                        break  # a torn last line from a crash mid-write: never acknowledged
                    good += len(line)
        except FileNotFoundError:
            return entries
        # Cut the torn tail, so that new entries start on a line of their own.
        with self._journal_path.open("r+b") as journal:
            journal.truncate(good)
        return entries

    async def put(self, body: dict[str, Any]) -> str:
        seq = self._next
        self._next += 1
        put_at = time.time()
        doc = {"seq": seq, "at": put_at, "body": body}
        self._journal.write(json.dumps(doc, separators=(",", ":")) + "\n")
        self._journal.flush()
        self._pending[seq] = body
        self._put_at[seq] = put_at
        self._arrived.set()
        return str(seq)

    async def take(self, max_items: int, wait_s: float) -> list[QueueEntry]:
        if not self._available():
            self._arrived.clear()
            try:
                async with asyncio.timeout(wait_s):
                    await self._arrived.wait()
            except TimeoutError:
                return []
        seqs = [s for s in sorted(self._pending) if s not in self._taken][:max_items]
        self._taken.update(seqs)
        return [QueueEntry(str(s), self._pending[s]) for s in seqs]

    def _available(self) -> bool:
        return len(self._pending) > len(self._taken)

    async def ack(self, ids: list[str]) -> None:
        for entry_id in ids:
            seq = int(entry_id)
            self._pending.pop(seq, None)
            self._put_at.pop(seq, None)
            self._taken.discard(seq)
            self._done.add(seq)
        advanced = False
        while self._acked + 1 in self._done:
            self._acked += 1
            self._done.discard(self._acked)
            advanced = True
        if advanced:
            self._write_acked()
        if not self._pending and self._journal.tell() > 0:
            # Nothing left to copy: acked messages do not stay on disk (one syscall).
            self._journal.truncate(0)
            self._journal.seek(0)

    async def release(self, ids: list[str]) -> None:
        for entry_id in ids:
            self._taken.discard(int(entry_id))
        if self._available():
            self._arrived.set()

    def _write_acked(self) -> None:
        tmp = self._acked_path.with_suffix(".tmp")
        tmp.write_text(str(self._acked))
        os.replace(tmp, self._acked_path)

    async def compact(self) -> None:
        # On the loop, without awaiting, so no `put` interleaves (as `put` and `ack` write).
        try:
            self._rewrite()
        except OSError as exc:  # a full or read-only disk: the old journal stays
            raise QueueDown(f"journal {self._journal_path} not rewritten: {exc}") from exc

    def _rewrite(self) -> None:
        """The journal, rewritten with exactly the entries pending now. It replaces the
        old one atomically: a crash leaves one or the other, never a mix."""
        self._journal.flush()
        fd, tmp = tempfile.mkstemp(dir=self._journal_path.parent, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as journal:
                for seq in sorted(self._pending):
                    doc = {"seq": seq, "at": self._put_at[seq], "body": self._pending[seq]}
                    journal.write(json.dumps(doc, separators=(",", ":")) + "\n")
                journal.flush()
                os.fsync(journal.fileno())
            os.replace(tmp, self._journal_path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._journal.close()
        self._journal = self._journal_path.open("a", encoding="utf-8")
        dir_fd = os.open(self._journal_path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    async def pending(self) -> int:
        return len(self._pending)

    async def oldest_put_at(self) -> float | None:
        return min(self._put_at.values(), default=None)

    async def newest_id(self) -> str | None:
        # Sequence numbers grow with each put and go on after a restart (from the journal,
        # or past the last acked one when it was emptied).
        return str(max(self._pending)) if self._pending else None

    async def pending_through(self, mark: str) -> bool:
        return bool(self._pending) and min(self._pending) <= int(mark)

    async def close(self) -> None:
        self._journal.close()
