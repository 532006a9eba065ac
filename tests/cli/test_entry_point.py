"""The `kbench` launcher: workers started before torch is imported, none left behind."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kbench.cli.main import _gpu_children, _workers_needed
from kbench.stats.estimates import DEFAULT_PROCESSES
from tests.helpers import ROOT


def test_workers_started_first_match_the_command(monkeypatch):
    # the count alone (paths and devices made up): whether the line is a usage error is tested apart
    monkeypatch.setattr("kbench.cli.main._well_formed", lambda args: True)
    assert _workers_needed(["eval", "submissions/qknorm"]) == 2
    assert _workers_needed(["eval", "submissions/qknorm", "--baseline", "none"]) == 1
    assert _workers_needed(["eval", "submissions/qknorm", "--baseline=none"]) == 1
    assert _workers_needed(["eval", "none", "--baseline", "torch"]) == 2
    assert _workers_needed(["compare", "a", "b"]) == 2
    assert _workers_needed(["compare", "a.json", "b.json"]) == 0
    assert _workers_needed(["eval", "--help"]) == 0
    assert _workers_needed(["list"]) == 0
    assert _workers_needed([]) == 0
    # on a GPU, a task's GPU_POOL (qknorm: 8) unless --pool says otherwise, read without torch
    assert _workers_needed(["eval", "submissions/qknorm", "--device", "cuda"]) == 16
    assert _workers_needed(["eval", "submissions/qknorm/submission.py", "--device=cuda", "--baseline", "none"]) == 8
    assert _workers_needed(["eval", "mine", "--task", "qknorm", "--device", "cuda"]) == 16
    assert _workers_needed(["eval", "submissions/qknorm", "--device", "cuda", "--pool", "3"]) == 6
    assert _workers_needed(["eval", "submissions/mla_decode", "--device", "cuda"]) == 2 * DEFAULT_PROCESSES
    assert _workers_needed(["eval", "mine", "--device", "cuda"]) == 2 * DEFAULT_PROCESSES
    # --gpus and --ray: the work runs in per-GPU children or Ray tasks, which start their own
    assert _workers_needed(["eval", "a", "--gpus", "all"]) == 0
    assert _workers_needed(["eval", "a", "--ray=auto"]) == 0


def test_eval_gpus_starts_one_child_per_gpu_first_with_the_runs_workers(monkeypatch):
    # the count alone (paths and devices made up): whether the line is a usage error is tested apart
    monkeypatch.setattr("kbench.cli.main._well_formed", lambda args: True)
    assert _gpu_children(["eval", "a", "b", "--gpus", "all", "--device", "cuda"]) == ("all", 2 * DEFAULT_PROCESSES)
    assert _gpu_children(["eval", "a", "--gpus=0,1", "--device", "cuda", "--baseline", "none",
                          "--processes", "3"]) == ("0,1", 3)
    assert _gpu_children(["eval", "submissions/qknorm", "--gpus", "all", "--device", "cuda"]) == ("all", 16)
    assert _gpu_children(["eval", "a", "--gpus", "all", "--device", "cpu"]) is None
    assert _gpu_children(["eval", "a", "--device", "cuda"]) is None
    assert _gpu_children(["compare", "a", "b", "--gpus", "all", "--device", "cuda"]) is None


def test_the_launcher_imports_no_torch_before_it_starts_the_workers():
    out = subprocess.run([sys.executable, "-c", "import sys, kbench.cli.main, kbench.run.workers, kbench.worker.environment,"
                          " kbench.scaleout.gpus;"
                          "print('torch' in sys.modules)"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_unused_spare_workers_are_gone_at_exit(tmp_path):
    """Spares that no run took are killed and their folders removed when kbench exits."""
    script = textwrap.dedent("""
        import os, sys
        from kbench.run import workers
        workers.prestart(2)
        print(" ".join(f"{s.process.pid}:{s.tmp}" for s in workers._spares), flush=True)
    """)
    env = dict(os.environ, TMPDIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    spares = [item.split(":", 1) for item in out.stdout.split()]
    assert len(spares) == 2
    for pid, folder in spares:
        assert not Path(folder).exists()
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert list(tmp_path.glob("kbench-worker-*")) == []


def test_keep_warm_tops_up_the_spares(monkeypatch):
    from kbench.run import workers

    class Proc:
        def __init__(self, alive):
            self.alive = alive

        def is_alive(self):
            return self.alive

    started = []
    monkeypatch.setattr(workers, "prestart", lambda count: started.append(count))
    monkeypatch.setattr(workers, "_spares", [])
    workers.keep_warm(2)
    monkeypatch.setattr(workers, "_spares", [workers.BareWorker(Proc(True), None, "x"),
                                                   workers.BareWorker(Proc(False), None, "y")])
    workers.keep_warm(2)   # one alive: one more
    workers.keep_warm(1)   # enough
    assert started == [2, 1, 0]


def test_eval_of_several_submissions_starts_each_next_runs_workers_during_the_one_before(monkeypatch):
    # Each run, after its first case, starts as many workers as it took, and the next run takes
    # those; none is started after the last.
    from click.testing import CliRunner

    from kbench.cli.commands import cli
    from kbench.run import workers

    workers._discard_spares()
    warmed, got_spare = [], []
    keep_warm, take = workers.keep_warm, workers.take
    monkeypatch.setattr(workers, "keep_warm", lambda n: (warmed.append(n), keep_warm(n)))
    monkeypatch.setattr(workers, "take", lambda: (
        got_spare.append(any(s.process.is_alive() for s in workers._spares)), take())[1])
    good = str(ROOT / "tests" / "fixtures" / "qknorm" / "good_torch")
    result = CliRunner().invoke(cli, ["eval", good, str(ROOT / "submissions" / "qknorm"), good, "--device", "cpu",
                                      "--case", "b3_q5_kv2_d64_f16"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert warmed == [2, 2]   # a submission and its baseline, after runs 1 and 2, not 3
    assert got_spare == [False, False, True, True, True, True]
    assert not workers._spares   # none started for a run that does not come


def test_a_gpu_run_takes_every_process_of_every_target(monkeypatch):
    # the count alone (paths and devices made up): whether the line is a usage error is tested apart
    monkeypatch.setattr("kbench.cli.main._well_formed", lambda args: True)
    assert _workers_needed(["eval", "x", "--device", "cuda"]) == 2 * DEFAULT_PROCESSES
    assert _workers_needed(["eval", "x", "--device=cuda", "--processes", "3"]) == 6
    assert _workers_needed(["compare", "a", "b", "--device", "cuda", "--processes=1"]) == 2
    assert _workers_needed(["eval", "x", "--device", "cuda", "--baseline", "none", "--processes", "4"]) == 4
    # --pool: every process of the pool
    assert _workers_needed(["eval", "x", "--device", "cuda", "--pool", "4"]) == 8
    assert _workers_needed(["eval", "x", "--device", "cuda", "--pool=1", "--processes", "3"]) == 6
    # CPU mode times every target in one process, whatever --processes says
    assert _workers_needed(["eval", "x", "--device", "cpu", "--processes", "4"]) == 2


def test_profile_dir_gets_the_commands_profile_and_each_workers(tmp_path):
    """KBENCH_PROFILE_DIR: the parent's profile is written although the command ends with
    os._exit, and the workers' too; each loads as cProfile output."""
    import pstats

    env = dict(os.environ, KBENCH_PROFILE_DIR=str(tmp_path))
    run = subprocess.run([sys.executable, "-m", "kbench", "eval", "submissions/qknorm", "--device", "cpu",
                          "--case", "b3_q5_kv2_d64_f16", "-q"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    names = sorted(p.name.split("-")[0] for p in tmp_path.glob("*.prof"))
    assert names == ["parent", "worker", "worker"], names   # the submission and its baseline
    for path in tmp_path.glob("*.prof"):
        assert pstats.Stats(str(path)).total_calls > 0
    parent = pstats.Stats(str(next(tmp_path.glob("parent-*.prof"))))
    assert any(func[2] == "run_case" for func in parent.stats), "the parent's profile misses the runner"
