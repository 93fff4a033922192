"""A memoryd that wants API keys and gives one user a tight rate on a clock that stands
still: one query and two writes a minute, so the second query is past the limit for as
long as the test runs (no timing involved)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.grants import new_key

# A profile of the tests' own, named on the key (a key's rate profile).
TIGHT = {"profiles": {"tight": {"queries_per_minute": 1, "writes_per_minute": 2}}}


@dataclass(frozen=True)
class LimitedServer:
    server: RunningServer
    key: str  # an agent key for `user`, with the tight rate profile
    keys_file: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server.port}"


async def limited_server(start_server: ServerFactory, tmp_path: Path, user: str) -> LimitedServer:
    keys_file = tmp_path / "keys.jsonl"
    keys_file.touch()
    server = await start_server(
        clock=MovableClock(1_700_000_000.0), auth={"keys_file": keys_file}, quotas=TIGHT
    )
    key = new_key(keys_file, "acme", "agent", (user,), profile="tight")
    return LimitedServer(server, key, keys_file)
