"""The layers of docs/ARCHITECTURE.md, checked on every import of the service (those inside
functions and under TYPE_CHECKING included): dependencies point down only, and a store is
reached above its own package through its port.

    cli                           may import anything below
    console                       a gRPC client: the stubs and the export stream format only
    app (the composition root)    core, stores, telemetry; never transport
    transport                     core, telemetry, store ports; never app or an adapter
    telemetry                     core, store ports
    core                          store ports; no gRPC, no store client, no adapter
    stores                        their own packages; nothing of ours above

A port may be imported from any layer above the stores; an adapter only by the composition
root (and the command line).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import memoryd

PACKAGE = Path(memoryd.__file__).resolve().parent

# What a module of each layer must not import (a name or any module under it).
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "memoryd.console": (
        "memoryd.transport",
        "memoryd.app",
        "memoryd.cli",
        "memoryd.core",
        "memoryd.stores",
        "memoryd.telemetry",
        "memoryd.settings",
    ),
    "memoryd.app": ("memoryd.transport", "memoryd.cli", "memoryd.console"),
    "memoryd.transport": ("memoryd.app", "memoryd.cli", "memoryd.console", "memoryd.stores"),
    "memoryd.telemetry": (
        "memoryd.app",
        "memoryd.cli",
        "memoryd.console",
        "memoryd.transport",
        "memoryd.stores",
        "grpc",
    ),
    "memoryd.core": (
        "memoryd.app",
        "memoryd.cli",
        "memoryd.console",
        "memoryd.transport",
        "memoryd.telemetry",
        "memoryd.stores",
        "memoryd.v1",
        "grpc",
        "google.rpc",
        "redis",
        "qdrant_edge",
        "qdrant_client",
        "prometheus_client",
        "opentelemetry",
    ),
    "memoryd.stores": (
        "memoryd.app",
        "memoryd.cli",
        "memoryd.console",
        "memoryd.transport",
        "memoryd.telemetry",
        "memoryd.core",
        "memoryd.v1",
    ),
}

# Allowed by name, with the reason: qdrant_edge's BM25 model is pure computation (no I/O,
# no store), and the one tokeniser both vector backends and the keyword lift must share;
# the console writes export files in the export stream's format.
EXCEPTIONS: dict[str, tuple[str, ...]] = {
    "memoryd.core.retrieval.bm25": ("qdrant_edge.Bm25", "qdrant_edge.Bm25Config"),
    "memoryd.console": ("memoryd.transport.export_stream",),
}


def is_port(module: str) -> bool:
    """A store port, or a name in one: `memoryd.stores.<port>.port[.<name>]`, and the
    per-request budget every network adapter honours and the transport sets
    (`stores/call_budget.py`)."""
    parts = module.split(".")
    return parts[:2] == ["memoryd", "stores"] and (
        (len(parts) >= 4 and parts[3] == "port") or parts[2] == "call_budget"
    )


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """Every name `path` imports, absolute: `from memoryd.stores import hot` names
    `memoryd.stores.hot`, `from memoryd.stores.hot.port import HotStore` names
    `memoryd.stores.hot.port.HotStore`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def breaches(path: Path) -> list[str]:
    own = module_name(path)
    forbidden = [bad for layer, rule in FORBIDDEN.items() if under(own, layer) for bad in rule]
    allowed = [name for layer, names in EXCEPTIONS.items() if under(own, layer) for name in names]
    return [
        f"{own}:{line} imports {imported}"
        for line, imported in imports_of(path)
        if not is_port(imported)
        and imported not in allowed
        and any(under(imported, bad) for bad in forbidden)
    ]


def test_every_import_of_the_service_points_down_its_layers() -> None:
    found = [b for path in sorted(PACKAGE.rglob("*.py")) for b in breaches(path)]
    assert found == []


def test_a_store_port_is_told_from_an_adapter() -> None:
    assert is_port("memoryd.stores.hot.port.HotStore")
    assert is_port("memoryd.stores.call_budget")
    assert not is_port("memoryd.stores.hot.redis_store")
    assert not is_port("memoryd.stores.keys.file.KeysFile")
    assert not is_port("memoryd.stores.hot")
