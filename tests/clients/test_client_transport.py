"""The client's transport against a scripted gRPC server: gRPC's own retry policy for
UNAVAILABLE, the metadata every call carries, default deadlines, TLS and mTLS, and the
rich error details it turns into exception attributes."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from memoryd_client import (
    NO_RETRY,
    AsyncMemoryClient,
    DeadlineExceeded,
    MemoryClient,
    RateLimited,
    RetryPolicy,
    Unavailable,
)
from tests.support.scripted_server import Script, scripted_server


def status(code: int, message: str, *details: object) -> status_pb2.Status:
    packed = []
    for detail in details:
        any_ = any_pb2.Any()
        any_.Pack(detail)  # type: ignore[arg-type]
        packed.append(any_)
    return status_pb2.Status(code=code, message=message, details=packed)


def unavailable() -> status_pb2.Status:
    delay = duration_pb2.Duration(seconds=2)
    return status(
        code_pb2.UNAVAILABLE,
        "hot store is unavailable",
        error_details_pb2.RetryInfo(retry_delay=delay),
        error_details_pb2.ErrorInfo(reason="STORE_UNAVAILABLE", metadata={"store": "hot store"}),
    )


FAST = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05)


async def test_unavailable_is_retried_by_the_channel_retry_policy() -> None:
    script = Script(failures=[unavailable(), unavailable()])
    async with (
        scripted_server(script) as port,
        AsyncMemoryClient(f"127.0.0.1:{port}", retry=FAST) as client,
    ):
        usage = await client.usage(user_id="ana")
    assert usage.quota_profile == "served ana"
    assert len(script.calls) == 3
    # gRPC's retry machinery (not a loop in the client) numbers the attempts it resends.
    assert [c.get("grpc-previous-rpc-attempts") for c in script.calls] == [None, "1", "2"]
    assert len({c["x-request-id"] for c in script.calls}) == 1  # one call, one request id


async def test_retries_stop_at_max_attempts_and_raise_unavailable_with_its_advice() -> None:
    script = Script(failures=[unavailable() for _ in range(10)])
    async with (
        scripted_server(script) as port,
        AsyncMemoryClient(f"127.0.0.1:{port}", retry=FAST) as client,
    ):
        with pytest.raises(Unavailable) as caught:
            await client.usage(user_id="ana")
    assert len(script.calls) == 4
    assert caught.value.retry_after == 2.0 and caught.value.store == "hot store"


async def test_no_retry_policy_makes_one_attempt() -> None:
    script = Script(failures=[unavailable()])
    async with (
        scripted_server(script) as port,
        AsyncMemoryClient(f"127.0.0.1:{port}", retry=NO_RETRY) as client,
    ):
        with pytest.raises(Unavailable):
            await client.usage(user_id="ana")
    assert len(script.calls) == 1


async def test_other_codes_are_not_retried_and_rate_limits_say_when_to_come_back() -> None:
    delay = duration_pb2.Duration(seconds=1, nanos=500_000_000)
    limited = status(
        code_pb2.RESOURCE_EXHAUSTED,
        "too many calls",
        error_details_pb2.RetryInfo(retry_delay=delay),
        error_details_pb2.ErrorInfo(reason="RATE_LIMITED", domain="memoryd"),
    )
    script = Script(failures=[limited])
    async with scripted_server(script) as port, AsyncMemoryClient(f"127.0.0.1:{port}") as client:
        with pytest.raises(RateLimited) as caught:
            await client.usage(user_id="ana")
    assert len(script.calls) == 1
    assert caught.value.retry_after == 1.5 and caught.value.reason == "RATE_LIMITED"


async def test_every_call_carries_the_api_key_and_a_request_id() -> None:
    script = Script()
    async with scripted_server(script) as port:
        async with AsyncMemoryClient(f"127.0.0.1:{port}", api_key="sk-mem-123") as client:
            await client.usage(user_id="ana", request_id="trace-7")
            await client.usage(user_id="ana")
        async with AsyncMemoryClient(f"127.0.0.1:{port}") as anonymous:
            await anonymous.usage(user_id="ana")
    first, second, third = script.calls
    assert first["authorization"] == "Bearer sk-mem-123" and first["x-request-id"] == "trace-7"
    assert second["authorization"] == "Bearer sk-mem-123" and len(second["x-request-id"]) == 32
    assert "authorization" not in third
    assert first["user-agent"].startswith("memoryd-client-python/")


async def test_calls_have_a_default_deadline_that_the_server_sees() -> None:
    script = Script(hang=True)
    async with (
        scripted_server(script) as port,
        AsyncMemoryClient(f"127.0.0.1:{port}", timeout=0.3) as client,
    ):
        with pytest.raises(DeadlineExceeded):
            await client.usage(user_id="ana")
    remaining = script.time_remaining[0]
    # The server sees a deadline no later than the client's 0.3 s (clocks differ by microseconds).
    assert remaining is not None and 0 < remaining < 0.3 + 0.05


async def test_sync_client_retries_and_raises_the_same_way() -> None:
    script = Script(failures=[unavailable()])
    async with scripted_server(script) as port:

        def call() -> str:
            with MemoryClient(f"127.0.0.1:{port}", api_key="k", retry=FAST) as client:
                return client.usage(user_id="bo").quota_profile

        assert await asyncio.to_thread(call) == "served bo"
    assert len(script.calls) == 2 and script.calls[1]["authorization"] == "Bearer k"


# --- TLS ---------------------------------------------------------------------------


@dataclass
class Pki:
    ca: bytes
    server_cert: bytes
    server_key: bytes
    client_cert: bytes
    client_key: bytes


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    ca: bool = False,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("memoryd.test")]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


@pytest.fixture(scope="module")
def pki() -> Iterator[Pki]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("test CA", ca_key, None, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    client_key = ec.generate_private_key(ec.SECP256R1())
    pem = serialization.Encoding.PEM
    yield Pki(
        ca=ca.public_bytes(pem),
        server_cert=_cert("memoryd.test", server_key, ca.subject, ca_key).public_bytes(pem),
        server_key=_pem_key(server_key),
        client_cert=_cert("agent", client_key, ca.subject, ca_key).public_bytes(pem),
        client_key=_pem_key(client_key),
    )


def _mtls_port(pki: Pki) -> object:
    credentials = grpc.ssl_server_credentials(
        [(pki.server_key, pki.server_cert)], root_certificates=pki.ca, require_client_auth=True
    )
    return lambda server: server.add_secure_port("127.0.0.1:0", credentials)


async def test_mtls_with_a_private_ca_and_a_client_pair(pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_bytes(pki.ca)
    script = Script()
    async with scripted_server(script, _mtls_port(pki)) as port:  # type: ignore[arg-type]
        async with AsyncMemoryClient(
            f"127.0.0.1:{port}",
            root_certificates=tmp_path / "ca.pem",  # a path or PEM bytes
            certificate_chain=pki.client_cert,
            private_key=pki.client_key,
            tls_server_name="memoryd.test",
            retry=NO_RETRY,
        ) as client:
            assert (await client.usage(user_id="ana")).quota_profile == "served ana"
        async with AsyncMemoryClient(
            f"127.0.0.1:{port}",
            root_certificates=pki.ca,
            tls_server_name="memoryd.test",
            retry=NO_RETRY,
        ) as no_pair:
            with pytest.raises(Unavailable):  # the server wants a client certificate
                await no_pair.usage(user_id="ana")
    assert len(script.calls) == 1


def test_an_mtls_half_pair_is_refused() -> None:
    with pytest.raises(ValueError, match="both certificate_chain and private_key"):
        MemoryClient("127.0.0.1:1", certificate_chain=b"cert only")
