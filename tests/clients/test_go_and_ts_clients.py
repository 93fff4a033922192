"""The TypeScript and Go clients' generated code is fresh, and the Go example (built with
Debian's Go toolchain and packaged grpc/protobuf libraries, GOPATH mode) works against a
live memoryd. The TypeScript client's own tests run with `npm test` (.ci/run)."""

from __future__ import annotations

import asyncio
import filecmp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ServerFactory
from tests.support.limited_server import limited_server

ROOT = Path(__file__).resolve().parents[2]
GO_PACKAGE = "memoryd.dev/client"


def _generate(which: str, out: Path) -> None:
    result = subprocess.run(
        ["bash", "scripts/gen_clients.sh", which, str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stderr


def _same_tree(fresh: Path, committed: Path) -> list[str]:
    fresh_files = sorted(p.relative_to(fresh).as_posix() for p in fresh.rglob("*") if p.is_file())
    kept = sorted(p.relative_to(committed).as_posix() for p in committed.rglob("*") if p.is_file())
    assert fresh_files == kept, "generated files were added or removed: run scripts/gen_clients.sh"
    _, mismatch, errors = filecmp.cmpfiles(fresh, committed, fresh_files, shallow=False)
    return mismatch + errors


def test_typescript_generated_code_is_not_stale(tmp_path: Path) -> None:
    if not (ROOT / "clients/typescript/node_modules/.bin/protoc-gen-es").exists():
        pytest.skip("protoc-gen-es is not installed: npm ci in clients/typescript")
    _generate("typescript", tmp_path)
    stale = _same_tree(tmp_path / "clients/typescript/src/gen", ROOT / "clients/typescript/src/gen")
    assert not stale, f"stale TypeScript code {stale}: run scripts/gen_clients.sh"


def test_go_generated_code_is_not_stale(tmp_path: Path) -> None:
    if not (shutil.which("protoc-gen-go") and shutil.which("protoc-gen-go-grpc")):
        pytest.skip("protoc-gen-go / protoc-gen-go-grpc are not installed (make go-deps)")
    _generate("go", tmp_path)
    stale = _same_tree(tmp_path / "clients/go/memorydv1", ROOT / "clients/go/memorydv1")
    assert not stale, f"stale Go code {stale}: run scripts/gen_clients.sh"


@pytest.fixture(scope="module")
def go_example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("go") or not Path("/usr/share/gocode/src/google.golang.org/grpc").is_dir():
        pytest.skip("Debian's Go toolchain and golang-google-grpc-dev are not installed")
    gopath = tmp_path_factory.mktemp("gopath")
    (gopath / "src" / "memoryd.dev").mkdir(parents=True)
    (gopath / "src" / GO_PACKAGE).symlink_to(ROOT / "clients" / "go")
    binary = gopath / "example"
    env = {
        **os.environ,
        "GO111MODULE": "off",  # no module proxy here: the packaged libraries, GOPATH mode
        "GOPATH": f"{gopath}:/usr/share/gocode",
        "GOFLAGS": "",
    }
    build = subprocess.run(
        ["go", "build", "-o", str(binary), f"{GO_PACKAGE}/example"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    return binary


async def test_the_go_example_talks_to_a_live_memoryd(
    go_example: Path, start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server()
    proc = await asyncio.create_subprocess_exec(
        str(go_example),
        "-target",
        f"127.0.0.1:{s.port}",
        "-user",
        user_id,
        "-api-key",
        "sk-go",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[0] == "health: SERVING"
    assert lines[1].startswith("added: ") and lines[1].endswith("OPERATION_ADD")
    assert lines[2].endswith("Prefers window seats on long flights")
    assert '<item kind="preference"' in out.decode()


async def test_the_go_example_says_when_a_query_was_rate_limited(
    go_example: Path, start_server: ServerFactory, tmp_path: Path, user_id: str
) -> None:
    # One query a minute: the Retrieve is answered, the RenderContext after it is not.
    limited = await limited_server(start_server, tmp_path, user_id)
    proc = await asyncio.create_subprocess_exec(
        str(go_example),
        "-target",
        limited.target,
        "-user",
        user_id,
        "-api-key",
        limited.key,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert lines[2].endswith("Prefers window seats on long flights")
    assert lines[-1].startswith("context: rate limited: ")
