"""The golden set: JSONL lines of memories and cases, parsed and checked as a whole."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.paraphrase import shared_content_words

DEFAULT_DATASET = Path(__file__).resolve().parents[1] / "golden.jsonl"

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
