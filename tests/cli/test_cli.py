"""The command line: exact output, exit codes, one-line errors, tables that fit."""
import json

import click
import pytest
import torch
from click.testing import CliRunner

from kbench.cli.commands import Progress, cli, exit_code
from tests.helpers import FIXTURES, ROOT

FAST = ["--device", "cpu", "--min-samples", "2", "--max-samples", "2", "--budget", "0.2"]
ONE = ["--case", "b3_q5_kv2_d64_f16"]


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _commands(group, prefix=()):
    """Every command, found by walking the click group (none can be left out by hand)."""
    for name, command in group.commands.items():
        yield prefix + (name,)
        if isinstance(command, click.Group):
            yield from _commands(command, prefix + (name,))


COMMANDS = list(_commands(cli))


def test_the_walk_finds_every_command():
    assert set(COMMANDS) >= {("list",), ("show",), ("eval",), ("compare",)}


@pytest.mark.parametrize("command", [()] + COMMANDS, ids=lambda c: " ".join(c) or "kbench")
def test_every_command_has_help_with_an_example(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output
    assert "kbench " + " ".join(command or ("eval",)) in result.output.split("Example:")[1]


def test_list_shows_tasks_suites_and_case_counts():
    result = invoke("list")
    assert result.exit_code == 0
    # qknorm's line wraps inside its columns: its suites read in order across the lines
    lines = result.output.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("qknorm"))
    suites = " ".join(l[19:59].strip() for l in lines[start:start + 3] if l[:19].strip() in ("", "qknorm"))
    assert "smoke (5), quick (6), full (20), models (7)" in suites


def test_show_lists_the_20_original_cases_in_order():
    result = invoke("show", "qknorm", "--suite", "full")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("full: 20 cases") and lines[1] == "  order"  # the suite's reason, wrapped
    assert lines[2] == "every case: dtype=float16, num_qo_heads=32, seq=0"
    names = [l.split()[0] for l in lines[5:25]]
    assert names[:5] == ["kv8_q32_d64_b1", "kv8_q32_d64_b16", "kv8_q32_d64_b64", "kv8_q32_d64_b128",
                         "kv8_q32_d64_b256"]
    assert names[-1] == "kv32_q32_d128_b256"


@pytest.mark.parametrize("args", [["list"], ["show", "qknorm"], ["show", "mla_decode"],
                                  ["show", "block_sparse_attn"]], ids=" ".join)
def test_tables_fit_100_columns_and_wide_shows_everything(args):
    narrow, wide = invoke(*args), invoke(*args, "--wide")
    assert narrow.exit_code == wide.exit_code == 0
    assert max(len(l) for l in narrow.output.splitlines()) <= 100
    assert max(len(l) for l in wide.output.splitlines()) > 100
    assert "--wide shows them" not in wide.output


def test_show_wide_has_every_parameter_as_a_column():
    result = invoke("show", "block_sparse_attn", "--suite", "full", "--wide")
    header = result.output.splitlines()[1].split()
    assert header[:3] == ["case", "batch_size", "case_id"] and "window_blocks" in header


