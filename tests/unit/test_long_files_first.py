"""tests/conftest.py queues its LONG_FILES first under xdist: each must still name a test
file (a renamed one would silently go back to the end of the queue)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_FILES

ROOT = Path(__file__).resolve().parents[2]


def test_every_long_file_is_a_test_file() -> None:
    assert [f for f in LONG_FILES if not (ROOT / f).is_file()] == []
    assert all(Path(f).name.startswith("test_") for f in LONG_FILES)
    assert len(set(LONG_FILES)) == len(LONG_FILES)
