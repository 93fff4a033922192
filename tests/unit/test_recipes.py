"""CONTRIBUTING.md's recipes are claims about the tree: each `recipe` block lists the files
a change of that kind touches. Every listed path exists, and each list holds the files the
tree says must change: the modules the registry and access tests name, the proto, and
every file that spells out an existing example of the thing (the structured and episodic
tiers, the AddBatch RPC), generated ones included."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

from memoryd.core.models import Tier
from memoryd.settings import Settings
from memoryd.transport import identity, limits, servicer
from memoryd.v1 import memory_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
STORES = ROOT / "service/memoryd/stores"
BLOCK = re.compile(r"^```recipe ([\w-]+)\n(.*?)^```", re.DOTALL | re.MULTILINE)
# Where files that a change must touch live; tests and prose docs are the author's choice.
SCANNED = ("service", "clients", "proto", "docs/reference")
SKIPPED = ("node_modules", "dist", "test", "__pycache__")


class Recipe:
    def __init__(self, body: str) -> None:
        self.globs: list[str] = []
        self.packages: set[str] = set()
        for line in body.splitlines():
            if line.startswith("# packages:"):
                self.packages = set(line.removeprefix("# packages:").split())
            elif line.strip() and not line.startswith("#"):
                glob = re.sub(r"<[a-z]+>", "*", line.split()[0])
                self.globs.append(re.sub(r"\*+", "*", glob))

    def lists(self, path: str) -> bool:
        return any(fnmatch(path, g) for g in self.globs)


def recipes() -> dict[str, Recipe]:
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    return {name: Recipe(body) for name, body in BLOCK.findall(text)}


RECIPES = recipes()


def relative(path: str | Path) -> str:
    return Path(path).resolve().relative_to(ROOT).as_posix()


def spelling(pattern: str) -> list[str]:
    """Files where a change must be made (not tests, not prose docs) that match `pattern`."""
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            parts = path.relative_to(ROOT).parts
            if not path.is_file() or any(p in SKIPPED for p in parts):
                continue
            if path.suffix not in {".py", ".pyi", ".ts", ".go", ".proto", ".md"}:
                continue
            if re.search(pattern, path.read_text(encoding="utf-8", errors="replace")):
                found.append(relative(path))
    return found


def test_contributing_has_the_recipes() -> None:
    assert set(RECIPES) == {
        "add-a-tier",
        "add-an-rpc",
        "add-an-adapter-by-name",
        "add-a-redis-family-port",
        "add-an-adapter-without-registry",
        "change-a-console-page",
    }


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_listed_path_exists(name: str) -> None:
    missing = [g for g in RECIPES[name].globs if not any(ROOT.glob(g))]
    assert missing == [], f"{name} lists paths the tree does not have"


def _home(module: str, name: str) -> str:
    """The file that defines what `from module import name` imports (a value: `module`)."""
    found = getattr(importlib.import_module(module), name)
    home = found if inspect.ismodule(found) else inspect.getmodule(found)
    return relative(inspect.getfile(home or importlib.import_module(module)))


def test_a_tier_recipe_lists_every_module_the_registry_test_names() -> None:
    test = ast.parse((ROOT / "tests/unit/test_tier_registry.py").read_text(encoding="utf-8"))
    imports = [n for n in ast.walk(test) if isinstance(n, ast.ImportFrom)]
    named = {
        _home(node.module, alias.name)
        for node in imports
        if node.module and node.module.startswith("memoryd")
        for alias in node.names
    }
    named.add(f"proto/{pb.DESCRIPTOR.name}")  # the Tier enum the models convert to by name
    assert {"service/memoryd/core/tiers/registry.py", "service/memoryd/settings.py"} <= named
    assert sorted(p for p in named if not RECIPES["add-a-tier"].lists(p)) == []


@pytest.mark.parametrize("tier", ["STRUCTURED", "EPISODIC"])
def test_a_tier_recipe_lists_every_file_that_spells_an_existing_tier(tier: str) -> None:
    """Adding a tier changes the files where one of its siblings is spelled as an enum
    member, the generated ones included."""
    assert tier in Tier.__members__
    unlisted = [p for p in spelling(rf"\b(TIER_)?{tier}\b") if not RECIPES["add-a-tier"].lists(p)]
    assert unlisted == []


def test_an_rpc_recipe_lists_what_the_access_and_isolation_tests_require() -> None:
    required = {
        f"proto/{pb.DESCRIPTOR.name}",
        relative(inspect.getfile(identity)),  # ACTIONS (tests/unit/test_access.py)
        relative(inspect.getfile(limits)),  # QUERIES / WRITES
        relative(inspect.getfile(servicer)),
        "tests/service/test_tenant_isolation.py",  # fails until every RPC is exercised
    }
    assert set(identity.ACTIONS) >= set(
        pb.DESCRIPTOR.services_by_name["MemoryService"].methods_by_name
    )
    assert {p for p in required if not RECIPES["add-an-rpc"].lists(p)} == set()


# Files that name AddBatch for what is its own, not an RPC's: a batch's write tokens taken
# at once, and the per-item error details.
BATCH_ONLY = {
    "service/memoryd/core/rate_limits.py",
    "service/memoryd/transport/status_map.py",
    "docs/reference/errors.md",
}


def test_an_rpc_recipe_lists_every_file_that_addbatch_touched() -> None:
    spelled = spelling(r"AddBatch|add_batch|addBatch")
    assert set(spelled) >= BATCH_ONLY  # an exception that no longer applies goes
    unlisted = [p for p in spelled if p not in BATCH_ONLY and not RECIPES["add-an-rpc"].lists(p)]
    assert unlisted == []


def _kind_of_store(package: str) -> str:
    module = importlib.import_module(f"memoryd.stores.{package}")
    if not hasattr(module, "ADAPTERS"):
        return "add-an-adapter-without-registry"
    if "redis_adapter(" in inspect.getsource(module):
        return "add-a-redis-family-port"
    return "add-an-adapter-by-name"


def test_the_adapter_recipes_name_every_store_package_by_how_its_adapter_is_chosen() -> None:
    packages = sorted(p.name for p in STORES.iterdir() if (p / "__init__.py").is_file())
    claimed = {package: name for name, recipe in RECIPES.items() for package in recipe.packages}
    assert claimed == {p: _kind_of_store(p) for p in packages}


def test_the_adapter_recipes_list_what_the_registry_test_names() -> None:
    by_name = RECIPES["add-an-adapter-by-name"]
    for package in RECIPES["add-an-adapter-by-name"].packages:
        assert by_name.lists(f"service/memoryd/stores/{package}/__init__.py")
    assert by_name.lists(relative(inspect.getfile(Settings)))
    family = RECIPES["add-a-redis-family-port"]
    assert family.lists("tests/unit/test_adapter_registries.py")
    assert family.lists(relative(inspect.getfile(importlib.import_module("memoryd.app"))))
