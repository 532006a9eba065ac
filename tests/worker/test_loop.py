"""The worker's loop (kbench/worker/loop.py): a worker survives a Python exception, a warm-up
starts a case and is not used up by a first call that compiles, and Triton's cache key is hashed
when a worker loads, on a GPU only."""
from kbench import protocol
from kbench.run.runner import Options, Runner
from kbench.run.targets import WorkerProcess
from kbench.stats.estimates import StopRule
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES


def test_a_worker_survives_a_python_exception_and_is_not_restarted(monkeypatch):
    starts = []
    real_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (starts.append(1), real_start(self))[1])
    options = Options(suite="smoke", device="cpu", baseline="none", calibrate=False, warmup_ms=1.0,
                      stop=StopRule(min_samples=2, max_samples=2, budget_s=0.5))
    result = Runner(get_task("qknorm"), options).run(FIXTURES / "qknorm" / "fails_one_case")
    statuses = [c["status"] for c in result["cases"]]
    assert "error" in statuses and statuses.count("passed") == len(statuses) - 1
    assert len(starts) == 1


def test_a_workers_warm_up_starts_a_case():
    from kbench.worker.loop import Caller

    caller = Caller(None, "cpu", 0)
    caller.timer.primer, caller.timer.gate_off = ("stale",), True
    caller.timer.timed = lambda invoke, prepare, inputs, graph=False: ([], None)
    caller.warmup(protocol.Warmup({}, min_ms=0.0, max_calls=1))
    assert caller.timer.primer is None and not caller.timer.gate_off


def test_a_first_call_that_compiles_does_not_use_up_the_warm_up():
    import time

    from kbench.worker.loop import Caller

    caller = Caller(None, "cpu", 0)
    calls = []

    def timed(invoke, prepare, inputs, graph=False):
        calls.append(time.perf_counter())
        time.sleep(0.05 if len(calls) == 1 else 0.001)   # the first call compiles
        return [], None

    caller.timer.timed = timed
    caller.warmup(protocol.Warmup({}, min_ms=20.0, max_calls=100))
    assert len(calls) > 5 and (calls[-1] - calls[1]) * 1e3 >= 15.0


def test_the_worker_hashes_triton_at_load_on_a_gpu_only(monkeypatch):
    # Triton's cache key (0.46 s a process on the H100 host) is paid while the pool starts,
    # side by side, not at each process's first call inside a case. This imports triton in this
    # process: in pytest's order it must come after tests/tasks/block_sparse_attn/ (tests/test_project.py).
    import triton  # noqa: F401  (the submission would have imported it)
    from triton.runtime import cache

    from kbench.worker import loop

    calls = []
    monkeypatch.setattr(cache, "triton_key", lambda: calls.append(1))
    loop._warm_triton("cpu")
    assert calls == []
    loop._warm_triton("cuda")
    assert calls == [1]
