"""Audit log as an append-only JSON Lines file, each line fsynced."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memoryd.stores.audit.port import AuditLogError


class JsonlAuditLog:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()

    def append(self, entry: Mapping[str, Any]) -> None:
        line = json.dumps(dict(entry), ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            with self._lock:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                with self._path.open("a", encoding="utf-8") as f:
                    f.write(line)
                    f.flush()
                    os.fsync(f.fileno())
        except OSError as exc:
            raise AuditLogError(f"cannot write {self._path}: {exc}") from exc
