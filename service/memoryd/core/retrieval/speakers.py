"""The speakers each user's recent searches met, to embed a query without their names
while the store searches (ADR 0408).

A query naming a speaker ranks its dense side by the query embedded without the name.
Which names are speakers is known only from the candidates, after the search; embedding
then would add a query embedding to the answer's time. So each search remembers the
speakers its candidates had, and the next query of that user that names one of them is
embedded without it at once, beside the search. What the candidates then say decides:
a guess they do not confirm is dropped, and the query is embedded again as they say.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

# A user's remembered names beyond this start again from the last search's (a user with
# that many speakers is rare; the memo is a guess, never a fact).
MAX_NAMES = 256
# Users remembered; the least recently searched are forgotten first.
MAX_USERS = 10_000

Owner = tuple[str, str]  # (tenant, user_id)


class SpeakerMemo:
    """The speakers met by each (tenant, user)'s recent searches, least recent forgotten."""

    def __init__(self, max_users: int = MAX_USERS, max_names: int = MAX_NAMES) -> None:
        self._max_users = max_users
        self._max_names = max_names
        self._names: OrderedDict[Owner, frozenset[str]] = OrderedDict()

    def of(self, owner: Owner | None) -> frozenset[str]:
        """The speakers remembered for `owner` (none for a search of no single user)."""
        if owner is None:
            return frozenset()
        return self._names.get(owner, frozenset())

    def met(self, owner: Owner | None, speakers: Iterable[str]) -> None:
        """Remember the speakers a search of `owner` met."""
        if owner is None:
            return
        new = frozenset(s for s in speakers if s)
        if not new:
            return
        known = self._names.get(owner, frozenset())
        merged = known | new
        self._names[owner] = merged if len(merged) <= self._max_names else new
        self._names.move_to_end(owner)
        while len(self._names) > self._max_users:
            self._names.popitem(last=False)
