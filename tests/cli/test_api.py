"""The Python API under the command line: the same runs, the same records, KbenchError for mistakes."""
import json

import pytest
from click.testing import CliRunner

import kbench
from kbench.cli.commands import cli
from tests.helpers import FIXTURES, ROOT

QKNORM = ROOT / "submissions" / "qknorm"
ONE_CASE = {"device": "cpu", "cases": ["b3_q5_kv2_d64_f16"], "baseline": "none"}


def test_evaluate_returns_the_record_the_command_line_saves(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    record = kbench.evaluate(QKNORM, **ONE_CASE)
    out = tmp_path / "cli.json"
    result = CliRunner().invoke(cli, ["eval", str(QKNORM), "--device", "cpu", "--case", "b3_q5_kv2_d64_f16",
                                      "--baseline", "none", "--json", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert record["task"] == saved["task"] == "qknorm" and record["suite"] == saved["suite"] == "smoke"
    assert [(c["case"], c["status"]) for c in record["cases"]] == [(c["case"], c["status"]) for c in saved["cases"]] \
        == [("b3_q5_kv2_d64_f16", "passed")]
    assert set(record) == set(saved)
    assert record["timing"]["meaningful"] is False


def test_the_search_loop_compares_two_records_and_reads_a_verdict():
    good = kbench.evaluate(QKNORM, **ONE_CASE)
    bad = kbench.evaluate(FIXTURES / "qknorm" / "fails_one_case", device="cpu", baseline="none")
    same = kbench.compare(good, good)
    assert [r["verdict"] for r in same["rows"]] == ["NOT TIMED"]   # CPU mode: statuses only
    assert same["summary"]["timed"] is False and same["summary"]["failed"] == 0
    worse = kbench.compare(kbench.evaluate(QKNORM, device="cpu", baseline="none"), bad)
    assert worse["summary"]["failed"] == 1 and worse["task"] == "qknorm"


def test_mistakes_are_kbench_errors_of_one_line(tmp_path):
    with pytest.raises(kbench.KbenchError, match=r"^no case 'nope' in suite 'smoke' of qknorm \(see: kbench show"):
        kbench.evaluate(QKNORM, device="cpu", cases=["nope"])
    with pytest.raises(kbench.KbenchError, match="unknown suite 'nope'"):
        kbench.evaluate(QKNORM, device="cpu", suite="nope")
    with pytest.raises(kbench.KbenchError, match="no such file or directory"):
        kbench.evaluate(tmp_path / "missing", device="cpu")
    with pytest.raises(kbench.KbenchError, match="unknown device"):
        kbench.evaluate(QKNORM, device="tpu")
    with pytest.raises(kbench.KbenchError, match="needs a CUDA device"):
        kbench.evaluate(QKNORM, device="cpu", cuda_graph=True)


def test_cpu_mode_caps_what_was_given_and_says_so():
    notices = []
    record = kbench.evaluate(QKNORM, budget_s=30.0, max_samples=50, notices=notices, **ONE_CASE)
    assert notices == ["CPU mode: capped to --budget 1, --max-samples 3 (timings are not meaningful there)"]
    assert (record["timing"]["budget_s_per_case"], record["timing"]["max_samples"]) == (1.0, 3)


def test_a_file_of_several_runs_is_compared_one_run_at_a_time(tmp_path):
    one = kbench.evaluate(QKNORM, **ONE_CASE)
    two = dict(one, submission="other/kernel")
    path = tmp_path / "runs.json"
    path.write_text(json.dumps({"runs": [one, two]}))
    with pytest.raises(kbench.KbenchError, match=r"2 runs \(submissions: qknorm, kernel\); pick one as .*runs.json:NAME"):
        kbench.compare(str(path), str(path))
    result = kbench.compare(f"{path}:qknorm", f"{path}:kernel")
    assert result["summary"]["failed"] == 0 and len(result["rows"]) == 1
    with pytest.raises(kbench.KbenchError, match="no run 'nope'"):
        kbench.compare(f"{path}:nope", f"{path}:kernel")


@pytest.mark.parametrize("content", ['{"runs": 5}', '{"task": "qknorm", "cases": 3}', '{"task": "qknorm", "cases": [1]}',
                                     "[]", "not json"])
def test_json_of_the_wrong_structure_is_one_line_and_exit_2(tmp_path, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = CliRunner().invoke(cli, ["compare", str(bad), str(bad)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.stderr.strip().startswith(f"Error: {bad}: not a kbench JSON result")


def test_a_broken_task_folder_is_one_line_for_list_show_and_eval(tmp_path, monkeypatch):
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "brk.toml").write_text((ROOT / "cases" / "qknorm.toml").read_text())
    code = tmp_path / "reference" / "brk"
    code.mkdir(parents=True)
    (code / "task.py").write_text("import kbench_no_such_package\n")
    (code / "contract.py").write_text("x = (\n")
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    listed = CliRunner().invoke(cli, ["list"])
    assert listed.exit_code == 1 and "Traceback" not in listed.output
    assert "qknorm" in listed.stdout and "mla_decode" in listed.stdout
    assert listed.stderr.strip() == (f"kbench: task brk: {code / 'task.py'}: ModuleNotFoundError: "
                                     "No module named 'kbench_no_such_package'")
    for args in (["show", "brk"], ["eval", str(QKNORM), "--task", "brk", "--device", "cpu"]):
        result = CliRunner().invoke(cli, args)
        assert "Traceback" not in result.output
        if result.exit_code:
            assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    evaluated = CliRunner().invoke(cli, ["eval", str(QKNORM), "--task", "brk", "--device", "cpu"])
    assert evaluated.exit_code == 2
    assert evaluated.stderr.strip() == f"Error: {code / 'contract.py'} line 1: SyntaxError: '(' was never closed"
