"""Pure metric functions: per case from returned and relevant ids, then aggregated.

See evals/README.md for their definitions. Nothing here needs a server or the model.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any


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


def pooled_recall(pairs: Sequence[tuple[int, int]]) -> float:
    """Found ÷ total over (found, total) pairs pooled together, so a question with more
    evidence weighs more; 0 when there is nothing to find."""
    return sum(f for f, _ in pairs) / max(1, sum(t for _, t in pairs))
