"""The `memoryd` command line."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from memoryd.app import StartupRefused, build_app, build_embedder
from memoryd.reindex import ReindexRefused, reindex
from memoryd.settings import Settings, load_settings
from memoryd.transport.server import serve


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memoryd", description="A memory service for AI agents")
    parser.add_argument("--config", type=Path, help="TOML settings file (env vars win over it)")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("serve", help="run the gRPC server")
    run.add_argument("--listen", help="host:port (default from MEMORYD_LISTEN)")
    commands.add_parser(
        "maintain",
        help="archive memories past their retention and purge expired/deleted ones, once "
        "(server stopped)",
    )
    commands.add_parser(
        "reindex", help="re-embed every memory with the configured embedder (server stopped)"
    )
    return parser


def _reindex(settings: Settings) -> int:
    def progress(done: int, total: int) -> None:
        print(f"\rreindexed {done:,} of {total:,} memories", end="", file=sys.stderr, flush=True)

    try:
        copied = reindex(settings, build_embedder(settings), progress)
    except ReindexRefused as exc:
        logging.getLogger("memoryd").error("reindex refused: %s", exc)
        return 2
    print(f"\nreindex done: {copied:,} memories re-embedded", file=sys.stderr)
    return 0


async def _maintain(settings: Settings) -> None:
    app = await build_app(settings)
    try:
        report = await app.maintenance.run_once()
    finally:
        await app.close()
    print(
        f"maintenance done: {report.users:,} users, {report.archived:,} memories archived "
        f"(older than {settings.retention.long_term_archive_after_days} days), "
        f"{report.purged:,} expired or deleted memories purged"
    )


async def _serve(settings: Settings) -> None:
    app = await build_app(settings)
    await serve(settings, app)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = {"listen": args.listen} if getattr(args, "listen", None) else {}
    settings = load_settings(args.config, **overrides)
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command == "serve":
            asyncio.run(_serve(settings))
        elif args.command == "maintain":
            asyncio.run(_maintain(settings))
        elif args.command == "reindex":
            return _reindex(settings)
    except StartupRefused as exc:
        logging.getLogger("memoryd").error("start-up refused: %s", exc)
        return 2
    return 0
