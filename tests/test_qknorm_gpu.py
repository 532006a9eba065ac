"""qknorm on a CUDA device (skipped without one): ground truth vs flashinfer, bundled solution."""
import pytest
import torch

from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import ROOT, run_suite

pytestmark = pytest.mark.gpu
task = get_task("qknorm")


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


def test_cuda_graph_mode_is_labelled_and_times_the_replay():
    options = Options(suite="quick", device="cuda", only=("kv8_q32_d128_b1",), cuda_graph=True,
                      stop=StopRule(budget_s=0.3))
    run = run_suite(task, ROOT / "submissions" / "qknorm", options)
    case = run["cases"][0]
    assert run["timing"]["mode"] == "cuda-graph-replay"
    assert case["status"] == "passed" and case["latency_ms"] < 0.05
    assert case["sm_clock_mhz"] > 0   # a replay runs behind the gate too
