"""bench/gpu_acceptance.py's parts that run without a GPU: its refusals, the run records it reads,
and what its full runs say about their processes (bench/repeat_runs.py's components)."""
import importlib.util
import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "bench" / "gpu_acceptance.py"


def _acceptance():
    spec = importlib.util.spec_from_file_location("gpu_acceptance", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(scale: float, off: float = 0.0) -> dict:
    """Two cases timed in pool processes 0 and 1; process 1 reads ``off`` above process 0."""
    cases = []
    for ms in (0.005, 0.007):
        lo, hi = ms * scale, ms * scale * (1 + off)
        cases.append({"latency_ms": (lo + hi) / 2, "latency_by_process_ms": [lo, hi], "process_ids": [0, 1],
                      "baseline_latency_ms": 0.008, "baseline_by_process_ms": [0.008, 0.008],
                      "baseline_process_ids": [0, 1]})
    return {"cases": cases}


def test_the_acceptance_reports_what_its_full_runs_say_about_their_processes(tmp_path):
    acceptance = _acceptance()
    paths = []
    for i, run in enumerate((_run(1.0, 0.02), _run(1.01, 0.0), _run(0.99, 0.02)), 1):
        paths.append(tmp_path / f"qknorm-full-{i}.json")
        paths[-1].write_text(json.dumps(run))
    text = acceptance.process_spread(paths)
    # processes about 1% either side in runs 1 and 3, together in run 2: variance ~(2 + 2 + 0) / 3
    assert text.startswith("; 3 runs: per-process SD 1.14%, run SD ") and text.endswith(" %^2")
    assert acceptance.process_spread(paths[:2]) == ""   # two runs say nothing about the split


def test_a_run_file_that_cannot_be_read_costs_the_acceptance_row_nothing(tmp_path):
    broken = tmp_path / "qknorm-full-1.json"
    broken.write_text("{not json")
    assert _acceptance().process_spread([broken] * 3).startswith("; processes: not read (JSONDecodeError")


def test_a_run_is_clean_only_with_every_case_passed_unflagged_and_nothing_fatal(tmp_path):
    acceptance = _acceptance()

    def record(flags=(), status="passed", fatal=None):
        cases = [{"case": "a", "status": "passed", "flags": [], "sm_clock_mhz": 1980, "baseline_sm_clock_mhz": 1755},
                 {"case": "b", "status": status, "flags": list(flags)}]
        summary = {"passed": sum(c["status"] == "passed" for c in cases), "total": 2, "geomean_speedup": 1.5,
                   "fatal": fatal}
        path = tmp_path / "run.json"
        path.write_text(json.dumps({"cases": cases, "summary": summary}))
        return acceptance.clean(path)

    assert record() == (True, "2/2 passed, geomean 1.5; SM clock 1755-1980 MHz")
    ok, detail = record(flags=["hidden work"])
    assert not ok and detail.endswith("; b passed flagged")
    assert record(status="failed")[0] is False
    assert record(fatal="kbench's files changed")[0] is False


def test_the_table_counts_the_checks_that_passed(capsys):
    table = _acceptance().Table()
    table.add("one", True, "fine")
    table.add("another check", False, "not")
    assert capsys.readouterr().out == "PASS  one: fine\nFAIL  another check: not\n"
    lines = table.render().splitlines()
    assert lines[0].split() == ["check", "result", "detail"]
    assert lines[2].split() == ["one", "pass", "fine"] and lines[3].split()[-2:] == ["FAIL", "not"]
    assert lines[-1] == "1/2 checks passed"


@pytest.mark.parametrize("argv, says", [
    (["--skip-tests", "--tasks", ""], "nothing to check"),
    (["--tasks", "qknrm"], "unknown task or suite: qknrm"),
    (["--suites", "quick,ful"], "unknown task or suite: ful"),
])
def test_the_acceptance_refuses_a_call_with_nothing_or_something_unknown_to_check(tmp_path, argv, says):
    """Such a call would run nothing and crash on an empty table."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path), *argv],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert says in proc.stderr.strip().splitlines()[-1]
    assert not (tmp_path / "acceptance.txt").exists()
