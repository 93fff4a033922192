"""The test suite is a package: its helpers are imported as `tests.support.<module>`, and no
test directory is on the import path, so nothing under tests/ can shadow a module of
benchmarks/ or evals/ (both on pytest's path)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_tests_is_not_on_the_import_path() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    paths = config["tool"]["pytest"]["ini_options"]["pythonpath"]
    assert not [p for p in paths if p == "tests" or p.startswith("tests/")]
    assert not [p for p in config["tool"]["mypy"]["mypy_path"] if p.startswith("tests")]


def test_every_test_directory_is_a_package() -> None:
    directories = {
        path.parent
        for path in (ROOT / "tests").rglob("*.py")
        if "node_modules" not in path.parts and "__pycache__" not in path.parts
    }
    assert (
        sorted(str(d.relative_to(ROOT)) for d in directories if not (d / "__init__.py").exists())
        == []
    )
