"""The contract: buf lint is clean and the committed stubs match the proto."""

from __future__ import annotations

import filecmp
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_buf_lint_is_clean() -> None:
    buf = Path(sys.executable).parent / "buf"
    result = subprocess.run([str(buf), "lint"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_stubs_are_not_stale(tmp_path: Path) -> None:
    subprocess.run(
        ["bash", "scripts/gen_stubs.sh", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    fresh = tmp_path / "memoryd" / "v1"
    committed = ROOT / "service" / "memoryd" / "v1"
    names = sorted(p.name for p in fresh.iterdir() if p.is_file())
    _, mismatch, errors = filecmp.cmpfiles(fresh, committed, names, shallow=False)
    assert not mismatch and not errors, f"stale stubs {mismatch + errors}: run `make gen`"
