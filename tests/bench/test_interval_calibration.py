"""kbench's intervals hold what separate runs of identical code do, under the variance model the
H100 showed (bench/interval_calibration.py simulates the runs; kbench's own statistics judge them)."""
import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import ROOT

_spec = importlib.util.spec_from_file_location("interval_calibration", ROOT / "bench" / "interval_calibration.py")
calibration = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(calibration)


@pytest.mark.parametrize("lasting, per_pair", [(0.01, 0.015), (0.04, 0.01)], ids=["qknorm-like", "eager"])
def test_a_pool_of_eight_holds_identical_code_in_its_intervals(lasting, per_pair):
    # 95% intervals: 5% of cases called by chance at most; the tolerance is the simulation's
    # own (150 pairs of runs whose 20 cases share their processes' offsets)
    c = calibration.calibration(8, lasting, per_pair, trials=150, seed=7)
    assert c["geomean_holds_1"] >= 0.9
    assert c["cases_called"] <= 0.06


def test_the_floor_alone_missed_processes_that_sit_far_apart():
    # what the run-level estimates fixed: 4% per process, the 1% floor's geomean interval
    floor = calibration.calibration(8, 0.04, 0.01, trials=60, seed=7, floor_only=True)
    now = calibration.calibration(8, 0.04, 0.01, trials=60, seed=7)
    assert floor["geomean_holds_1"] < 0.85 < now["geomean_holds_1"]
    assert floor["cases_called"] > 2 * now["cases_called"]


def test_the_command_line_prints_every_model_at_pools_of_two_and_eight():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "interval_calibration.py"), "--trials", "3"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.strip().splitlines()
    assert header.split()[:3] == ["model", "pool", "proc"]
    table = [(row[:26].strip(), row[26:].split()) for row in rows]
    assert [name for name, _ in table] == [m[0] for m in calibration.MODELS for _ in (2, 8)]
    assert [cells[:2] for _, cells in table] == [["2", "2"], ["8", "2"]] * len(calibration.MODELS)
    shares = [float(x) for _, cells in table for x in cells[2:]]
    assert all(0.0 <= x <= 1.0 for x in shares)   # each a share of the trials or of the cases
