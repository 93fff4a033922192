"""The load harness's reports carry ghz's field names and units (benchmarks/ghz_report.py)."""

from __future__ import annotations

from collections import Counter

from ghz_report import go_code_name, histogram, percentile, report

MS = 1_000_000


def test_a_report_has_ghz_fields_in_nanoseconds() -> None:
    latencies = [i * MS for i in range(1, 101)]  # 1..100 ms
    result = report(
        "add c=2",
        latencies,
        total_ns=2_000 * MS,
        status_codes=Counter({"OK": 99, "Unavailable": 1}),
        errors=Counter({"rpc error: code = Unavailable desc = down": 1}),
        options={"concurrency": 2},
    )

    assert {
        "count",
        "total",
        "average",
        "fastest",
        "slowest",
        "rps",
        "latencyDistribution",
        "histogram",
        "statusCodeDistribution",
        "errorDistribution",
    } <= set(result)
    assert (result["count"], result["fastest"], result["slowest"]) == (100, MS, 100 * MS)
    assert result["average"] == 50_500_000
    assert result["rps"] == 50.0
    dist = {d["percentage"]: d["latency"] for d in result["latencyDistribution"]}
    assert (dist[50], dist[90], dist[99]) == (50 * MS, 90 * MS, 99 * MS)
    assert result["statusCodeDistribution"] == {"OK": 99, "Unavailable": 1}


def test_the_histogram_covers_every_sample_with_marks_in_seconds() -> None:
    buckets = histogram([MS, 2 * MS, 2 * MS, 11 * MS])
    assert sum(b["count"] for b in buckets) == 4
    assert buckets[-1]["mark"] == 0.011
    assert sum(b["frequency"] for b in buckets) == 1.0
    assert histogram([]) == []
    assert histogram([5, 5])[-1]["count"] == 2


def test_percentiles_are_nearest_rank_and_codes_are_named_as_in_go() -> None:
    assert percentile([10, 20, 30, 40], 50) == 20
    assert percentile([10, 20, 30, 40], 99) == 40
    assert percentile([], 50) == 0
    assert go_code_name("DEADLINE_EXCEEDED") == "DeadlineExceeded"
    assert go_code_name("OK") == "OK"
