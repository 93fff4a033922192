"""The `memoryd` command line."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import time
from pathlib import Path

from memoryd.app import App, build_app, build_embedder, warm_up
from memoryd.cli import progress
from memoryd.cli.backup import BackupCorrupt, backup, restore
from memoryd.cli.client_commands import add_client_commands, run_client_command
from memoryd.cli.compact import compact
from memoryd.cli.health import add_health_command, run_health
from memoryd.cli.keys import add_keys_command, audit_local, run_keys_command
from memoryd.cli.mcp import add_mcp_command, run_mcp_command
from memoryd.cli.offline import OfflineRefused
from memoryd.cli.progress import Progress
from memoryd.cli.reindex import reindex
from memoryd.console.cli import add_console_command, run_console_command
from memoryd.core.memory.vector_memory import VectorMemory
from memoryd.core.startup import startup_refusal
from memoryd.settings import Settings, load_settings
from memoryd.stores.backup.port import BackupStore, BackupStoreError
from memoryd.stores.embeddings import for_preparing
from memoryd.transport.identity import check_exposure
from memoryd.transport.logs import HANDLER_NAME as LOG_HANDLER_NAME
from memoryd.transport.logs import configure_logging
from memoryd.transport.server import check_ports_free, serve
from memoryd.transport.starting import StartingServer


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
    reindexing = commands.add_parser(
        "reindex", help="re-embed every memory with the configured embedder (server stopped)"
    )
    progress.add_option(reindexing)
    commands.add_parser(
        "compact",
        help="rebuild the embedded store's memories into memory-mapped segments: less RAM per "
        "memory and a quicker open (server stopped)",
    )
    commands.add_parser(
        "prepare-embedder",
        help="load the configured embedder once (derives the int8 ONNX graph, or assembles "
        "MPNet's weights and exports its graph, into the user's cache, where every data "
        "directory finds it; run at install)",
    )
    backing_up = commands.add_parser(
        "backup",
        help="write today's per-user backup of long-term and persona memories and delete "
        "backups past their retention (server stopped)",
    )
    progress.add_option(backing_up)
    back = commands.add_parser(
        "restore", help="import backed-up memories again, skipping ids already there"
    )
    back.add_argument("--date", help="backup day YYYY-MM-DD (default: the latest)")
    back.add_argument("--user", help="only this user's backup")
    back.add_argument("--tenant", help="only this tenant's backups")
    progress.add_option(back)
    add_client_commands(commands)
    add_mcp_command(commands)
    add_health_command(commands)
    add_keys_command(commands)
    add_console_command(commands)
    return parser


def _backups_of(app: App) -> tuple[VectorMemory, BackupStore]:
    return app.memory, app.backups


async def _backup(settings: Settings, args: argparse.Namespace) -> int:
    app = await build_app(settings)
    try:
        memory, store = _backups_of(app)
        with Progress("backup", "users", enabled=not args.no_progress) as bar:
            report = await backup(
                app.engine, memory, store, time.time(), settings.backup.retention_days, bar
            )
            bar.close(
                f"backup {report.day} done: backed up {report.users:,} of {bar.total:,} "
                f"users, {report.items:,} memories; {report.days_deleted:,} backup days older "
                f"than {settings.backup.retention_days} days deleted"
            )
    finally:
        await app.close()
    audit_local(settings, "backup", {"event": "backup", "day": report.day, "users": report.users})
    if report.failed:
        print(
            f"backup: {len(report.failed):,} users could not be backed up (see the log): "
            + ", ".join(report.failed),
            file=sys.stderr,
        )
        return 1
    return 0


async def _restore(settings: Settings, args: argparse.Namespace) -> int:
    app = await build_app(settings)
    try:
        _, store = _backups_of(app)
        with Progress("restore", "files", enabled=not args.no_progress) as bar:
            report = await restore(app.engine, store, args.date, args.user, args.tenant, bar)
            if report.day:
                bar.close(
                    f"restore of {report.day} done: {report.users:,} users, "
                    f"{report.imported:,} memories imported, {report.skipped:,} already there"
                )
    except (BackupCorrupt, BackupStoreError) as exc:
        logging.getLogger("memoryd").error("restore refused: %s", exc)
        return 2
    finally:
        await app.close()
    if not report.day:
        print("restore: there are no backups", file=sys.stderr)
        return 1
    audit_local(
        settings,
        "restore",
        {
            "event": "restore",
            "day": report.day,
            "users": report.users,
            "tenant": args.tenant,
            "user_id": args.user,
            "imported": report.imported,
        },
    )
    return 0


def _reindex(settings: Settings, args: argparse.Namespace) -> int:
    try:
        with Progress("reindex", "memories", enabled=not args.no_progress) as bar:
            copied = reindex(settings, build_embedder(settings), bar)
            bar.close(f"reindex done: {copied:,} memories re-embedded")
    except OfflineRefused as exc:
        logging.getLogger("memoryd").error("reindex refused: %s", exc)
        return 2
    return 0


async def _compact(settings: Settings) -> int:
    try:
        report = await compact(settings)
    except OfflineRefused as exc:
        logging.getLogger("memoryd").error("compact refused: %s", exc)
        return 2
    done = "rebuilt" if report.rebuilt else "already compact"
    print(f"compact done: {report.memories:,} memories {done} in {report.seconds:.1f} s")
    return 0


async def _maintain(settings: Settings) -> None:
    app = await build_app(settings)
    try:
        report = await app.maintenance.run_once()
    finally:
        await app.close()
    print(
        f"maintenance done: {report.users:,} users, {report.archived:,} memories archived "
        f"(past retention: long-term {settings.retention.long_term_archive_after_days}, "
        f"structured {settings.retention.structured_archive_after_days}, "
        f"episodic {settings.retention.episodic_archive_after_days} days), "
        f"{report.purged:,} expired or deleted memories purged"
    )


async def _serve(settings: Settings) -> None:
    # Before the model loads: a refusal should be quick.
    check_exposure(settings)
    check_ports_free(settings)
    embedder = build_embedder(settings)
    # The model and dateparser load while the start-up health process starts (a process
    # of its own, ~0.4 s), not after it: the time to SERVING is their sum otherwise.
    warming = asyncio.create_task(asyncio.to_thread(warm_up, embedder))
    try:
        # A large vector store takes seconds to open: meanwhile the port answers health
        # (NOT_SERVING) and the log says how long it has taken so far.
        async with StartingServer(settings) as starting:
            await warming
            app = await build_app(settings, embedder=embedder, warmed=True)
    finally:
        await asyncio.gather(warming, return_exceptions=True)  # refused early: let it end
    await serve(settings.model_copy(update={"listen": starting.listen_for_server()}), app)


def main(argv: list[str] | None = None) -> int:
    try:
        rc = _main(argv)
        sys.stdout.flush()  # now, so that a closed pipe is reported here, not at exit
        return rc
    except BrokenPipeError:
        # Whoever read stdout stopped (`memoryd usage | head -3`): nothing is wrong and
        # nothing is left to say. Point stdout at /dev/null so exit's flush is quiet too.
        # (A stdout that is no file, as when captured, has nothing to flush.)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    try:
        if (rc := run_client_command(args)) is not None:
            return rc
        if args.command == "mcp":
            return run_mcp_command(args)
        if args.command == "health":
            return run_health(args)
        return _run(args)
    except Exception as exc:
        refusal = startup_refusal(exc)
        if refusal is None:
            raise
        if not _logging_configured():  # the settings that choose the format failed
            configure_logging()
        logging.getLogger("memoryd").error("start-up refused: %s", refusal)
        return 2


def _logging_configured() -> bool:
    return any(h.get_name() == LOG_HANDLER_NAME for h in logging.getLogger().handlers)


def _run(args: argparse.Namespace) -> int:
    """A command that reads the settings; a start-up refusal is raised to `_main`."""
    if args.command == "console":  # its --listen is the console's, not the server's
        settings = load_settings(args.config)
        configure_logging(settings.log_level, settings.log_format)
        return run_console_command(args)
    overrides = {"listen": args.listen} if getattr(args, "listen", None) else {}
    settings = load_settings(args.config, **overrides)
    configure_logging(settings.log_level, settings.log_format)
    if args.command == "keys":
        return run_keys_command(args, settings)
    # A server's stderr is its log: no progress bar (the model loader's) belongs there.
    progress.quiet_library_bars(args.command != "serve" and not getattr(args, "no_progress", False))
    if args.command == "serve":
        asyncio.run(_serve(settings))
    elif args.command == "maintain":
        asyncio.run(_maintain(settings))
    elif args.command == "reindex":
        return _reindex(settings, args)
    elif args.command == "compact":
        return asyncio.run(_compact(settings))
    elif args.command == "prepare-embedder":
        embedder = build_embedder(for_preparing(settings))
        embedder.warm()
        print(f"embedder ready: {embedder.name} ({settings.embedder.provider})")
    elif args.command == "backup":
        return asyncio.run(_backup(settings, args))
    elif args.command == "restore":
        return asyncio.run(_restore(settings, args))
    return 0
