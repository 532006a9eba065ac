"""The qknorm task: inputs, ground truth, score, contract forms, the bundled solution on CPU; on a
CUDA device (GPU tests marked): ground truth vs flashinfer, the bundled solution timed."""
import ast

import pytest
import torch

from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, ROOT, run_cpu, run_suite, statuses

task = get_task("qknorm")
ref = task.module


def test_full_suite_is_the_original_20_cases_in_order():
    cases = task.suite("full").cases
    assert len(cases) == 20
    expected = [(kv, 32, d, b) for kv in (8, 32) for d in (64, 128) for b in (1, 16, 64, 128, 256)]
    got = [(c.params["num_kv_heads"], c.params["num_qo_heads"], c.params["head_dim"], c.params["batch"])
           for c in cases]
    assert got == expected
    assert all(c.params["dtype"] == "float16" for c in cases)
    assert [c.seed for c in cases] == list(range(1, 21))


def test_every_suite_says_why_it_exists():
    assert all(s.reason for s in task.suites.values())


def test_q_and_k_are_strided_views_of_one_fused_qkv():
    inputs = ref.generate({"batch": 3, "num_qo_heads": 5, "num_kv_heads": 2, "head_dim": 64,
                           "dtype": "float16", "seed": 7}, "cpu")
    q, k, qkv = inputs["q"], inputs["k"], inputs["qkv"]
    assert q.shape == (3, 5, 64) and k.shape == (3, 2, 64)
    assert not q.is_contiguous() and not k.is_contiguous()
    assert q.stride() == ((5 + 4) * 64, 64, 1) and k.stride() == q.stride()
    assert k.storage_offset() == 5 * 64 and q.untyped_storage().data_ptr() == qkv.untyped_storage().data_ptr()


def test_4d_inputs():
    inputs = ref.generate({"batch": 2, "seq": 3, "num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 64,
                           "dtype": "bfloat16", "seed": 1}, "cpu")
    assert inputs["q"].shape == (2, 3, 4, 64) and inputs["k"].shape == (2, 3, 2, 64)


