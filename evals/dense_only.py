"""An embedder's recall by cosine similarity alone: no server, no keyword search, no lifts.

Every turn of both development sets embedded as ``"Speaker: text"``; each question ranks
its conversation's turns by cosine; R@5 / R@20 of the evidence turns, per set, half and
category (pooled as in ``run_recall.py``). It compares embedders before any ranking step
(ADR 0302); the embedder is the one the settings build, so ``MEMORYD_EMBEDDER__*`` apply:

    PYTHONPATH=service .venv/bin/python evals/dense_only.py
    MEMORYD_EMBEDDER__PROVIDER=mpnet PYTHONPATH=service .venv/bin/python evals/dense_only.py

``--unnamed`` asks each question without its speakers' names, as the fusion ranks
(ADR 0408); ``--turns`` compares ways of giving a turn its vector (evals/RESULTS.md,
session 23): ``own`` (the text alone, the default), ``lead`` (after the end of the turn
before it, as the server embeds a turn, ADR 0400), ``mean`` (the mean of those two
cosines: two vectors a turn) and ``chain`` (its own vector plus 0.3 x the vector the turn
before got, normalised: one vector a turn, no lead text):

    PYTHONPATH=service .venv/bin/python evals/dense_only.py --unnamed \\
        --turns own,lead,mean,chain --half tune
"""

from __future__ import annotations

import argparse
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memoryd.app import build_embedder
from memoryd.core.memory.payload import lead_of, with_lead
from memoryd.core.retrieval.conversation import without_names
from memoryd.settings import Settings
from run_recall import SETS, half_of, load_set, turn_content

Matrix = npt.NDArray[np.float32]
WAYS = ("own", "lead", "mean", "chain")
CHAIN = 0.3


def _leads(sessions: Sequence[dict[str, Any]], lead_chars: int) -> list[str]:
    """Each turn after the end of the turn before it in its session, as the server writes
    it (`lead_of`, `with_lead`)."""
    out = []
    for session in sessions:
        lead = ""
        for turn in session["turns"]:
            own = turn_content(turn)
            out.append(with_lead(lead, own))
            lead = lead_of(own, {}, lead_chars)
    return out


def _chain(own: Matrix, sessions: Sequence[dict[str, Any]]) -> Matrix:
    """Each turn's own vector plus CHAIN x the vector the turn before it got, normalised."""
    out = own.copy()
    i = 0
    for session in sessions:
        for n in range(len(session["turns"])):
            if n:
                out[i] = own[i] + CHAIN * out[i - 1]
                out[i] /= np.linalg.norm(out[i])
            i += 1
    return out


def _turn_vectors(
    way: str, own: Matrix, leads: Matrix | None, sessions: Sequence[dict[str, Any]]
) -> Matrix:
    """The turns' vectors one way (`WAYS`); `leads` is given when the way needs it."""
    if way == "own":
        return own
    if way == "chain":
        return _chain(own, sessions)
    assert leads is not None
    # The mean of two cosines is the cosine to the mean of the two vectors.
    return leads if way == "lead" else (own + leads) * np.float32(0.5)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--unnamed", action="store_true", help="questions without names")
    parser.add_argument("--turns", default="own", help=",".join(WAYS))
    parser.add_argument("--half", choices=["tune", "report", "both"], default="both")
    args = parser.parse_args(argv)
    ways = args.turns.split(",")
    if unknown := set(ways) - set(WAYS):
        parser.error(f"--turns: {', '.join(sorted(unknown))} is not one of {', '.join(WAYS)}")
    with_leads = bool({"lead", "mean"} & set(ways))
    halves = ["tune", "report"] if args.half == "both" else [args.half]
    with tempfile.TemporaryDirectory() as data:
        settings = Settings(data_dir=Path(data))
        embedder = build_embedder(settings)
        lead_chars = settings.long_term.lead_chars

        def embed(texts: Sequence[str]) -> Matrix:
            return np.asarray(embedder.embed(list(texts)), dtype=np.float32)

        # [evidence turns, found in 5, found in 20] per (way, set, half, category)
        found: dict[tuple[str, str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for set_name in SETS:
            for conversation in load_set(set_name, halves):
                half = half_of(set_name, conversation["id"])
                sessions = conversation["sessions"]
                turns = [t for s in sessions for t in s["turns"]]
                ids = [t["id"] for t in turns]
                speakers = {t["speaker"] for t in turns}
                questions = conversation["questions"]
                texts = [q["q"] for q in questions]
                if args.unnamed:
                    texts = [without_names(t, speakers) for t in texts]
                asked = embed(texts)
                own = embed([turn_content(t) for t in turns])
                leads = embed(_leads(sessions, lead_chars)) if with_leads else None
                for way in ways:
                    vectors = _turn_vectors(way, own, leads, sessions)
                    for question, scores in zip(questions, asked @ vectors.T, strict=True):
                        rank = {ids[j]: r for r, j in enumerate(np.argsort(-scores))}
                        tally = found[(way, set_name, half, question["category"])]
                        for evidence in question["evidence"]:
                            tally[0] += 1
                            tally[1] += rank[evidence] < 5
                            tally[2] += rank[evidence] < 20
    asked_as = "questions without names" if args.unnamed else "questions as written"
    print(f"embedder {embedder.name}: cosine alone, {asked_as}")
    totals: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (way, set_name, half, category), (n, at5, at20) in sorted(found.items()):
        print(f"{way:6s} {set_name:10s} {half:7s} {category:12s} "
              f"R@5 {at5 / n:.3f}  R@20 {at20 / n:.3f}")  # fmt: skip
        total = totals[(way, set_name, half)]
        for i, value in enumerate((n, at5, at20)):
            total[i] += value
    for (way, set_name, half), (n, at5, at20) in sorted(totals.items()):
        print(f"{way:6s} {set_name:10s} {half:7s} {'total':12s} "
              f"R@5 {at5 / n:.3f}  R@20 {at20 / n:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
