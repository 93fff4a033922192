"""Malformed requests get INVALID_ARGUMENT with a BadRequest naming the field; nothing written."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer
from tests.support.rpc import bad_request_fields, rpc_error, scope

W, ST = pb.TIER_WORKING, pb.TIER_SHORT_TERM


def task(user_id: str) -> pb.Scope:
    return scope(user_id, agent_id="agent", task_id="task")


BAD_ADDS: dict[str, tuple[Callable[[str], pb.AddRequest], str]] = {
    "empty content": (
        lambda u: pb.AddRequest(scope=task(u), tier=W, key="k", content=""),
        "content",
    ),
    "blank content": (
        lambda u: pb.AddRequest(scope=task(u), tier=W, key="k", content="  \n"),
        "content",
    ),
    "missing user_id": (
        lambda u: pb.AddRequest(scope=pb.Scope(task_id="t"), tier=W, key="k", content="v"),
        "scope.user_id",
    ),
    "unspecified tier": (lambda u: pb.AddRequest(scope=task(u), key="k", content="v"), "tier"),
    "unknown tier": (lambda u: pb.AddRequest(scope=task(u), tier=99, key="k", content="v"), "tier"),  # type: ignore[arg-type]
    "oversize content": (
        lambda u: pb.AddRequest(scope=task(u), tier=ST, content="x" * 70_000),
        "content",
    ),
    "working entry over the task size": (
        lambda u: pb.AddRequest(scope=task(u), tier=W, key="k", content="x" * 10_300),
        "content",
    ),
    "oversize key": (
        lambda u: pb.AddRequest(scope=task(u), tier=W, key="k" * 300, content="v"),
        "key",
    ),
    "working without key": (lambda u: pb.AddRequest(scope=task(u), tier=W, content="v"), "key"),
    "working without task": (
        lambda u: pb.AddRequest(scope=scope(u), tier=W, key="k", content="v"),
        "scope.task_id",
    ),
    "session-less short-term add": (
        lambda u: pb.AddRequest(scope=scope(u), tier=ST, content="hello"),
        "scope.session_id",
    ),
    "importance out of range": (
        lambda u: pb.AddRequest(scope=task(u), tier=W, key="k", content="v", importance=1.5),
        "importance",
    ),
    "too many metadata entries": (
        lambda u: pb.AddRequest(
            scope=task(u), tier=W, key="k", content="v", metadata={str(i): "x" for i in range(40)}
        ),
        "metadata",
    ),
    "control characters in user_id": (
        lambda u: pb.AddRequest(
            scope=scope("bad\nuser", task_id="t"), tier=W, key="k", content="v"
        ),
        "scope.user_id",
    ),
    "unknown kind": (
        lambda u: pb.AddRequest(scope=task(u), tier=W, key="k", content="v", kind=42),  # type: ignore[arg-type]
        "kind",
    ),
}


@pytest.mark.parametrize("case", BAD_ADDS, ids=list(BAD_ADDS))
async def test_a_bad_add_names_the_field_and_writes_nothing(
    memoryd: RunningServer, user_id: str, case: str
) -> None:
    make, field = BAD_ADDS[case]
    err = await rpc_error(memoryd.stub.Add(make(user_id)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in bad_request_fields(err)
    assert field in (err.details() or "")
    for sc, tier in ((task(user_id), W), (scope(user_id, session_id="s"), ST)):
        left = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=sc, tiers=[tier]))
        assert not left.items


@pytest.mark.parametrize("top_k", [-1, 101, 10_000])
async def test_top_k_out_of_range(memoryd: RunningServer, user_id: str, top_k: int) -> None:
    err = await rpc_error(
        memoryd.stub.Retrieve(pb.RetrieveRequest(scope=task(user_id), tiers=[W], top_k=top_k))
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["top_k"]


async def test_every_problem_of_a_request_is_reported_at_once(memoryd: RunningServer) -> None:
    err = await rpc_error(memoryd.stub.Add(pb.AddRequest(scope=pb.Scope(), tier=W, content="")))
    assert {"scope.user_id", "content", "key", "scope.task_id"} <= set(bad_request_fields(err))


async def test_retrieve_without_user_or_with_a_bad_tier(memoryd: RunningServer) -> None:
    err = await rpc_error(memoryd.stub.Retrieve(pb.RetrieveRequest(tiers=[W])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scope.user_id" in bad_request_fields(err)
    err = await rpc_error(
        memoryd.stub.Retrieve(pb.RetrieveRequest(scope=scope("u"), tiers=[pb.TIER_UNSPECIFIED]))
    )
    assert bad_request_fields(err) == ["tiers[0]"]


async def test_get_and_delete_need_ids_or_keys(memoryd: RunningServer, user_id: str) -> None:
    for call in (
        memoryd.stub.Get(pb.GetRequest(scope=task(user_id), tier=W)),
        memoryd.stub.Delete(pb.DeleteRequest(scope=task(user_id), tier=W)),
    ):
        err = await rpc_error(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_request_fields(err) == ["ids"]


async def test_keys_only_address_keyed_tiers(memoryd: RunningServer, user_id: str) -> None:
    err = await rpc_error(
        memoryd.stub.Get(pb.GetRequest(scope=scope(user_id, session_id="s"), tier=ST, keys=["k"]))
    )
    assert bad_request_fields(err) == ["keys"]


async def test_prune_needs_a_strategy(memoryd: RunningServer, user_id: str) -> None:
    err = await rpc_error(memoryd.stub.Prune(pb.PruneRequest(scope=task(user_id), tiers=[W])))
    assert bad_request_fields(err) == ["strategy"]


LT = pb.TIER_LONG_TERM

BAD_PRUNES = {
    "no strategy": (pb.PruneRequest(tiers=[LT]), "strategy"),
    "unknown strategy": (pb.PruneRequest(tiers=[LT], strategy=99), "strategy"),  # type: ignore[arg-type]
    "percent of zero": (
        pb.PruneRequest(tiers=[LT], strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=0),
        "percent",
    ),
    "percent over 100": (
        pb.PruneRequest(tiers=[LT], strategy=pb.PRUNE_STRATEGY_OLDEST_PERCENT, percent=150),
        "percent",
    ),
    "archive with no age": (
        pb.PruneRequest(tiers=[LT], strategy=pb.PRUNE_STRATEGY_ARCHIVE_OLDER_THAN),
        "older_than_days",
    ),
    "filter prune with no filter": (
        pb.PruneRequest(tiers=[LT], strategy=pb.PRUNE_STRATEGY_BY_FILTER),
        "filters",
    ),
    "unspecified tier": (
        pb.PruneRequest(tiers=[pb.TIER_UNSPECIFIED], strategy=pb.PRUNE_STRATEGY_ALL),
        "tiers[0]",
    ),
}


@pytest.mark.parametrize("case", BAD_PRUNES, ids=list(BAD_PRUNES))
async def test_a_bad_prune_names_the_field_and_removes_nothing(
    memoryd: RunningServer, user_id: str, case: str
) -> None:
    await memoryd.stub.Add(pb.AddRequest(scope=scope(user_id), tier=LT, content="Keep me safe"))
    request, field = BAD_PRUNES[case]
    request.scope.CopyFrom(scope(user_id))
    err = await rpc_error(memoryd.stub.Prune(request))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in bad_request_fields(err)
    left = await memoryd.stub.Retrieve(pb.RetrieveRequest(scope=scope(user_id), tiers=[LT]))
    assert [i.content for i in left.items] == ["Keep me safe"]


async def test_prune_and_export_need_a_user(memoryd: RunningServer) -> None:
    err = await rpc_error(
        memoryd.stub.Prune(pb.PruneRequest(tiers=[LT], strategy=pb.PRUNE_STRATEGY_ALL))
    )
    assert bad_request_fields(err) == ["scope.user_id"]
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in memoryd.stub.Export(pb.ExportRequest()):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(caught.value) == ["scope.user_id"]


async def test_export_of_an_unspecified_tier_is_refused(
    memoryd: RunningServer, user_id: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in memoryd.stub.Export(
            pb.ExportRequest(scope=scope(user_id), tiers=[pb.TIER_UNSPECIFIED])
        ):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(caught.value) == ["tiers[0]"]
