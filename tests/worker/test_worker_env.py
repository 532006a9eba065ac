"""The workers run in kbench's environment, not the shell's: variables that change what a timed
call means are not passed on, and the run says so (kbench/worker/environment.py)."""
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kbench.cli.commands import cli
from kbench.run import workers
from kbench.worker import environment
from tests.helpers import FIXTURES, ROOT, run_cpu, statuses

EXPORTED = {"CUDA_LAUNCH_BLOCKING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_DEVICE_MAX_CONNECTIONS": "1",
            "TORCH_COMPILE_DISABLE": "1", "TRITON_DEBUG": "1", "TRITON_DEFAULT_FP_FUSION": "0",
            "TORCHINDUCTOR_MAX_AUTOTUNE": "1"}


def _submission_that_sees_none_of_them(tmp_path):
    sub = tmp_path / "qknorm"
    sub.mkdir()
    (sub / "submission.py").write_text(
        "import os\n"
        f"seen = {{k: os.environ[k] for k in {sorted(EXPORTED)!r} if k in os.environ}}\n"
        "assert not seen, f'the worker sees {seen}'\n"
        + (FIXTURES / "qknorm" / "good_torch" / "submission.py").read_text())
    return sub


def _export(monkeypatch):
    monkeypatch.setattr(environment, "_taken", {})   # what the command line takes is put back after
    for name, value in EXPORTED.items():
        monkeypatch.setenv(name, value)
    workers._discard_spares()   # workers spawned from here on inherit the exported values


