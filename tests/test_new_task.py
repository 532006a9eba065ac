"""Adding a task takes one case file and one reference folder: nothing in kbench/ changes."""
import json
import textwrap

from click.testing import CliRunner

from kbench.cli import cli

CASES = """
[suites.smoke]
reason = "two odd sizes"
cases = [
  { name = "n127", n = 127, seed = 1 },
  { name = "n129", n = 129, seed = 2 },
]
"""

CONTRACT = '''
from kbench.errors import ContractError
from kbench.loader import load_module

ENTRY_POINTS = ("scale_add",)
SUBMISSION_FILES = ("submission.py",)


def load(path):
    fn = getattr(load_module(path, "submission"), "scale_add", None)
    if fn is None:
        raise ContractError("no scale_add")
    return fn


def call(fn, args):
    return (fn(args["x"], args["y"]),)
'''

TASK = '''
import torch
from kbench.check import compare

DESCRIPTION = "2x + y, a task defined inside the tests"
BASELINES = {"eager": {"path": "eager.py", "devices": ("cpu", "cuda")},
             "sloppy": {"path": "sloppy.py", "devices": ("cpu", "cuda")}}


def generate(case, device):
    g = torch.Generator(device=device).manual_seed(case["seed"])
    return {"x": torch.randn(case["n"], generator=g, device=device),
            "y": torch.randn(case["n"], generator=g, device=device)}


def reference(inputs):
    return (2 * inputs["x"] + inputs["y"],)


def check(outputs, expected, inputs):
    return compare("out", outputs[0], expected[0], rtol=1e-5, atol=1e-6)


def roofline(case):
    return {"bytes": 12 * case["n"], "flops": 2 * case["n"]}


def native_score(results, suite):
    return {"cases_passed": sum(r["status"] == "passed" for r in results)}
'''

EAGER = "def scale_add(x, y):\n    return 2 * x + y\n"


def make_task(root):
    (root / "cases").mkdir()
    (root / "cases" / "scaleadd.toml").write_text(CASES)
    code = root / "reference" / "scaleadd"
    code.mkdir(parents=True)
    (code / "contract.py").write_text(textwrap.dedent(CONTRACT))
    (code / "task.py").write_text(textwrap.dedent(TASK))
    (code / "eager.py").write_text(EAGER)
    (code / "sloppy.py").write_text("def scale_add(x, y):\n    return 2 * x + y + 1e-3\n")
    good = root / "mine"
    good.mkdir()
    (good / "submission.py").write_text("def scale_add(x, y):\n    return x + x + y\n")
    bad = root / "bad"
    bad.mkdir()
    (bad / "submission.py").write_text("def scale_add(x, y):\n    return x + y\n")
    return good, bad


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
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    out = tmp_path / "run.json"
    result = CliRunner().invoke(cli, ["eval", str(good), "--device", "cpu", "--baseline", "sloppy",
                                      "--min-samples", "2", "--max-samples", "2", "--json", str(out)])
    assert result.exit_code == 0, result.output  # the submission is fine; the baseline is not its fault
    case = json.loads(out.read_text())["cases"][0]
    assert case["speedup"] > 0 and case["baseline"] == "sloppy"
    assert case["baseline_problem"].startswith("baseline sloppy mismatch: out: ")
    assert "timed anyway" in case["baseline_problem"]
