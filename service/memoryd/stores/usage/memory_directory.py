"""The user directory in the server's own memory (the embedded default): lost on restart,
refilled as users write again."""

from __future__ import annotations

import bisect

from memoryd.stores.usage.port import SeenUser


class InProcessDirectory:
    def __init__(self) -> None:
        # Per tenant: the sorted ids (for prefix pages) and each id's last activity.
        self._ids: dict[str, list[str]] = {}
        self._seen: dict[str, dict[str, float]] = {}

    async def note(self, tenant: str, user_id: str, at: float) -> None:
        seen = self._seen.setdefault(tenant, {})
        if user_id not in seen:
            bisect.insort(self._ids.setdefault(tenant, []), user_id)
            seen[user_id] = at
        elif at > seen[user_id]:
            seen[user_id] = at

    async def remove(self, tenant: str, user_id: str) -> None:
        seen = self._seen.get(tenant, {})
        if seen.pop(user_id, None) is not None:
            ids = self._ids[tenant]
            del ids[bisect.bisect_left(ids, user_id)]

    async def page(
        self, tenant: str, *, prefix: str = "", after: str = "", limit: int
    ) -> list[SeenUser]:
        ids = self._ids.get(tenant, [])
        seen = self._seen.get(tenant, {})
        start = (
            bisect.bisect_right(ids, after) if after >= prefix else bisect.bisect_left(ids, prefix)
        )
        found: list[SeenUser] = []
        for user_id in ids[start:]:
            if len(found) >= limit or not user_id.startswith(prefix):
                break
            found.append(SeenUser(user_id, seen[user_id]))
        return found

    async def close(self) -> None:
        pass