def test_the_command_line_takes_them_out_and_the_run_names_them(tmp_path, monkeypatch):
    _export(monkeypatch)
    sub = _submission_that_sees_none_of_them(tmp_path)
    out = tmp_path / "run.json"
    result = CliRunner().invoke(cli, ["eval", str(sub), "--device", "cpu", "--case", "b3_q5_kv2_d64_f16",
                                      "--baseline", "none", "--json", str(out), "--wide"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    # out of kbench's own process too: its allocator and any GPU child start without them
    assert not [name for name in EXPORTED if name in os.environ]
    line = next(ln for ln in result.output.splitlines() if ln.startswith("note: not passed on to the workers"))
    assert "CUDA_LAUNCH_BLOCKING=1 (every launch would wait for the device" in line
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in line
    run = json.loads(out.read_text())
    assert run["timing"]["environment_not_passed_on"] == EXPORTED
    assert run["cases"][0]["status"] == "passed"


def test_the_kbench_command_takes_them_before_its_first_workers_and_still_names_them(tmp_path):
    # kbench/cli/main.py takes them before it prestarts workers; the group's own call then finds
    # none, and the run must still name what the first took.
    sub = _submission_that_sees_none_of_them(tmp_path)
    out = tmp_path / "run.json"
    proc = subprocess.run([sys.executable, "-m", "kbench", "eval", str(sub), "--device", "cpu", "--case",
                           "b3_q5_kv2_d64_f16", "--baseline", "none", "--json", str(out)],
                          cwd=ROOT, env={**os.environ, **EXPORTED}, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads(out.read_text())["timing"]["environment_not_passed_on"] == EXPORTED
    assert "note: not passed on to the workers: CUDA_DEVICE_MAX_CONNECTIONS=1" in proc.stdout


def test_compare_of_two_folders_says_what_neither_side_got(tmp_path, monkeypatch):
    _export(monkeypatch)
    sub = _submission_that_sees_none_of_them(tmp_path)
    result = CliRunner().invoke(cli, ["compare", str(FIXTURES / "qknorm" / "good_torch"), str(sub), "--task", "qknorm",
                                      "--device", "cpu", "--case", "b3_q5_kv2_d64_f16"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "warning: not passed on to the workers: CUDA_DEVICE_MAX_CONNECTIONS=1" in result.output


def test_a_worker_takes_them_out_itself_when_kbench_is_used_as_a_library(tmp_path, monkeypatch):
    # No command line: the parent keeps the variables (as a Ray node's environment would); the
    # worker removes them before the submission and CUDA load.
    _export(monkeypatch)
    sub = _submission_that_sees_none_of_them(tmp_path)
    run = run_cpu("qknorm", sub, only=("b3_q5_kv2_d64_f16",))
    assert set(statuses(run).values()) == {"passed"}
    assert run["timing"]["environment_not_passed_on"] == EXPORTED
    assert any(n.startswith("not passed on to the workers: CUDA_DEVICE_MAX_CONNECTIONS=1") for n in run["notes"])


def test_a_clean_environment_gives_no_note(tmp_path, monkeypatch):
    for name in environment.NOT_PASSED_ON:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(environment, "_taken", {})
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "good_torch", only=("b3_q5_kv2_d64_f16",))
    assert run["timing"]["environment_not_passed_on"] == {}
    assert not any("not passed on" in n for n in run["notes"])


def test_the_run_records_what_the_workers_inherit_and_never_a_credential(tmp_path, monkeypatch):
    for name in environment.NOT_PASSED_ON:   # whatever the test's own shell has
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRITON_ALWAYS_COMPILE", "1")
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))   # where files go, not how they run
    monkeypatch.setenv("NVIDIA_API_KEY", "not-for-the-record")
    monkeypatch.setenv("TORCH_HUB_TOKEN", "not-for-the-record")
    monkeypatch.setenv("TRITON_DEBUG", "1")   # removed, and recorded as such instead
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")   # kbench's own per GPU child; none on CPU
    monkeypatch.setattr(environment, "_taken", {})
    run = run_cpu("qknorm", FIXTURES / "qknorm" / "good_torch", only=("b3_q5_kv2_d64_f16",))
    recorded = run["timing"]["environment_passed_on"]
    assert recorded["TRITON_ALWAYS_COMPILE"] == "1" and recorded["NVIDIA_TF32_OVERRIDE"] == "0"
    assert not {"TRITON_CACHE_DIR", "NVIDIA_API_KEY", "TORCH_HUB_TOKEN", "TRITON_DEBUG",
                "CUDA_VISIBLE_DEVICES"} & recorded.keys()
    assert "not-for-the-record" not in json.dumps(run)
    assert run["timing"]["environment_not_passed_on"] == {"TRITON_DEBUG": "1"}


def test_the_option_still_sets_the_connections_the_environment_loses(monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")
    monkeypatch.setenv("TRITON_INTERPRET", "0")   # restored after the test, as the others are
    environment.strip()   # a worker's sequence: at its entry, then on its assignment
    environment.prepare_worker(interpret=True, cuda_connections=3)
    assert os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] == "3" and "PYTORCH_ALLOC_CONF" not in os.environ
    assert os.environ["TRITON_INTERPRET"] == "1"


@pytest.mark.gpu
def test_a_gpu_run_with_them_exported_is_timed_as_without(tmp_path):
    # On the GPU each one did harm before kbench took them out (docs/measurement.md, "The
    # workers' environment"): CUDA_LAUNCH_BLOCKING=1 made every call unheld and 16x slower on
    # qknorm, PYTORCH_NO_CUDA_MEMORY_CACHING=1 killed the run with a traceback.
    out = tmp_path / "run.json"
    env = {**os.environ, **EXPORTED}
    proc = subprocess.run([sys.executable, "-m", "kbench", "eval", str(ROOT / "submissions" / "qknorm"),
                           "--suite", "quick", "--case", "kv32_q32_d128_b256", "--baseline", "none",
                           "--budget", "0.3", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = json.loads(out.read_text())
    case = run["cases"][0]
    assert case["status"] == "passed" and not case["flags"]
    # Every timed call held behind the gate: impossible had CUDA_LAUNCH_BLOCKING reached a worker.
    assert not [n for n in case["notes"] if "could not be enqueued" in n], case["notes"]
    assert run["timing"]["environment_not_passed_on"] == EXPORTED


def test_a_worker_gets_the_environment_of_its_start_not_the_fork_servers(tmp_path, monkeypatch):
    # Workers fork from a server started earlier (kbench/run/workers.py); each still sees what the
    # parent's environment holds when it starts.
    workers.start_server()
    monkeypatch.setenv("KBENCH_TEST_LATE", "set after the server started")
    monkeypatch.delenv("HOME", raising=False)
    workers._discard_spares()
    sub = tmp_path / "qknorm"
    sub.mkdir()
    (sub / "submission.py").write_text(
        "import os\n"
        "assert os.environ.get('KBENCH_TEST_LATE') == 'set after the server started', 'late variable missing'\n"
        "assert 'HOME' not in os.environ, 'a removed variable is back'\n"
        + (FIXTURES / "qknorm" / "good_torch" / "submission.py").read_text())
    assert set(statuses(run_cpu("qknorm", sub)).values()) == {"passed"}


def test_a_killed_fork_server_is_started_again_for_the_next_worker():
    import signal
    from multiprocessing import forkserver

    workers.start_server()
    first = forkserver._forkserver._forkserver_pid
    os.kill(first, signal.SIGKILL)
    workers._discard_spares()
    assert set(statuses(run_cpu("qknorm", FIXTURES / "qknorm" / "good_torch")).values()) == {"passed"}
    assert forkserver._forkserver._forkserver_pid not in (None, first)
