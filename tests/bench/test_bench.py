"""bench/ and the kernels' dev/ folders as a whole: every script has a row in its README, compiles,
answers --help (or, for a shell script, parses), and uses only kbench's public names."""
import ast
import importlib.util
import os
import py_compile
import re
import subprocess
import sys

import pytest

from tests.helpers import ROOT

BENCH = ROOT / "bench"
# Kernel probes: submissions/<task>/dev/, or bench/<task>/ where the task's contract checks every
# file under a submission folder (block_sparse_attn: bench/block_sparse_attn/README.md)
DEV = sorted(p for p in (ROOT / "submissions").glob("*/dev") if p.is_dir())
PARKED = sorted(p for p in BENCH.iterdir() if p.is_dir() and (p / "README.md").is_file())
FOLDERS = [BENCH, *PARKED, *DEV]
SCRIPTS = sorted(p for folder in FOLDERS for p in folder.iterdir() if p.suffix in (".py", ".sh"))


def _listed(readme) -> set[str]:
    """The names in the first column of the README's tables."""
    return {name for cell in re.findall(r"^\| (`.+?`) \|", readme.read_text(), re.MULTILINE)
            for name in re.findall(r"`([\w.]+)`", cell)}


def _rel(path) -> str:
    return str(path.relative_to(ROOT))


def test_the_kernels_with_probes_have_a_folder_of_them():
    assert {p.parent.name for p in DEV} >= {"mla_decode"}
    assert {p.name for p in PARKED} == {"block_sparse_attn"}


@pytest.mark.parametrize("dev", DEV, ids=_rel)
def test_a_dev_folder_leaves_its_submission_loadable(dev):
    """The task's contract loads the bundled submission with its dev/ folder in place (in a process of
    its own: the submission imports Triton, which must not bind this one's mode)."""
    code = ("import sys; from kbench.tasks.task import get_task; t = get_task(sys.argv[1]); "
            "t.contract.load(sys.argv[2]); print('loaded')")
    proc = subprocess.run([sys.executable, "-c", code, dev.parent.name, str(dev.parent)], cwd=ROOT, text=True,
                          capture_output=True, timeout=120, check=False,
                          env=dict(os.environ, TRITON_INTERPRET="1", PYTHONDONTWRITEBYTECODE="1"))
    assert proc.stdout.strip().endswith("loaded"), proc.stderr[-1500:]


