"""`memoryd health`: ask a server's grpc.health.v1 service; exit 0 only when it is SERVING.

Any orchestrator can run it (the image's HEALTHCHECK does). It prints one line and exits:

    0  SERVING
    1  NOT_SERVING (or UNKNOWN): the server answered that it is not ready
    2  bad command line (argparse), or settings that cannot be used (one line naming it)
    3  no answer: nothing listens there, the call timed out, or it failed otherwise
    4  the server does not know the service name asked for

It runs every few seconds for the life of a container, so it imports gRPC and the
settings only: `memoryd.cli.entry` routes `memoryd health` here before the server's
modules are loaded (they cost about a second of CPU per call).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVING = 0
NOT_SERVING = 1
NO_ANSWER = 3
UNKNOWN_SERVICE = 4

DEFAULT_TIMEOUT_S = 3.0

# A server bound to every address is asked on loopback: the wildcard is no destination.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]", "": "127.0.0.1"}


@dataclass(frozen=True)
class HealthAnswer:
    exit_code: int
    line: str


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target",
        help="host:port of the server (default: MEMORYD_LISTEN, a wildcard host asked on loopback)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"seconds to wait for the answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--service",
        default="",
        help='service to ask about: "" (default) for the whole server, or e.g. '
        "memoryd.v1.MemoryService",
    )


def add_health_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add `health` to the `memoryd` command line."""
    add_arguments(
        subparsers.add_parser(
            "health", help="check a running server's gRPC health; exit 0 when SERVING"
        )
    )


def loopback_target(listen: str) -> str:
    """The address to dial for a server listening on `listen`."""
    host, sep, port = listen.rpartition(":")
    if not sep:
        return listen
    return f"{_WILDCARDS.get(host, host)}:{port}"


def check(target: str, service: str = "", timeout_s: float = DEFAULT_TIMEOUT_S) -> HealthAnswer:
    """One Check call; never raises for what the server or the network answers."""
    name = service or '""'
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
            if code == grpc.StatusCode.NOT_FOUND:
                return HealthAnswer(UNKNOWN_SERVICE, f"{target}: unknown service {name}")
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            return HealthAnswer(NO_ANSWER, f"{target}: no answer: {code.name}: {details}")
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    serving = reply.status == health_pb2.HealthCheckResponse.SERVING
    return HealthAnswer(SERVING if serving else NOT_SERVING, f"{target} {name}: {status}")


def run_health(args: argparse.Namespace) -> int:
    target: str | None = args.target
    if target is None:
        from memoryd.settings import InvalidSettings, load_settings

        config: Path | None = getattr(args, "config", None)
        try:
            target = loopback_target(load_settings(config).listen)
        except InvalidSettings as exc:
            print(f"memoryd health: {exc}", file=sys.stderr)
            return 2
    answer = check(target, args.service, args.timeout)
    answered = answer.exit_code in (SERVING, NOT_SERVING)
    print(answer.line, file=sys.stdout if answered else sys.stderr)
    return answer.exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """`memoryd health ...` without the rest of the command line (see the module doc)."""
    parser = argparse.ArgumentParser(
        prog="memoryd health", description="Check a running server's gRPC health."
    )
    add_arguments(parser)
    return run_health(parser.parse_args(argv))
