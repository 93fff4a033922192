"""The rate-limit port: token buckets, one per (tenant, user, name).

A bucket holds up to `capacity` tokens and gains `refill_per_s` per second; a call takes
`cost` tokens if it holds them. Time is given by the caller (`now`, epoch seconds), so the
policy's clock decides (tests move it); a clock that steps back never adds tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class BucketsUnavailable(Exception):
    """The store holding the buckets cannot be reached."""


@dataclass(frozen=True)
class BucketKey:
    tenant: str
    user_id: str
    name: str  # "query" or "write"


@dataclass(frozen=True)
class Rate:
    capacity: float
    refill_per_s: float

    @classmethod
    def per_minute(cls, count: int) -> Rate:
        """`count` calls a minute, all of them at once if the bucket is full."""
        return cls(capacity=float(count), refill_per_s=count / 60.0)


@dataclass(frozen=True)
class Taken:
    allowed: bool
    # Tokens left after this call.
    remaining: float
    # When refused: seconds until `cost` tokens are there again; 0 when allowed.
    retry_after_s: float


class TokenBuckets(Protocol):
    async def take(self, key: BucketKey, rate: Rate, now: float, cost: float = 1.0) -> Taken:
        """Atomically refill the bucket to `now` and take `cost` tokens if it holds them."""
        ...

    async def give_back(self, key: BucketKey, rate: Rate, now: float, amount: float) -> None:
        """Return `amount` tokens a call took and did not use (never past capacity)."""
        ...

    async def close(self) -> None: ...


# Refilling in steps adds float error (5 s + 1 s of 1/6 token/s is 0.999...): a token this
# close counts as whole. The Lua script uses the same figure.
EPSILON = 1e-9


def refill(tokens: float, last: float, rate: Rate, now: float) -> tuple[float, float]:
    """The in-process adapter's arithmetic; redis_buckets.py's script does the same in Lua."""
    elapsed = max(0.0, now - last)
    return min(rate.capacity, tokens + elapsed * rate.refill_per_s), max(last, now)
