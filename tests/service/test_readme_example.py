"""The README's first example runs as written against a live server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import re
from pathlib import Path

from tests.conftest import ServerFactory

README = Path(__file__).resolve().parents[2] / "README.md"


def _first_python_block() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert match is not None, "the README has no Python example"
    return match.group(1)


async def test_the_readme_example_adds_retrieves_and_renders(start_server: ServerFactory) -> None:
    server = await start_server()
    code = _first_python_block().replace("127.0.0.1:50051", f"127.0.0.1:{server.port}")
    out = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(out):
            exec(compile(code, str(README), "exec"), {})

    await asyncio.to_thread(run)
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("User enjoys skiing")  # the best match first, with its score
    assert "<memory>" in out.getvalue()
