"""Where kbench's data lives, how task code is loaded (by path, never by name), and how a file's
top-level names are read without running it."""
from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PACKAGE_DIR = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """``cases`` or ``reference``: inside the installed package, else the checkout's top level."""
    installed = _PACKAGE_DIR / f"_{name}"
    if installed.is_dir():
        return installed
    return _PACKAGE_DIR.parent / name


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """Import one file under a private module name, so it cannot clash with ``reference``/``task``."""
    path = Path(path).resolve()
    name = name or f"_kbench_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_sibling(folder, stem: str) -> ModuleType:
    """``<folder>/<stem>.py``, imported once per process under a private name.

    Task code is loaded by path, never as a package; this lets it split into files and
    still give every importer the same module object (one class, one cache)."""
    path = (Path(folder) / f"{stem}.py").resolve()
    name = f"_kbench_{path.parent.name}_{stem}"
    module = sys.modules.get(name)
    if module is None or Path(getattr(module, "__file__", "") or "").resolve() != path:
        module = load_module(path, name)
    return module


def _top_level(path) -> list[ast.stmt]:
    """A Python file's top-level statements, read with ``ast``: the file is never run. Empty
    for a file that does not parse."""
    try:
        return ast.parse(Path(path).read_text(errors="replace")).body
    except SyntaxError:
        return []


def top_level_names(path) -> set[str]:
    """The names a Python file defines at its top level (functions, classes, assignments).
    Empty for a file that does not parse."""
    names = set()
    for node in _top_level(path):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def top_level_int(path, name: str) -> int | None:
    """The int a Python file assigns to ``name`` at its top level (``NAME = 8``); None where it
    assigns no int literal or does not parse."""
    for node in _top_level(path):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets) \
                and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            return node.value.value
    return None
