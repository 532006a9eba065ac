"""The command line: exact output, exit codes, one-line errors."""
import json

import pytest
from click.testing import CliRunner

from kbench.cli import cli
from tests.helpers import FIXTURES, ROOT

FAST = ["--device", "cpu", "--min-samples", "2", "--max-samples", "2", "--budget", "0.2"]


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("command", [[], ["list"], ["show"], ["eval"]])
def test_every_command_has_help_with_an_example(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    if command:
        assert "Example:" in result.output and "kbench " + command[0] in result.output


def test_list_shows_tasks_suites_and_case_counts():
    result = invoke("list")
    assert result.exit_code == 0
    line = next(l for l in result.output.splitlines() if l.startswith("qknorm"))
    assert "smoke (5), quick (6), full (20), models (7)" in line


def test_show_lists_the_20_original_cases_in_order():
    result = invoke("show", "qknorm", "--suite", "full")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("full: 20 cases")
    names = [l.split()[0] for l in lines[3:23]]
    assert names[:5] == ["kv8_q32_d64_b1", "kv8_q32_d64_b16", "kv8_q32_d64_b64", "kv8_q32_d64_b128",
                         "kv8_q32_d64_b256"]
    assert names[-1] == "kv32_q32_d128_b256"


@pytest.mark.parametrize("args, message", [
    (["eval", "no/such/dir"], "Error: no/such/dir: no such file or directory"),
    (["eval", "submissions/qknorm", "--suite", "nope"], "Error: unknown suite 'nope' for task qknorm"),
    (["eval", "submissions/qknorm", "--task", "nope"], "Error: unknown task 'nope'"),
    (["show", "nope"], "Error: unknown task 'nope'"),
    (["eval", "submissions/qknorm", "--cuda-graph"], "Error: --cuda-graph needs a CUDA device"),
    (["eval", str(FIXTURES / "qknorm" / "no_entry_point")], "Error: cannot tell the task of"),
    (["eval", "tests", "--task", "qknorm"], "Error: tests: no submission.py or solution.py for task qknorm"),
])
def test_usage_errors_are_one_line_and_exit_2(args, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke(*args, *FAST[:2])  if args[0] == "eval" else invoke(*args)
    assert result.exit_code == 2
    err = result.output.strip().splitlines()
    assert err[-1].startswith(message), err
    assert "Traceback" not in result.output


def test_eval_bundled_solution_on_cpu_writes_json_and_markdown(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out, md = tmp_path / "run.json", tmp_path / "summary.md"
    result = invoke("eval", "submissions/qknorm", *FAST, "--case", "b3_q5_kv2_d64_f16",
                    "--json", str(out), "--markdown", str(md))
    assert result.exit_code == 0, result.output
    assert "qknorm/smoke: passed 1/1" in result.output
    assert "CPU mode: correctness only, timings are not meaningful" in result.output
    run = json.loads(out.read_text())
    case = run["cases"][0]
    assert case["status"] == "passed" and case["latency_ms"] > 0 and case["samples"] == 2
    assert run["timing"]["meaningful"] is False and run["suite"] == "smoke"
    assert md.read_text().startswith("### kbench: qknorm / smoke")


def test_eval_failure_exits_1_and_keeps_other_results(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke("eval", str(FIXTURES / "qknorm" / "fails_one_case"), *FAST, "--baseline", "none")
    assert result.exit_code == 1
    assert "passed 4/5" in result.output
    assert "b2_q3_kv1_d256_bf16: error: RuntimeError: unsupported head_dim (at submission.py:7)" in result.output


def test_min_speedup_without_a_measurable_speedup_fails(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke("eval", "submissions/qknorm", *FAST, "--case", "b3_q5_kv2_d64_f16",
                    "--baseline", "none", "--min-speedup", "1.0")
    assert result.exit_code == 1


def test_two_submissions_are_ranked(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke("eval", str(FIXTURES / "qknorm" / "good_torch"), str(FIXTURES / "qknorm" / "raises"),
                    "--task", "qknorm", *FAST, "--case", "b3_q5_kv2_d64_f16")
    assert result.exit_code == 1
    ranking = result.output.split("rank")[1].splitlines()
    assert "good_torch" in ranking[2] and "raises" in ranking[3]