@pytest.mark.parametrize("args, message", [
    (["eval", "no/such/dir"], "Error: no/such/dir: no such file or directory"),
    (["eval", "submissions/qknorm", "--suite", "nope"], "Error: unknown suite 'nope' for task qknorm"),
    (["eval", "submissions/qknorm", "--task", "nope"], "Error: unknown task 'nope'"),
    (["show", "nope"], "Error: unknown task 'nope'"),
    (["eval", "submissions/qknorm", "--cuda-graph"], "Error: --cuda-graph needs a CUDA device"),
    (["eval", "submissions/qknorm", "--cuda-connections", "1"], "Error: --cuda-connections needs a CUDA device"),
    (["eval", str(FIXTURES / "qknorm" / "no_entry_point")], "Error: cannot tell the task of"),
    (["eval", "tests", "--task", "qknorm"], "Error: tests: no submission.py or solution.py for task qknorm"),
    (["eval", "submissions/qknorm", "--case", "nope"],
     "Error: no case 'nope' in suite 'smoke' of qknorm (see: kbench show qknorm --suite smoke)"),
    (["eval", str(FIXTURES / "qknorm" / "syntax_error")],
     f"Error: cannot tell the task of {FIXTURES / 'qknorm' / 'syntax_error'}: submission.py line 1: "
     "SyntaxError: expected ':'"),
    (["eval", "submissions/mla_decode", "--suite", "quick"], "Error: suite 'quick' of mla_decode needs cuda"),
    (["compare", "no.json", "submissions/qknorm"], "Error: no.json: no such file or directory"),
])
def test_usage_errors_are_one_line_and_exit_2(args, message, monkeypatch):
    """With the default device: on a machine without CUDA no CPU-mode notice comes first."""
    if "--suite" in args and "quick" in args and torch.cuda.is_available():
        pytest.skip("the suite runs on CUDA")
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "..." not in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_cuda_is_a_one_line_error(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["eval", "submissions/qknorm", "--device", "cuda"])
    assert (result.exit_code, result.stderr) == (2, "Error: --device cuda asked for, but no CUDA device is available\n")


