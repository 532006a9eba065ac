"""kbench/tasks/submission.py: the one way every contract finds, imports and checks a submission."""
import sys

import pytest
import torch

from kbench.errors import ContractError
from kbench.tasks import interface


def test_find_takes_a_file_or_the_first_listed_file_in_a_folder(tmp_path):
    (tmp_path / "solution.py").write_text("")
    assert interface.find(tmp_path, ("submission.py", "solution.py")) == tmp_path / "solution.py"
    (tmp_path / "submission.py").write_text("")
    assert interface.find(tmp_path, ("submission.py", "solution.py")) == tmp_path / "submission.py"
    assert interface.find(tmp_path / "solution.py", ("submission.py",)) == tmp_path / "solution.py"
    with pytest.raises(ContractError, match=r": no kernel.py or main.py$"):
        interface.find(tmp_path, ("kernel.py", "main.py"))


def test_import_file_puts_the_folder_then_the_compat_folder_first(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    sub, compat, elsewhere = tmp_path / "sub", tmp_path / "compat", tmp_path / "elsewhere"
    for folder in (sub, compat, elsewhere):
        folder.mkdir()
    (sub / "helper.py").write_text("VALUE = 'the submission folder'\n")
    (compat / "task.py").write_text("WHERE = 'compat'\n")
    (elsewhere / "task.py").write_text("WHERE = 'elsewhere'\n")
    (sub / "submission.py").write_text("import helper\nimport task\nANSWER = (helper.VALUE, task.WHERE)\n")
    monkeypatch.syspath_prepend(str(elsewhere))
    saved = {name: sys.modules.pop(name) for name in ("task", "helper") if name in sys.modules}
    try:
        import task  # noqa: F401  - an earlier import of another "task" (say, by another interface)

        module = interface.import_file(sub / "submission.py", "_test_sub", compat_dir=compat)
        assert module.ANSWER == ("the submission folder", "compat")
        assert sys.path[:2] == [str(sub.resolve()), str(compat.resolve())]
    finally:
        for name in ("task", "helper"):
            sys.modules.pop(name, None)
        sys.modules.update(saved)


def test_entry_point_is_the_named_function(tmp_path):
    (tmp_path / "submission.py").write_text("def f(x):\n    return x\nnot_a_function = 3\n")
    module = interface.import_file(tmp_path / "submission.py", "_test_entry")
    assert interface.entry_point(module, tmp_path / "submission.py", "f", "f(x)")(2) == 2
    with pytest.raises(ContractError) as caught:
        interface.entry_point(module, tmp_path / "submission.py", "not_a_function", "not_a_function(x)")
    assert str(caught.value) == "submission.py defines no not_a_function(x) function"


def test_returned_checks_the_number_of_outputs():
    t = torch.zeros(1)
    assert interface.returned([t, t], "f", ("a", "b")) == (t, t)
    assert interface.returned(t, "f", ("out",)) == (t,)       # one output may come back bare
    assert interface.returned((t,), "f", ("out",)) == (t,)
    for out, got in ((t, "Tensor"), ((t,), "tuple of length 1"), ([t, t, t], "list of length 3")):
        with pytest.raises(ContractError) as caught:
            interface.returned(out, "f", ("a", "b"))
        assert str(caught.value) == f"f must return (a, b), got {got}"
