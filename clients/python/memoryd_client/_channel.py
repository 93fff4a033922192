"""Channel set-up shared by both clients: credentials, the retry policy as a gRPC service
config, and the per-call metadata (API key, x-request-id)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

SERVICE = "memoryd.v1.MemoryService"
HEALTH_SERVICE = "grpc.health.v1.Health"
USER_AGENT = "memoryd-client-python/0.1.0"

# Default deadlines (seconds): unary calls, and whole Export / Import streams.
DEFAULT_TIMEOUT = 10.0
DEFAULT_STREAM_TIMEOUT = 300.0


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of UNAVAILABLE with exponential backoff, done by gRPC itself from the
    channel's service config (gRFC A6): attempt n waits a random time up to
    min(initial_backoff * multiplier**(n-1), max_backoff). Retries stop at the deadline."""

    max_attempts: int = 4
    initial_backoff: float = 0.1
    max_backoff: float = 2.0
    backoff_multiplier: float = 2.0
    retryable_status_codes: tuple[str, ...] = ("UNAVAILABLE",)

    def service_config(self) -> str:
        policy = {
            "maxAttempts": self.max_attempts,
            "initialBackoff": f"{self.initial_backoff}s",
            "maxBackoff": f"{self.max_backoff}s",
            "backoffMultiplier": self.backoff_multiplier,
            "retryableStatusCodes": list(self.retryable_status_codes),
        }
        names = [{"service": SERVICE}, {"service": HEALTH_SERVICE}]
        return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})


NO_RETRY = RetryPolicy(max_attempts=1)


def _pem(value: bytes | str | Path | None) -> bytes | None:
    """PEM bytes as given, or read from a path."""
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


@dataclass(frozen=True)
class ChannelConfig:
    target: str
    api_key: str | None = None
    tls: bool | None = None
    root_certificates: bytes | str | Path | None = None
    certificate_chain: bytes | str | Path | None = None
    private_key: bytes | str | Path | None = None
    tls_server_name: str | None = None
    retry: RetryPolicy | None = None
    options: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if (self.certificate_chain is None) != (self.private_key is None):
            raise ValueError("mTLS needs both certificate_chain and private_key")

    @property
    def secure(self) -> bool:
        explicit = self.root_certificates, self.certificate_chain, self.tls_server_name
        return bool(self.tls) or any(v is not None for v in explicit)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=_pem(self.root_certificates),
            private_key=_pem(self.private_key),
            certificate_chain=_pem(self.certificate_chain),
        )

    def channel_options(self) -> list[tuple[str, Any]]:
        retry = self.retry if self.retry is not None else RetryPolicy()
        options: list[tuple[str, Any]] = [("grpc.primary_user_agent", USER_AGENT)]
        if retry.max_attempts > 1:  # gRPC refuses a retry policy of fewer than 2 attempts
            options += [("grpc.enable_retries", 1), ("grpc.service_config", retry.service_config())]
        else:
            options.append(("grpc.enable_retries", 0))
        if self.tls_server_name:
            options.append(("grpc.ssl_target_name_override", self.tls_server_name))
        return options + list(self.options)

    def metadata(self, request_id: str | None) -> tuple[tuple[str, str], ...]:
        rid = request_id or uuid.uuid4().hex
        if self.api_key:
            return (("x-request-id", rid), ("authorization", f"Bearer {self.api_key}"))
        return (("x-request-id", rid),)


def request_id_of(metadata: tuple[tuple[str, str], ...]) -> str:
    return metadata[0][1]
