"""Every case of every suite that runs on CPU is fair: the exact answer (the task's math in
float64) rounded to the outputs' dtypes passes the task's check on 1,000 fresh seeds."""
import pytest

from kbench.tasks.suites import exact_answer_misses, health_seeds
from kbench.tasks.task import get_task

# 1,000 seeds where a case is cheap and small (qknorm's smoke suite). Fewer where a seed costs
# more on a CPU: mla_decode's smoke cases 10-50 ms a seed, block_sparse_attn 30-45 ms (smoke) and
# 0.1-0.4 s (local-dev), qknorm's big suites up to 20 s (models). 400 seeds see a case that fails
# 1% of them (the noise this test is after, test_a_noisy_case_is_caught) with 98% certainty;
# `python bench/suite_health.py TASK SUITE --seeds 1000` gives the full count (docs/tasks.md).
SEEDS = {("mla_decode", "smoke"): 400, ("block_sparse_attn", "smoke"): 200, ("block_sparse_attn", "local-dev"): 20,
         ("qknorm", "quick"): 40, ("qknorm", "full"): 20, ("qknorm", "models"): 1}
DEFAULT_SEEDS = 1000


def _cpu_cases():
    out = []
    for name in ("qknorm", "mla_decode", "block_sparse_attn"):
        task = get_task(name)
        for suite_name, suite in task.suites.items():
            if "cpu" in suite.devices:
                out += [(name, suite_name, case) for case in suite.cases]
    return out


CASES = _cpu_cases()


@pytest.mark.parametrize("task_name, suite, case", CASES, ids=[f"{t}-{s}-{c.name}" for t, s, c in CASES])
def test_the_exact_answer_passes_the_check(task_name, suite, case):
    module = get_task(task_name).module
    seeds = health_seeds(case, SEEDS.get((task_name, suite), DEFAULT_SEEDS))
    misses, first = exact_answer_misses(module, case, seeds)
    assert misses == 0, f"{misses}/{len(seeds)} seeds: {first}"


def test_a_noisy_case_is_caught():
    # One row of context (mla_decode's old smoke case b1_h2_ctx1): the bf16 ground truth is
    # noisy enough that the exact answer fails the check on about 1% of seeds.
    from kbench.tasks.suites import Case
    case = Case("b1_h2_ctx1", dict(batchsize=1, dim=32, dq=16, prefill=1, n_heads=2, kv_lora_rank=32,
                                    qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16, max_seq_len=16))
    misses, first = exact_answer_misses(get_task("mla_decode").module, case, health_seeds(case, 600))
    assert misses > 0 and "out of tolerance" in first
