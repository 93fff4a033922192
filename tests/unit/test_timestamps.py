"""Times cross the wire as google.protobuf.Timestamp and live as float epoch seconds: the
two conversions must give back the very instant they were given, or an exported memory
comes back at another time (a relation closed "now" reads as open after an import)."""

from __future__ import annotations

import random

from memoryd.transport.convert import seconds_of, timestamp_of


def test_a_time_comes_back_from_its_timestamp_as_the_same_float() -> None:
    rng = random.Random(7)
    now = 1_763_900_000.0
    for _ in range(20_000):
        instant = now + rng.uniform(-1e8, 1e8)
        assert seconds_of(timestamp_of(instant), "t") == instant


def test_a_timestamp_keeps_its_nanoseconds_to_the_nearest() -> None:
    ts = timestamp_of(1_700_000_000.25)
    assert (ts.seconds, ts.nanos) == (1_700_000_000, 250_000_000)
    assert seconds_of(ts, "t") == 1_700_000_000.25
