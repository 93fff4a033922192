"""`memoryd mcp`: the MCP server of the client distribution (memoryd_client.mcp_server),
under the server's command line. It talks to memoryd over gRPC like any other client."""

from __future__ import annotations

import argparse
import sys


def add_mcp_command(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser(
        "mcp", help="run an MCP server (stdio, or --http) exposing memory tools for one user"
    )
    try:
        from memoryd_client.mcp_server import add_arguments
    except ImportError:  # the client distribution is not installed: say so when used
        return
    add_arguments(parser)


def run_mcp_command(args: argparse.Namespace) -> int:
    try:
        from memoryd_client.mcp_server import run
    except ImportError:
        print("memoryd mcp: install memoryd-client[mcp] (make install does)", file=sys.stderr)
        return 2
    return run(args)
