"""The hostile corpus: every submission that tries to win by cheating gets caught.

Each fixture in tests/fixtures/hostile/<task>/<exploit>/ is one published exploit; the
table in docs/threat-model.md maps each to its defense and to the test here. Caught means
a failing status (mismatch, invalid, error, crash, timeout) or a flag, and exit code 1.
On a CUDA device (GPU tests marked): the GPU-only exploits and broken submissions, and the
bundled solutions passing clean under the same defenses.
"""
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from kbench.cli.commands import exit_code
from kbench.run import workers
from kbench.run.runner import Options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, ROOT, run_cpu, run_suite

HOSTILE = FIXTURES / "hostile"
CASE = ("b3_q5_kv2_d64_f16",)


def _with_torch_attention(fixture: str) -> Path:
    """block_sparse_attn fixtures wrap the original-style PyTorch submission: it is copied
    next to them as attn.py (a submission may import only its own files)."""
    folder = Path(tempfile.mkdtemp(prefix="kbench-hostile-")) / fixture
    shutil.copytree(HOSTILE / "block_sparse_attn" / fixture, folder)
    shutil.copy(FIXTURES / "block_sparse_attn" / "torch_submission" / "submission.py", folder / "attn.py")
    return folder


def run(fixture: str, task: str = "qknorm", **kw) -> dict:
    kw.setdefault("only", CASE)
    kw.setdefault("timeout", 20.0)
    if task != "block_sparse_attn":
        return run_cpu(task, HOSTILE / task / fixture, **kw)
    path = _with_torch_attention(fixture)
    try:
        return run_cpu(task, path, **kw)
    finally:
        shutil.rmtree(path.parent, ignore_errors=True)


def caught(result: dict) -> bool:
    return exit_code(result, None) == 1


@pytest.mark.parametrize("fixture, status, reason", [
    ("cache_by_shape", "mismatch", "timed call 1"),              # 1
    ("lazy_subclass", "invalid", "output 0 is Lazy, not a torch.Tensor"),  # 3
    # the outputs are empty_like: NaN where the L2 flush freed them on a GPU, any bytes on CPU
    ("filled_later", "mismatch", "elements out of tolerance"),   # 3
    ("forges_result_lines", "mismatch", "q_out: "),              # 7
    ("writes_inherited_fds", "invalid", "unreadable worker reply"),  # 7
    ("exits_success", "crash", "worker exited with code 0 mid-call"),  # 7
    ("gc_reference", "mismatch", "q_out: "),                     # 8
    ("gc_poison", "invalid", "the submission modified its input"),  # 8
    ("zero_inputs", "invalid", "the submission modified its input"),  # 9
    ("stale_memory", "mismatch", "q_out: "),                     # 10
    ("constant_output", "mismatch", "q_out: "),                  # 11
    ("low_precision", "mismatch", "elements out of tolerance"),  # 12
    ("public_seeds", "mismatch", "timed call 1"),                # 13, public seed: caught on timed calls
    ("detects_timing", "mismatch", "timed call 1"),              # 14
    ("tampers_harness", "mismatch", "q_out: "),                  # 16, the worker's kbench.tasks.check is not the judge
    ("busy_loop", "timeout", "no answer after 3 s"),             # broken: infinite loop
])
def test_exploit_gets_a_failing_status(fixture, status, reason):
    result = run(fixture, timeout=3.0 if fixture == "busy_loop" else 20.0)
    case = result["cases"][0]
    assert (case["status"], case["latency_ms"]) == (status, None), case["reason"]
    assert reason in case["reason"] and "\n" not in case["reason"]
    # nothing the submission printed reaches the verdict: the forging fixtures print "PASSED ... speedup
    # ... 1000"; a bare "1000" can be a fresh timed seed in the reason (seed 1000311142 was)
    assert not any(printed in case["reason"] for printed in ("PASSED", "speedup", "1000x", "1000.0"))
    assert caught(result)


@pytest.mark.parametrize("fixture, flag", [
    ("opens_socket", "submission connected a socket"),          # 15
    ("reads_outside", "reference/qknorm/task.py, outside its folder"),  # 15
    ("writes_outside", ".kbench-hostile-writes-outside for writing, outside its folder"),  # 15
    ("spawns_process", "submission started a process ('true'"),  # 15
])
def test_exploit_gets_flagged(fixture, flag):
    result = run(fixture)
    case = result["cases"][0]
    assert case["status"] == "passed", case["reason"]
    assert any(flag in f for f in case["flags"]), case["flags"]
    assert caught(result)


