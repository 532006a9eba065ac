"""Every target timed in several worker processes: the figure is the mean of their medians and
its interval includes how far apart they are (kbench/stats/estimates.py ``pool``, docs/measurement.md)."""
import pytest

from kbench import protocol
from kbench.run.runner import Runner
from kbench.run.targets import Target, WorkerProcess
from kbench.stats.compare import compare_cases
from kbench.stats.estimates import PROCESS_REL, StopRule, pool, summarize
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, cpu_options


def _process(median_us: float, n: int = 50, spread: float = 0.002) -> list[float]:
    """``n`` samples around ``median_us`` (ms), evenly spread by +-``spread``."""
    return [median_us * 1e-3 * (1 + spread * (2 * i / (n - 1) - 1)) for i in range(n)]


def test_processes_that_agree_give_their_mean_and_the_spread_they_show():
    fig = pool([_process(62.0), _process(62.4)]).summary
    assert fig.median == pytest.approx(62.2e-3, rel=1e-3)
    # tight samples, close medians: the standard error is what the two medians show (0.2 us
    # either side of their mean), nothing assumed
    assert fig.noise == pytest.approx(0.2 / 62.2, rel=1e-3)
    assert fig.n == 100


def test_one_process_carries_the_whole_floor():
    fig = pool([_process(62.0)]).summary
    assert fig.noise == pytest.approx(PROCESS_REL, rel=0.1)
    # a kernel of a few microseconds: 0.1 us between processes is more than 1%
    assert pool([_process(6.20)]).summary.noise == pytest.approx(0.1 / 6.2, rel=0.1)


def test_processes_that_disagree_widen_the_interval_to_cover_both():
    # the H100 case: one worker of a pair sat 6% above the other (6.65 against 6.27 us)
    low, high = _process(6.27), _process(6.65)
    fig = pool([low, high]).summary
    assert fig.median == pytest.approx(6.46e-3, rel=1e-3)
    assert fig.ci_low < 6.27e-3 and fig.ci_high > 6.65e-3


def test_identical_code_with_one_process_off_is_not_called_faster():
    # A: both processes at 6.27 us; B: the same code, one of its processes 6% off. Each process
    # alone would read 6.65 against 6.27 with tight intervals (FASTER/SLOWER by 6%).
    a = pool([_process(6.27), _process(6.28)]).summary
    b = pool([_process(6.27), _process(6.65)]).summary
    row = compare_cases([("c", ("passed", a.median, a.noise), ("passed", b.median, b.noise))])["rows"][0]
    assert row["verdict"] == "UNSURE"
    one_each = compare_cases([("c", ("passed", 6.27e-3, 0.002), ("passed", 6.65e-3, 0.002))])["rows"][0]
    assert one_each["verdict"] == "SLOWER"   # what a figure from single processes would claim


def test_a_run_times_every_target_round_the_processes(monkeypatch):
    starts = []
    real_start = WorkerProcess.start
    monkeypatch.setattr(WorkerProcess, "start", lambda self: (starts.append(1), real_start(self))[1])
    options = cpu_options(processes=2, only=("b1_q4_kv4_d128_bf16",), warmup_ms=1.0,
                          stop=StopRule(noise=0.5, min_samples=2, max_samples=6, budget_s=0.5))
    run = Runner(get_task("qknorm"), options).run(FIXTURES / "honest" / "qknorm" / "torch_eager")
    case = run["cases"][0]
    assert case["status"] == "passed", case["reason"]
    assert len(starts) == 2 and run["timing"]["processes"] == 2 and case["process_ids"] == [0, 1]
    # at least three timed calls in each process before the target may stop
    assert case["samples"] == 6 and len(case["latency_by_process_ms"]) == 2
    assert case["latency_ms"] == pytest.approx(sum(case["latency_by_process_ms"]) / 2, rel=1e-4)
    # every timed call kept, per process: each process's median is its own samples' median
    assert [len(s) for s in case["samples_ms"]] == [3, 3]
    for samples, median in zip(case["samples_ms"], case["latency_by_process_ms"]):
        assert summarize(samples).median == pytest.approx(median, rel=1e-4)
    assert case["sm_clock_mhz"] is None   # no gate on the CPU, so no clock reading and no note


