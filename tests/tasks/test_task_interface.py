"""The task interface (kbench/tasks/interface.py): what a task folder defines, checked when the task is
loaded (a one-line error naming the name), and docs/tasks.md saying the same."""
import re
import shutil

import pytest
from click.testing import CliRunner

from kbench.cli.commands import cli
from kbench.errors import KbenchError
from kbench.tasks.interface import CONTRACT, TASK
from kbench.tasks.task import Task, all_tasks
from tests.helpers import ROOT

EXAMPLE = ROOT / "docs" / "example-task"
DOC = ROOT / "docs" / "tasks.md"


def example(tmp_path, edit_task=None, edit_contract=None) -> Task:
    """A copy of docs/tasks.md's example task, with its task.py / contract.py text edited."""
    shutil.copytree(EXAMPLE, tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    code = tmp_path / "reference" / "scaleadd"
    for name, edit in (("task.py", edit_task), ("contract.py", edit_contract)):
        if edit is not None:
            (code / name).write_text(edit((code / name).read_text()))
    return Task("scaleadd", tmp_path / "cases" / "scaleadd.toml", code)


def load_error(task: Task) -> str:
    with pytest.raises(KbenchError) as caught:
        task.module, task.contract
    return str(caught.value)


def replace(old, new):
    def edit(text):
        assert old in text, old
        return text.replace(old, new)
    return edit


def append(line):
    return lambda text: text + line + "\n"


def test_the_bundled_tasks_and_the_example_follow_the_interface(tmp_path):
    tasks = [*all_tasks().values(), example(tmp_path)]
    assert {t.name for t in tasks} >= {"qknorm", "mla_decode", "block_sparse_attn", "scaleadd"}
    for task in tasks:
        TASK.check(task.module, task.code_dir / "task.py")
        CONTRACT.check(task.contract, task.contract_path)


def test_a_missing_required_name_is_a_one_line_error_naming_it(tmp_path, monkeypatch):
    task = example(tmp_path, edit_task=replace("def check(outputs, expected, inputs):", "def _check(outputs, expected, inputs):"))
    path = task.code_dir / "task.py"
    expected = f"{path}: no check (required: check(outputs: tuple, expected: tuple, inputs: dict) -> CheckResult)"
    assert load_error(task) == expected

    # what the user sees: the same line, exit code 2
    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    result = CliRunner().invoke(cli, ["eval", str(tmp_path / "submission"), "--device", "cpu"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"Error: {expected}"]


def test_a_missing_contract_name_is_named_too(tmp_path):
    task = example(tmp_path, edit_contract=replace("SUBMISSION_FILES = (\"submission.py\",)\n", ""))
    assert load_error(task) == (f"{task.contract_path}: no SUBMISSION_FILES "
                                f"(required: SUBMISSION_FILES: tuple[str, ...])")


def test_a_misspelled_optional_name_is_a_one_line_error_naming_it(tmp_path, monkeypatch):
    task = example(tmp_path, edit_task=append('MUTABLE_INPUT = ("x",)'))
    expected = (f"{task.code_dir / 'task.py'}: MUTABLE_INPUT is not a name kbench reads in task.py; "
                f"did you mean MUTABLE_INPUTS?")
    assert load_error(task) == expected

    monkeypatch.setenv("KBENCH_TASK_DIRS", str(tmp_path))
    result = CliRunner().invoke(cli, ["eval", str(tmp_path / "submission"), "--device", "cpu"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [f"Error: {expected}"]


@pytest.mark.parametrize("side, edit, wrong, meant", [
    ("task", append("def native_scores(results, suite):\n    return None"), "native_scores", "native_score"),
    ("task", append("def generate_Timed(case, device, seed):\n    return {}"), "generate_Timed", "generate_timed"),
    ("task", replace("DESCRIPTION = ", "DESCRIPTON = "), "DESCRIPTON", "DESCRIPTION"),
    ("contract", append("def prepar(inputs):\n    return inputs"), "prepar", "prepare"),
    ("contract", append("def afterrun(entry):\n    pass"), "afterrun", "after_run"),
])
def test_misspellings_on_either_side_are_named(tmp_path, side, edit, wrong, meant):
    task = example(tmp_path, **{f"edit_{side}": edit})
    path = task.code_dir / f"{side}.py"
    assert load_error(task) == f"{path}: {wrong} is not a name kbench reads in {side}.py; did you mean {meant}?"


def test_a_misspelled_required_name_is_pointed_at(tmp_path):
    task = example(tmp_path, edit_task=replace("def check(", "def chek("))
    assert load_error(task).endswith("; is chek a misspelling of it?")


def test_other_top_level_names_are_the_tasks_own(tmp_path):
    # constants, helpers and classes of the task itself are not misspellings of anything
    task = example(tmp_path, edit_task=append("RTOL = 1e-5\nCASE_KEYS = ('n',)\n\n\ndef scale(x):\n    return x\n"),
                   edit_contract=append("SETUP_BUDGET_S = 30.0\n\n\nclass Entry:\n    pass"))
    assert task.module.RTOL == 1e-5 and task.contract.SETUP_BUDGET_S == 30.0


@pytest.mark.parametrize("side, old, new, problem", [
    ("task", "def generate(case, device):", "def generate(case):",
     "generate cannot be called with 2 argument(s) as generate(case: dict, device: str) -> dict"),
    ("task", 'DESCRIPTION = "2x + y, the example task of docs/tasks.md"', "DESCRIPTION = 3",
     "DESCRIPTION must be a str, not int"),
    ("contract", 'ENTRY_POINTS = ("scale_add",)', 'ENTRY_POINTS = "scale_add"',
     "ENTRY_POINTS must be a tuple of str, not str"),
    ("task", '"devices": ("cpu", "cuda")', '"device": ("cuda",)',
     "BASELINES['eager'] has an unknown key 'device'; did you mean 'devices'?"),
    ("task", '"devices": ("cpu", "cuda")', '"devices": ("gpu",)',
     "BASELINES['eager']: 'devices' must be a tuple of cpu and/or cuda, not ('gpu',)"),
    ("task", '"path": "eager.py"', '"path": "eagre.py"',
     "BASELINES['eager'] names eagre.py, which is not a file next to task.py"),
    ("task", 'DESCRIPTION = "2x + y', 'GPU_POOL = 0\nDESCRIPTION = "2x + y',
     "GPU_POOL must be an int from 1 to 8, not 0"),
    ("task", 'DESCRIPTION = "2x + y', 'GPU_POOL = "4"\nDESCRIPTION = "2x + y',
     "GPU_POOL must be an int from 1 to 8, not '4'"),
])
def test_names_of_the_wrong_kind_are_named(tmp_path, side, old, new, problem):
    task = example(tmp_path, **{f"edit_{side}": replace(old, new)})
    assert load_error(task) == f"{task.code_dir / (side + '.py')}: {problem}"


def test_optional_names_read_their_default_when_absent(tmp_path):
    task = example(tmp_path)
    assert TASK.get(task.module, "MUTABLE_INPUTS") == () and TASK.get(task.module, "native_score") is None
    assert CONTRACT.get(task.contract, "prepare")({"x": 1}) == {"x": 1}
    assert TASK.get(task.module, "DESCRIPTION") == "2x + y, the example task of docs/tasks.md"


def _doc_rows() -> dict[str, tuple[str, str]]:
    """docs/tasks.md's interface tables: the form (in backticks) -> (required 'yes'/'no', meaning)."""
    rows = {}
    for line in DOC.read_text().splitlines():
        found = re.fullmatch(r"\| `([^`]+)` \| (yes|no) \| (.*) \|", line)
        if found:
            rows[found[1]] = (found[2], found[3])
    return rows


def test_docs_list_exactly_the_interface():
    expected = {n.form: ("yes" if n.required else "no", n.meaning) for n in TASK.names + CONTRACT.names}
    assert _doc_rows() == expected


def test_docs_show_the_example_task_verbatim():
    doc = DOC.read_text()
    files = sorted(p for p in EXAMPLE.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert len(files) == 5
    for path in files:
        rel = path.relative_to(EXAMPLE)
        lang = "toml" if path.suffix == ".toml" else "python"
        assert f"`docs/example-task/{rel}`:\n```{lang}\n{path.read_text()}```\n" in doc, rel
