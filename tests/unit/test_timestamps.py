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


def test_a_timestamp_rounds_exactly_once_half_to_even() -> None:
    from fractions import Fraction

    rng = random.Random(11)
    # 2**-10 s is 976,562.5 ns exactly: the ties go to the even neighbour.
    halves = [2**-10, 3 * 2**-10, -(2**-10), -3 * 2**-10, 1_700_000_000 + 2**-10]
    samples = [rng.uniform(-1e9, 4e9) for _ in range(5_000)] + halves + [0.0, -1e-10, 1e-10]
    for instant in samples:
        expected = round(Fraction(instant) * 1_000_000_000)
        assert timestamp_of(instant).ToNanoseconds() == expected, instant
