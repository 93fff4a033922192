"""A private 3-master Redis Cluster for tests: local redis-server processes on free
loopback ports joined by `redis-cli --cluster create`; never the machine's 6379."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.redis_server import free_ports


class RedisCluster:
    def __init__(self, directory: Path, masters: int = 3) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError("redis-server and redis-cli are needed (make test installs them)")
        self._cli = cli
        self.ports: list[int] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        # A client port and a bus port per node, all distinct (a node whose two ports
        # collide never starts). The bus port is set: the default (port + 10000) may be taken.
        ports = free_ports(2 * masters)
        try:
            for n in range(masters):
                node_dir = directory / f"node-{n}"
                node_dir.mkdir(parents=True, exist_ok=True)
                port, bus = ports[2 * n], ports[2 * n + 1]
                self._procs.append(
                    subprocess.Popen(
                        [
                            server,
                            "--port", str(port),
                            "--cluster-port", str(bus),
                            "--bind", "127.0.0.1",
                            "--dir", str(node_dir),
                            "--cluster-enabled", "yes",
                            "--cluster-config-file", "nodes.conf",
                            "--cluster-node-timeout", "5000",
                            "--save", "",
                            "--appendonly", "no",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )  # fmt: skip
                self.ports.append(port)
            for port in self.ports:
                self._wait_for(port, "PING", "PONG")
            nodes = [f"127.0.0.1:{p}" for p in self.ports]
            subprocess.run(
                [cli, "--cluster", "create", *nodes, "--cluster-replicas", "0", "--cluster-yes"],
                check=True,
                capture_output=True,
                timeout=60,
            )
            # Every node must agree before clients route by slot.
            for port in self.ports:
                self._wait_for(port, "CLUSTER INFO", "cluster_state:ok")
        except BaseException:
            self.stop()
            raise
        self.url = f"redis://127.0.0.1:{self.ports[0]}"

    def _wait_for(self, port: int, command: str, expected: str) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            reply = subprocess.run(
                [self._cli, "-h", "127.0.0.1", "-p", str(port), *command.split()],
                capture_output=True,
                text=True,
                timeout=5,
            )
            if expected in reply.stdout:
                return
            time.sleep(0.05)
        raise RuntimeError(f"redis cluster node {port} never answered {expected!r}")

    def flush(self) -> None:
        """Empty every master (a cluster has only database 0)."""
        for port in self.ports:
            subprocess.run(
                [self._cli, "-h", "127.0.0.1", "-p", str(port), "FLUSHALL"],
                check=True,
                capture_output=True,
                timeout=10,
            )

    def stop(self) -> None:
        for proc in self._procs:
            proc.terminate()
        for proc in self._procs:
            proc.wait(timeout=10)


def on_family(fixture: str, family: str) -> pytest.MarkDecorator:
    """A test runs on one Redis family (`"redis"` or `"redis_cluster"`) where `fixture` is
    parametrized by both. For the scenarios of several `memoryd serve` processes: each
    start costs seconds of CPU, so their modules split the scenarios between the families,
    and what differs between them (the stream, the lease, the counters on one node or
    across slots) is covered per family by the stores' contract suites."""
    return pytest.mark.parametrize(fixture, [family], indirect=True)
