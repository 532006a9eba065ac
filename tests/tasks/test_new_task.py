"""Adding a task takes one case file and one reference folder: nothing in kbench/ changes.

The task is docs/tasks.md's example, docs/example-task/ (the doc shows those files verbatim:
tests/tasks/test_task_interface.py checks it), copied to a temporary folder.
"""
import json
import shutil

from click.testing import CliRunner

from kbench.cli.commands import cli
from tests.helpers import ROOT

EXAMPLE = ROOT / "docs" / "example-task"


def make_task(root):
    """The example task under ``root``; returns its submission and a wrong one."""
    shutil.copytree(EXAMPLE, root, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    bad = root / "bad"
    bad.mkdir()
    (bad / "submission.py").write_text("def scale_add(x, y):\n    return x + y\n")
    return root / "submission", bad


def test_a_task_defined_outside_kbench_lists_and_runs(tmp_path, monkeypatch):
    good, bad = make_task(tmp_path)
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    runner = CliRunner()
    listed = runner.invoke(cli, ["list"])
    assert "scaleadd" in listed.output and "smoke (2)" in listed.output

    out = tmp_path / "run.json"
    result = runner.invoke(cli, ["eval", str(good), "--device", "cpu", "--min-samples", "2",
                                 "--max-samples", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    run = json.loads(out.read_text())
    assert run["task"] == "scaleadd"  # found from the entry point, not the folder name
    assert [c["status"] for c in run["cases"]] == ["passed", "passed"]
    assert run["baseline"] == "eager" and all(c["speedup"] > 0 for c in run["cases"])

    result = runner.invoke(cli, ["eval", str(bad), "--device", "cpu", "--min-samples", "2", "--max-samples", "2"])
    assert result.exit_code == 1
    assert "n127: mismatch: out: " in result.output


def test_a_baseline_that_misses_the_tolerance_is_timed_and_reported(tmp_path, monkeypatch):
    good, _ = make_task(tmp_path)
    code = tmp_path / "reference" / "scaleadd"
    (code / "sloppy.py").write_text("def scale_add(x, y):\n    return 2 * x + y + 1e-3\n")
    with open(code / "task.py", "a") as task:
        task.write('BASELINES["sloppy"] = {"path": "sloppy.py", "devices": ("cpu", "cuda")}\n')
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    out = tmp_path / "run.json"
    result = CliRunner().invoke(cli, ["eval", str(good), "--device", "cpu", "--baseline", "sloppy",
                                      "--min-samples", "2", "--max-samples", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output  # the submission is fine; the baseline is not its fault
    case = json.loads(out.read_text())["cases"][0]
    assert case["speedup"] > 0 and case["baseline"] == "sloppy"
    assert case["baseline_problem"].startswith("baseline sloppy mismatch: out: ")
    assert "timed anyway" in case["baseline_problem"]


def test_the_default_baseline_is_the_best_one_installed(tmp_path, monkeypatch):
    """BASELINES lists the best first; one whose modules are missing here is passed over by
    default and refused in one line when asked for by name."""
    good, _ = make_task(tmp_path)
    code = tmp_path / "reference" / "scaleadd"
    (code / "fancy.py").write_text("import kbench_no_such_library\n")
    task_py = code / "task.py"
    task_py.write_text(task_py.read_text().replace(
        'BASELINES = {', 'BASELINES = {"fancy": {"path": "fancy.py", "requires": ("kbench_no_such_library",)}, '))
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    out = tmp_path / "run.json"
    result = CliRunner().invoke(cli, ["eval", str(good), "--device", "cpu", "--min-samples", "2",
                                      "--max-samples", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["baseline"] == "eager"
    result = CliRunner().invoke(cli, ["eval", str(good), "--device", "cpu", "--baseline", "fancy"])
    assert result.exit_code == 2
    assert result.output.strip() == ("Error: baseline 'fancy' needs kbench_no_such_library, "
                                      "which is not installed here")
