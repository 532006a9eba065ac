"""The package's shape, as docs/architecture.md draws it: layers, no import circle, small modules."""
import ast
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

KBENCH = ROOT / "kbench"

# Highest first: a module may import from its own layer or any layer below it, never above.
# ``kbench`` itself is the facade: it re-exports the API (its __version__ is read from anywhere).
LAYERS = ["facade", "cli", "api", "scaleout", "run", "stats", "worker", "tasks", "base"]
BASE = {"errors", "interrupts", "protocol"}
# Imported before torch: the command's start, the workers' start, loading a task's files.
TORCH_FREE = ["kbench.cli.main", "kbench.run.workers", "kbench.worker.environment", "kbench.tasks.task",
              "kbench.tasks.interface", "kbench.tasks.suites", "kbench.stats.estimates", "kbench.stats.spread",
              "kbench.stats.compare",
              "kbench.scaleout.gpus", "kbench.errors", "kbench.interrupts", "kbench"]


def modules() -> dict[str, ast.Module]:
    out = {}
    for path in sorted(KBENCH.rglob("*.py")):
        name = ".".join(("kbench",) + path.relative_to(KBENCH).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = ast.parse(path.read_text())
    return out


def imports(tree: ast.Module, known) -> set[str]:
    """The kbench modules a module imports, anywhere in it (a function's lazy import counts)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kbench"):
            assert node.level == 0, "kbench imports itself by absolute names"
            for alias in node.names:
                if node.module == "kbench" and alias.name == "__version__":
                    continue
                found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("kbench")}
    return found


def layer(name: str) -> str:
    parts = name.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return "facade"
    return "base" if parts[1] in BASE else parts[1]


def test_no_import_circle():
    mods = modules()
    graph = {name: imports(tree, mods) - {name} for name, tree in mods.items()}
    state: dict[str, int] = {}
    circles = []

    def visit(node, path):
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert circles == []


def test_imports_run_down_the_layers():
    mods = modules()
    upward = []
    for name, tree in mods.items():
        for target in imports(tree, mods):
            if LAYERS.index(layer(target)) < LAYERS.index(layer(name)):
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_the_modules_that_start_before_torch_do_not_import_it():
    code = "import sys\n" + "".join(f"import {m}\n" for m in TORCH_FREE) + \
        "bad = [m for m in ('torch', 'triton', 'numpy') if m in sys.modules]\nprint(','.join(bad))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def test_every_module_is_small_and_says_what_it_is():
    problems = []
    count = 0
    for path in sorted(KBENCH.rglob("*.py")):
        lines = path.read_text().splitlines()
        rel = path.relative_to(ROOT)
        if path.name == "__init__.py" and path.parent != KBENCH:   # a subpackage's: its docstring only
            doc = ast.get_docstring(ast.parse(path.read_text()))
            if not doc:
                problems.append(f"{rel}: no docstring (a subpackage's says what its modules share)")
            continue
        count += path.name not in ("__init__.py", "__main__.py")
        if len(lines) > 450:
            problems.append(f"{rel}: {len(lines)} lines")
        doc = ast.get_docstring(ast.parse(path.read_text()))
        if path.name != "__main__.py" and not (doc and len(doc.splitlines()[0]) <= 110):
            problems.append(f"{rel}: no one-line docstring")
    assert problems == []
    assert count <= 29   # a few modules a layer, each named by what it is


WORDS = re.compile(r"\bsessions?\b|\bissue \d+|\brulings?\b|\bthe owner\b|\bacc\d+[a-z]?\b", re.IGNORECASE)


@pytest.mark.parametrize("where", ["README.md", "CHANGELOG.md", "docs", "bench", "kbench", "submissions"])
def test_the_product_never_speaks_of_its_making(where):
    """Sessions, issues, rulings and run labels belong in git history and notes, not in the product."""
    root = ROOT / where
    files = [root] if root.is_file() else [p for p in sorted(root.rglob("*")) if p.is_file()
                                             and p.suffix in (".md", ".py", ".sh", ".toml", ".txt")]
    hits = [f"{p.relative_to(ROOT)}:{i}: {m.group(0)}" for p in files
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
            for m in [WORDS.search(line)] if m]
    assert hits == []


# A page and, in quotes, the heading or bold lead of the part cited: docs/measurement.md, "The gate".
CITATION = re.compile(r'((?:docs/[\w-]+|README)\.md),? "([^"\n]+)"')


def test_every_cited_part_of_a_page_is_on_that_page():
    """A page regenerated or rewritten must not leave code and docs pointing at a part it lost."""
    files = [p for where in ("README.md", "docs", "bench", "kbench", "submissions")
             for p in ([ROOT / where] if (ROOT / where).is_file() else sorted((ROOT / where).rglob("*")))
             if p.is_file() and p.suffix in (".md", ".py", ".sh")]
    missing = []
    for path in files:
        for m in CITATION.finditer(path.read_text(errors="replace")):
            page = ROOT / m.group(1)
            lines = page.read_text().lower().splitlines() if page.is_file() else []
            parts = [line for line in lines if line.startswith("#") or line.lstrip("- ").startswith("**")]
            if not any(m.group(2).lower() in part for part in parts):
                missing.append(f"{path.relative_to(ROOT)}: {m.group(1)}, {m.group(2)!r}")
    assert missing == []
