"""The original's submission policy, worker side: file limits, the import allowlist (static
and at run time) and the compile-cache stability check.

The runtime import guard wraps ``builtins.__import__`` and ``importlib.import_module``.
Unlike the original's (which called ``pathlib.Path`` inside the hook and, on Python 3.12,
recursed through ``import ntpath`` until RecursionError), this one calls nothing that can
import: plain string operations on paths computed before the hook is installed, and a
per-thread re-entrancy flag so that any import started inside the check goes straight
to the real import.
"""
from __future__ import annotations

import ast
import builtins
import importlib
import os
import shutil
import sys
import tempfile
import threading

ALLOWED_THIRD_PARTY = frozenset({"torch", "triton", "numpy"})
MAX_FILES = 128
MAX_UNPACKED_BYTES = 20 * 1024 * 1024
ALLOWED_SUFFIXES = frozenset({".py", ".json", ".toml", ".txt", ".md"})
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(sys.builtin_module_names)


class PolicyError(Exception):
    """A submission broke the challenge's rules (the contract turns it into ContractError)."""


# -- files ---------------------------------------------------------------------------------
def submission_files(root: str) -> list[str]:
    out = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for d in dirs:
            if os.path.islink(os.path.join(folder, d)):
                raise PolicyError(f"symlinks are not allowed: {os.path.relpath(os.path.join(folder, d), root)}")
        for name in files:
            if name == ".DS_Store":
                continue
            out.append(os.path.join(folder, name))
    return sorted(out)


def check_files(root: str) -> list[str]:
    """At most 128 files, 20 MB in all, suffixes .py .json .toml .txt .md, no symlinks."""
    files = submission_files(root)
    if len(files) > MAX_FILES:
        raise PolicyError(f"too many files: {len(files)} > {MAX_FILES}")
    total = 0
    for path in files:
        rel = os.path.relpath(path, root)
        if os.path.islink(path):
            raise PolicyError(f"symlinks are not allowed: {rel}")
        if os.path.splitext(path)[1] not in ALLOWED_SUFFIXES:
            raise PolicyError(f"file type not allowed: {rel} (allowed: {', '.join(sorted(ALLOWED_SUFFIXES))})")
        total += os.path.getsize(path)
        if total > MAX_UNPACKED_BYTES:
            raise PolicyError(f"submission larger than {MAX_UNPACKED_BYTES} bytes")
    return files


def local_modules(root: str) -> frozenset:
    names = {"submission"}
    for name in os.listdir(root):
        full = os.path.join(root, name)
        if name.startswith("."):
            continue
        if name.endswith(".py") and os.path.isfile(full):
            names.add(name[:-3])
        elif os.path.isfile(os.path.join(full, "__init__.py")):
            names.add(name)
    return frozenset(names)


def allowed(module: str, local: frozenset) -> bool:
    top = module.split(".", 1)[0]
    return top in local or top in ALLOWED_THIRD_PARTY or top in _STDLIB


def check_imports(files: list[str], local: frozenset) -> None:
    """Every absolute ``import x`` / ``from x import`` in the submission's .py files."""
    for path in files:
        if not path.endswith(".py"):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            try:
                tree = ast.parse(fh.read(), filename=path)
            except SyntaxError as exc:
                raise PolicyError(f"{os.path.basename(path)}:{exc.lineno}: syntax error") from None
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if not allowed(name, local):
                    raise PolicyError(f"import {name!r} not allowed ({os.path.basename(path)}:{node.lineno}); "
                                      "allowed: torch, triton, numpy, the standard library, the submission's own files")


# -- runtime import guard ------------------------------------------------------------------
class ImportGuard:
    """Refuses, at run time, imports made BY the submission's own files of anything outside
    the allowlist. Imports made by torch/triton/the standard library pass untouched."""

    def __init__(self, root: str, local: frozenset):
        self.roots = tuple({os.path.realpath(root) + os.sep, os.path.abspath(root) + os.sep})
        self.local = local
        self._state = threading.local()
        self._orig_import = None
        self._orig_import_module = None

    def _from_submission(self, globals_) -> bool:
        if not globals_:
            return False
        filename = globals_.get("__file__")
        if not isinstance(filename, str):
            return False
        return filename.startswith(self.roots)

    def _check(self, name: str, globals_) -> None:
        state = self._state
        if getattr(state, "busy", False):
            return
        state.busy = True
        try:
            if self._from_submission(globals_) and not allowed(name, self.local):
                raise ImportError(f"import {name!r} is not allowed in a submission (allowed: torch, "
                                  "triton, numpy, the standard library, the submission's own files)")
        finally:
            state.busy = False

    def install(self) -> None:
        if self._orig_import is not None:
            return
        orig_import, orig_import_module = builtins.__import__, importlib.import_module
        self._orig_import, self._orig_import_module = orig_import, orig_import_module
        guard = self

        def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level == 0:
                guard._check(name, globals if globals is not None else sys._getframe(1).f_globals)
            return orig_import(name, globals, locals, fromlist, level)

        def guarded_import_module(name, package=None):
            if not name.startswith("."):
                guard._check(name, sys._getframe(1).f_globals)
            return orig_import_module(name, package)

        builtins.__import__ = guarded_import
        importlib.import_module = guarded_import_module

    def remove(self) -> None:
        if self._orig_import is None:
            return
        builtins.__import__ = self._orig_import
        importlib.import_module = self._orig_import_module
        self._orig_import = self._orig_import_module = None


# -- compile caches ------------------------------------------------------------------------
class CacheMonitor:
    """Points Triton/Inductor/CUDA/XDG caches at a private folder before the submission is
    imported; ``freeze()`` after setup, ``changes()`` later lists what appeared or changed."""

    ENV = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME")

    def __init__(self):
        self.root = None   # made by install(); a monitor never installed watches nothing
        self.saved = {}
        self.baseline = None

    def install(self) -> None:
        self.root = tempfile.mkdtemp(prefix="kbench-bsa-cache-")
        for key, sub in zip(self.ENV, ("triton", "torchinductor", "cuda", "xdg")):
            path = os.path.join(self.root, sub)
            os.makedirs(path, exist_ok=True)
            self.saved[key] = os.environ.get(key)
            os.environ[key] = path
        self.saved["TORCHINDUCTOR_COMPILE_THREADS"] = os.environ.get("TORCHINDUCTOR_COMPILE_THREADS")
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"

    def remove(self) -> None:
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)

    def snapshot(self) -> dict:
        files = {}
        if self.root is None:
            return files
        for folder, _, names in os.walk(self.root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                files[os.path.relpath(path, self.root)] = (st.st_size, st.st_mtime_ns)
        return files

    def freeze(self) -> None:
        self.baseline = self.snapshot()

    def changes(self) -> list[str]:
        if self.baseline is None:
            return []
        now = self.snapshot()
        return sorted(k for k in set(now) | set(self.baseline) if now.get(k) != self.baseline.get(k))
