"""Client commands of the `memoryd` CLI: export, import, prune and usage against a running
server, over gRPC. `main` adds them with `add_client_commands` and runs them with
`run_client_command`.

Each takes `--api-key` (or MEMORYD_API_KEY), sent as `authorization: Bearer <key>`, and
`--tls` (system roots) or `--tls-ca` for a TLS server (with `--tls-cert`/`--tls-key` for
mutual TLS). `memoryd mcp` spells its flags the same; its older spellings (`--user-id`,
`--ca-cert`, `--client-cert`, `--client-key`) are accepted here too, out of the help.

An export file holds JSON lines, one `ExportResponse` each (header, items, trailer), as
the server streamed them (transport.export_stream, docs/reference/export-format.md);
`import` streams such a file back, so the trailer's checksum is verified by the server.
Export and import show their progress on stderr (see `memoryd.cli.progress`); `-q` /
`--no-progress` turns it off.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TextIO

import grpc

from memoryd.cli import progress
from memoryd.cli.progress import Progress
from memoryd.settings import load_settings
from memoryd.transport import export_stream
from memoryd.v1 import memory_pb2 as pb
from memoryd.v1 import memory_pb2_grpc

_COMMANDS = ("export", "import", "prune", "usage")
_TIERS = {n.removeprefix("TIER_").lower(): v for n, v in pb.Tier.items() if v}
_STRATEGIES = {
    n.removeprefix("PRUNE_STRATEGY_").lower(): v for n, v in pb.PruneStrategy.items() if v
}
_STDOUT = Path("-")


class _Failed(Exception):
    """A local problem (file, format); reported like a gRPC error, exit 1."""


def _tier(name: str) -> int:
    value = _TIERS.get(name.lower().replace("-", "_"))
    if value is None:
        raise argparse.ArgumentTypeError(f"unknown tier {name!r}; one of {', '.join(_TIERS)}")
    return value


def _filter(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"filter {text!r} must be key=value")
    return key, value


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--target", help="host:port of the server (default: MEMORYD_LISTEN / settings)"
    )
    parser.add_argument("--timeout", type=float, help="seconds per call (default: none)")
    # One spelling across the client commands and `memoryd mcp` (memoryd_client.mcp_server).
    parser.add_argument("--user", help="user_id of the scope (required)")
    parser.add_argument("--api-key", help="API key (default: MEMORYD_API_KEY)")
    parser.add_argument("--tls", action="store_true", help="TLS with the system's CA roots")
    parser.add_argument(
        "--tls-ca", type=Path, help="CA certificate (PEM) of a TLS server; without it: plaintext"
    )
    parser.add_argument("--tls-cert", type=Path, help="client certificate (PEM), for mutual TLS")
    parser.add_argument("--tls-key", type=Path, help="client private key (PEM), for mutual TLS")
    # memoryd mcp's earlier spellings, kept working and out of the help.
    parser.add_argument("--user-id", dest="user", help=argparse.SUPPRESS)
    for old, dest in (("--ca-cert", "tls_ca"), ("--client-cert", "tls_cert")):
        parser.add_argument(old, dest=dest, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--client-key", dest="tls_key", type=Path, help=argparse.SUPPRESS)


def _tiers_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tiers",
        nargs="+",
        type=_tier,
        default=[],
        metavar="TIER",
        help=f"tiers ({', '.join(_TIERS)}); default: every tier",
    )


def add_client_commands(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add export, import, prune and usage to the `memoryd` command line."""
    export = subparsers.add_parser("export", help="export a user's memories to a JSON-lines file")
    _common(export)
    _tiers_option(export)
    export.add_argument("--include-archived", action="store_true")
    export.add_argument(
        "-o", "--output", type=Path, default=_STDOUT, help="file to write (default, or -: stdout)"
    )
    progress.add_option(export)

    imp = subparsers.add_parser("import", help="import a JSON-lines export file for a user")
    _common(imp)
    imp.add_argument("file", type=Path)
    progress.add_option(imp)

    prune = subparsers.add_parser("prune", help="prune a user's memories")
    _common(prune)
    _tiers_option(prune)
    prune.add_argument(
        "--strategy", required=True, choices=sorted(_STRATEGIES), help="what to prune"
    )
    prune.add_argument("--percent", type=float, default=0.0, help="oldest_percent: 0 < P <= 100")
    prune.add_argument("--older-than-days", type=int, default=0, help="archive_older_than: N")
    prune.add_argument(
        "--filter",
        dest="filters",
        action="append",
        type=_filter,
        default=[],
        metavar="KEY=VALUE",
        help="by_filter: metadata equality (repeatable)",
    )
    prune.add_argument("--dry-run", action="store_true", help="report, change nothing")

    usage = subparsers.add_parser("usage", help="print a user's usage per tier")
    _common(usage)


