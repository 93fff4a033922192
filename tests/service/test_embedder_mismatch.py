"""A store built with one embedder is never searched with another: start-up is refused,
and `memoryd reindex` re-embeds it so that the new embedder can serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from memoryd.app import build_app, build_embedder
from memoryd.cli.reindex import reindex
from memoryd.core.startup import StartupRefused
from memoryd.settings import Settings
from memoryd.v1 import memory_pb2 as pb
from tests.conftest import ServerFactory
from tests.support.openai_stub import OpenAIStub, start_openai_stub
from tests.support.rpc import scope


@pytest.fixture
def openai_api() -> Iterator[OpenAIStub]:
    stub = start_openai_stub(dim=8)
    yield stub
    stub.stop()


def openai_settings(data: Path, stub: OpenAIStub) -> Settings:
    return Settings.explicit(
        data_dir=data,
        embedder=stub.embedder_settings(),
    )


async def test_start_up_is_refused_for_a_store_built_with_another_embedder(
    start_server: ServerFactory, openai_api: OpenAIStub, tmp_path: Path
) -> None:
    data = tmp_path / "store"
    first = await start_server(data_dir=data)
    await first.stub.Add(pb.AddRequest(scope=scope("u"), tier=pb.TIER_LONG_TERM, content="hi"))
    await first.server.stop(grace_s=0)

    with pytest.raises(StartupRefused) as refused:
        await build_app(openai_settings(data, openai_api))
    message = str(refused.value)
    assert "384" in message and "8" in message and "memoryd reindex" in message


async def test_reindex_re_embeds_every_memory_for_the_new_embedder(
    start_server: ServerFactory, openai_api: OpenAIStub, tmp_path: Path
) -> None:
    data = tmp_path / "store"
    first = await start_server(data_dir=data)
    added = await first.stub.Add(
        pb.AddRequest(scope=scope("u"), tier=pb.TIER_LONG_TERM, content="User likes tea")
    )
    await first.stub.Add(
        pb.AddRequest(scope=scope("u"), tier=pb.TIER_PERSONA, key="name", content="Ana")
    )
    await first.server.stop(grace_s=0)

    settings = openai_settings(data, openai_api)
    seen: list[tuple[int, int]] = []
    assert reindex(settings, build_embedder(settings), lambda d, t: seen.append((d, t))) == 2
    assert seen[-1] == (2, 2)
    texts = [t for r in openai_api.requests for t in r.body["input"]]
    assert "User likes tea" in texts and "name: Ana" in texts

    app = await build_app(settings)  # the new embedder is accepted now
    try:
        assert app.vectors.dim == 8 and len(app.vectors.retrieve([added.memory_id])) == 1
    finally:
        await app.close()