@pytest.mark.parametrize("parked", PARKED, ids=_rel)
def test_a_parked_folder_would_break_its_submission(parked, tmp_path):
    """Why bench/<task>/ and not submissions/<task>/dev/: the task's contract checks every file under
    a submission folder (the original challenge's policy), and these scripts import kbench."""
    import shutil

    from kbench.tasks.task import get_task

    folder = tmp_path / parked.name
    shutil.copytree(ROOT / "submissions" / parked.name, folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(parked, folder / "dev", ignore=shutil.ignore_patterns("__pycache__"))
    guard = get_task(parked.name).contract.guard_mod
    files = guard.check_files(str(folder))
    with pytest.raises(guard.PolicyError, match="import 'kbench[.a-z]*' not allowed"):
        guard.check_imports(files, guard.local_modules(str(folder)))
    shutil.rmtree(folder / "dev")
    guard.check_imports(guard.check_files(str(folder)), guard.local_modules(str(folder)))


@pytest.mark.parametrize("folder", FOLDERS, ids=_rel)
def test_every_script_has_a_row_in_its_readme_and_every_row_a_script(folder):
    scripts = {p.name for p in folder.iterdir() if p.suffix in (".py", ".sh")}
    listed = _listed(folder / "README.md")
    assert scripts - listed == set(), "scripts without a row"
    assert {n for n in listed if n.endswith((".py", ".sh"))} - scripts == set(), "rows without a script"


def test_the_bench_readme_says_where_the_rest_went():
    text = (BENCH / "README.md").read_text()
    assert "submissions/<task>/dev/" in text
    assert "1e2a4e4" in text
    assert "python bench/results.py runs/*.json > docs/results.md" in text
    assert "benchmarks" not in text   # docs/benchmarks*.md are gone


def test_every_python_script_compiles(tmp_path):
    for path in SCRIPTS:
        if path.suffix == ".py":
            py_compile.compile(str(path), cfile=str(tmp_path / f"{path.parent.name}-{path.stem}.pyc"), doraise=True)


def test_every_shell_script_parses():
    for path in SCRIPTS:
        if path.suffix == ".sh":
            proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
            assert proc.returncode == 0, f"{_rel(path)}: {proc.stderr}"


def _runnable(path) -> bool:
    """A script with a command line (the helpers beside them are imported, never run)."""
    return path.suffix == ".py" and 'if __name__ == "__main__":' in path.read_text()


def test_every_python_tool_answers_help_from_the_repository_root():
    """Each tool's --help, all at once (each imports torch and kbench: ~2 s apiece)."""
    tools = [p for p in SCRIPTS if _runnable(p)]
    assert len(tools) >= 15
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    procs = {p: subprocess.Popen([sys.executable, _rel(p), "--help"], cwd=ROOT, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for p in tools}
    failed = []
    for path, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        if proc.returncode != 0 or "usage:" not in out:
            failed.append(f"{_rel(path)}: exit {proc.returncode}: {(out + err).strip()[-300:]}")
    assert failed == []


def _private_uses(path) -> list[str]:
    """kbench's private names a script uses: imported from kbench (``from kbench.x import _y``, a
    module ``kbench._x``), reached through a name imported from kbench (``CallTimer._flush_l2``,
    ``workers._spawn``), or a private module name kbench gives task code (``"_kbench_..."``)."""
    tree = ast.parse(path.read_text(), str(path))
    found, from_kbench = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kbench":
            parts = node.module.split(".")
            found += [f"{node.lineno}: from {node.module}" for part in parts if part.startswith("_")]
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.lineno}: {alias.name} from {node.module}")
                from_kbench.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "kbench":
                    found += [f"{node.lineno}: import {alias.name}" for part in parts if part.startswith("_")]
                    from_kbench.add(alias.asname or parts[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("_kbench_"):
            found.append(f"{node.lineno}: {node.value!r}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, base = [node.attr], node.value
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in from_kbench:
                found += [f"{node.lineno}: {base.id}...{a}" for a in chain
                          if a.startswith("_") and not (a.startswith("__") and a.endswith("__"))]
    return sorted(set(found))


def test_every_kbench_name_a_script_uses_is_there():
    """Also the names imported inside a function (after --help has answered), and the attributes read
    off what was imported (``workers.make_and_exit``): kbench moves under the scripts."""
    missing = []
    for path in SCRIPTS:
        if path.suffix != ".py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        bound = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "kbench":
                module = importlib.import_module(node.module)
                for a in node.names:
                    if hasattr(module, a.name):
                        bound[a.asname or a.name] = getattr(module, a.name)
                    elif importlib.util.find_spec(f"{node.module}.{a.name}") is not None:
                        bound[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
                    else:
                        missing.append(f"{_rel(path)}:{node.lineno}: {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                missing += [f"{_rel(path)}:{node.lineno}: {a.name}" for a in node.names
                            if a.name.split(".")[0] == "kbench" and importlib.util.find_spec(a.name) is None]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                    and isinstance(node.ctx, ast.Load) and not hasattr(bound[node.value.id], node.attr)):
                missing.append(f"{_rel(path)}:{node.lineno}: {node.value.id}.{node.attr}")
    assert missing == []


def test_no_script_uses_a_private_kbench_name():
    """The tools measure through kbench's public names only: a private one may change under them."""
    used = {_rel(p): _private_uses(p) for p in SCRIPTS if p.suffix == ".py"}
    assert {k: v for k, v in used.items() if v} == {}


def test_the_private_name_check_sees_each_way_in(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("from kbench.run.runner import Runner, _Series\nfrom kbench.worker.timer import CallTimer\n"
                     "import kbench._reference\nimport sys\nm = sys.modules['_kbench_mla_decode_mla_model']\n"
                     "CallTimer._flush_l2\nCallTimer.timed\nRunner.__init__\n")
    found = " ".join(_private_uses(probe))
    for name in ("_Series", "kbench._reference", "_kbench_mla_decode_mla_model", "_flush_l2"):
        assert name in found
    assert "__init__" not in found and ".timed" not in found
