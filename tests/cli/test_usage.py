"""Bad input costs a user neither results nor time: one line, the documented exit code, at once."""
import json
import os
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from kbench.cli.commands import cli, ranking
from kbench.cli.main import _workers_per_run
from tests.helpers import ROOT

QKNORM = str(ROOT / "submissions" / "qknorm")
ONE_CASE = ["--device", "cpu", "--case", "b3_q5_kv2_d64_f16", "--baseline", "none"]


@pytest.mark.parametrize("args", [
    ["eval", QKNORM, "--task", "nope"],
    ["eval"],
    ["eval", QKNORM, "--bogus"],
    ["eval", QKNORM, "--processes", "many"],
    ["eval", "no/such/folder"],
    ["compare", QKNORM],
    ["eval", QKNORM, "--device", "cuda"] if not os.path.exists("/dev/nvidiactl") else ["eval", "nope/"],
])
def test_a_usage_error_starts_no_worker(args):
    assert _workers_per_run(args) == 0


def test_a_usage_error_answers_in_about_a_second():
    """The command used to start its workers (each importing torch) before click read the line."""
    for args in (["eval", QKNORM, "--task", "nope"], ["eval", QKNORM, "--bogus"], ["eval"]):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "kbench", *args], capture_output=True, text=True,
                             cwd=ROOT, timeout=60)
        wall = time.perf_counter() - start
        assert out.returncode == 2 and "Traceback" not in out.stderr
        assert wall < 3.0, f"{args}: {wall:.1f} s"   # python's start and click's import, no torch


def test_a_well_formed_command_still_starts_its_workers_first():
    assert _workers_per_run(["eval", QKNORM, "--device", "cpu"]) == 2
    assert _workers_per_run(["eval", QKNORM, "--device", "cpu", "--baseline", "none"]) == 1


@pytest.mark.parametrize("option", ["--json", "--markdown"])
def test_an_output_path_that_cannot_be_written_is_refused_before_the_run(tmp_path, option):
    a_file = tmp_path / "file"
    a_file.write_text("")
    for path, why in ((tmp_path, "is a folder; give a file's path"),
                      (a_file / "x.json", f"{a_file} is a file, not a folder")):
        start = time.perf_counter()
        result = CliRunner().invoke(cli, ["eval", QKNORM, *ONE_CASE, option, str(path)])
        assert result.exit_code == 2
        assert result.stderr.strip().splitlines() == [f"Error: {option} {path}: {why}"]
        assert "passed" not in result.stdout and time.perf_counter() - start < 5


def test_a_missing_folder_for_json_is_made_and_said(tmp_path):
    path = tmp_path / "runs" / "deep" / "1.json"
    result = CliRunner().invoke(cli, ["eval", QKNORM, *ONE_CASE, "--json", str(path)])
    assert result.exit_code == 0, result.output
    assert f"kbench: --json: made the folder {path.parent}" in result.stderr
    assert json.loads(path.read_text())["task"] == "qknorm"


def test_a_write_that_fails_after_the_run_keeps_the_table_and_exits_2(tmp_path, monkeypatch):
    path = tmp_path / "out.json"
    real_open = open

    def failing_open(file, *a, **kw):
        if str(file) == str(path):
            raise OSError(28, "No space left on device")
        return real_open(file, *a, **kw)

    monkeypatch.setattr("builtins.open", failing_open)
    result = CliRunner().invoke(cli, ["eval", QKNORM, *ONE_CASE, "--json", str(path)])
    assert result.exit_code == 2
    assert "b3_q5_kv2_d64_f16  passed" in result.stdout   # the results are on the screen
    assert result.stderr.strip().splitlines()[-1] == f"kbench: --json {path}: not written: No space left on device"


def test_quiet_says_no_cpu_mode_notice():
    result = CliRunner().invoke(cli, ["eval", QKNORM, "--case", "b3_q5_kv2_d64_f16", "--baseline", "none", "-q"])
    assert result.exit_code == 0
    if not os.path.exists("/dev/nvidiactl"):
        assert result.stderr == ""
        loud = CliRunner().invoke(cli, ["eval", QKNORM, "--case", "b3_q5_kv2_d64_f16", "--baseline", "none"])
        assert "kbench: no CUDA device: CPU mode" in loud.stderr


def test_a_task_folder_that_is_not_there_is_said(monkeypatch, tmp_path):
    monkeypatch.setenv("KBENCH_TASK_DIRS", f"{tmp_path / 'missing'}{os.pathsep}{tmp_path}")
    result = CliRunner().invoke(cli, ["list"])
    assert result.exit_code == 0 and "qknorm" in result.stdout
    assert result.stderr.splitlines() == [f"kbench: KBENCH_TASK_DIRS: {tmp_path / 'missing'}: no such folder",
                                          f"kbench: KBENCH_TASK_DIRS: {tmp_path}: no cases/ and reference/ folders in it"]


def _run(name, passed, total, geomean=None, meaningful=False):
    return {"submission": name, "timing": {"meaningful": meaningful},
            "summary": {"passed": passed, "total": total, "geomean_speedup": geomean}}


def test_runs_that_tie_share_their_rank():
    table = ranking([_run("a", 5, 5), _run("b", 4, 5), _run("c", 5, 5)])
    ranks = {line.split()[1]: line.split()[0] for line in table.splitlines()[2:]}
    assert ranks == {"a": "1", "c": "1", "b": "3"}
    timed = ranking([_run("a", 5, 5, 1.2, True), _run("b", 5, 5, 1.5, True)])
    assert [line.split()[:2] for line in timed.splitlines()[2:]] == [["1", "b"], ["2", "a"]]


def test_help_names_every_exit_code():
    for command in ("eval", "compare"):
        text = CliRunner().invoke(cli, [command, "--help"]).output
        assert "2 on a usage error" in " ".join(text.split()) and "130 when interrupted" in " ".join(text.split())


def test_eval_help_names_the_default_baselines_and_what_a_hang_costs():
    text = " ".join(CliRunner().invoke(cli, ["eval", "--help"]).output.split())
    assert "default: the best installed: flashinfer for qknorm and mla_decode" in text
    assert "FlexAttention for block_sparse_attn" in text
    assert "one that hangs everywhere costs ~2.5 min on smoke" in text


def test_reason_lines_fit_100_columns_unless_wide():
    import kbench
    from kbench.cli.report import text_report

    run = kbench.evaluate(QKNORM, device="cpu", cases=["b3_q5_kv2_d64_f16"], baseline="none")
    reason = "ContractError: output 0 has shape (3, 5, 64), expected (3, 5, 65) " + "x" * 60
    run["cases"][0].update(status="invalid", reason=reason)
    assert max(len(line) for line in text_report(run).splitlines()) <= 100
    assert f"b3_q5_kv2_d64_f16: invalid: {reason}" in text_report(run, wide=True).splitlines()


def test_mla_decode_lists_its_smoke_suite_first():
    from kbench.tasks.task import get_task

    assert next(iter(get_task("mla_decode").suites)) == "smoke"
