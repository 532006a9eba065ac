"""Loading a submission and checking what it returns: the one way every task's contract does it.

Worker side: a contract's ``load`` finds the file (``find``), imports it (``import_file``) and
takes its entry point (``entry_point``); its ``call`` passes the entry point's return through
``returned``. Each raises ``ContractError`` with one line naming what is wrong, which the
worker reports as an ``invalid`` case. Whether every output is a real ``torch.Tensor`` is
checked by the worker itself, with the type it captured before the submission was imported.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import ModuleType

from .errors import ContractError
from .loader import load_module


def find(path, files) -> Path:
    """``path`` when it is a file, else the first of ``files`` (names, in order) inside it."""
    path = Path(path)
    if path.is_file():
        return path
    for name in files:
        if (path / name).is_file():
            return path / name
    raise ContractError(f"{path}: no {' or '.join(files)}")


def _first_on_path(folders: list[str]) -> None:
    """``folders`` at the front of sys.path, in this order, each once."""
    for folder in reversed(folders):
        while folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)


def _forget_stale(names, folders: list[str]) -> None:
    """Drop the modules called ``names`` that an earlier import loaded from somewhere else than
    ``folders``, so the submission's own import of that name finds the task's file."""
    for name in names:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None) if module is not None else None
        if module is not None and str(Path(where or "").resolve().parent) not in folders:
            del sys.modules[name]


def import_file(path, name: str | None = None, compat_dir=None) -> ModuleType:
    """Import the submission file ``path`` under a private module name (``name``, default one
    derived from the path), with its folder first on sys.path: an original submission imports
    the other files of its folder by name.

    ``compat_dir``: a folder of the task's own stand-ins for the modules an original
    submission imports from its harness (GPU MODE's ``task``, ``reference``, ``utils``), put
    on sys.path right after the submission's folder.
    """
    path = Path(path).resolve()
    folders = [str(path.parent)]
    if compat_dir is not None:
        compat = Path(compat_dir).resolve()
        folders.append(str(compat))
        _forget_stale(sorted(p.stem for p in compat.glob("*.py")), folders)
    _first_on_path(folders)
    if name is None:
        name = f"_kbench_submission_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}"
    return load_module(path, name)


def entry_point(module: ModuleType, path, name: str, usage: str):
    """The function ``name`` of the imported submission; ``usage`` shows how it is called."""
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ContractError(f"{Path(path).name} defines no {usage} function")
    return fn


def returned(out, entry: str, names: tuple[str, ...]) -> tuple:
    """The entry point's return value as a tuple of ``len(names)`` outputs, named ``names``
    in the error. A single output may come back bare, as a one-output function returns it."""
    if len(names) == 1 and not isinstance(out, (tuple, list)):
        return (out,)
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        got = type(out).__name__ + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        raise ContractError(f"{entry} must return ({', '.join(names)}), got {got}")
    return tuple(out)