def run_client_command(args: argparse.Namespace) -> int | None:
    """Run one of the commands above; None when `args.command` is not one of them."""
    command = getattr(args, "command", None)
    if command not in _COMMANDS:
        return None
    if not args.user:  # checked here: argparse's `required` would refuse --user-id
        print(f"memoryd {command}: --user required", file=sys.stderr)
        return 2
    settings = load_settings()
    target = args.target or settings.listen
    key = args.api_key or (settings.api_key.get_secret_value() if settings.api_key else None)
    # Every call carries the key; a stub wrapper would hide that from the call sites.
    args.metadata = (("authorization", f"Bearer {key}"),) if key else ()
    try:
        with _channel(target, args) as channel:
            stub = memory_pb2_grpc.MemoryServiceStub(channel)
            if command == "export":
                return _export(stub, args)
            if command == "import":
                return _import(stub, args)
            if command == "prune":
                return _prune(stub, args)
            return _usage(stub, args)
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = err.details() if isinstance(err, grpc.Call) else str(err)
        print(f"memoryd {command}: {code.name}: {details}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # stdout's reader went away: `main` ends quietly
    except (_Failed, OSError) as err:
        print(f"memoryd {command}: {err}", file=sys.stderr)
        return 1


def _channel(target: str, args: argparse.Namespace) -> grpc.Channel:
    if args.tls_ca is None and not args.tls:
        if args.tls_cert or args.tls_key:
            raise _Failed("--tls-cert and --tls-key need --tls-ca or --tls")
        return grpc.insecure_channel(target)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise _Failed("--tls-cert and --tls-key go together")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=args.tls_ca.read_bytes() if args.tls_ca else None,
        private_key=args.tls_key.read_bytes() if args.tls_key else None,
        certificate_chain=args.tls_cert.read_bytes() if args.tls_cert else None,
    )
    return grpc.secure_channel(target, credentials)


def _scope(args: argparse.Namespace) -> pb.Scope:
    return pb.Scope(user_id=args.user)


def _export(stub: memory_pb2_grpc.MemoryServiceStub, args: argparse.Namespace) -> int:
    request = pb.ExportRequest(
        scope=_scope(args), tiers=args.tiers, include_archived=args.include_archived
    )
    path: Path = args.output
    to_stdout = path == _STDOUT
    # Bar frames between data lines on one terminal would garble both: plain lines then.
    tty = False if to_stdout and progress.is_tty(sys.stdout) else None
    with Progress("export", "items", enabled=not args.no_progress, tty=tty) as bar:
        if to_stdout:
            items = _write_export(
                stub.Export(request, timeout=args.timeout, metadata=args.metadata), sys.stdout, bar
            )
            sys.stdout.flush()
        else:
            partial = path.with_name(path.name + ".partial")
            with partial.open("w", encoding="utf-8") as out:
                items = _write_export(
                    stub.Export(request, timeout=args.timeout, metadata=args.metadata), out, bar
                )
            partial.replace(path)  # only a complete export takes the file's name
        bar.close(f"exported {items:,} items to {'stdout' if to_stdout else path}")
    return 0


def _write_export(stream: Iterable[pb.ExportResponse], out: TextIO, bar: Progress) -> int:
    """Write the stream as JSON lines; the header's total is the bar's."""
    items = total = 0
    for message in stream:
        out.write(export_stream.to_json_line(message))
        out.write("\n")
        kind = message.WhichOneof("payload")
        if kind == "header":
            total = message.header.total
            bar(items, total)
        elif kind == "item":
            items += 1
            bar(items, total)
    return items


