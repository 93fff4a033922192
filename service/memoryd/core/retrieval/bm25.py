"""BM25 sparse encoding for the lexical half of hybrid search, by Qdrant's own model.

`qdrant_edge.Bm25` tokenises exactly as a Qdrant server's BM25 inference does (word
tokens, lower case, English stop words, Snowball English stemming) and hashes tokens to
the same ids, so vectors written through either vector backend match queries from the
other. The store multiplies query terms by IDF itself (``Modifier.IDF``), so:

* documents get the BM25 term-frequency part,
  ``tf * (k + 1) / (tf + k * (1 - b + b * dl / avg_len))``;
* queries get weight 1.0 per unique term.

A memory's distinct term ids (`term_ids`) are what the per-user IDF counts: the
dimensions of its sparse vector, so keyword lift and sparse search share one tokeniser.
Pure computation, no I/O; the model is safe to call from several threads.
"""

from __future__ import annotations

from qdrant_edge import Bm25, Bm25Config

from memoryd.stores.vectors.port import SparseVector

__all__ = [
    "DEFAULT_AVG_DOC_LEN",
    "DEFAULT_B",
    "DEFAULT_K1",
    "ENCODER_NAME",
    "BM25Encoder",
]

DEFAULT_K1 = 1.2
DEFAULT_B = 0.75
# Memories are sentences, not pages: Qdrant's default of 256 tokens would all but switch
# off length normalisation. Only the weights depend on it, never the token ids.
DEFAULT_AVG_DOC_LEN = 40.0

# Recorded in the vector store's metadata: sparse vectors of another tokeniser share no
# ids with these, so a store written with one is never searched with the other.
ENCODER_NAME = "qdrant-bm25/english"


class BM25Encoder:
    """Document and query sparse vectors, and the term ids a memory is counted under."""

    def __init__(
        self,
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        avg_doc_len: float = DEFAULT_AVG_DOC_LEN,
    ) -> None:
        # The library checks the ranges (ValueError), as we did before.
        self._model = Bm25(Bm25Config(k=k1, b=b, avg_len=avg_doc_len))

    def encode_document(self, text: str) -> SparseVector:
        """BM25 term-frequency weights of ``text`` (IDF is applied by the store)."""
        vector = self._model.embed_document(text)
        return SparseVector(indices=vector.indices, values=vector.values)

    def encode_query(self, text: str) -> SparseVector:
        """Weight 1.0 per unique term of ``text`` (IDF is applied by the store)."""
        vector = self._model.embed_query(text)
        return SparseVector(indices=vector.indices, values=vector.values)

    def term_ids(self, text: str) -> list[int]:
        """The sorted distinct term ids of ``text``: its sparse vector's dimensions."""
        return sorted(self._model.embed_query(text).indices)
