"""`memoryd health`: what an orchestrator's health check sees, against live servers and
addresses where no server answers."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.cli import health
from memoryd.cli.entry import main
from memoryd.cli.main import main as full_command_line
from tests.conftest import ServerFactory
from tests.support.redis_server import RedisServer, free_port

SERVICE = "memoryd.v1.MemoryService"
SERVICE_DIR = Path(__file__).resolve().parents[2] / "service"


async def run(*argv: str) -> int:
    # A sync gRPC client must not block the event loop that serves the server.
    return await asyncio.to_thread(main, ["health", *argv])


async def test_a_serving_server_exits_0_for_the_whole_server_and_for_memory_service(
    start_server: ServerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    target = f"127.0.0.1:{s.port}"

    assert await run("--target", target) == health.SERVING
    assert capsys.readouterr().out == f'{target} "": SERVING\n'
    assert await run("--target", target, "--service", SERVICE) == health.SERVING
    assert capsys.readouterr().out == f"{target} {SERVICE}: SERVING\n"


async def test_a_server_shutting_down_answers_not_serving_exit_1(
    start_server: ServerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    await s.server.health.shutdown()  # what SIGTERM does first

    for service in ("", SERVICE):
        assert await run("--target", f"127.0.0.1:{s.port}", "--service", service) == 1
        assert capsys.readouterr().out.rstrip().endswith(": NOT_SERVING")


async def test_a_server_whose_redis_is_down_is_not_serving(
    start_server: ServerFactory, tmp_path: Path
) -> None:
    redis = RedisServer(tmp_path)
    s = await start_server(redis_url=redis.url)
    target = f"127.0.0.1:{s.port}"
    assert await run("--target", target, "--service", SERVICE) == health.SERVING

    redis.stop()
    await s.server.health.check_now()
    assert await run("--target", target, "--service", SERVICE) == health.NOT_SERVING


async def test_an_unknown_service_name_exits_4(
    start_server: ServerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    s = await start_server()
    target = f"127.0.0.1:{s.port}"
    assert await run("--target", target, "--service", "no.such.Service") == 4
    assert capsys.readouterr().err == f"{target}: unknown service no.such.Service\n"


def test_nothing_listening_exits_3_saying_unavailable(capsys: pytest.CaptureFixture[str]) -> None:
    target = f"127.0.0.1:{free_port()}"
    assert main(["health", "--target", target]) == health.NO_ANSWER
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"{target}: no answer: UNAVAILABLE")
    assert captured.err.count("\n") == 1


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A port that accepts connections and never says a word: a hung server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_server_that_never_answers_exits_3_after_the_timeout(
    silent_listener: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["health", "--target", f"127.0.0.1:{silent_listener}", "--timeout", "0.5"]
    assert main(argv) == health.NO_ANSWER
    assert "no answer: DEADLINE_EXCEEDED" in capsys.readouterr().err


def test_the_full_command_line_knows_health_too(capsys: pytest.CaptureFixture[str]) -> None:
    target = f"127.0.0.1:{free_port()}"
    assert full_command_line(["health", "--target", target]) == health.NO_ANSWER
    assert "no answer" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("listen", "dialled"),
    [
        ("0.0.0.0:50051", "127.0.0.1:50051"),
        ("[::]:50051", "[::1]:50051"),
        ("10.0.0.7:50051", "10.0.0.7:50051"),
        ("127.0.0.1:7000", "127.0.0.1:7000"),
    ],
)
def test_a_wildcard_listen_address_is_dialled_on_loopback(listen: str, dialled: str) -> None:
    assert health.loopback_target(listen) == dialled


async def subprocess_health(*argv: str, **env: str) -> tuple[int, str, str]:
    environment = {**os.environ, "PYTHONPATH": str(SERVICE_DIR), **env}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "memoryd",
        "health",
        *argv,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_as_a_process_it_dials_memoryd_listen_and_exits_0_when_serving(
    start_server: ServerFactory,
) -> None:
    s = await start_server()
    # The image sets MEMORYD_LISTEN=0.0.0.0:50051 and runs `memoryd health` bare.
    code, out, _ = await subprocess_health(MEMORYD_LISTEN=f"0.0.0.0:{s.port}")
    assert (code, out) == (0, f'127.0.0.1:{s.port} "": SERVING\n')


async def test_as_a_process_it_exits_3_when_nothing_listens() -> None:
    code, out, err = await subprocess_health("--target", f"127.0.0.1:{free_port()}")
    assert code == 3 and out == ""
    assert "UNAVAILABLE" in err


async def test_as_a_process_it_refuses_a_bad_command_line_with_2() -> None:
    code, _, err = await subprocess_health("--timeout", "soon")
    assert code == 2
    assert "invalid float value" in err


async def test_as_a_process_it_refuses_settings_that_cannot_be_used_with_2_in_one_line() -> None:
    code, out, err = await subprocess_health(MEMORYD_LISTEN="127.0.0.1:99999")
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "(MEMORYD_LISTEN): port 99999 is out of range" in err
