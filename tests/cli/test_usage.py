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
    for args in (["eval", QKNORM, "--task", "nope"], ["eval", QKNORM, "--bogus"], ["eval"], ["eval", "/" + "a" * 300]):
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


LONG = "a" * 300   # a name over the file system's 255 bytes


@pytest.mark.parametrize("args, message", [
    (["eval"], "Missing argument 'SUBMISSIONS...'. (see: cli eval --help)"),
    (["eval", QKNORM, "--processes", "0"], "Invalid value for '--processes': 0 is not in the range 1<=x<=16."),
    (["eval", QKNORM, "--jsno", "x"], "No such option '--jsno'. (Did you mean one of: '--json', '--noise'?)"),
    (["show"], "Missing argument 'TASK'."),
    (["list", "qknorm"], "Got unexpected extra argument (qknorm)"),
    (["nosuchcommand"], "No such command 'nosuchcommand'."),
    (["eval", QKNORM, *ONE_CASE, "--timeout", "nan"], "--timeout nan: give a finite number above 0"),
    (["eval", QKNORM, *ONE_CASE, "--timeout", "0"], "--timeout 0: give a finite number above 0"),
    (["eval", QKNORM, *ONE_CASE, "--noise", "-1"], "--noise -1: give a finite number of 0 or more"),
    (["eval", QKNORM, *ONE_CASE, "--budget", "inf"], "--budget inf: give a finite number above 0"),
    (["eval", QKNORM, *ONE_CASE, "--max-samples", "0"], "--max-samples 0: give 1 or more"),
    (["eval", QKNORM, *ONE_CASE, "--min-samples", "50", "--max-samples", "5"], "--min-samples 50 is over --max-samples 5"),
    (["eval", f"/tmp/{LONG}"], f"/tmp/{LONG}: File name too long"),
    (["eval", QKNORM, "--json", f"/tmp/{LONG}.json"], f"--json /tmp/{LONG}.json: File name too long"),
    (["eval", QKNORM, "--json", "/tmp/same.out", "--markdown", "/tmp/same.out"],
     "--json and --markdown name the same file, /tmp/same.out: give each its own"),
    (["eval", QKNORM, str(ROOT / "submissions" / "block_sparse_attn"), "--device", "cpu"],
     "submissions of different tasks (block_sparse_attn, qknorm): one task per run"),
    (["eval", QKNORM, str(ROOT / "submissions" / "qknorm"), "--device", "cpu", "--case", "nope"],
     "no case 'nope' in suite 'smoke' of qknorm"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_run(args, message):
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], lines
    assert result.stdout == ""   # nothing ran


def test_a_case_given_twice_runs_once():
    import kbench
    run = kbench.evaluate(QKNORM, device="cpu", cases=["b3_q5_kv2_d64_f16"] * 2, baseline="none")
    assert [c["case"] for c in run["cases"]] == ["b3_q5_kv2_d64_f16"]


def test_compare_refuses_json_nested_too_deep_or_cases_without_params(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"task": "qknorm", "cases": [{"case": "x", "status": "passed"}]}))
    for path, why in ((deep, "nested too deep to read"), (bare, "with 'case', 'status' and 'params'")):
        result = CliRunner().invoke(cli, ["compare", str(path), str(path)])
        assert result.exit_code == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{path}: not a kbench JSON result" in lines[0] and why in lines[0]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_an_output_that_cannot_be_written_is_one_line():
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "kbench", "show", "qknorm"], stdout=full, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT, timeout=60, check=False)
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == ["kbench: the output could not be written: No space left on device"]


def test_a_nul_byte_in_a_submission_is_named_without_a_line(tmp_path):
    (tmp_path / "submission.py").write_bytes(b"def qknorm(q, k, w):\n    return q\x00\n")
    result = CliRunner().invoke(cli, ["eval", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip() == (f"Error: cannot tell the task of {tmp_path}: submission.py: "
                                     f"SyntaxError: source code string cannot contain null bytes")