def _read_export(lines: TextIO, path: Path) -> Iterator[pb.ExportResponse]:
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield export_stream.from_json_line(line)
        except export_stream.NotAnExportLine as err:
            raise _Failed(f"{path}:{number}: not an export line: {err}") from err


def _import(stub: memory_pb2_grpc.MemoryServiceStub, args: argparse.Namespace) -> int:
    path: Path = args.file
    sent = 0
    problem: _Failed | None = None
    bar = Progress("import", "items", enabled=not args.no_progress)

    def requests(lines: TextIO) -> Iterator[pb.ImportRequest]:
        # Runs on gRPC's sending thread: a bad line ends the stream (the server then
        # refuses it for its missing trailer) and is reported once the call returns.
        nonlocal sent, problem
        first = True
        total = 0  # the file's header says how many items follow
        try:
            for message in _read_export(lines, path):
                request = export_stream.import_request(message)
                if first:
                    request.scope.CopyFrom(_scope(args))
                    first = False
                kind = message.WhichOneof("payload")
                if kind == "header":
                    total = message.header.total
                    bar(sent, total)
                elif kind == "item":
                    sent += 1
                    bar(sent, total)
                yield request
        except _Failed as err:
            problem = err
            return
        # Everything is sent; the server now checks the checksum and embeds and stores
        # every item before it answers (seconds for a large file): say so meanwhile.
        bar.wait("sent; memoryd is verifying and storing them")

    with bar, path.open(encoding="utf-8") as lines:
        try:
            reply = stub.Import(requests(lines), timeout=args.timeout, metadata=args.metadata)
        except grpc.RpcError:
            if problem is not None:
                raise problem from None
            raise
        if problem is not None:
            raise problem
        bar.close()  # the final count sent; the server's answer goes to stdout
    verified = "checksum verified" if reply.checksum_verified else "no checksum"
    print(f"imported {reply.imported_count:,} items, skipped {reply.skipped_count:,} ({verified})")
    return 0


def _prune(stub: memory_pb2_grpc.MemoryServiceStub, args: argparse.Namespace) -> int:
    request = pb.PruneRequest(
        scope=_scope(args),
        tiers=args.tiers,
        strategy=_STRATEGIES[args.strategy],
        percent=args.percent,
        older_than_days=args.older_than_days,
        filters=dict(args.filters),
        dry_run=args.dry_run,
    )
    reply = stub.Prune(request, timeout=args.timeout, metadata=args.metadata)
    verb = "would delete" if reply.dry_run else "deleted"
    line = f"{verb} {reply.deleted_count:,}"
    if reply.archived_count:
        line += f", {'would archive' if reply.dry_run else 'archived'} {reply.archived_count:,}"
    print(line)
    for count in reply.per_tier:
        print(f"  {pb.Tier.Name(count.tier).removeprefix('TIER_').lower()}: {count.count:,}")
    return 0


def _usage(stub: memory_pb2_grpc.MemoryServiceStub, args: argparse.Namespace) -> int:
    reply = stub.Usage(
        pb.UsageRequest(scope=_scope(args)), timeout=args.timeout, metadata=args.metadata
    )
    rows = [("tier", "count", "max_count", "bytes", "max_bytes", "percent")]
    for t in reply.tiers:
        rows.append(
            (
                pb.Tier.Name(t.tier).removeprefix("TIER_").lower(),
                f"{t.count:,}",
                f"{t.max_count:,}" if t.max_count else "-",
                f"{t.bytes:,}",
                f"{t.max_bytes:,}" if t.max_bytes else "-",
                f"{t.percent:.1f}%",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        rest = zip(row[1:], widths[1:], strict=True)
        cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in rest]
        print("  ".join(cells).rstrip())
    # The user's storage quotas; an API key's --rate-profile may set other rate limits.
    print(f"quota profile: {reply.quota_profile}")
    print(f"estimated monthly cost: ${reply.estimated_monthly_cost_usd:.4f}")
    for alert in reply.alerts:
        print(f"{alert.level}: {alert.message}")
    return 0
