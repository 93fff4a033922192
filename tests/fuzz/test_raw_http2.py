"""Requests no gRPC client sends, written as raw HTTP/2 frames (the `h2` package): the
server answers them without writing a credential to its log, and goes on serving."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import grpc
import h2.config
import h2.connection
import h2.events
import pytest

from memoryd.transport.grpc_logs import WITHHELD
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory
from tests.support.grants import Caller, new_key
from tests.support.rpc import scope


def raw_grpc_call(port: int, path: str, headers: list[tuple[bytes, bytes]], body: bytes) -> int:
    """One unary call over a fresh HTTP/2 connection; returns its grpc-status (-1: none)."""
    config = h2.config.H2Configuration(
        client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False
    )
    conn = h2.connection.H2Connection(config=config)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        conn.initiate_connection()
        stream = conn.get_next_available_stream_id()
        conn.send_headers(
            stream,
            [
                (b":method", b"POST"),
                (b":scheme", b"http"),
                (b":path", path.encode()),
                (b":authority", f"127.0.0.1:{port}".encode()),
                (b"content-type", b"application/grpc"),
                (b"te", b"trailers"),
                *headers,
            ],
        )
        conn.send_data(stream, b"\x00" + len(body).to_bytes(4, "big") + body, end_stream=True)
        sock.sendall(conn.data_to_send())
        status = -1
        while True:
            data = sock.recv(65536)
            if not data:
                return status
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                    for name, value in event.headers:
                        if name == b"grpc-status":
                            status = int(value)
                if isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                    return status
            sock.sendall(conn.data_to_send())


async def test_a_key_with_a_non_utf8_byte_in_the_header_is_never_logged(
    start_server: ServerFactory,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
    user_id: str,
) -> None:
    keys = tmp_path / "keys.jsonl"
    token = new_key(keys, "acme", "admin")
    s = await start_server(auth={"keys_file": keys})
    body = pb.UsageRequest(scope=scope(user_id)).SerializeToString()
    header = (b"authorization", b"Bearer " + token.encode() + b"\xff")
    with caplog.at_level(logging.DEBUG):
        statuses = [
            await asyncio.to_thread(
                raw_grpc_call, s.port, "/memoryd.v1.MemoryService/Usage", [header], body
            )
            for _ in range(20)
        ]
    assert statuses == [grpc.StatusCode.UNAUTHENTICATED.value[0]] * 20
    # What the server logged (the test's own HTTP/2 client logs what it sends: not those).
    server_records = [r for r in caplog.records if not r.name.startswith(("hpack", "h2"))]
    logged = "\n".join(
        f"{r.getMessage()} {r.exc_info or ''} {r.exc_text or ''}" for r in server_records
    )
    err = capfd.readouterr().err
    secret = token.rsplit("_", 1)[-1]
    assert secret not in logged and secret not in err
    # One short line for the 20 requests (each used to log the key three times, with a
    # traceback each: about 14 KB a request).
    withheld = [r for r in server_records if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in withheld] == [WITHHELD]
    assert withheld[0].levelno == logging.WARNING and withheld[0].exc_info is None
    # The server goes on serving the same key, well formed.
    reply = await Caller(s.channel, token).Usage(pb.UsageRequest(scope=scope(user_id)))
    assert reply.quota_profile and not reply.skipped_tiers
