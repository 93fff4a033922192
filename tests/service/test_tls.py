"""TLS and mutual TLS handshakes, with certificates the tests make (cryptography). A client
certificate is a credential: its subject's O is the tenant, OU the role, CN the user."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.cli.client_commands import run_client_command
from memoryd.cli.main import _parser as main_parser
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc
from tests.conftest import ServerFactory
from tests.support.certs import CertificateAuthority, Issued
from tests.support.grants import bearer, error_info, new_key
from tests.support.rpc import rpc_error, scope

LT = pb.TIER_LONG_TERM


@dataclass
class Pki:
    ca: CertificateAuthority
    other_ca: CertificateAuthority
    server: Issued
    alice: Issued  # O=acme OU=agent CN=alice
    stranger: Issued  # the same subject, issued by the other CA
    no_role: Issued  # O=acme CN=alice only


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, other = CertificateAuthority(directory, "ca"), CertificateAuthority(directory, "other")
    return Pki(
        ca=ca,
        other_ca=other,
        server=ca.server(),
        alice=ca.client("alice", CN="alice", O="acme", OU="agent"),
        stranger=other.client("stranger", CN="alice", O="acme", OU="agent"),
        no_role=ca.client("norole", CN="alice", O="acme"),
    )


class Channels:
    def __init__(self, port: int) -> None:
        self.target = f"127.0.0.1:{port}"
        self._open: list[grpc.aio.Channel] = []

    def secure(self, ca: Path, client: Issued | None = None) -> grpc.aio.Channel:
        key, chain = (client.key.read_bytes(), client.cert.read_bytes()) if client else (None, None)
        credentials = grpc.ssl_channel_credentials(ca.read_bytes(), key, chain)
        channel = grpc.aio.secure_channel(self.target, credentials)
        self._open.append(channel)
        return channel

    def plain(self) -> grpc.aio.Channel:
        channel = grpc.aio.insecure_channel(self.target)
        self._open.append(channel)
        return channel

    async def close(self) -> None:
        for channel in self._open:
            await channel.close(None)


@pytest.fixture
async def channels() -> AsyncIterator[list[Channels]]:
    made: list[Channels] = []
    yield made
    for c in made:
        await c.close()


def tls(pki: Pki, **extra: Any) -> dict[str, Any]:
    return {"cert_file": pki.server.cert, "key_file": pki.server.key, **extra}


def stub(channel: grpc.aio.Channel) -> memory_pb2_grpc.MemoryServiceAsyncStub:
    return memory_pb2_grpc.MemoryServiceStub(channel)


async def refused_handshake(channel: grpc.aio.Channel) -> None:
    call = stub(channel).Usage(pb.UsageRequest(scope=scope("alice")), timeout=10)
    err = await rpc_error(call)
    assert err.code() == grpc.StatusCode.UNAVAILABLE


async def test_tls_carries_api_keys_and_refuses_plaintext_and_untrusted_servers(
    start_server: ServerFactory, pki: Pki, tmp_path: Path, channels: list[Channels]
) -> None:
    keys = tmp_path / "keys.jsonl"
    token = new_key(keys, "acme", "agent", ("alice",))
    s = await start_server(tls=tls(pki), auth={"keys_file": keys})
    c = Channels(s.port)
    channels.append(c)
    good = stub(c.secure(pki.ca.pem))
    await good.Add(
        pb.AddRequest(scope=scope("alice"), tier=LT, content="tea"), metadata=bearer(token)
    )
    reply = await good.Usage(pb.UsageRequest(scope=scope("alice")), metadata=bearer(token))
    assert {t.tier: t.count for t in reply.tiers}[LT] == 1
    await refused_handshake(c.plain())
    await refused_handshake(c.secure(pki.other_ca.pem))  # the client does not trust the server


async def test_mtls_the_client_certificate_is_the_credential(
    start_server: ServerFactory, pki: Pki, channels: list[Channels]
) -> None:
    s = await start_server(tls=tls(pki, client_ca_file=pki.ca.pem))
    c = Channels(s.port)
    channels.append(c)
    channel = c.secure(pki.ca.pem, pki.alice)
    alice = stub(channel)
    await alice.Add(pb.AddRequest(scope=scope("alice"), tier=LT, content="alice likes tea"))
    reply = await alice.Retrieve(
        pb.RetrieveRequest(scope=scope("alice"), tiers=[LT], min_score=0.0)
    )
    assert [i.content for i in reply.items] == ["alice likes tea"]
    err = await rpc_error(alice.Usage(pb.UsageRequest(scope=scope("bob"))))
    assert (err.code(), error_info(err).reason) == (
        grpc.StatusCode.PERMISSION_DENIED,
        "USER_NOT_GRANTED",
    )
    health = health_pb2_grpc.HealthStub(channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


async def test_mtls_handshakes_fail_for_a_certificate_of_another_ca_or_none(
    start_server: ServerFactory, pki: Pki, channels: list[Channels]
) -> None:
    s = await start_server(tls=tls(pki, client_ca_file=pki.ca.pem))
    c = Channels(s.port)
    channels.append(c)
    await refused_handshake(c.secure(pki.ca.pem, pki.stranger))
    await refused_handshake(c.secure(pki.ca.pem))


async def test_a_certificate_naming_no_role_is_unauthenticated(
    start_server: ServerFactory, pki: Pki, channels: list[Channels]
) -> None:
    s = await start_server(tls=tls(pki, client_ca_file=pki.ca.pem))
    c = Channels(s.port)
    channels.append(c)
    err = await rpc_error(
        stub(c.secure(pki.ca.pem, pki.no_role)).Usage(pb.UsageRequest(scope=scope("alice")))
    )
    assert (err.code(), error_info(err).reason) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "CREDENTIAL_INVALID",
    )


async def test_under_mtls_an_api_key_speaks_for_the_call_instead_of_the_certificate(
    start_server: ServerFactory, pki: Pki, tmp_path: Path, channels: list[Channels]
) -> None:
    keys = tmp_path / "keys.jsonl"
    token = new_key(keys, "acme", "reader", ("bob",))
    s = await start_server(tls=tls(pki, client_ca_file=pki.ca.pem), auth={"keys_file": keys})
    c = Channels(s.port)
    channels.append(c)
    both = stub(c.secure(pki.ca.pem, pki.alice))
    await both.Usage(pb.UsageRequest(scope=scope("bob")), metadata=bearer(token))
    err = await rpc_error(both.Usage(pb.UsageRequest(scope=scope("alice")), metadata=bearer(token)))
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED
    await both.Usage(pb.UsageRequest(scope=scope("alice")))  # the certificate's own user


async def test_client_commands_reach_a_tls_server_with_tls_ca_and_api_key(
    start_server: ServerFactory, pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = tmp_path / "keys.jsonl"
    token = new_key(keys, "acme", "agent", ("alice",))
    s = await start_server(tls=tls(pki), auth={"keys_file": keys})

    def usage(*extra: str) -> int | None:
        argv = ["usage", "--target", f"127.0.0.1:{s.port}", "--user", "alice", "--timeout", "10"]
        return run_client_command(main_parser().parse_args([*argv, *extra]))

    assert await asyncio.to_thread(usage, "--tls-ca", str(pki.ca.pem), "--api-key", token) == 0
    assert "quota profile" in capsys.readouterr().out
    assert await asyncio.to_thread(usage, "--api-key", token) == 1  # plaintext to a TLS port
    assert "UNAVAILABLE" in capsys.readouterr().err