def test_eval_bundled_solution_on_cpu_writes_json_and_markdown(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out, md = tmp_path / "run.json", tmp_path / "summary.md"
    result = invoke("eval", "submissions/qknorm", *FAST, *ONE, "--json", str(out), "--markdown", str(md))
    assert result.exit_code == 0, result.output
    assert "qknorm/smoke: passed 1/1; CPU mode (Triton interpreter): correctness only, no timings" in result.output
    run = json.loads(out.read_text())
    case = run["cases"][0]
    assert case["status"] == "passed" and case["latency_ms"] > 0 and case["samples"] == 2
    assert run["timing"]["meaningful"] is False and run["suite"] == "smoke"
    assert md.read_text().startswith("### kbench: qknorm / smoke: submissions/qknorm\n\n")
    assert md.read_text().endswith("\n")


def test_cpu_mode_prints_no_timing_figure(monkeypatch):
    """Interpreter wall clock is not the kernel's speed: no time, speedup or bandwidth column or
    geomean is printed (the baseline ran: there would be a speedup to show)."""
    monkeypatch.chdir(ROOT)
    result = invoke("eval", "submissions/qknorm", *FAST, *ONE)
    assert result.exit_code == 0, result.output
    header = result.stdout.splitlines()[0].split()
    assert header == ["case", "status", "abs", "err", "rel", "err", "worst", "at"]
    for word in ("speedup", " us", "GB/s", "x vs "):
        assert word not in result.stdout
    assert max(len(l) for l in result.output.splitlines()) <= 100


def test_cpu_mode_says_once_which_options_it_capped(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["eval", "submissions/qknorm", "--device", "cpu", *ONE, "--budget", "5",
                                      "--max-samples", "20", "--min-samples", "2"])
    assert result.exit_code == 0, result.output
    assert result.stderr == "kbench: CPU mode: capped to --budget 1, --max-samples 3 (timings are not meaningful there)\n"


def test_eval_failure_exits_1_and_keeps_other_results(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke("eval", str(FIXTURES / "qknorm" / "fails_one_case"), *FAST, "--baseline", "none")
    assert result.exit_code == 1
    assert "passed 4/5" in result.output
    assert "b2_q3_kv1_d256_bf16: error: RuntimeError: unsupported head_dim (at submission.py:7)" in result.output


def test_a_load_error_is_said_once_not_per_case(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = invoke("eval", str(FIXTURES / "qknorm" / "syntax_error"), "--task", "qknorm", *FAST)
    assert result.exit_code == 1
    assert result.stdout.count("SyntaxError") == 1
    assert "all 5 cases: error: load failed: SyntaxError: expected ':' (submission.py, line 1)" in result.stdout


def test_min_speedup_is_not_judged_on_cpu(monkeypatch):
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["eval", "submissions/qknorm", *FAST, *ONE, "--min-speedup", "1000"])
    assert result.exit_code == 0
    assert result.stderr == "kbench: --min-speedup not judged: CPU-mode timings are not meaningful\n"


def test_min_speedup_without_a_measurable_speedup_fails():
    """On CUDA timings (a record as a GPU run writes it), --min-speedup decides."""
    run = {"summary": {"passed": 2, "total": 2, "flagged": 0, "fatal": None, "geomean_speedup": None}}
    assert exit_code(run, 1.0) == 1
    run["summary"]["geomean_speedup"] = 1.1
    assert (exit_code(run, 1.0), exit_code(run, 1.2), exit_code(run, None)) == (0, 1, 0)


def test_two_submissions_are_named_and_ranked(monkeypatch):
    monkeypatch.chdir(ROOT)
    good, bad = str(FIXTURES / "qknorm" / "good_torch"), str(FIXTURES / "qknorm" / "raises")
    result = invoke("eval", good, bad, "--task", "qknorm", *FAST, *ONE)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == f"== {good}" and f"== {bad}" in lines
    assert lines.index(f"== {bad}") > lines.index("qknorm/smoke: passed 1/1; CPU mode (Triton interpreter): "
                                                  "correctness only, no timings")
    ranking = result.output.split("rank")[1].splitlines()
    assert "good_torch" in ranking[2] and "raises" in ranking[3]


def test_progress_on_a_pipe_is_a_line_at_most_every_interval(monkeypatch):
    """A long run whose stderr is not a terminal (CI) is not silent; a short one says nothing."""
    class Pipe:
        def isatty(self):
            return False

    now, printed = [0.0], []
    monkeypatch.setattr(click, "echo", lambda text, err=False, nl=True: printed.append(text))
    progress = Progress(False, interval=10.0, clock=lambda: now[0], stream=Pipe())
    progress.notices.append("first notice")
    for now[0], text in ((0, "[1/4] a"), (4, "[2/4] b"), (11, "[3/4] c"), (15, "[4/4] d")):
        progress(text)
    assert printed == ["kbench: first notice", "kbench: [3/4] c"]


def test_list_names_a_broken_task_in_one_line_and_still_lists_the_others(tmp_path, monkeypatch):
    (tmp_path / "cases").mkdir()
    (tmp_path / "cases" / "broken.toml").write_text("this is = = not toml\n")
    code = tmp_path / "reference" / "broken"
    code.mkdir(parents=True)
    (code / "task.py").write_text("")
    (code / "contract.py").write_text("")
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    result = CliRunner().invoke(cli, ["list"])
    assert result.exit_code == 1
    assert "qknorm" in result.stdout and "Traceback" not in result.output
    assert result.stderr.strip().splitlines() == [
        f"kbench: task broken: {tmp_path / 'cases' / 'broken.toml'}: not valid TOML "
        "(Expected '=' after a key in a key/value pair (at line 1, column 6))"]


def test_a_temp_folder_too_long_for_cpu_modes_sockets_still_runs_every_case(tmp_path, monkeypatch):
    # CPU tensors cross processes over Unix sockets made under TMPDIR; at 108 bytes such a
    # path fails, and every case used to crash with "AF_UNIX path too long". The workers' folders
    # now go under a short system folder instead.
    long_dir = tmp_path / ("x" * 60)
    long_dir.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(long_dir))
    monkeypatch.chdir(ROOT)
    result = CliRunner().invoke(cli, ["eval", "submissions/qknorm", "--device", "cpu",
                                      "--case", "b3_q5_kv2_d64_f16"])
    assert result.exit_code == 0, result.output
    assert "passed 1/1" in result.stdout and "AF_UNIX" not in result.output
    assert list(long_dir.iterdir()) == []