def test_cases_take_turns_round_the_pool(monkeypatch):
    # a pool of three: each case is timed in two of them, the next case in the next two
    timed_by, current = [], set()
    real_request = Target.request

    def request(self, message, what, timeout=None):
        if isinstance(message, protocol.Call) and message.timed:
            current.add(id(self))
        return real_request(self, message, what, timeout)

    def on_case(record):
        timed_by.append(set(current))
        current.clear()

    monkeypatch.setattr(Target, "request", request)
    cases = ("b3_q5_kv2_d64_f16", "b1_q4_kv4_d128_bf16", "b2_q3_kv1_d256_bf16")
    options = cpu_options(processes=2, pool=3, only=cases, warmup_ms=1.0, on_case=on_case,
                          stop=StopRule(noise=0.5, min_samples=2, max_samples=6, budget_s=0.5))
    run = Runner(get_task("qknorm"), options).run(FIXTURES / "honest" / "qknorm" / "torch_eager")
    assert [c["status"] for c in run["cases"]] == ["passed"] * 3, [c["reason"] for c in run["cases"]]
    assert run["timing"]["processes"] == 2 and run["timing"]["pool"] == 3
    assert [c["process_ids"] for c in run["cases"]] == [[0, 1], [2, 0], [1, 2]]
    # the timed calls really went to two processes per case, and the three cases used all three
    assert [len(t) for t in timed_by] == [2, 2, 2]
    assert len(set().union(*timed_by)) == 3 and timed_by[0] != timed_by[1] != timed_by[2]
    assert all(c["samples"] == 6 and len(c["latency_by_process_ms"]) == 2 for c in run["cases"])


def test_the_end_of_run_check_runs_in_every_process_of_the_pool(monkeypatch):
    # each worker has its own compile caches (block_sparse_attn): JIT during timing in the
    # second process shows only there, so the check must reach every process that timed
    asked, real_request = [], Target.request

    def request(self, message, what, timeout=None):
        if isinstance(message, protocol.AfterRun):
            asked.append(id(self))
            if len(asked) == 2:   # the pool's second process saw a change
                return protocol.Failure("invalid", "compile cache changed after setup", True)
        return real_request(self, message, what, timeout)

    monkeypatch.setattr(Target, "request", request)
    options = cpu_options(processes=2, pool=3, only=("b3_q5_kv2_d64_f16", "b1_q4_kv4_d128_bf16"),
                          warmup_ms=1.0, stop=StopRule(noise=0.5, min_samples=2, max_samples=6, budget_s=0.5))
    run = Runner(get_task("qknorm"), options).run(FIXTURES / "honest" / "qknorm" / "torch_eager")
    assert [c["status"] for c in run["cases"]] == ["passed"] * 2   # the cases keep their results
    assert len(set(asked)) == 2   # stopped at the failing one, which is not the first
    assert "compile cache changed after setup" in run["summary"]["fatal"]


def test_a_tasks_gpu_pool_is_the_default_pool_on_a_gpu_only():
    # qknorm's kernels take microseconds: eight processes per target unless --pool says otherwise
    task = get_task("qknorm")
    assert task.module.GPU_POOL == 8
    assert Runner(task, cpu_options(device="cuda")).options.pool_size == 8
    assert Runner(task, cpu_options(device="cuda", pool=2)).options.pool_size == 2
    assert Runner(task, cpu_options(device="cuda", processes=3)).options.pool_size == 8
    assert Runner(task, cpu_options(device="cuda", processes=8, pool=1)).options.pool_size == 8
    assert Runner(task, cpu_options()).options.pool_size == 1
    # a task without GPU_POOL keeps --processes' default
    assert Runner(get_task("mla_decode"), cpu_options(device="cuda")).options.pool_size == 2


def _timed(ms: float, by_process: list[float], noise: float = 0.004) -> dict:
    half = 1.96 * noise * ms
    return {"latency_ms": ms, "noise": noise, "latency_ci95_ms": [ms - half, ms + half],
            "process_ids": list(range(len(by_process))), "latency_by_process_ms": by_process,
            "baseline_latency_ms": None, "baseline_noise": None, "baseline_ci95_ms": None}


