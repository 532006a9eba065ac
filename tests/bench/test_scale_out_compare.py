"""bench/scale_out_compare.py on hand-made run records, as bench/scale_out.sh leaves them."""
import importlib.util
import json
import subprocess
import sys

from tests.helpers import ROOT

SCRIPT = ROOT / "bench" / "scale_out_compare.py"


def _module():
    spec = importlib.util.spec_from_file_location("scale_out_compare", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(submission: str, cases: list[tuple[str, float, float]]) -> dict:
    """A saved run record: (case, median ms, relative noise) each."""
    from kbench.stats.compare import Z95

    return {"task": "qknorm", "submission": submission, "notes": [],
            "timing": {"meaningful": True, "processes": 2, "pool": 2},
            "summary": {"geomean_speedup": 1.0, "passed": len(cases), "total": len(cases)},
            "cases": [{"case": name, "params": {"n": i}, "status": "passed", "latency_ms": ms, "noise": noise,
                       "latency_ci95_ms": [ms * (1 - Z95 * noise), ms * (1 + Z95 * noise)]}
                      for i, (name, ms, noise) in enumerate(cases)]}


def _folder(tmp_path, fault: bool = False):
    plain = _run("s1", [("moved", 1.0, 0.01), ("still", 2.0, 0.005)])
    scaled = _run("s1", [("moved", 1.035, 0.01), ("still", 2.0, 0.005)])
    (tmp_path / "plain.json").write_text(json.dumps({"runs": [plain]}))
    (tmp_path / "scaled.json").write_text(json.dumps({"runs": [scaled]}))
    (tmp_path / "plain.wall").write_text("100")
    (tmp_path / "scaled.wall").write_text("55")
    (tmp_path / "gpus.txt").write_text("0, H100\n1, H100\n")
    if fault:
        lost = dict(plain, summary=dict(plain["summary"], passed=1, lost=1), notes=["1 case lost with cuda:1"])
        (tmp_path / "fault.json").write_text(json.dumps({"runs": [lost]}))
    return tmp_path


def test_agreement_is_judged_by_the_ratio_not_only_by_overlap(tmp_path, capsys):
    _module().main(_folder(tmp_path), "abc")
    out = capsys.readouterr().out
    # 3.5% apart with 1% noise a side: the intervals overlap, but B/A's interval excludes 1
    moved = next(line for line in out.splitlines() if " moved " in line)
    assert " yes " in moved and moved.endswith("SLOWER")
    assert next(line for line in out.splitlines() if " still " in line).endswith("SAME")
    assert "(overlap): 2/2; kbench compare SAME or UNSURE: 1/2" in out
    assert "ratio 0.55" in out


def test_the_command_line_reads_the_folder_and_the_fault_run(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), str(_folder(tmp_path, fault=True)), "abc"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("commit abc; cards: 0, H100; 1, H100")
    assert "fault run: s1: 1/2 passed, 1 lost, notes: ['1 case lost with cuda:1']" in proc.stdout
