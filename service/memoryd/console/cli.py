"""`memoryd console --target HOST:PORT [--listen 127.0.0.1:8080]`: serve the console."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path


def add_console_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "console", help="serve the operator's web console (a gRPC client of the service)"
    )
    p.add_argument("--target", required=True, help="host:port of the memoryd service")
    p.add_argument("--listen", default="127.0.0.1:8080", help="host:port of the console")
    p.add_argument("--metrics-url", help="the service's Prometheus endpoint, for the health page")
    p.add_argument(
        "--session-key-file",
        type=Path,
        help="a Fernet key (urlsafe base64 of 32 bytes) that encrypts the session cookies; "
        "replicas sharing it share sign-ins (without it: a key of this process)",
    )
    p.add_argument("--idle-minutes", type=float, default=15.0, help="sign out after this idle time")
    p.add_argument("--tls-ca", type=Path, help="CA of the service's certificate (TLS to it)")
    p.add_argument("--tls-cert", type=Path, help="client certificate for mTLS to the service")
    p.add_argument("--tls-key", type=Path, help="its private key")
    p.add_argument("--certfile", type=Path, help="serve the console over HTTPS: certificate")
    p.add_argument("--keyfile", type=Path, help="and its private key")


def run_console_command(args: argparse.Namespace) -> int:
    # Imported here: the rest of the command line does not need the web stack.
    import uvicorn

    from memoryd.console.app import Console, create_app
    from memoryd.console.service import Service, ServiceTls
    from memoryd.console.sessions import BadSessionKey, load_key

    try:
        key = load_key(args.session_key_file) if args.session_key_file else None
    except (OSError, BadSessionKey) as err:
        print(f"memoryd console: --session-key-file: {err}", file=sys.stderr)
        return 2

    host, _, port = args.listen.rpartition(":")
    service = Service(args.target, ServiceTls(args.tls_ca, args.tls_cert, args.tls_key))
    secure = args.certfile is not None
    console = Console(
        service,
        idle_s=args.idle_minutes * 60,
        metrics_url=args.metrics_url,
        secure_cookies=secure,
        session_key=key,
    )
    config = uvicorn.Config(
        create_app(console),
        host=host.strip("[]") or "127.0.0.1",
        port=int(port),
        # Our own access log (no query strings: they carry queries); uvicorn's is off.
        access_log=False,
        log_config=None,
        ssl_certfile=str(args.certfile) if secure else None,
        ssl_keyfile=str(args.keyfile) if args.keyfile else None,
        server_header=False,
    )
    print(f"memoryd console on {'https' if secure else 'http'}://{args.listen} -> {args.target}")
    asyncio.run(uvicorn.Server(config).serve())
    return 0
