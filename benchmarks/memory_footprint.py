"""Memory and disk per memory: load N short long-term memories into the embedded store and
measure the process's resident memory and the store's size on disk (docs/deploy.md, sizing).

    PYTHONPATH=service .venv/bin/python benchmarks/memory_footprint.py --memories 100000

Memories go in through the engine's import path (real MiniLM embeddings, BM25 sparse
vectors, payload indexes; batches of 64), spread over --users users so that no user
passes the default 10,000-memory quota. Prints one JSON object; sizes in MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from memoryd.app import build_app
from memoryd.core.models import MemoryRecord, Scope, Tier
from memoryd.settings import Settings

_SUBJECTS = ["User", "The user", "Their manager", "Their sister", "The customer", "The team"]
_VERBS = ["likes", "owns", "reads", "prefers", "visited", "is learning", "works on", "avoids"]
_THINGS = [
    "jazz records",
    "a red bicycle",
    "Borges",
    "green tea",
    "Lisbon",
    "the cello",
    "Rust",
    "quarterly reports",
    "hiking boots",
    "vegan food",
    "Kyoto",
    "chess openings",
    "a cat named Miso",
    "sourdough",
    "Postgres",
    "early flights",
    "sci-fi novels",
    "a standing desk",
    "Portuguese",
    "marathon training",
]


def sentence(rng: random.Random, i: int) -> str:
    """A short memory (~40-70 bytes), varied enough that the vocabulary keeps growing."""
    return (
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_THINGS)} "
        f"and {rng.choice(_THINGS)} (note {i})"
    )


def rss_mib() -> dict[str, float]:
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def du_mib(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


async def run(memories: int, users: int, data_dir: Path) -> dict[str, Any]:
    settings = Settings(data_dir=data_dir, listen="127.0.0.1:0")  # type: ignore[call-arg]
    app = await build_app(settings)  # loads the model
    gc.collect()
    baseline = rss_mib()
    rng = random.Random(17)
    per_user = memories // users
    now = time.time()
    started = time.perf_counter()
    content_bytes = 0
    # Store files are preallocated, so the slope between checkpoints is the cost per memory.
    checkpoints: list[dict[str, float]] = []
    checkpoint_every = max(1, users // 10)
    try:
        for u in range(users):
            scope = Scope(tenant="default", user_id=f"user-{u:05d}")
            records = []
            for j in range(per_user):
                text = sentence(rng, u * per_user + j)
                content_bytes += len(text.encode())
                records.append(
                    MemoryRecord(
                        id=str(uuid.uuid4()),
                        tier=Tier.LONG_TERM,
                        content=text,
                        created_at=now,
                        updated_at=now,
                    )
                )
            result = await app.engine.import_records(scope, records)
            assert result.imported_count == per_user, result
            if (u + 1) % checkpoint_every == 0:
                done = (u + 1) * per_user
                checkpoints.append(
                    {
                        "memories": done,
                        "rss_mib": round(rss_mib()["VmRSS"], 1),
                        "disk_mib": round(du_mib(data_dir / "vectors"), 1),
                    }
                )
                print(json.dumps(checkpoints[-1]), file=sys.stderr, flush=True)
        elapsed = time.perf_counter() - started
        gc.collect()
        loaded = rss_mib()
    finally:
        await app.close()
    loaded_count = per_user * users
    vectors_mib = du_mib(data_dir / "vectors")
    grown = loaded["VmRSS"] - baseline["VmRSS"]
    first, last = checkpoints[0], checkpoints[-1]
    span = last["memories"] - first["memories"] or 1
    return {
        "memories": loaded_count,
        "users": users,
        "mean_content_bytes": round(content_bytes / loaded_count, 1),
        "load_seconds": round(elapsed, 1),
        "memories_per_second": round(loaded_count / elapsed, 1),
        "rss_after_model_load_mib": round(baseline["VmRSS"], 1),
        "rss_loaded_mib": round(loaded["VmRSS"], 1),
        "peak_rss_mib": round(loaded["VmHWM"], 1),
        "rss_growth_mib": round(grown, 1),
        "vectors_on_disk_mib": round(vectors_mib, 1),
        "checkpoints": checkpoints,
        # Slope from the first to the last checkpoint, scaled to 1M memories.
        "per_1m_memories": {
            "rss_mib": round((last["rss_mib"] - first["rss_mib"]) * 1_000_000 / span),
            "disk_mib": round((last["disk_mib"] - first["disk_mib"]) * 1_000_000 / span),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--data-dir", type=Path, help="default: a temporary directory")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    if args.data_dir is not None:
        report = asyncio.run(run(args.memories, args.users, args.data_dir))
    else:
        with tempfile.TemporaryDirectory(prefix="memoryd-footprint-") as tmp:
            report = asyncio.run(run(args.memories, args.users, Path(tmp)))
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
