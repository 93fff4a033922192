"""`memoryd reindex`: re-embed every memory with the configured embedder, and re-encode
its BM25 sparse vector and term ids (this is how a store written by an older sparse
encoder, or in another term space than the configured one (ADR 0601), is brought up
to date).

The new collection is built beside the old one and swapped in at the end, so an
interrupted reindex leaves the store as it was. The old collection is kept aside
(`<collection>.replaced-<time>`) until the operator deletes it.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable

from memoryd.cli.offline import embedded_store
from memoryd.core.memory.own_vector import OWN_FIELD, keeps_own, pack
from memoryd.core.memory.payload import (
    LEAD_FIELD,
    embed_text_of,
    from_payload,
    lead_for,
    with_lead,
)
from memoryd.core.memory.term_space import TERM_SPACE_KEY, in_term_space
from memoryd.core.retrieval import bm25
from memoryd.settings import Settings
from memoryd.stores.embeddings.port import Embedder
from memoryd.stores.vectors.edge_store import EdgeVectorStore, promote_collection
from memoryd.stores.vectors.port import (
    TERMS_FIELD,
    StoredPoint,
    VectorPoint,
    VectorStore,
    canonical_id,
    every_page,
)


def _leads(source: VectorStore, points: list[StoredPoint], lead_chars: int) -> list[str]:
    """Each point's lead, from the turn before it that its payload names, as it was
    embedded after when added (ADR 0400; `lead_for` leaves out a lead deleted since)."""
    lead_ids = [p.payload.get(LEAD_FIELD) for p in points]
    wanted = sorted({canonical_id(i) for i in lead_ids if i}) if lead_chars > 0 else []
    found = source.retrieve(wanted) if wanted else []
    before = {canonical_id(q.id): from_payload(q.id, q.payload) for q in found}
    out = []
    for point, lead_id in zip(points, lead_ids, strict=True):
        turn = before.get(canonical_id(lead_id)) if lead_id else None
        if turn is None:
            out.append("")
            continue
        record = from_payload(point.id, point.payload)
        out.append(lead_for(record.kind, record.metadata, turn, lead_chars))
    return out


def copy_reembedded(
    source: VectorStore,
    target: VectorStore,
    embedder: Embedder,
    batch_size: int = 128,
    progress: Callable[[int, int], None] = lambda done, total: None,
    lead_chars: int = 0,
    own_weight: float = 0.0,
) -> int:
    """Copy every point (payload and id kept) from source to target with fresh vectors:
    a turn embedded after a lead also gets its own text's vector again while `own_weight`
    gives it a share (ADR 0409); otherwise it keeps none (one of another embedder would
    not compare)."""
    encoder = bm25.BM25Encoder()
    total = source.count()
    done = 0
    for points in every_page(source, limit=batch_size):
        texts = [embed_text_of(p.payload) for p in points]
        leads = _leads(source, points, lead_chars)
        dense_texts = [with_lead(lead, t) for lead, t in zip(leads, texts, strict=True)]
        owned = [keeps_own(lead, own_weight) for lead in leads]
        own_texts = [t for t, own in zip(texts, owned, strict=True) if own]
        embedded = embedder.embed(dense_texts + own_texts)
        vectors, own_vectors_left = embedded[: len(points)], iter(embedded[len(points) :])
        upserts = []
        for point, text, vector, own in zip(points, texts, vectors, owned, strict=True):
            payload = {**point.payload, TERMS_FIELD: encoder.term_ids(text)}
            payload.pop(OWN_FIELD, None)
            if own:
                payload[OWN_FIELD] = pack(next(own_vectors_left))
            upserts.append(
                VectorPoint(
                    id=point.id,
                    dense=vector,
                    sparse=encoder.encode_document(text),
                    payload=payload,
                )
            )
        target.upsert(upserts)
        done += len(points)
        progress(done, total)
    return done


def reindex(settings: Settings, embedder: Embedder, progress: Callable[[int, int], None]) -> int:
    root, collection, meta = embedded_store(
        settings,
        "reindex",
        "for a Qdrant server, point a new server collection at MEMORYD_VECTORS__COLLECTION "
        "and re-import an export",
    )
    embedder.warm()
    building = f"{collection}.reindex"
    for leftover in (root / building, root / f"{building}.meta.json"):
        if leftover.is_dir():
            shutil.rmtree(leftover)
        else:
            leftover.unlink(missing_ok=True)
    # The copy reads the old ids in their space and writes them in the configured one
    # (ADR 0601): reindex is how a store moves between term spaces.
    space = settings.vectors.term_space
    source = in_term_space(EdgeVectorStore(root, int(meta["dim"]), collection), meta)
    target = in_term_space(EdgeVectorStore(root, embedder.dim, building), {TERM_SPACE_KEY: space})
    try:
        copied = copy_reembedded(
            source,
            target,
            embedder,
            progress=progress,
            lead_chars=settings.long_term.lead_chars,
            own_weight=settings.retrieval.own_weight,
        )
        target.write_meta(
            {
                **meta,
                "embedder": embedder.name,
                "dim": embedder.dim,
                "sparse": bm25.ENCODER_NAME,
                TERM_SPACE_KEY: space,
            }
        )
    finally:
        source.close()
        target.close()
    keep_as = f"{collection}.replaced-{time.strftime('%Y%m%dT%H%M%S')}"
    promote_collection(root, building, collection, keep_as)
    return copied
