"""The console's way to the service: one gRPC channel, every call sent with the signed-in
operator's credential (the service decides what it may do, never the console)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc


@dataclass(frozen=True)
class ServiceTls:
    """TLS (and mTLS) to the service, as the CLI's --tls-ca/--tls-cert/--tls-key."""

    ca: Path | None = None
    cert: Path | None = None
    key: Path | None = None


class Service:
    def __init__(self, target: str, tls: ServiceTls | None = None, timeout_s: float = 10.0):
        self.target = target
        self._timeout_s = timeout_s
        if tls is not None and tls.ca is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=tls.ca.read_bytes(),
                private_key=tls.key.read_bytes() if tls.key else None,
                certificate_chain=tls.cert.read_bytes() if tls.cert else None,
            )
            self.channel = grpc.aio.secure_channel(target, credentials)
        else:
            self.channel = grpc.aio.insecure_channel(target)
        self._stub = memory_pb2_grpc.MemoryServiceStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)

    def _metadata(self, credential: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {credential}"),) if credential else ()

    async def call(self, rpc: str, request: Any, credential: str) -> Any:
        method = getattr(self._stub, rpc)
        return await method(request, metadata=self._metadata(credential), timeout=self._timeout_s)

    def export(self, request: pb.ExportRequest, credential: str) -> AsyncIterator[Any]:
        call = self._stub.Export(request, metadata=self._metadata(credential), timeout=300.0)
        return aiter(call)

    async def import_(
        self, requests: AsyncIterator[pb.ImportRequest], credential: str
    ) -> pb.ImportResponse:
        """Stream an export to Import (the service checks it whole before writing)."""
        reply: pb.ImportResponse = await self._stub.Import(
            requests, metadata=self._metadata(credential), timeout=300.0
        )
        return reply

    async def health(self, service: str) -> str:
        """The health service's answer for `service` ("" is the server as a whole)."""
        try:
            reply = await self._health.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=self._timeout_s
            )
        except grpc.aio.AioRpcError as err:
            return err.code().name
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))

    async def close(self) -> None:
        await self.channel.close(None)
