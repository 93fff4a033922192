"""Golden-set evaluation of memoryd long-term retrieval.

Loads a JSONL golden set (users, their memories, and queries with the labels of the
memories that are relevant), writes every memory through gRPC ``Add``, runs every query
through gRPC ``Retrieve`` and reports Recall@k, Precision@k, MRR, abstention accuracy,
Retrieve latency, token-budget compliance and cross-user leaks, per category and in total.
Exits non-zero when a gate fails (thresholds in harness/gates.py, overridable by flags).

    PYTHONPATH=service .venv/bin/python evals/run_eval.py [--json-out report.json]

By default an in-process server is started on a fresh temporary data dir with
``Settings(listen="127.0.0.1:0", data_dir=...)``, so ``MEMORYD_*`` environment variables
(e.g. ``MEMORYD_RETRIEVAL__MODE=dense``) apply. ``--target host:port`` evaluates a running
server instead (user ids then get a unique prefix).

The work is done by the ``harness`` package next to this file; see evals/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.dataset import DEFAULT_DATASET, DatasetError, load_dataset
from harness.gates import (
    MAX_LEAKS,
    MIN_COMPLIANCE,
    MIN_PRECISION,
    MIN_RECALL,
    Thresholds,
    check_gates,
)
from harness.metrics import summarize
from harness.report import per_category, print_report, report_dict, write_report
from harness.runner import DEFAULT_TOP_K, run_eval


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
    """0 when every gate passes, 1 when one fails, 2 when the dataset is invalid."""
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
    passed = print_report(
        run,
        total,
        categories,
        gates,
        min_precision=args.min_precision,
        show_noisy=args.show_noisy,
    )
    if args.json_out:
        write_report(args.json_out, report_dict(run, total, categories, gates))
        print(f"report written to {args.json_out}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
