"""bench/verdicts.py: the planted submissions it writes load and pass, sized as it says; its
figures (the family-wise rate's bound, the smallest change called) are what they claim."""
import importlib.util
import json

import pytest

from kbench import api
from tests.helpers import FIXTURES, ROOT

_spec = importlib.util.spec_from_file_location("verdicts", ROOT / "bench" / "verdicts.py")
verdicts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verdicts)


def test_the_qknorm_plant_spins_its_share_of_each_cases_median_in_cycles(tmp_path):
    run = json.loads((FIXTURES / "results" / "qknorm-quick-h100.json").read_text())
    folder = verdicts.plant("qknorm", 3.0, tmp_path / "planted", run)
    text = (folder / "submission.py").read_text()
    assert "SPIN_CYCLES=_spin_cycles(q, k)" in text and "while now - start < SPIN_CYCLES" in text
    sizes = verdicts.qknorm_sizes(run, 3.0)
    first = run["cases"][0]
    assert sizes[verdicts.qknorm_shapes(first["params"])] == round(0.03 * first["latency_ms"] * 1e3 * first["sm_clock_mhz"])
    assert len(sizes) == len(run["cases"])
    # interpreted (CPU) the plant is off, and the copy passes as the bundled kernel does
    record = api.evaluate(folder, task="qknorm", suite="smoke", device="cpu")
    assert {c["status"] for c in record["cases"]} == {"passed"}


def test_a_cpu_run_cannot_size_the_qknorm_plant(tmp_path):
    run = json.loads((FIXTURES / "results" / "qknorm-smoke-cpu.json").read_text())
    with pytest.raises(SystemExit, match="has no GPU median and SM clock"):
        verdicts.plant("qknorm", 3.0, tmp_path / "planted", run)


def test_the_wrapping_plant_keeps_the_tasks_other_names_and_passes(tmp_path):
    folder = verdicts.plant("block_sparse_attn", 2.0, tmp_path / "planted")
    assert (folder / "_bundled.py").read_text() == (ROOT / "submissions/block_sparse_attn/submission.py").read_text()
    assert "FRACTION = 0.02" in (folder / "submission.py").read_text()
    record = api.evaluate(folder, task="block_sparse_attn", suite="smoke", device="cpu")
    assert {c["status"] for c in record["cases"]} == {"passed"}


def test_the_figures():
    assert verdicts.upper_95(0, 20) == pytest.approx(1 - 0.05 ** (1 / 20), abs=1e-6)   # 13.9%
    assert verdicts.upper_95(20, 20) == 1.0
    result = {"rows": [{"ratio_ci95": [0.99, 1.01]}, {"ratio_ci95": [0.96, 1.04]}, {"ratio_ci95": None}]}
    assert verdicts.widest(result) == pytest.approx((1.04 / 0.96) ** 0.5 - 1)


def test_saved_samples_are_judged_again_by_the_current_statistics():
    # three cases, two processes a side; B's calls 5% slower than A's, each process's calls
    # spread 0.2% about its median
    def calls(ms, shift):
        return [[ms * shift * (1 + 0.002 * (i - 10) / 10) for i in range(21)] for _ in range(2)]

    cases = []
    for i, ms in enumerate((0.1, 0.2, 0.3)):
        cases.append({"case": f"c{i}", "params": {"i": i}, "status": "passed", "flags": [],
                      "baseline_status": "passed", "process_ids": [0, 1], "baseline_process_ids": [0, 1],
                      "latency_ms": 1.0, "noise": 1.0, "baseline_latency_ms": 1.0, "baseline_noise": 1.0,
                      "samples_ms": calls(ms, 1.05), "baseline_samples_ms": calls(ms, 1.0)})
    run = {"task": "qknorm", "suite": "quick", "cases": cases,
           "timing": {"meaningful": True, "processes": 2, "pool": 2}}
    again = verdicts.rejudge({"wall_s": 1.0, "run": run, "compare": {}})
    assert [r["verdict"] for r in again["compare"]["rows"]] == ["SLOWER"] * 3
    assert again["compare"]["summary"]["geomean_ratio"] == pytest.approx(1.05, abs=1e-3)
    assert again["run"]["cases"][0]["latency_ms"] == pytest.approx(0.105, rel=1e-3)
    assert run["cases"][0]["latency_ms"] == 1.0   # the saved record itself is left as it was