def test_killing_the_fork_server_is_flagged_and_the_next_run_starts_its_workers():  # 15
    # A worker's parent is the server kbench forks workers from (kbench/run/workers.py): the worker
    # runs on without it, and the next worker's start finds a new one.
    result = run("kills_fork_server")
    case = result["cases"][0]
    assert case["status"] == "passed", case["reason"]
    assert any("sent signal 9 to process" in f for f in case["flags"]), case["flags"]
    assert caught(result)
    workers._discard_spares()   # the next run's workers start from the server, now dead
    after = run_cpu("qknorm", FIXTURES / "qknorm" / "good_torch", only=CASE)
    assert [c["status"] for c in after["cases"]] == ["passed"]


def test_public_seed_special_casing_fails_the_first_call_under_a_hidden_seed():  # 13
    case = run("public_seeds", seed=1234)["cases"][0]
    assert case["status"] == "mismatch" and "timed call" not in case["reason"]


def test_work_done_ahead_for_later_calls_is_impossible():  # 2
    # Each timed call costs the fixture 50 ms unless it found that call's inputs during an
    # earlier call. Every timed call is its own request and the worker never holds a later
    # call's inputs, so every call pays: the median is the honest 50 ms, with no heuristic.
    result = run("batch_ahead", stop=StopRule(noise=0.5, min_samples=4, max_samples=8, budget_s=5))
    case = result["cases"][0]
    assert case["status"] == "passed" and case["latency_ms"] >= 45, case
    assert case["flags"] == []


def test_background_thread_output_is_not_waited_for():  # 5
    result = run("background_thread")
    case = result["cases"][0]
    assert case["status"] == "mismatch"  # outputs are snapshotted when the call returns
    assert caught(result)


def test_timer_patching_is_flagged_and_has_no_effect():  # 6
    result = run("patches_timer")
    case = result["cases"][0]
    assert case["status"] == "passed"
    flags = " ".join(case["flags"])
    for name in ("time.perf_counter", "kbench.worker.loop._perf_counter", "CallTimer._flush_l2"):
        assert name in flags
    assert case["latency_ms"] >= 15  # the fixture sleeps 20 ms per call; the real clock saw it
    assert caught(result)


def test_forged_reply_on_the_channel_is_rejected():  # 7
    result = run("forges_reply")
    assert result["cases"][0]["status"] in ("invalid", "mismatch")
    assert caught(result)


