"""Load a sibling module of reference/mla_decode by file path, once per process.

Modules here are loaded by path (never as a package named ``reference``); the same
file must give the same module object to every loader so that ``Config`` and
``KVCache`` are one class on the worker side.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sibling(name: str):
    """The module ``reference/mla_decode/<name>.py``, imported once under a private name."""
    key = f"_kbench_mla_decode_{name}"
    module = sys.modules.get(key)
    if module is None:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return module
