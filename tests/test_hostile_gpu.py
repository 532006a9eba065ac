"""The hostile corpus on a CUDA device (skipped without one): the GPU-only exploits and
broken submissions, and the bundled solutions passing clean under the same defenses."""
import json
import os

import pytest

from kbench.cli.commands import exit_code
from kbench.run import workers
from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, ROOT, run_suite

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _next_worker_warm():
    """Each test starts the next test's worker (kbench/run/workers.py): it imports torch meanwhile."""
    workers.keep_warm(2)


HOSTILE = FIXTURES / "hostile" / "qknorm"
CASES = ("b3_q5_kv2_d64_f16", "b2_q3_kv1_d256_bf16")
LOG = os.environ.get("KBENCH_HOSTILE_LOG")  # where the GPU run writes each record, for the report


def gpu_run(path, task="qknorm", suite="smoke", only=CASES[:1], **kw) -> dict:
    defaults = dict(suite=suite, device="cuda", only=only, baseline="none", timeout=60.0,
                    calibrate=False, warmup_ms=5.0, pool=2,   # not qknorm's 8: the verdicts do not depend on it
                    stop=StopRule(noise=0.5, min_samples=10, max_samples=20, budget_s=0.5))
    defaults.update(kw)
    result = run_suite(get_task(task), path, Options(**defaults))
    if LOG:
        with open(LOG, "a") as f:
            f.write(json.dumps({"submission": str(path), "cases": [
                {k: c[k] for k in ("case", "status", "reason", "latency_ms", "flags")} for c in result["cases"]],
                "fatal": result["summary"]["fatal"]}) + "\n")
    return result


@pytest.mark.parametrize("fixture, status, reason", [
    ("cpu_tensor", "invalid", "on cpu, expected cuda"),
    ("illegal_memory_access", "crash", "illegal memory access"),
    ("gpu_oom", "error", "OutOfMemoryError"),
    ("stale_memory", "mismatch", "elements out of tolerance"),
    ("background_thread", "mismatch", "q_out: "),
])
def test_broken_or_hostile_on_gpu(fixture, status, reason):
    result = gpu_run(HOSTILE / fixture, only=CASES)
    assert [c["status"] for c in result["cases"]] == [status, status]  # the second case still ran
    assert reason in result["cases"][0]["reason"], result["cases"][0]["reason"]
    assert exit_code(result, None) == 1


def test_side_stream_work_past_the_timed_region_is_flagged():
    result = gpu_run(HOSTILE / "side_stream_slow")
    case = result["cases"][0]
    assert case["status"] == "passed", case["reason"]
    assert any("work hidden on another stream" in f for f in case["flags"]), case["flags"]
    assert exit_code(result, None) == 1


def test_a_side_stream_that_never_waits_on_the_callers_stream_fails():
    """Inputs are written on the caller's stream after the gate: work on a stream that does
    not wait for it reads them before they exist, as it would behind a real model's
    previous kernel."""
    result = gpu_run(HOSTILE / "side_stream", only=CASES)
    assert [c["status"] for c in result["cases"]] == ["mismatch", "mismatch"], result["cases"][0]["reason"]
    assert exit_code(result, None) == 1


def test_one_cuda_connection_reaches_the_workers_context_and_hides_a_stream_race():
    """--cuda-connections is set in the worker before its context exists. With one connection
    every stream feeds one hardware queue in enqueue order, so the race above goes unseen: what
    the option's help and docs/scale-out.md warn of, shown here so that it stays true."""
    result = gpu_run(HOSTILE / "side_stream", only=CASES, cuda_connections=1)
    assert [c["status"] for c in result["cases"]] == ["passed", "passed"], result["cases"][0]["reason"]
    assert result["timing"]["cuda_connections"] == 1


def test_cuda_timer_patching_is_flagged_and_has_no_effect():
    result = gpu_run(HOSTILE / "patches_timer")
    case = result["cases"][0]
    flags = " ".join(case["flags"])
    assert "torch.cuda.Event.elapsed_time" in flags and "torch.cuda.synchronize" in flags
    assert case["latency_ms"] >= 15  # the captured events still measured the 20 ms per call
    assert exit_code(result, None) == 1


@pytest.mark.parametrize("task, suite", [("qknorm", "quick"), ("block_sparse_attn", "quick")])
def test_bundled_solution_passes_clean_on_gpu(task, suite):
    first = get_task(task).suite(suite).cases[0].name
    result = gpu_run(ROOT / "submissions" / task, task=task, suite=suite, only=(first,), calibrate=True,
                     baseline=None)
    case = result["cases"][0]
    assert case["status"] == "passed" and case["flags"] == [], (case["reason"], case["flags"])
    assert result["summary"]["fatal"] is None
