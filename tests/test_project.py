"""Project metadata that must match the code."""
import re
import sys
import tomllib

from tests.helpers import ROOT


def _minimum_python() -> tuple[int, int]:
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    found = re.fullmatch(r">=\s*(\d+)\.(\d+)", spec.strip())
    assert found, f"requires-python {spec!r} is not of the form '>=X.Y'"
    return int(found[1]), int(found[2])


def test_requires_python_admits_no_interpreter_without_tomllib():
    # kbench/tasks/suites.py reads the case files with tomllib, new in Python 3.11.
    assert "import tomllib" in (ROOT / "kbench" / "tasks" / "suites.py").read_text()
    assert _minimum_python() >= (3, 11)


def test_this_interpreter_satisfies_requires_python():
    assert sys.version_info[:2] >= _minimum_python()


def test_no_test_module_imports_triton_at_import_time():
    """tests/tasks/block_sparse_attn/test_block_sparse_attn.py runs Triton's interpreter in-process by
    setting TRITON_INTERPRET before it loads the submission; a test module that imports triton while
    pytest collects (before that) broke it ("Cannot call @triton.jit'd outside of the scope of a
    kernel"). So does a test that imports triton in this process while it runs, if pytest's order
    (by path) puts it first: tests/worker/test_loop.py's does, after tests/tasks/."""
    import ast

    offenders = []
    tests = ROOT / "tests"
    for path in sorted(tests.rglob("*.py")):   # every folder of tests/ but the submissions in fixtures/
        if path.relative_to(tests).parts[0] == "fixtures":
            continue
        for node in ast.parse(path.read_text()).body:   # module level only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "triton" or n.startswith("triton.") for n in names):
                offenders.append(f"{path.relative_to(tests)}:{node.lineno}")
    assert offenders == []
