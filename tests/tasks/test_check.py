import math

import pytest
import torch

from kbench.tasks.check import combine, compare


def test_within_tolerance_passes_and_reports_worst_error():
    ref = torch.tensor([1.0, 2.0, -3.0])
    out = ref + torch.tensor([0.001, -0.002, 0.0])
    r = compare("y", out, ref, rtol=1e-2, atol=1e-3)
    assert r.status == "passed"
    assert math.isclose(r.max_abs_err, 0.002, rel_tol=1e-4)


def test_mismatch_counts_elements_and_gives_positions():
    ref = torch.zeros(4, 5)
    out = ref.clone()
    out[1, 2] = 1.0
    out[3, 4] = -2.0
    r = compare("y", out, ref, rtol=1e-2, atol=1e-3)
    assert r.status == "mismatch"
    assert r.details["bad_elements"] == 2
    assert r.details["positions"] == [[1, 2], [3, 4]]
    assert "2/20 elements" in r.reason and "max abs err 2" in r.reason


def test_nan_where_reference_is_finite_fails():
    ref = torch.ones(3)
    out = torch.tensor([1.0, float("nan"), 1.0])
    r = compare("y", out, ref, rtol=1.0, atol=1.0)  # even a huge tolerance cannot pass NaN
    assert r.status == "mismatch"
    assert "1 NaN/inf" in r.reason


def test_inf_where_reference_is_finite_fails():
    r = compare("y", torch.tensor([float("inf")]), torch.tensor([1.0]), rtol=1.0, atol=1.0)
    assert r.status == "mismatch"


def test_matching_infinities_pass_and_wrong_sign_fails():
    ref = torch.tensor([float("-inf"), 0.5])
    assert compare("lse", ref.clone(), ref, rtol=1e-5, atol=1e-5).passed
    bad = torch.tensor([float("inf"), 0.5])
    assert compare("lse", bad, ref, rtol=1e-5, atol=1e-5).status == "mismatch"


def test_shape_dtype_and_type_errors_are_invalid():
    ref = torch.zeros(2, 3, dtype=torch.float16)
    assert "shape (3, 2)" in compare("y", torch.zeros(3, 2, dtype=torch.float16), ref, rtol=0, atol=0).reason
    r = compare("y", torch.zeros(2, 3), ref, rtol=0, atol=0)
    assert r.status == "invalid" and "dtype torch.float32" in r.reason
    r = compare("y", [[0.0] * 3] * 2, ref, rtol=0, atol=0)
    assert r.status == "invalid" and "expected a torch.Tensor, got list" in r.reason


def test_tensor_subclass_is_invalid():
    class Lazy(torch.Tensor):
        pass

    ref = torch.zeros(3)
    r = compare("y", ref.clone().as_subclass(Lazy), ref, rtol=0, atol=0)
    assert r.status == "invalid"


def test_combine_keeps_first_failure_and_counts_the_rest():
    ok = compare("a", torch.ones(2), torch.ones(2), rtol=0, atol=0)
    bad1 = compare("b", torch.zeros(2), torch.ones(2), rtol=0, atol=0)
    bad2 = compare("c", torch.zeros(2), torch.ones(2), rtol=0, atol=0)
    r = combine([ok, bad1, bad2])
    assert r.status == "mismatch" and r.reason.startswith("b:") and "(+1 more outputs failing)" in r.reason
    assert combine([ok, ok]).passed


def _cases():
    """(out, ref, rtol, atol): few or many elements differing, NaN, inf, exact ties."""
    g = torch.Generator().manual_seed(7)
    ref = torch.randn(6, 50, 40, generator=g).to(torch.bfloat16)
    ref[0, 0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    few = ref.clone()
    few[2, 7, 1] += 1.0                      # out of tolerance
    few[4, 49, 39] = float("nan")            # NaN where the reference is finite
    few[5, 3, 2] += few[5, 3, 2].abs() * 0.004  # within tolerance, but not bit-equal
    many = (ref.float() + 0.002 * torch.randn(ref.shape, generator=g)).to(torch.bfloat16)
    many[0, 0, :3] = ref[0, 0, :3]
    many[1, 1, 1] = -many[1, 1, 1] - 1
    wrong_inf = ref.clone()
    wrong_inf[0, 0, 1] = float("inf")
    return [(few, ref, 1e-2, 1e-3), (many, ref, 1e-2, 1e-3), (wrong_inf, ref, 1e-2, 1e-3),
            (ref.clone(), ref, 0.0, 0.0), (ref.float().double() + 1e-9, ref.float().double(), 0.0, 1e-12)]


def test_checking_only_the_differing_elements_changes_nothing(monkeypatch):
    """The gathered path (few elements differ) and the whole-tensor path give the same verdict,
    errors, count and positions."""
    import kbench.tasks.check as check

    for out, ref, rtol, atol in _cases():
        fast = compare("y", out, ref, rtol=rtol, atol=atol)
        monkeypatch.setattr(check, "GATHER_BELOW", 0.0)
        whole = compare("y", out, ref, rtol=rtol, atol=atol)
        monkeypatch.undo()
        assert (fast.status, fast.reason, fast.details) == (whole.status, whole.reason, whole.details)
        assert (fast.max_abs_err, fast.max_rel_err) == (whole.max_abs_err, whole.max_rel_err)


def test_gathered_path_reports_the_few_bad_elements_where_they_are():
    ref = torch.zeros(3, 4, 1000)
    out = ref.clone()
    out[2, 3, 999] = 5.0
    out[0, 1, 2] = float("nan")
    r = compare("kv", out, ref, rtol=1e-2, atol=1e-3)
    assert r.status == "mismatch" and r.details["bad_elements"] == 2
    assert r.details["positions"] == [[0, 1, 2], [2, 3, 999]]
    assert "1 NaN/inf" in r.reason
    assert compare("kv", ref.clone(), ref, rtol=0, atol=0).max_abs_err == 0.0


def test_a_nan_in_the_reference_gives_no_nan_error():
    ref = torch.tensor([float("nan"), 1.0, float("-inf")])
    r = compare("y", torch.tensor([float("nan"), 1.001, float("-inf")]), ref, rtol=1e-2, atol=1e-3)
    assert r.passed and r.max_rel_err == pytest.approx(0.001, rel=1e-3) and not math.isnan(r.max_abs_err)
    bad = compare("y", torch.tensor([1.0, 1.0, float("-inf")]), ref, rtol=1e-2, atol=1e-3)
    assert bad.status == "mismatch" and not math.isnan(bad.max_rel_err)
