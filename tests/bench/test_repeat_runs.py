"""bench/repeat_runs.py's figures: a run-level shift and a process offset read apart."""
import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys

import pytest

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("repeat_runs", ROOT / "bench" / "repeat_runs.py")
repeat_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repeat_runs)


def _run(scale: float, off: float = 0.0) -> dict:
    """Two cases timed in pool processes 0 and 1; process 1 reads ``off`` above process 0."""
    cases = []
    for ms in (0.005, 0.007):
        lo, hi = ms * scale, ms * scale * (1 + off)
        cases.append({"latency_ms": (lo + hi) / 2, "latency_by_process_ms": [lo, hi], "process_ids": [0, 1],
                      "baseline_latency_ms": 0.008, "baseline_by_process_ms": [0.008, 0.008],
                      "baseline_process_ids": [0, 1]})
    return {"cases": cases}


def test_a_shift_of_the_whole_run_is_not_a_process_offset(tmp_path):
    for i, run in enumerate((_run(1.0), _run(1.02), _run(1.0, off=0.04)), 1):
        (tmp_path / f"default-{i}.json").write_text(json.dumps(run))
    s = repeat_runs.summarize(tmp_path)["default"]
    assert s["sub"]["max_ratio"] == pytest.approx(1.02, abs=1e-3)   # run 2 sits 2% above run 1
    assert s["base"]["max_ratio"] == 1.0
    first, _, third = s["runs"]
    assert first["sub_process_pct"] == {0: 0.0, 1: 0.0}
    # run 3: its processes 4% apart, +-2% around the figure they share
    assert third["sub_process_pct"][1] - third["sub_process_pct"][0] == pytest.approx(3.9, abs=0.1)


def test_variants_are_read_back_by_name_and_in_run_order(tmp_path):
    for name in ("default", "pool4"):
        for i in (1, 2, 10):
            (tmp_path / f"{name}-{i}.json").write_text(json.dumps(_run(1 + i / 100)))
    summary = repeat_runs.summarize(tmp_path)
    assert set(summary) == {"default", "pool4"}
    unit = 1e3 * (0.005 * 0.007) ** 0.5   # the geomean of a run at scale 1
    assert [round(r["sub_us"] / unit, 2) for r in summary["pool4"]["runs"]] == [1.01, 1.02, 1.1]


def test_a_variant_name_cannot_break_the_file_names():
    assert repeat_runs.parse_variant("pool4=--processes,4") == ("pool4", ["--processes", "4"])
    assert repeat_runs.parse_variant("default=") == ("default", [])
    with pytest.raises(argparse.ArgumentTypeError):
        repeat_runs.parse_variant("no-base=--baseline,none")


def _components(tmp_path, runs):
    for i, run in enumerate(runs, 1):
        (tmp_path / f"default-{i}.json").write_text(json.dumps(run))
    return repeat_runs.summarize(tmp_path)["default"]["components"]["sub"]


def test_a_shift_every_process_of_a_run_shares_is_not_per_process_spread(tmp_path):
    c = _components(tmp_path, [_run(s) for s in (1.0, 1.02, 0.98, 1.01)])
    assert c["process_sd_pct"] == 0.0 and c["processes"] == 2
    assert c["shared_var_pct2"] == pytest.approx(c["run_sd_pct"] ** 2, rel=0.01) and c["run_sd_pct"] > 1
    # a pool cannot average away what every process shares: the chance stays where it is
    assert c["p_within_1pct"][2] == c["p_within_1pct"][4] == c["p_within_1pct"][8] < 0.8


def test_processes_that_offset_each_other_leave_the_run_still(tmp_path):
    # each run's two processes 2-4% apart, the run's figure the same every time
    c = _components(tmp_path, [_run(2 / (2 + off), off) for off in (0.02, 0.04, 0.02, 0.04)])
    assert c["process_sd_pct"] > 1 and c["run_sd_pct"] < 0.01
    assert c["shared_var_pct2"] < 0
    assert c["p_within_1pct"] == {2: 1.0}   # no prediction for other pools from such runs


def _pool_run(offsets: dict[int, float], order) -> dict:
    """Eight cases timed two processes a case in the given ``order`` of process pairs."""
    cases = []
    for i, ms in enumerate((0.004, 0.005, 0.006, 0.007, 0.0045, 0.0055, 0.0065, 0.0075)):
        ids = list(order(i))
        medians = [ms * math.exp(offsets[p]) for p in ids]
        cases.append({"latency_ms": sum(medians) / 2, "latency_by_process_ms": medians, "process_ids": ids})
    return {"cases": cases}


def test_process_offsets_in_a_pool_larger_than_a_case_are_each_processs_own():
    offsets = {0: -0.03, 1: -0.01, 2: 0.01, 3: 0.03}
    # pairs that link the whole pool (a case in 0-1, then 1-2, ...): every offset is recovered
    linked = repeat_runs.run_figures(_pool_run(offsets, lambda i: (i % 4, (i + 1) % 4)))
    assert linked["sub_process_pct"] == pytest.approx({p: 100 * v for p, v in offsets.items()}, abs=0.01)
    assert linked["sub_process_var_pct2"] == pytest.approx(statistics.variance([-3, -1, 1, 3]), rel=1e-3)
    # fixed pairs (kbench's rotation before 0b0171f), a pool of 4 two a case: 0-1 and 2-3. Each pair's offsets
    # are read about the pair's mean, and the variance from the differences within the pairs
    pairs = repeat_runs.run_figures(_pool_run(offsets, lambda i: ((2 * i) % 4, (2 * i + 1) % 4)))
    assert pairs["sub_process_pct"] == pytest.approx({0: -1.0, 1: 1.0, 2: -1.0, 3: 1.0}, abs=0.01)
    assert pairs["sub_process_var_pct2"] == pytest.approx(2.0, rel=1e-3)   # (2%)^2 / 2 per pair


def test_the_command_line_summarizes_a_folder_of_runs_again(tmp_path):
    for i, run in enumerate((_run(1.0), _run(1.02), _run(1.0, off=0.04)), 1):
        (tmp_path / f"default-{i}.json").write_text(json.dumps(run))
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "repeat_runs.py"), "--summarize", str(tmp_path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("== default: submission runs {'runs': 3, 'max_ratio': 1.02")
    assert proc.stdout.count("  run ") == 3


def test_the_command_line_wants_a_task_and_a_folder_or_a_summary():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "repeat_runs.py"), "qknorm"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "a task and --out are needed" in proc.stderr
