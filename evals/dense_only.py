"""An embedder's recall by cosine similarity alone: no server, no keyword search, no lifts.

Every turn of both development sets embedded as ``"Speaker: text"``; each question ranks
its conversation's turns by cosine; R@5 / R@20 of the evidence turns, per set, half and
category (pooled as in ``run_recall.py``). It compares embedders before any ranking step
(ADR 0302); the embedder is the one the settings build, so ``MEMORYD_EMBEDDER__*`` apply:

    PYTHONPATH=service .venv/bin/python evals/dense_only.py
    MEMORYD_EMBEDDER__PROVIDER=mpnet PYTHONPATH=service .venv/bin/python evals/dense_only.py
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

from memoryd.app import build_embedder
from memoryd.settings import Settings
from run_recall import SETS, half_of, load_set, turn_content


def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        embedder = build_embedder(Settings(data_dir=Path(data)))
        # [evidence turns, found in 5, found in 20] per (set, half, category)
        found: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for set_name in SETS:
            for conversation in load_set(set_name, ["tune", "report"]):
                half = half_of(set_name, conversation["id"])
                turns = [t for s in conversation["sessions"] for t in s["turns"]]
                ids = [t["id"] for t in turns]
                texts = [turn_content(t) for t in turns]
                vectors = np.asarray(embedder.embed(texts), dtype=np.float32)
                questions = conversation["questions"]
                asked = np.asarray(embedder.embed([q["q"] for q in questions]), np.float32)
                for question, scores in zip(questions, asked @ vectors.T, strict=True):
                    rank = {ids[j]: r for r, j in enumerate(np.argsort(-scores))}
                    tally = found[(set_name, half, question["category"])]
                    for evidence in question["evidence"]:
                        tally[0] += 1
                        tally[1] += rank[evidence] < 5
                        tally[2] += rank[evidence] < 20
    print(f"embedder {embedder.name}: cosine alone")
    totals: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (set_name, half, category), (n, at5, at20) in sorted(found.items()):
        print(f"{set_name:10s} {half:7s} {category:12s} R@5 {at5 / n:.3f}  R@20 {at20 / n:.3f}")
        total = totals[(set_name, half)]
        for i, value in enumerate((n, at5, at20)):
            total[i] += value
    for (set_name, half), (n, at5, at20) in sorted(totals.items()):
        print(f"{set_name:10s} {half:7s} {'total':12s} R@5 {at5 / n:.3f}  R@20 {at20 / n:.3f}")


if __name__ == "__main__":
    main()
