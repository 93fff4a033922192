"""The evaluation harness's metric and gate functions on tiny inputs (no server, no model).

``evals/`` is on the test path (pyproject), so its ``harness`` package imports directly.
"""

from __future__ import annotations

import pytest

from harness import gates, metrics


def test_recall_counts_relevant_found_in_the_first_k() -> None:
    assert metrics.recall_at_k(["a", "x", "b"], {"a", "b"}, 5) == 1.0
    assert metrics.recall_at_k(["a", "x", "b"], {"a", "b"}, 2) == 0.5
    assert metrics.recall_at_k([], {"a"}, 5) == 0.0
    assert metrics.recall_at_k(["a"], set(), 5) is None  # no relevant memory: not a recall case


def test_precision_is_relevant_share_of_what_was_returned() -> None:
    assert metrics.precision_at_k(["a", "x", "y", "b"], {"a", "b"}, 5) == 0.5
    assert metrics.precision_at_k(["a", "x", "y", "b"], {"a", "b"}, 1) == 1.0
    assert metrics.precision_at_k(["a"], {"a", "b", "c"}, 5) == 1.0  # fewer items is no penalty
    assert metrics.precision_at_k([], {"a"}, 5) is None  # empty result: recall already says 0
    assert metrics.precision_at_k(["x"], set(), 5) is None  # no-relevant case: abstention instead


def test_reciprocal_rank_of_first_relevant_within_k() -> None:
    assert metrics.reciprocal_rank(["x", "a", "b"], {"a", "b"}, 5) == 0.5
    assert metrics.reciprocal_rank(["x", "y", "a"], {"a"}, 2) == 0.0
    assert metrics.reciprocal_rank([], {"a"}, 5) == 0.0
    assert metrics.reciprocal_rank(["a"], set(), 5) is None


def test_abstention_only_judges_no_relevant_cases() -> None:
    assert metrics.abstention_correct([], set()) is True
    assert metrics.abstention_correct(["x"], set()) is False
    assert metrics.abstention_correct([], {"a"}) is None


def test_budget_compliance_and_leaks() -> None:
    assert metrics.within_budget([10, 20], 30) is True
    assert metrics.within_budget([10, 21], 30) is False
    assert metrics.within_budget([], 5) is True
    assert metrics.within_budget([99], None) is None
    assert metrics.count_leaks(["a", "b", "z"], {"a", "b"}) == 1
    assert metrics.count_leaks([], {"a"}) == 0


def test_percentile_interpolates_and_mean_skips_none() -> None:
    assert metrics.percentile([], 50) is None
    assert metrics.percentile([7.0], 95) == 7.0
    assert metrics.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert metrics.percentile([4.0, 1.0, 3.0, 2.0], 100) == 4.0
    assert metrics.percentile(list(map(float, range(1, 101))), 95) == pytest.approx(95.05)
    assert metrics.mean([1.0, None, 0.0]) == 0.5
    assert metrics.mean([None]) is None


def test_summary_averages_each_metric_over_the_cases_it_applies_to() -> None:
    own = {"a", "b"}
    cases = [
        metrics.score_case(["a", "b"], {"a"}, 5, own_ids=own, latency_ms=10.0),  # R 1, P .5
        metrics.score_case([], {"b"}, 5, own_ids=own, latency_ms=20.0),  # R 0, P n/a
        metrics.score_case([], set(), 5, own_ids=own, latency_ms=30.0),  # abstained
        metrics.score_case(["z"], set(), 5, own_ids=own, latency_ms=40.0),  # leak, no abstention
        metrics.score_case(
            ["a", "b"], {"a"}, 5, own_ids=own, token_counts=[30, 31], token_budget=60
        ),
    ]
    s = metrics.summarize(cases)
    assert s["cases"] == 5 and s["cases_with_relevant"] == 3 and s["cases_precision"] == 2
    assert s["recall"] == pytest.approx(2 / 3)
    assert s["precision"] == pytest.approx((0.5 + 0.5) / 2)
    assert s["mrr"] == pytest.approx(2 / 3)
    assert s["abstention_accuracy"] == 0.5
    assert s["budget_compliance"] == 0.0
    assert s["leaks"] == 1
    assert s["empty_when_relevant"] == 1
    assert s["latency_p50_ms"] == 25.0


def test_gates_fail_on_any_missed_threshold() -> None:
    good = {
        "recall": 0.95,
        "precision": 0.8,
        "budget_compliance": 1.0,
        "leaks": 0,
        "errors": 0,
    }
    t = gates.Thresholds()
    assert all(g["passed"] for g in gates.check_gates(good, t))
    for key, bad in [("recall", 0.89), ("precision", 0.69), ("budget_compliance", 0.99)]:
        failed = [g["gate"] for g in gates.check_gates({**good, key: bad}, t) if not g["passed"]]
        assert failed == [key]
    assert not gates.check_gates({**good, "leaks": 1}, t)[3]["passed"]
    assert not gates.check_gates({**good, "recall": None}, t)[0]["passed"]
    assert gates.check_gates({**good, "budget_compliance": None}, t)[2]["passed"]
    assert gates.check_gates({**good, "recall": 0.5}, gates.Thresholds(min_recall=0.5))[0]["passed"]


def test_pooled_recall_weighs_each_question_by_its_evidence() -> None:
    assert metrics.pooled_recall([(1, 1), (0, 3)]) == 0.25  # not the mean of 1.0 and 0.0
    assert metrics.pooled_recall([(2, 2)]) == 1.0
    assert metrics.pooled_recall([]) == 0.0
