"""A submission that hangs everywhere is rejected without waiting out every case; one that hangs
on one shape still gets its slow shapes timed with the full timeout."""
import time

from kbench.run.runner import CUT_FLOOR_S
from tests.helpers import FIXTURES, run_cpu, statuses

CASES = ("b3_q5_kv2_d64_f16", "b1_q4_kv4_d128_bf16", "b2_q3_kv1_d256_bf16")


def test_after_a_timeout_with_nothing_answered_later_cases_get_a_cut_deadline():
    start = time.perf_counter()
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "hangs", only=CASES[:2], timeout=10.0)
    wall = time.perf_counter() - start
    assert statuses(run) == {c: "timeout" for c in CASES[:2]}
    first, later = run["cases"]
    assert first["reason"] == "no answer after 10 s while checking the first call"
    assert later["reason"].startswith(f"no answer after {CUT_FLOOR_S:g} s while checking the first call (cut: "
                                      f"nothing answered since the timeout on {CASES[0]}; 50x the reference's")
    # one full timeout and one cut one (~10 + 3 s and two worker restarts of 1-3 s each), never two
    # full ones: those alone take 20 s
    assert wall < 2 * 10.0


def test_a_shape_cut_short_runs_again_with_the_full_timeout_once_another_is_answered():
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "hangs_on_one_shape", only=CASES, timeout=5.0)
    assert statuses(run) == {CASES[0]: "timeout", CASES[1]: "passed", CASES[2]: "passed"}
    assert [c["case"] for c in run["cases"]] == list(CASES)   # the order of the suite, not of the runs
    assert run["cases"][0]["reason"] == "no answer after 5 s while checking the first call"
