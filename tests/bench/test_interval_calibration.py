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
    # the intervals hold together at 95%: a comparison calls anything (a case or the geomean) in
    # 5% of pairs at most; the tolerance is the simulation's own (150 pairs of runs whose 20 cases
    # share their processes' offsets)
    c = calibration.calibration(8, lasting, per_pair, trials=150, seed=7)
    assert c["geomean_holds"] >= 0.9
    assert c["any_called"] <= 0.08 and c["cases_called"] <= 0.02


def test_a_pool_of_two_that_shares_its_processes_over_every_case_is_not_read_as_twenty_draws():
    # one lasting offset a process, nothing else: twenty cases read one difference twenty times
    c = calibration.calibration(2, 0.012, 0.0, trials=150, seed=7)
    assert c["any_called"] <= 0.08


def test_a_planted_change_is_called_on_every_case_of_a_long_kernel():
    # mla_decode's full suite as the H100 showed it: six cases, processes 0.1% apart plus 0.3% of
    # sampling error a median. 3% is called on every case in most single runs; 2% in some, and in
    # nearly all with four processes a case (seeded, deterministic)
    three = calibration.calibration(2, 0.001, 0.001, trials=40, seed=7, cases=6, planted=3.0)
    assert three["all_slower"] >= 0.8 and three["geomean_holds"] >= 0.9
    two = calibration.calibration(2, 0.001, 0.001, trials=40, seed=7, cases=6, planted=2.0)
    assert 0.3 <= two["all_slower"] < three["all_slower"]
    four = calibration.calibration(4, 0.001, 0.001, trials=40, seed=7, cases=6, planted=2.0, per_case=4)
    assert four["all_slower"] >= 0.9


def test_the_command_line_prints_every_model_at_pools_of_two_and_eight():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "interval_calibration.py"), "--trials", "3"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.strip().splitlines()
    assert header.split()[:3] == ["model", "pool", "proc"]
    table = [(row[:28].strip(), row[28:].split()) for row in rows]
    assert [name for name, _ in table] == [m[0] for m in calibration.MODELS for _ in (2, 8)]
    assert [cells[:2] for _, cells in table] == [["2", "2"], ["8", "2"]] * len(calibration.MODELS)
    shares = [float(x) for _, cells in table for x in cells[2:]]
    assert all(0.0 <= x <= 1.0 for x in shares)   # each a share of the trials or of the cases
