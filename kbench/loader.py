"""Where kbench's data lives and how trusted task code is loaded (by path, never by name)."""
from __future__ import annotations

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
