import math

from kbench.stats.estimates import StopRule, harrell_davis_median, quantile, relative_noise, summarize


def test_summary_median_quartiles_and_interval():
    s = summarize([float(x) for x in range(1, 102)])  # 1..101
    assert math.isclose(s.median, 51) and s.q1 == 26 and s.q3 == 76
    assert s.ci_low < 51 < s.ci_high
    assert s.ci_low >= 40 and s.ci_high <= 62


def test_noise_is_relative_standard_error_of_the_median():
    s = summarize([10.0] * 50 + [11.0] * 50)
    assert math.isclose(s.noise, (s.ci_high - s.ci_low) / (2 * 1.96) / s.median)
    assert s.noise > 0.02    # the interval straddles both clusters
    assert summarize([5.0] * 20).noise == 0.0


def test_quantized_samples_with_a_one_tick_iqr_are_not_called_precise():
    """Ten calls on a few timer ticks (32 ns on the H100) with two strays: the IQR is one
    tick, the interval the median can honestly claim spans 6%: no stop at 1%."""
    xs = [6.016] * 4 + [6.048] * 4 + [5.9, 6.3]
    iqr_formula = 1.2533 * ((quantile(sorted(xs), 0.75) - quantile(sorted(xs), 0.25)) / 1.349) / math.sqrt(10) / 6.03
    assert iqr_formula < 0.005                      # what the old rule read
    assert relative_noise(xs) > 0.01
    assert StopRule(noise=0.01, min_samples=10, budget_s=1.0).verdict(xs, 0.1) is None
    tight = [6.016] * 25 + [6.048] * 25 + [5.9, 6.3]   # more calls: the same strays no longer matter
    assert relative_noise(tight) < 0.01


def test_stop_rule_noise_matches_the_summary():
    xs = [1.0, 1.1, 1.3, 0.9, 1.05, 1.2, 0.95, 1.15, 1.07]
    s = summarize(xs)
    assert math.isclose(relative_noise(xs), s.noise, rel_tol=0.02)  # against the middle sample
    assert relative_noise([2.0] * 30) == 0.0 and math.isinf(relative_noise([1.0]))


def test_median_matches_the_middle_sample_on_one_cluster():
    import random
    rnd = random.Random(3)
    xs = sorted(rnd.gauss(5.0, 0.1) for _ in range(201))
    s = summarize(xs)
    assert s.ci_low <= s.median <= s.ci_high
    assert abs(s.median - xs[100]) < 0.02
    assert math.isclose(summarize([4.32] * 40).median, 4.32)


def test_median_of_two_even_clusters_does_not_jump_with_one_sample():
    """A kernel alternating between two speeds: the middle sample jumps a whole cluster when
    one call more lands in the other; the Harrell-Davis estimate moves by a fraction."""
    low, high = [7.1] * 50, [8.1] * 50
    more_low = sorted(low + [7.1] + high)
    more_high = sorted(low + high + [8.1])
    assert more_high[50] - more_low[50] == 1.0  # the middle sample: a whole cluster apart
    moved = harrell_davis_median(more_high) - harrell_davis_median(more_low)
    assert 0 < moved < 0.2
    assert 7.4 < harrell_davis_median(sorted(low + high)) < 7.8


def test_median_of_tiny_samples():
    assert harrell_davis_median([3.0]) == 3.0
    assert harrell_davis_median([1.0, 3.0]) == 2.0
    assert math.isnan(harrell_davis_median([]))


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


def test_targets_stop_together_up_to_a_cap():
    rule = StopRule(noise=0.01, min_samples=10, budget_s=1.0, together_up_to=50)
    quiet, noisy = [1.0] * 10, [1.0, 2.0] * 5
    # the quiet one met its rule, the noisy one has not: both go on
    assert rule.verdicts([quiet, noisy], 0.1) == [None, None]
    # at the cap the quiet one stops on its own
    assert rule.verdicts([[1.0] * 50, noisy * 5], 0.1) == ["noise target", None]
    # once every target has its verdict, all stop
    assert rule.verdicts([quiet, noisy], 1.0) == ["noise target", "budget"]
    assert rule.verdicts([quiet], 0.1) == ["noise target"]
