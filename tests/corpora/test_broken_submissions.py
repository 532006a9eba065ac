"""A broken submission gets its status and a one-line reason; the other cases still run."""
import pytest

from tests.helpers import FIXTURES, run_cpu, statuses

CASES = ("b3_q5_kv2_d64_f16", "b2_q3_kv1_d256_bf16")


@pytest.mark.parametrize("fixture, status, reason", [
    ("raises", "error", "ValueError: kernel exploded (at submission.py:2)"),
    ("exits", "crash", "worker exited with code 0 mid-call"),
    ("segfault", "crash", "worker killed by SIGSEGV"),
    ("wrong_answer", "mismatch", "q_out: 951/960 elements out of tolerance"),
    ("wrong_shape", "invalid", "q_out: shape (15, 64), expected (3, 5, 64)"),
    ("wrong_dtype", "invalid", "q_out: dtype torch.float32, expected torch.float16"),
    ("not_a_tensor", "invalid", "ContractError: output 0 is list, not a torch.Tensor"),
    ("wrong_arity", "invalid", "qknorm must return (q_out, k_out), got tuple of length 1"),
    ("nan_output", "mismatch", "960 NaN/inf"),
    ("syntax_error", "error", "load failed: SyntaxError"),
    ("import_error", "error", "load failed: ModuleNotFoundError: No module named 'kernel_library_that_does_not_exist'"),
    ("no_entry_point", "invalid", "defines no qknorm(q, k, norm_weight) function"),
    ("mutates_input", "invalid", "the submission modified its input 'qkv'"),
])
def test_broken_submission_status_and_reason(fixture, status, reason):
    run = run_cpu("qknorm", FIXTURES / "qknorm" / fixture, only=CASES, timeout=3.0)
    first = run["cases"][0]
    assert statuses(run) == {c: status for c in CASES}
    assert reason in first["reason"]
    assert "\n" not in first["reason"]
    assert first["latency_ms"] is None  # only a passed case has a time


def test_failure_on_one_case_keeps_the_others():
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "fails_one_case")
    st = statuses(run)
    assert st.pop("b2_q3_kv1_d256_bf16") == "error"
    assert set(st.values()) == {"passed"}
    assert run["summary"]["passed"] == 4 and run["summary"]["geomean_speedup"] is None


def test_megabytes_on_stdout_do_not_reach_the_report():
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "prints_megabytes", only=CASES[:1])
    assert statuses(run) == {CASES[0]: "passed"}
