"""bench/repeat_runs.py's figures: a run-level shift and a process offset read apart."""
import importlib.util
import json

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
    with pytest.raises(Exception):
        repeat_runs.parse_variant("no-base=--baseline,none")
