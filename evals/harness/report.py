"""What a golden-set run prints (failing and noisy cases, the table, the gates) and the
JSON report it can write."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.dataset import CATEGORIES
from harness.gates import WARN_P95_MS
from harness.metrics import CaseMetrics, percentile, summarize
from harness.runner import CaseResult, Run


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


def _case_dict(run: Run, r: CaseResult) -> dict[str, Any]:
    c = r.case
    return {
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


def report_dict(
    run: Run, total: Mapping[str, Any], categories: Mapping[str, Any], gates: list[dict[str, Any]]
) -> dict[str, Any]:
    """The full report: dataset, totals, per category, gates, warnings and every case."""
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
        "cases": [_case_dict(run, r) for r in run.results],
    }


def write_report(path: Path, report: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


def print_report(
    run: Run,
    total: Mapping[str, Any],
    categories: Mapping[str, Mapping[str, Any]],
    gates: Sequence[Mapping[str, Any]],
    *,
    min_precision: float,
    show_noisy: bool,
) -> bool:
    """Print the run's outcome; True when every gate passed."""
    for w in run.warnings:
        print(f"warning: {w}")
    _print_cases(run, min_precision, show_noisy)
    _print_results(run, total, categories)
    return _print_gates(gates)


def _print_cases(run: Run, min_precision: float, show_noisy: bool) -> None:
    k = run.top_k
    failing = [(r, p) for r in run.results if (p := r.problems(min_precision))]
    hard = [(r, p) for r, p in failing if p != ["noisy"]]
    noisy = [(r, p) for r, p in failing if p == ["noisy"]]
    if hard:
        print(f"\nFAILING CASES ({len(hard)}):")
        for r, p in hard:
            print(format_case(run, r, p))
    if noisy:
        print(f"\nNOISY CASES ({len(noisy)}): all relevant found, P@{k} < {min_precision}")
        for r, p in noisy:
            if show_noisy:
                print(format_case(run, r, p))
            else:
                extra = [_label(run, r.case.user, h.id) for h in r.hits]
                extra = [x for x in extra if x not in r.case.relevant]
                print(f"  {r.case.id:<16} P={_fmt(r.metrics.precision)} extra: {', '.join(extra)}")


def _print_results(
    run: Run, total: Mapping[str, Any], categories: Mapping[str, Mapping[str, Any]]
) -> None:
    k = run.top_k
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


def _print_gates(gates: Sequence[Mapping[str, Any]]) -> bool:
    print("\nGATES")
    for g in gates:
        value = g["value"]
        shown = _fmt(value) if isinstance(value, float) else str(value)
        print(
            f"  {'PASS' if g['passed'] else 'FAIL'}  {g['gate']:<18} {shown:>7}  {g['threshold']}"
        )
    passed = all(g["passed"] for g in gates)
    print("\nPASSED" if passed else "\nFAILED")
    return passed