def test_generation_is_deterministic_per_seed():
    case = {"batch": 2, "num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 64, "dtype": "float16"}
    a, b = ref.generate({**case, "seed": 3}, "cpu"), ref.generate({**case, "seed": 3}, "cpu")
    c = ref.generate({**case, "seed": 4}, "cpu")
    assert torch.equal(a["qkv"], b["qkv"]) and not torch.equal(a["qkv"], c["qkv"])


def test_ground_truth_matches_float64_math():
    inputs = ref.generate({"batch": 4, "num_qo_heads": 3, "num_kv_heads": 1, "head_dim": 128,
                           "dtype": "float16", "seed": 5}, "cpu")
    q, w = inputs["q"].double(), inputs["norm_weight"].double()
    expected = q / torch.sqrt((q * q).mean(-1, keepdim=True) + 1e-6) * w
    got = ref.reference(inputs)[0]
    assert got.dtype == torch.float16
    assert torch.allclose(got.double(), expected, rtol=1e-3, atol=1e-3)


def test_tolerance_cannot_be_passed_by_zero_or_constant_outputs():
    for case in task.suite("full").cases[:3] + task.suite("smoke").cases:
        inputs = ref.generate(case.params, "cpu")
        expected = ref.reference(inputs)
        for fill in (0.0, 1.0):
            outs = tuple(torch.full_like(e, fill) for e in expected)
            assert ref.check(outs, expected, inputs).status == "mismatch"


def test_native_score_is_frontier_cs_formula():
    def frontier(recs):  # (score, unbounded score) in kbench's one native-score shape
        score = ref.native_score(recs, "full")
        return score["value"], score["details"]["score_unbounded"]
    recs = [{"status": "passed", "speedup": s, "baseline": "flashinfer"} for s in (1.0, 4.0)]
    assert frontier(recs) == (100.0, 200.0)
    recs = [{"status": "passed", "speedup": s, "baseline": "flashinfer"} for s in (0.5, 0.5)]
    assert frontier(recs) == (50.0, 50.0)
    recs[1] = {"status": "mismatch", "speedup": None, "baseline": None}
    assert frontier(recs) == (0.0, 0.0)


def test_roofline_counts_read_and_write_of_q_and_k():
    roof = ref.roofline({"batch": 1, "num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128, "dtype": "float16"})
    assert roof["bytes"] == (2 * 40 * 128 + 128) * 2


@pytest.mark.parametrize("fixture", ["frontier_code", "frontier_path"])
def test_frontier_cs_solution_runs_unchanged(fixture):
    run = run_cpu("qknorm", FIXTURES / "qknorm" / fixture, only=("b3_q5_kv2_d64_f16",))
    assert statuses(run) == {"b3_q5_kv2_d64_f16": "passed"}


def test_bundled_triton_solution_passes_smoke_in_the_interpreter():
    run = run_cpu("qknorm", ROOT / "submissions" / "qknorm")
    assert set(statuses(run).values()) == {"passed"}, run["cases"]
    assert len(run["cases"]) == 5
    # the worst over every checked call (timed calls on fresh seeds): at most one bf16 ulp,
    # relative, whatever |y| the seeds drew; the interpreter's bf16 tl.dot garbage is ~1e10
    worst = max(c["max_rel_err"] for c in run["cases"])
    assert worst <= 2 ** -7


def test_bundled_solution_reads_views_in_place():
    tree = ast.parse((ROOT / "submissions" / "qknorm" / "submission.py").read_text())
    copies = [n.attr for n in ast.walk(tree)
              if isinstance(n, ast.Attribute) and n.attr in ("contiguous", "reshape", "clone")]
    assert copies == []


@pytest.mark.gpu
@pytest.mark.parametrize("suite", ["full", "models"])
def test_fp32_ground_truth_matches_flashinfer(suite):
    import flashinfer  # the `gpu` extra: a GPU machine without it cannot run the baseline

    for case in task.suite(suite).cases:
        inputs = task.module.generate(case.params, "cuda")
        expected = task.module.reference(inputs)
        got = []
        for x in (inputs["q"], inputs["k"]):
            # flashinfer takes 2D/3D inputs: 4D cases go through a (tokens, heads, dim) copy
            flat = x if x.dim() == 3 else x.reshape(-1, *x.shape[-2:])
            out = torch.empty(flat.shape, dtype=x.dtype, device="cuda")
            flashinfer.norm.rmsnorm(flat, inputs["norm_weight"], out=out)
            got.append(out.view(x.shape))
        verdict = task.module.check(tuple(got), expected, inputs)
        assert verdict.passed, (case.name, verdict.reason)
        # |y| stays under 8 here, so one rounding step of the dtype bounds the difference
        assert verdict.max_abs_err <= 8 * torch.finfo(x.dtype).eps, (case.name, verdict.max_abs_err)


@pytest.mark.gpu
@pytest.mark.parametrize("suite", ["quick", "full"])
def test_bundled_solution_passes_unflagged(suite):
    options = Options(suite=suite, device="cuda", stop=StopRule(budget_s=0.2))
    run = run_suite(task, ROOT / "submissions" / "qknorm", options)
    bad = [(c["case"], c["status"], c["reason"], c["flags"]) for c in run["cases"]
           if c["status"] != "passed" or c["flags"]]
    assert bad == []
    assert run["baseline"] == "flashinfer" and run["summary"]["geomean_speedup"] is not None
    # The SM clock read from each call's gate: the card's maximum on a card kbench alone loads.
    top = float(run["device"]["clocks_max_sm"].split()[0])
    clocks = [c[k] for c in run["cases"] for k in ("sm_clock_mhz", "baseline_sm_clock_mhz")]
    assert all(0.97 * top <= mhz <= 1.01 * top for mhz in clocks), (top, clocks)
    assert not [n for c in run["cases"] for n in c["notes"] if "throttled" in n]


@pytest.mark.gpu
def test_cuda_graph_mode_is_labelled_and_times_the_replay():
    options = Options(suite="quick", device="cuda", only=("kv8_q32_d128_b1",), cuda_graph=True,
                      stop=StopRule(budget_s=0.3))
    run = run_suite(task, ROOT / "submissions" / "qknorm", options)
    case = run["cases"][0]
    assert run["timing"]["mode"] == "cuda-graph-replay"
    assert case["status"] == "passed" and case["latency_ms"] < 0.05
    assert case["sm_clock_mhz"] > 0   # a replay runs behind the gate too
