"""The `memoryd` console script.

`memoryd health` is routed before the rest of the command line is imported: orchestrators
run it every few seconds, and loading the server's modules would cost about a second of
CPU each time. Everything else, `memoryd --config FILE health` included, goes to
`memoryd.cli.main`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["health"]:
        from memoryd.cli import health

        return health.main(args[1:])
    from memoryd.cli.main import main as full_command_line

    return full_command_line(args)