def test_tampering_with_the_task_files_on_disk_fails_the_run(tmp_path, monkeypatch):  # 16
    shutil.copytree(ROOT / "reference" / "qknorm", tmp_path / "reference" / "qknorm_copy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "cases").mkdir()
    shutil.copy(ROOT / "cases" / "qknorm.toml", tmp_path / "cases" / "qknorm_copy.toml")
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    monkeypatch.setenv("KBENCH_HOSTILE_SANDBOX", "1")
    workers._discard_spares()   # the run's worker is spawned with them in its environment
    result = run_cpu("qknorm_copy", HOSTILE / "qknorm" / "tampers_harness", only=CASE, timeout=20.0)
    assert "changed during the run" in result["summary"]["fatal"]
    assert "contract.py" in result["summary"]["fatal"]
    assert any("contract.py for writing" in f for f in result["cases"][0]["flags"])
    assert caught(result)


def test_replay_by_address_never_passes_a_stale_answer():  # 1
    # Inputs land at a random place every call, so an address-keyed cache rarely hits; when
    # it does, the stale outputs fail the check. Either way no replay passes.
    folder = _with_torch_attention("cache_by_pointer")
    try:
        result = run_cpu("block_sparse_attn", folder, only=("smoke-window-1",),
                         stop=StopRule(noise=0.5, min_samples=8, max_samples=8, budget_s=5))
        hits = (folder / "hits.txt").read_text().count("hit") if (folder / "hits.txt").exists() else 0
    finally:
        shutil.rmtree(folder.parent, ignore_errors=True)
    status = result["cases"][0]["status"]
    assert status == ("mismatch" if hits else "passed"), (status, hits)


def test_block_sparse_attn_subprocess_is_flagged():  # 15
    result = run("spawns_process", task="block_sparse_attn", only=("smoke-window-1",))
    case = result["cases"][0]
    assert case["status"] == "passed"
    assert any("started a process" in f for f in case["flags"])


# Nothing left behind (processes, temp folders) is checked after every test, for every
# fixture: tests/conftest.py (nothing_left_behind).


def _cpu_cases():
    for task, suites in (("qknorm", ("smoke", "quick", "full")), ("block_sparse_attn", ("smoke",))):
        t = get_task(task)
        for suite in suites:
            for case in t.suite(suite).cases:
                yield t, case


def test_constant_outputs_fail_every_case():  # 11
    for task, case in _cpu_cases():
        inputs = task.module.generate(dict(case.params, seed=case.seed), "cpu")
        expected = task.module.reference(inputs)
        for fill in ("zeros", "mean", "ones"):
            fake = []
            for ref in expected:
                finite = ref.float()[torch.isfinite(ref.float())]
                value = {"zeros": 0.0, "ones": 1.0, "mean": float(finite.mean()) if finite.numel() else 0.0}[fill]
                fake.append(torch.full_like(ref, value))
            verdict = task.module.check(tuple(fake), expected, inputs)
            assert not verdict.passed, f"{task.name}/{case.name}: {fill} outputs pass"


@pytest.mark.parametrize("task, case", [("qknorm", CASE[0]), ("block_sparse_attn", "smoke-window-1")])
def test_bundled_solutions_pass_clean(task, case):
    """The defenses flag nothing on a legitimate submission."""
    result = run_cpu(task, ROOT / "submissions" / task, only=(case,), timeout=120.0)
    rec = result["cases"][0]
    assert rec["status"] == "passed" and rec["flags"] == [], (rec["reason"], rec["flags"])
    assert result["summary"]["fatal"] is None and exit_code(result, None) == 0


# -- on a CUDA device -------------------------------------------------------------------


HOSTILE_QKNORM = FIXTURES / "hostile" / "qknorm"
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


@pytest.mark.gpu
@pytest.mark.parametrize("fixture, status, reason", [
    ("cpu_tensor", "invalid", "on cpu, expected cuda"),
    ("illegal_memory_access", "crash", "illegal memory access"),
    ("gpu_oom", "error", "OutOfMemoryError"),
    ("stale_memory", "mismatch", "elements out of tolerance"),
    ("background_thread", "mismatch", "q_out: "),
])
def test_broken_or_hostile_on_gpu(fixture, status, reason):
    result = gpu_run(HOSTILE_QKNORM / fixture, only=CASES)
    assert [c["status"] for c in result["cases"]] == [status, status]  # the second case still ran
    assert reason in result["cases"][0]["reason"], result["cases"][0]["reason"]
    assert exit_code(result, None) == 1


@pytest.mark.gpu
def test_side_stream_work_past_the_timed_region_is_flagged():
    result = gpu_run(HOSTILE_QKNORM / "side_stream_slow")
    case = result["cases"][0]
    assert case["status"] == "passed", case["reason"]
    assert any("work hidden on another stream" in f for f in case["flags"]), case["flags"]
    assert exit_code(result, None) == 1


@pytest.mark.gpu
def test_a_side_stream_that_never_waits_on_the_callers_stream_fails():
    """Inputs are written on the caller's stream after the gate: work on a stream that does
    not wait for it reads them before they exist, as it would behind a real model's
    previous kernel."""
    result = gpu_run(HOSTILE_QKNORM / "side_stream", only=CASES)
    assert [c["status"] for c in result["cases"]] == ["mismatch", "mismatch"], result["cases"][0]["reason"]
    assert exit_code(result, None) == 1


@pytest.mark.gpu
def test_one_cuda_connection_reaches_the_workers_context_and_hides_a_stream_race():
    """--cuda-connections is set in the worker before its context exists. With one connection
    every stream feeds one hardware queue in enqueue order, so the race above goes unseen: what
    the option's help and docs/scale-out.md warn of, shown here so that it stays true."""
    result = gpu_run(HOSTILE_QKNORM / "side_stream", only=CASES, cuda_connections=1)
    assert [c["status"] for c in result["cases"]] == ["passed", "passed"], result["cases"][0]["reason"]
    assert result["timing"]["cuda_connections"] == 1


@pytest.mark.gpu
def test_cuda_timer_patching_is_flagged_and_has_no_effect():
    result = gpu_run(HOSTILE_QKNORM / "patches_timer")
    case = result["cases"][0]
    flags = " ".join(case["flags"])
    assert "torch.cuda.Event.elapsed_time" in flags and "torch.cuda.synchronize" in flags
    assert case["latency_ms"] >= 15  # the captured events still measured the 20 ms per call
    assert exit_code(result, None) == 1


@pytest.mark.gpu
@pytest.mark.parametrize("task, suite", [("qknorm", "quick"), ("block_sparse_attn", "quick")])
def test_bundled_solution_passes_clean_on_gpu(task, suite):
    first = get_task(task).suite(suite).cases[0].name
    result = gpu_run(ROOT / "submissions" / task, task=task, suite=suite, only=(first,), calibrate=True,
                     baseline=None)
    case = result["cases"][0]
    assert case["status"] == "passed" and case["flags"] == [], (case["reason"], case["flags"])
    assert result["summary"]["fatal"] is None
