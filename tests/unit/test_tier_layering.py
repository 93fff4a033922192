"""Tiers reach the vector store only through `VectorMemory`, whose methods say what each
store call is for; no tier calls `memory.store` itself."""

from __future__ import annotations

import ast
from pathlib import Path

from memoryd.core.tiers import registry

TIERS_DIR = Path(registry.__file__).resolve().parent


def _reaches(path: Path) -> list[str]:
    """`memory.store` / `self._memory.store` in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or node.attr != "store":
            continue
        owner = node.value
        name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
        if name in ("memory", "_memory"):
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_no_tier_reaches_past_vector_memory_to_the_store() -> None:
    assert [r for path in sorted(TIERS_DIR.glob("*.py")) for r in _reaches(path)] == []
