"""The candidates a query ranks: each memory's signals, read once from its stored point."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memoryd.core.memory.own_vector import unpack_all
from memoryd.core.memory.payload import content_of, embed_text_of, from_payload, is_turn
from memoryd.core.models import Kind, MemoryRecord, ScoreComponents
from memoryd.core.retrieval import bm25, conversation
from memoryd.core.retrieval.mmr import dots
from memoryd.stores.vectors.port import TERMS_FIELD, DenseVector

# A point as the store returns it: id, payload, dense vector (None when not read).
Point = tuple[str, dict[str, Any], DenseVector | None]


class CandidatePool:
    """The memories a query ranks: their signals (`members`), vectors, term ids and
    payloads; `idf` is the user's IDF of the query's terms."""

    def __init__(
        self,
        encoder: bm25.BM25Encoder,
        idf: Mapping[int, float],
        query_vector: np.ndarray[Any, Any] | None,
        grounded_vector: np.ndarray[Any, Any] | None = None,
        unnamed_vector: np.ndarray[Any, Any] | None = None,
        own_weight: float = 0.0,
    ) -> None:
        self._encoder = encoder
        self.idf = idf
        self._query = query_vector
        # The query grounded in the task's state (ADR 0405): a memory's cosine is the
        # better of the two, and what grounding added is kept apart (`Scored.grounded`).
        self._grounded = grounded_vector
        # The query without the speakers it names (ADR 0408): the cosine the fusion ranks
        # by; `cosine` (what relevance and the score floor use) stays the query's own.
        self._unnamed = unnamed_vector
        # A turn's own vector (ADR 0409) is compared with the query the fusion ranks by.
        self._own_weight = own_weight
        ranked = unnamed_vector if unnamed_vector is not None else query_vector
        self._ranked = ranked if own_weight > 0 else None
        self.members: dict[str, conversation.Scored] = {}
        self.payloads: dict[str, dict[str, Any]] = {}
        self.vectors: dict[str, DenseVector] = {}
        self.terms: dict[str, set[int]] = {}

    def add_all(self, points: Sequence[Point]) -> list[conversation.Scored]:
        """Score points read from the store into the pool; returns their members."""
        cosines = [0.0] * len(points)
        gains = [0.0] * len(points)
        unnamed: list[float | None] = [None] * len(points)
        with_vector = [i for i, p in enumerate(points) if p[2] is not None]
        if with_vector and self._query is not None:
            # One matrix product for every candidate (vectors and query are unit length).
            matrix = np.stack([points[i][2] for i in with_vector])  # type: ignore[misc]
            sims = np.clip(dots(matrix, self._query), 0.0, 1.0)
            if self._grounded is not None:
                grounded = np.clip(dots(matrix, self._grounded), 0.0, 1.0)
                for row, gain in enumerate(np.maximum(grounded - sims, 0.0).tolist()):
                    gains[with_vector[row]] = gain
                sims = np.maximum(sims, grounded)
            for row, sim in enumerate(sims.tolist()):
                cosines[with_vector[row]] = sim
            if self._unnamed is not None:
                ranked = np.clip(dots(matrix, self._unnamed), 0.0, 1.0)
                if self._grounded is not None:
                    ranked = np.maximum(ranked, grounded)
                for row, sim in enumerate(ranked.tolist()):
                    unnamed[with_vector[row]] = sim
        owns = self._own_cosines(points)
        added = []
        total_idf = sum(self.idf.values())
        for (point_id, payload, vector), cosine, gain, unnamed_cosine, own_cosine in zip(
            points, cosines, gains, unnamed, owns, strict=True
        ):
            terms = self._terms_of(payload)
            matched = sum(w for t, w in self.idf.items() if t in terms)
            metadata = payload.get("metadata") or {}
            content = content_of(payload)
            said = said_of(payload)
            member = conversation.Scored(
                id=point_id,
                cosine=cosine,
                unnamed_cosine=unnamed_cosine,
                own_cosine=own_cosine,
                own_weight=self._own_weight,
                grounded=gain,
                bm25=conversation.bm25_of(
                    matched, len(terms), bm25.DEFAULT_K1, bm25.DEFAULT_B, bm25.DEFAULT_AVG_DOC_LEN
                ),
                share=matched / total_idf if total_idf else 0.0,
                content=content,
                speaker=conversation.speaker_of(metadata, content, said=said),
                session=str(payload.get("session_id") or ""),
                position=int(payload.get("position") or 0),
                occurred_at=float(payload.get("occurred_at") or payload.get("created_at") or 0.0),
                asks=content.rstrip().endswith("?"),
                said=said,
            )
            self.members[point_id] = member
            self.payloads[point_id] = payload
            if vector is not None:
                self.vectors[point_id] = vector
            self.terms[point_id] = terms
            added.append(member)
        return added

    def _own_cosines(self, points: Sequence[Point]) -> list[float | None]:
        """Each turn's own vector's cosine to the ranked query, where it keeps one."""
        out: list[float | None] = [None] * len(points)
        if self._ranked is None:
            return out
        rows, matrix = unpack_all([p[1] for p in points], len(self._ranked))
        if rows:
            sims = np.clip(dots(matrix, self._ranked), 0.0, 1.0).tolist()
            for i, sim in zip(rows, sims, strict=True):
                out[i] = sim
        return out

    def record(self, components: ScoreComponents, point_id: str) -> MemoryRecord:
        """The memory `point_id` as a hit, its score and how it came about."""
        record = from_payload(point_id, self.payloads[point_id], components.final)
        record.components = components
        return record

    def _terms_of(self, payload: Mapping[str, Any]) -> set[int]:
        stored = payload.get(TERMS_FIELD)
        if stored is None:  # a point written before term ids were stored: tokenised here
            return set(self._encoder.term_ids(embed_text_of(payload)))
        return set(stored)


def said_of(payload: Mapping[str, Any]) -> bool:
    """Whether a stored point is a turn of a conversation (payload.is_turn)."""
    kind = Kind(payload.get("kind") or Kind.UNSPECIFIED.value)
    return is_turn(kind, payload.get("metadata") or {})


def speaker_of(payload: Mapping[str, Any]) -> str:
    """Who said a stored point (conversation.speaker_of), "" for no one."""
    said = said_of(payload)
    # Only a turn's line can name its speaker: other content is not read (nor unpacked).
    content = content_of(payload) if said else ""
    return conversation.speaker_of(payload.get("metadata") or {}, content, said=said)
