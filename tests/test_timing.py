import math

from kbench.timing import StopRule, quantile, summarize


def test_summary_median_quartiles_and_interval():
    s = summarize([float(x) for x in range(1, 102)])  # 1..101
    assert s.median == 51 and s.q1 == 26 and s.q3 == 76
    assert s.ci_low < 51 < s.ci_high
    assert s.ci_low >= 40 and s.ci_high <= 62


def test_noise_is_relative_standard_error_of_the_median():
    s = summarize([10.0] * 50 + [11.0] * 50)
    expected = 1.2533 * (s.iqr / 1.349) / math.sqrt(100) / s.median
    assert math.isclose(s.noise, expected)
    assert summarize([5.0] * 20).noise == 0.0


def test_quantile_interpolates():
    assert quantile([0.0, 10.0], 0.25) == 2.5


def test_stop_rule_waits_for_min_samples_even_when_quiet():
    rule = StopRule(noise=0.01, min_samples=10, budget_s=1.0)
    assert rule.verdict([1.0] * 9, 0.1) is None
    assert rule.verdict([1.0] * 10, 0.1) == "noise target"


def test_stop_rule_budget_counts_wall_time_and_max_samples():
    rule = StopRule(noise=1e-9, min_samples=5, max_samples=50, budget_s=1.0)
    noisy = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert rule.verdict(noisy, 0.5) is None
    assert rule.verdict(noisy, 1.0) == "budget"
    assert rule.verdict(noisy * 10, 0.1) == "max samples"


def test_stop_rule_gives_up_on_min_samples_at_four_budgets():
    rule = StopRule(noise=1e-9, min_samples=10, budget_s=1.0)
    assert rule.verdict([1.0, 2.0], 3.9) is None
    assert rule.verdict([1.0, 2.0], 4.1) == "budget"
