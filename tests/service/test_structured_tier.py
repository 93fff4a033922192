"""Structured memory over gRPC: a user's JSON documents, kept whole, searched by meaning
and filtered by their top-level fields (or metadata); 5,000 documents and 50 MB per user;
no TTL; Export/Import give them back unchanged."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from memoryd.v1 import memory_pb2 as pb
from tests.conftest import RunningServer, ServerFactory
from tests.support.clock import MovableClock
from tests.support.rpc import bad_request_fields, quota_failure, rpc_error, scope
from tests.support.vector_stores import QDRANT_LOCAL

SD = pb.TIER_STRUCTURED
DAY = 86_400

ORDER_OPEN = {
    "type": "order",
    "status": "open",
    "total": 42,
    "paid": False,
    "customer": {"name": "Ana Lima", "city": "Lyon"},
    "items": ["hiking boots", "rain jacket"],
}
ORDER_SHIPPED = {"type": "order", "status": "shipped", "total": 19.5, "paid": True}
TICKET = {
    "type": "ticket",
    "status": "open",
    "title": "Cannot log in after password reset",
    "priority": "high",
}


@pytest.fixture(params=["edge", "qdrant_client_local"])
async def vec(request: pytest.FixtureRequest, start_server: ServerFactory) -> RunningServer:
    """A server on each vector adapter: filters must mean the same on both."""
    if request.param == "edge":
        return await start_server()
    return await start_server(**QDRANT_LOCAL)


@pytest.fixture
async def server(start_server: ServerFactory) -> RunningServer:
    return await start_server()


async def store(s: RunningServer, user: str, document: Any, **fields: Any) -> pb.AddResponse:
    text = document if isinstance(document, str) else json.dumps(document)
    return await s.stub.Add(pb.AddRequest(scope=scope(user), tier=SD, document_json=text, **fields))


async def find(
    s: RunningServer, user: str, query: str = "", filters: dict[str, str] | None = None, **kw: Any
) -> list[pb.MemoryItem]:
    reply = await s.stub.Retrieve(
        pb.RetrieveRequest(
            scope=scope(user), tiers=[SD], query=query, filters=filters or {}, top_k=50, **kw
        )
    )
    return list(reply.items)


def docs(items: Sequence[pb.MemoryItem]) -> list[Any]:
    return [json.loads(i.document_json) for i in items]


async def test_a_document_is_kept_whole_and_shown_as_readable_text(
    vec: RunningServer, user_id: str
) -> None:
    text = json.dumps(ORDER_OPEN, indent=2)
    added = await store(vec, user_id, text, metadata={"source": "shop"})
    assert added.operation == pb.OPERATION_ADD and added.quota_remaining == 4999

    [item] = (
        await vec.stub.Get(pb.GetRequest(scope=scope(user_id), tier=SD, ids=[added.memory_id]))
    ).items

    assert item.document_json == text  # byte for byte, as given
    assert (item.tier, item.kind, dict(item.metadata)) == (SD, pb.KIND_DOCUMENT, {"source": "shop"})
    assert item.content.splitlines() == [
        "type: order",
        "status: open",
        "total: 42",
        "paid: false",
        "customer.name: Ana Lima",
        "customer.city: Lyon",
        "items: hiking boots, rain jacket",
    ]
    assert not item.HasField("expires_at")  # no TTL


async def test_a_query_finds_documents_by_meaning(vec: RunningServer, user_id: str) -> None:
    for document in (ORDER_OPEN, ORDER_SHIPPED, TICKET):
        await store(vec, user_id, document)
    found = await find(vec, user_id, "support request: user unable to sign in")
    assert docs(found)[0] == TICKET and 0 < found[0].score <= 1
    boots = await find(vec, user_id, "hiking boots order")
    assert docs(boots)[0] == ORDER_OPEN
    assert await find(vec, f"{user_id}-b", "hiking boots order") == []


async def test_filters_match_top_level_fields_and_metadata(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    for document, meta in ((ORDER_OPEN, {"project": "apollo"}), (ORDER_SHIPPED, {}), (TICKET, {})):
        await store(s, user_id, document, metadata=meta)
        clock.advance(60)

    # No query: every match, newest first.
    assert docs(await find(s, user_id, filters={"type": "order"})) == [ORDER_SHIPPED, ORDER_OPEN]
    assert docs(await find(s, user_id, filters={"status": "open"})) == [TICKET, ORDER_OPEN]
    # Every entry must match; numbers and booleans compare as written in JSON.
    assert docs(await find(s, user_id, filters={"status": "open", "type": "order"})) == [ORDER_OPEN]
    assert docs(await find(s, user_id, filters={"total": "42"})) == [ORDER_OPEN]
    assert docs(await find(s, user_id, filters={"total": "19.5"})) == [ORDER_SHIPPED]
    assert docs(await find(s, user_id, filters={"paid": "true"})) == [ORDER_SHIPPED]
    # A metadata entry is matched too.
    assert docs(await find(s, user_id, filters={"project": "apollo"})) == [ORDER_OPEN]
    # Nested fields and lists are not top-level scalars.
    assert await find(s, user_id, filters={"customer.city": "Lyon"}) == []
    assert await find(s, user_id, filters={"items": "hiking boots"}) == []
    assert await find(s, user_id, filters={"status": "closed"}) == []
    # Filters narrow a query's search as well.
    searched = await find(s, user_id, "order", filters={"status": "shipped"}, min_score=0.0)
    assert docs(searched) == [ORDER_SHIPPED]


async def test_filter_queries_behave_alike_on_both_vector_adapters(
    vec: RunningServer, user_id: str
) -> None:
    for document in (ORDER_OPEN, ORDER_SHIPPED, TICKET):
        await store(vec, user_id, document)
    assert sorted(
        d["status"] for d in docs(await find(vec, user_id, filters={"type": "order"}))
    ) == [
        "open",
        "shipped",
    ]
    assert docs(await find(vec, user_id, filters={"priority": "high"})) == [TICKET]
    assert docs(await find(vec, user_id, filters={"paid": "false", "total": "42"})) == [ORDER_OPEN]


async def test_delete_and_prune_by_a_document_field(vec: RunningServer, user_id: str) -> None:
    ids = [(await store(vec, user_id, d)).memory_id for d in (ORDER_OPEN, ORDER_SHIPPED, TICKET)]
    deleted = await vec.stub.Delete(pb.DeleteRequest(scope=scope(user_id), tier=SD, ids=ids[2:]))
    assert deleted.deleted_count == 1 and vec.app.vectors.retrieve(ids[2:]) == []
    pruned = await vec.stub.Prune(
        pb.PruneRequest(
            scope=scope(user_id),
            tiers=[SD],
            strategy=pb.PRUNE_STRATEGY_BY_FILTER,
            filters={"status": "shipped"},
        )
    )
    assert pruned.deleted_count == 1
    assert docs(await find(vec, user_id)) == [ORDER_OPEN]


def _past() -> Timestamp:
    ts = Timestamp()
    ts.FromSeconds(1_000)
    return ts


BAD_ADDS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("no document", {"document_json": ""}, ["document_json"]),
    ("not JSON", {"document_json": '{"type": "order",'}, ["document_json"]),
    ("a list", {"document_json": "[1, 2]"}, ["document_json"]),
    ("a string", {"document_json": '"order"'}, ["document_json"]),
    ("an empty object", {"document_json": "{}"}, ["document_json"]),
    ("nested too deeply", {"document_json": '{"a":' * 70 + "1" + "}" * 70}, ["document_json"]),
    ("content beside the document", {"content": "an order"}, ["content"]),
    ("a foreign kind", {"kind": pb.KIND_NOTE}, ["kind"]),
    ("an expiry in the past", {"expires_at": _past()}, ["expires_at"]),
    ("an episode", {"episode": pb.Episode(task="t")}, ["episode"]),
    ("bad importance", {"importance": 2.0}, ["importance"]),
    ("no user", {"scope": pb.Scope()}, ["scope.user_id"]),
]


@pytest.mark.parametrize(("case", "fields", "bad"), BAD_ADDS, ids=[c[0] for c in BAD_ADDS])
async def test_a_malformed_document_is_refused_naming_the_field_and_nothing_is_written(
    server: RunningServer, user_id: str, case: str, fields: dict[str, Any], bad: list[str]
) -> None:
    request: dict[str, Any] = {"scope": scope(user_id), "document_json": '{"a": 1}', **fields}
    err = await rpc_error(server.stub.Add(pb.AddRequest(tier=SD, **request)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == bad
    assert await find(server, user_id) == []


async def test_the_refusal_says_what_is_wrong_with_the_json(
    server: RunningServer, user_id: str
) -> None:
    err = await rpc_error(store(server, user_id, '{"type": "order",}'))
    assert "not valid JSON" in (err.details() or "") and "line 1" in (err.details() or "")
    err = await rpc_error(store(server, user_id, "[1, 2]"))
    assert "must be a JSON object" in (err.details() or "")


async def test_a_document_given_to_another_tier_is_refused(
    server: RunningServer, user_id: str
) -> None:
    request = pb.AddRequest(
        scope=scope(user_id), tier=pb.TIER_LONG_TERM, content="note", document_json='{"a": 1}'
    )
    err = await rpc_error(server.stub.Add(request))
    assert bad_request_fields(err) == ["document_json"]


async def test_a_document_over_the_content_limit_is_refused(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(limits={"max_content_bytes": 100})
    err = await rpc_error(store(s, user_id, {"text": "x" * 200}))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["document_json"]
    assert (await store(s, user_id, {"text": "short"})).operation == pb.OPERATION_ADD


async def test_a_full_tier_is_refused_with_the_limit_unless_auto_prune(
    start_server: ServerFactory, user_id: str
) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock, structured={"max_documents": 3})
    ids = []
    for n in range(3):
        clock.advance(1)
        ids.append((await store(s, user_id, {"n": n})).memory_id)

    err = await rpc_error(store(s, user_id, TICKET))

    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 3 documents" in (err.details() or "")
    assert "delete old documents or upgrade" in (err.details() or "")
    assert quota_failure(err).violations[0].subject == f"structured:{user_id}"
    clock.advance(1)
    pruned = await store(s, user_id, TICKET, auto_prune=True)
    assert pruned.operation == pb.OPERATION_ADD_WITH_PRUNE
    got = await s.stub.Get(pb.GetRequest(scope=scope(user_id), tier=SD, ids=ids))
    assert list(got.missing) == ids[:1]
    assert len(await find(s, user_id)) == 3


async def test_a_document_past_the_bytes_quota_is_always_refused(
    start_server: ServerFactory, user_id: str
) -> None:
    s = await start_server(structured={"max_bytes": 100})
    first = json.dumps({"note": "x" * 60})
    await store(s, user_id, first)
    err = await rpc_error(store(s, user_id, {"note": "y" * 60}, auto_prune=True))
    assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max: 100 bytes" in (err.details() or "")
    assert docs(await find(s, user_id)) == [json.loads(first)]


async def test_documents_have_no_ttl(start_server: ServerFactory, user_id: str) -> None:
    clock = MovableClock()
    s = await start_server(clock=clock)
    await store(s, user_id, TICKET)
    clock.advance(3 * 365 * DAY)
    assert docs(await find(s, user_id, "login problem ticket")) == [TICKET]


async def test_usage_counts_documents_and_their_json_bytes(
    server: RunningServer, user_id: str
) -> None:
    texts = [json.dumps(d) for d in (ORDER_OPEN, TICKET)]
    for text in texts:
        await store(server, user_id, text)
    usage = await server.stub.Usage(pb.UsageRequest(scope=scope(user_id)))
    [structured] = [t for t in usage.tiers if t.tier == SD]
    assert (structured.count, structured.bytes) == (2, sum(len(t) for t in texts))
    assert (structured.max_count, structured.max_bytes) == (5000, 50 * 1024 * 1024)
    assert structured.percent == pytest.approx(2 / 5000 * 100)


async def test_export_erase_import_gives_back_the_same_documents(
    vec: RunningServer, user_id: str
) -> None:
    big = {"type": "manual", "body": "Step by step instructions. " * 100}  # stored compressed
    await store(vec, user_id, ORDER_OPEN, metadata={"project": "apollo"})
    await store(vec, user_id, big, importance=0.9)

    async def export() -> tuple[list[pb.MemoryItem], pb.ExportTrailer]:
        items, trailer = [], pb.ExportTrailer()
        async for reply in vec.stub.Export(pb.ExportRequest(scope=scope(user_id), tiers=[SD])):
            if reply.WhichOneof("payload") == "item":
                items.append(reply.item)
            elif reply.WhichOneof("payload") == "trailer":
                trailer = reply.trailer
        return items, trailer

    before, trailer = await export()
    assert docs(before) == [ORDER_OPEN, big] or docs(before) == [big, ORDER_OPEN]
    erased = await vec.stub.Prune(
        pb.PruneRequest(scope=scope(user_id), strategy=pb.PRUNE_STRATEGY_ALL)
    )
    assert [c.count for c in erased.per_tier if c.tier == SD] == [2]
    assert await find(vec, user_id) == []

    def stream() -> Iterator[pb.ImportRequest]:
        yield pb.ImportRequest(scope=scope(user_id))
        for item in before:
            yield pb.ImportRequest(item=item)
        yield pb.ImportRequest(trailer=trailer)

    reply = await vec.stub.Import(stream())
    assert (reply.imported_count, reply.skipped_count) == (2, 0) and reply.checksum_verified
    after, again = await export()
    assert {i.id: i for i in after} == {i.id: i for i in before}
    assert again.checksum_sha256 == trailer.checksum_sha256
    # Filters and search work on the restored documents.
    assert docs(await find(vec, user_id, filters={"project": "apollo"})) == [ORDER_OPEN]
    assert docs(await find(vec, user_id, filters={"type": "manual"})) == [big]


async def test_an_imported_structured_item_with_a_bad_document_is_refused(
    server: RunningServer, user_id: str
) -> None:
    item = pb.MemoryItem(
        id="1f0e6a3c-0000-4000-8000-000000000001",
        tier=SD,
        kind=pb.KIND_DOCUMENT,
        content="x",
        document_json="[not an object]",
    )
    requests = [
        pb.ImportRequest(scope=scope(user_id)),
        pb.ImportRequest(item=item),
        pb.ImportRequest(trailer=pb.ExportTrailer(item_count=1)),
    ]
    err = await rpc_error(server.stub.Import(iter(requests)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert bad_request_fields(err) == ["item.document_json"]
    assert await find(server, user_id) == []