def test_a_case_whose_two_processes_happen_to_agree_gets_the_spread_the_others_show():
    from kbench.run.records import widen_by_process_spread

    # nine cases whose two processes sit 4% apart, one whose two agree: its own tight interval
    # is one draw of a spread the run shows nine times over
    # (which of the two is the slower one changes case to case: a scatter, not a lasting offset)
    records = [_timed(0.005, [0.0049, 0.0051][::(-1) ** i]) for i in range(9)] + [_timed(0.005, [0.005, 0.005])]
    spread = widen_by_process_spread(records)
    # the ten cases' variances pooled, nine of (4%)^2 / 2 and one of 0, each with one degree of freedom
    expected = (0.04 ** 2 / 2 * 9 / 10) ** 0.5
    assert spread["pct"]["case"] == pytest.approx(100 * expected, abs=0.05) and spread["pct"]["baseline"] is None
    assert spread["df"] == {"case": 10, "baseline": None}
    lucky = records[-1]
    assert lucky["noise"] == pytest.approx(expected / 2 ** 0.5, rel=0.01) and lucky["noise_df"] == 10
    # Student's t at 10 degrees of freedom: 2.23 standard errors each way
    assert lucky["latency_ci95_ms"][1] - 0.005 == pytest.approx(2.228 * lucky["noise"] * 0.005, rel=0.01)


def test_processes_that_agree_leave_the_intervals_as_they_were():
    from kbench.run.records import widen_by_process_spread

    records = [_timed(0.06, [0.05998, 0.06002]) for _ in range(6)]
    before = [dict(r) for r in records]
    widen_by_process_spread(records)
    # each case's own 0.4% (its processes' sampling error) stands, taken as known: nothing moves
    assert all(r.pop("noise_df") is None for r in records)
    assert records == before


def test_one_case_whose_processes_split_wide_does_not_widen_the_others():
    from kbench.run.records import widen_by_process_spread

    records = [_timed(0.005, [0.004998, 0.005002]) for _ in range(9)] + [_timed(0.005, [0.0046, 0.0054], 0.06)]
    widen_by_process_spread(records)
    assert all(r["noise"] == 0.004 for r in records[:9])   # pooled: 0.1% apart, under their own 0.4%
    # set apart: its own spread, read with its own one degree of freedom
    assert records[-1]["noise"] == 0.06 and records[-1]["noise_df"] == 1


def test_cases_link_every_process_of_a_pool_of_eight():
    from kbench.run.targets import Replicas
    from kbench.stats.spread import fit_offsets as fit

    member = type("Member", (), {"label": "submission", "strict": True})
    pool = Replicas([member() for _ in range(8)], per_case=2)
    windows = []
    for i in range(20):   # qknorm's full suite
        pool.begin_case(i)
        windows.append(pool.window)
    assert windows[:8] == [[0, 1], [2, 3], [4, 5], [6, 7], [1, 2], [3, 4], [5, 6], [7, 0]]
    assert all(sum(p in w for w in windows) == 5 for p in range(8))   # five cases each
    cells = [(i, p, 0.0) for i, w in enumerate(windows) for p in w]
    assert len(fit(cells).groups) == 1   # one linked group, not four pairs


def test_no_process_of_the_pool_is_still_loading_when_the_first_case_is_timed(monkeypatch):
    # a loading process runs on the device (CUDA's start-up, Triton's): beside another
    # process's timed call it would be in the figure. Every process of both pools is ready
    # before the first warm-up, though the first case uses two of the three.
    events, real_ready, real_request = [], Target.ready, Target.request

    def ready(self):
        events.append(("ready", self.label))
        return real_ready(self)

    def request(self, message, what, timeout=None):
        events.append((type(message).__name__, self.label))
        return real_request(self, message, what, timeout)

    monkeypatch.setattr(Target, "ready", ready)
    monkeypatch.setattr(Target, "request", request)
    options = cpu_options(processes=2, pool=3, baseline="torch", only=("b3_q5_kv2_d64_f16",), warmup_ms=1.0,
                          stop=StopRule(noise=0.5, min_samples=2, max_samples=4, budget_s=0.5))
    run = Runner(get_task("qknorm"), options).run(FIXTURES / "honest" / "qknorm" / "torch_eager")
    assert [c["status"] for c in run["cases"]] == ["passed"], run["cases"][0]["reason"]
    first_warmup = events.index(next(e for e in events if e[0] == "Warmup"))
    readied = [label == "torch" for what, label in events[:first_warmup] if what == "ready"]
    assert sorted(readied) == [False] * 3 + [True] * 3, events[:first_warmup]   # submission, baseline
    assert not any(what == "ready" for what, _ in events[first_warmup:])
