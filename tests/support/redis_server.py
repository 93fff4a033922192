"""A private redis-server for tests: its own port and directory, never the machine's 6379.

Fault tests kill it (SIGKILL) and start it again on the same port, with the data it had
persisted (append-only file, `appendfsync everysec` as docs/operations.md advises) or
without any.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """`n` distinct free loopback ports: each socket stays bound until all are chosen (one
    at a time, the kernel may hand out a port it gave a moment before)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


class RedisServer:
    def __init__(
        self, directory: Path, port: int | None = None, *, appendonly: bool = False
    ) -> None:
        """`port`: that of a server stopped before, to start it again at the same address."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (make test installs it)")
        self._binary = binary
        self._dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._appendonly = appendonly
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        persistence = ["--appendonly", "yes", "--appendfsync", "everysec"]
        proc = subprocess.Popen(
            [
                self._binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self._dir),
                "--save",
                "",
                *(persistence if self._appendonly else ["--appendonly", "no"]),
                "--protected-mode",
                "yes",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_ready(proc)
        return proc

    def _wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        proc.kill()
        proc.wait(timeout=10)
        raise RuntimeError("private redis-server did not start")

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no last fsync; what the OS already has survives."""
        self._proc.kill()
        self._proc.wait(timeout=10)

    def restart(self, *, keep_data: bool) -> None:
        """Start again on the same port, with its persisted data or (a fresh node, a
        fail-over to an empty replica) none."""
        if self._proc.poll() is None:
            self.kill()
        if not keep_data:
            shutil.rmtree(self._dir / "appendonlydir", ignore_errors=True)
            (self._dir / "dump.rdb").unlink(missing_ok=True)
        self._proc = self._start()

    def freeze(self) -> None:
        """SIGSTOP: connections stay open and nothing answers (a hung host, a long fork)."""
        self._proc.send_signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)
