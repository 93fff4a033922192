"""The contract's tiers and kinds are declared in the proto (and, for the core, in the domain
enums of `core/models.py`); the clients derive theirs from the generated descriptors. A
module that keeps its own list of tier or kind names (a hand-copied enum, a name → number
table) drifts the day a tier is added: these tests find such copies in the Python client,
the service, the TypeScript client and the Go example."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memoryd_client.v1 import memory_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]

# Where an enum may be spelled out member by member, and why.
DECLARATIONS = {
    # Generated from the descriptors by scripts/gen_clients.sh (checked fresh below).
    "clients/python/memoryd_client/_enums.py",
    # The core's domain enums; transport/convert.py maps them to the proto's by name.
    "service/memoryd/core/models.py",
    # The registry: the one list of tiers and of the kinds each owns (test_tier_registry).
    "service/memoryd/core/tiers/registry.py",
}


def _names(enum: object) -> set[str]:
    """An enum's member names as callers write them: `long_term` for TIER_LONG_TERM."""
    zero = enum.values_by_number[0].name  # type: ignore[attr-defined]
    prefix = zero.removesuffix("UNSPECIFIED")
    return {v.name.removeprefix(prefix).lower() for v in enum.values if v.number}  # type: ignore[attr-defined]


ENUMS = {"Tier": _names(pb.Tier.DESCRIPTOR), "Kind": _names(pb.Kind.DESCRIPTOR)}
# How many members make a copy: any two tiers (a set of tiers is a registry trait, as
# test_tier_registry holds for the service), a majority of the kinds (a tier's own kinds or
# the kinds an extracted fact may take are named subsets, not a copy of the list).
LIST = {"Tier": 2, "Kind": len(ENUMS["Kind"]) // 2 + 1}


def _python_files() -> list[Path]:
    roots = [ROOT / "service/memoryd", ROOT / "clients/python/memoryd_client"]
    return sorted(
        p
        for root in roots
        for p in root.rglob("*.py")
        if "v1" not in p.relative_to(root).parts
        and p.relative_to(ROOT).as_posix() not in DECLARATIONS
    )


def _member_name(node: ast.expr, enum: str) -> str | None:
    """The member a literal element names: "long_term", "LONG_TERM", Tier.LONG_TERM."""
    # Exact spellings only: "Episode" in an `__all__` is a class, not the kind.
    text = node.value if isinstance(node, ast.Constant) else None
    if isinstance(text, str) and text in (text.lower(), text.upper()):
        name = text.lower().replace("-", "_").removeprefix(enum.lower() + "_")
        return name if name in ENUMS[enum] else None
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == enum
        and node.attr.lower() in ENUMS[enum]
    ):
        return node.attr.lower()
    return None


def python_copies(source: str, where: str) -> list[str]:
    """Literal collections naming `LIST` members of one enum or more, and classes spelling
    out as many as attributes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        elements: list[ast.expr] = []
        if isinstance(node, ast.Set | ast.List | ast.Tuple):
            elements = list(node.elts)
        elif isinstance(node, ast.Dict):
            elements = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.ClassDef):
            elements = [
                ast.Constant(t.id.lower())
                for s in node.body
                if isinstance(s, ast.Assign)
                for t in s.targets
                if isinstance(t, ast.Name) and t.id.isupper()
            ]
        for enum in ENUMS:
            if len({_member_name(e, enum) for e in elements} - {None}) >= LIST[enum]:
                found.append(f"{where}:{getattr(node, 'lineno', '?')} ({enum})")
    return found


def source_copies(text: str, where: str) -> list[str]:
    """TypeScript and Go: a line of code (comments removed) naming `LIST` members of one
    enum or more (three tiers at least: prose such as "long-term or persona" is no table) as
    keys, strings or generated constants (`short_term:`, "persona", `Tier_TIER_ENTITY`)."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)[0]
        for enum, names in ENUMS.items():
            words = {
                w.lower().removeprefix(enum.lower() + "_") for w in re.findall(r"[A-Za-z_]+", code)
            }
            if len(words & names) >= max(3, LIST[enum]):
                found.append(f"{where}:{number} ({enum})")
    return found


def test_the_finders_see_a_hand_copied_table() -> None:
    old_ts = "const tierNames = { working: 1, short_term: 2, long_term: 3, persona: 4 };"
    old_py = 'class Tier(StrEnum):\n    WORKING = "working"\n    PERSONA = "persona"\n'
    assert source_copies(old_ts, "client.ts") == ["client.ts:1 (Tier)"]
    assert python_copies(old_py, "_enums.py") == ["_enums.py:1 (Tier)"]
    kinds = '("fact", "KIND_NOTE", "preference", "message", "episode")'
    assert python_copies(f"KINDS = {kinds}", "x.py") == ["x.py:1 (Kind)"]
    assert python_copies('HOT = {Tier.WORKING, "short_term"}', "x.py") == ["x.py:1 (Tier)"]
    assert python_copies("names = ', '.join(Tier)", "x.py") == []
    assert python_copies('__all__ = ["Episode", "Relation"]', "x.py") == []


def test_no_client_or_service_module_keeps_its_own_list_of_tiers_or_kinds() -> None:
    offenders = [
        c
        for p in _python_files()
        for c in python_copies(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())
    ]
    others = [
        *(ROOT / "clients/typescript/src").glob("*.ts"),
        *(ROOT / "clients/go/example").rglob("*.go"),
    ]
    offenders += [
        c
        for p in sorted(others)
        for c in source_copies(p.read_text(encoding="utf-8"), p.relative_to(ROOT).as_posix())
    ]
    assert offenders == [], "derive these from the generated enums: " + ", ".join(offenders)


def test_the_python_clients_enums_are_generated_fresh(tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", "scripts/gen_clients.sh", "python", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr
    fresh = (tmp_path / "clients/python/memoryd_client/_enums.py").read_text(encoding="utf-8")
    committed = (ROOT / "clients/python/memoryd_client/_enums.py").read_text(encoding="utf-8")
    assert fresh == committed, "the client's enums are stale: run `make gen`"


@pytest.mark.parametrize("enum", sorted(pb.DESCRIPTOR.enum_types_by_name))
def test_the_python_client_has_every_enum_of_the_contract(enum: str) -> None:
    import memoryd_client._enums as enums

    assert {m.value for m in getattr(enums, enum)} - {"unspecified"} == _names(
        pb.DESCRIPTOR.enum_types_by_name[enum]
    )
