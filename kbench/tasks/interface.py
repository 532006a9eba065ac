"""The task interface: the names kbench reads from a task's modules, and loading a submission.

``reference/<task>/task.py`` (``TASK``) is the parent side: inputs, ground truth, checker,
baselines, score. ``reference/<task>/contract.py`` (``CONTRACT``) is the worker side: how a
submission is loaded and called. kbench reads an optional name through ``Interface.get``, so
its default lives here and nowhere else. docs/tasks.md lists the same names (a test keeps the
two equal).

``Interface.check`` runs when a task's module is loaded and raises a one-line KbenchError
for a required name that is missing, a name of the wrong kind, a function that cannot take
the arguments kbench passes, a malformed BASELINES entry, or a top-level name close to an
optional name the module lacks (a misspelling kbench would otherwise silently ignore).
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, ModuleType

from kbench.errors import ContractError, KbenchError

DEVICES = ("cpu", "cuda")
BASELINE_KEYS = ("path", "devices", "requires")


@dataclass(frozen=True)
class Name:
    """One name of a task module: how it is written, whether a task must define it, what it is."""

    name: str
    form: str                  # as documented: "generate(case: dict, device: str) -> dict"
    meaning: str
    required: bool = True
    args: int | None = None    # a function: the positional arguments kbench passes; None: a constant
    kind: str = "function"     # a constant: "str", "names" (tuple of str) or "baselines"
    default: object = None     # what kbench uses when an optional name is absent


def _is_names(value) -> bool:
    return isinstance(value, (tuple, list)) and all(isinstance(v, str) for v in value)


_KINDS = {"str": (lambda v: isinstance(v, str), "a str"),
          "names": (_is_names, "a tuple of str"),
          "baselines": (lambda v: isinstance(v, dict), "a dict of name -> {'path': ..., 'devices': ...}"),
          "processes": (lambda v: type(v) is int and 1 <= v <= 8, "an int from 1 to 8")}


def _close(name: str, candidates) -> str | None:
    """The candidate ``name`` most likely misspells (case ignored), if any is close enough."""
    by_lower = {c.lower(): c for c in candidates}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.8)
    return by_lower[match[0]] if match else None


@dataclass(frozen=True)
class Interface:
    file: str                  # "task.py" or "contract.py"
    names: tuple[Name, ...]

    def __getitem__(self, name: str) -> Name:
        for spec in self.names:
            if spec.name == name:
                return spec
        raise KeyError(name)

    def get(self, module: ModuleType, name: str):
        """The module's ``name``, or the interface's default when a task leaves it out."""
        return getattr(module, name, self[name].default)

    def check(self, module: ModuleType, path: Path) -> None:
        """Raise a one-line KbenchError naming the first thing in ``module`` (loaded from
        ``path``) that breaks this interface."""
        path = Path(path)
        unknown = sorted(n for n in top_level_names(path)
                         if not n.startswith("_") and n not in {spec.name for spec in self.names})
        for spec in self.names:
            if not hasattr(module, spec.name):
                if spec.required:
                    typo = _close(spec.name, unknown)
                    hint = f"; is {typo} a misspelling of it?" if typo else ""
                    raise KbenchError(f"{path}: no {spec.name} (required: {spec.form}){hint}")
                continue
            problem = _kind_problem(spec, getattr(module, spec.name), path)
            if problem:
                raise KbenchError(f"{path}: {problem}")
        absent = [spec.name for spec in self.names if not hasattr(module, spec.name)]
        for defined in unknown:
            guess = _close(defined, absent)
            if guess:
                raise KbenchError(f"{path}: {defined} is not a name kbench reads in {self.file}; "
                                  f"did you mean {guess}?")


def same_inputs(inputs: dict) -> dict:
    """``prepare`` of a contract that defines none: the call takes the inputs as they are."""
    return inputs


def _kind_problem(spec: Name, value, path: Path) -> str | None:
    if spec.args is not None:
        if not callable(value):
            return f"{spec.name} must be a function {spec.form}, not {type(value).__name__}"
        try:
            inspect.signature(value).bind(*range(spec.args))
        except TypeError:
            return f"{spec.name} cannot be called with {spec.args} argument(s) as {spec.form}"
        except ValueError:  # no signature to read (a builtin): nothing to check
            pass
        return None
    accepts, what = _KINDS[spec.kind]
    if not accepts(value):
        shown = repr(value) if spec.kind == "processes" else type(value).__name__
        return f"{spec.name} must be {what}, not {shown}"
    return _baselines_problem(value, path) if spec.kind == "baselines" else None


def _baselines_problem(baselines: dict, path: Path) -> str | None:
    for label, entry in baselines.items():
        where = f"BASELINES[{label!r}]"
        if not isinstance(entry, dict):
            return f"{where} must be a dict with 'path' (and 'devices'), not {type(entry).__name__}"
        for key in entry:
            if key not in BASELINE_KEYS:
                guess = _close(str(key), BASELINE_KEYS)
                hint = f"; did you mean {guess!r}?" if guess else f" (known: {', '.join(BASELINE_KEYS)})"
                return f"{where} has an unknown key {key!r}{hint}"
        if not isinstance(entry.get("path"), str):
            return f"{where} needs 'path': a file next to {path.name}"
        if not (path.parent / entry["path"]).is_file():
            return f"{where} names {entry['path']}, which is not a file next to {path.name}"
        devices = entry.get("devices", DEVICES)
        if not _is_names(devices) or not set(devices) <= set(DEVICES):
            return f"{where}: 'devices' must be a tuple of {' and/or '.join(DEVICES)}, not {devices!r}"
        if not _is_names(entry.get("requires", ())):
            return f"{where}: 'requires' must be a tuple of module names, not {entry['requires']!r}"
    return None


TASK = Interface("task.py", (
    Name("DESCRIPTION", "DESCRIPTION: str", "one line for `kbench list`",
         required=False, kind="str", default=""),
    Name("generate", "generate(case: dict, device: str) -> dict",
         "the inputs of one call: tensors and plain values (picklable). `case` holds the case's keys, "
         "`seed` included (kbench passes fresh seeds for timed calls)", args=2),
    Name("reference", "reference(inputs: dict) -> tuple[Tensor, ...]",
         "ground truth, on the inputs' device, in the order `contract.call` returns the outputs", args=1),
    Name("check", "check(outputs: tuple, expected: tuple, inputs: dict) -> CheckResult",
         "the verdict of one call (build it with `kbench.tasks.check.compare` and `combine`)", args=3),
    Name("BASELINES", "BASELINES: dict[str, dict]",
         "name -> `{\"path\": file next to task.py, loadable by contract.load, \"devices\": (\"cpu\", "
         "\"cuda\"), \"requires\": (\"flashinfer\",)}` (`devices` defaults to both, `requires`: modules "
         "it imports beyond torch); best first: the default baseline is the first that runs on the device "
         "with its modules installed (`--baseline NAME` picks another)", required=False, kind="baselines",
         default=MappingProxyType({})),
    Name("MUTABLE_INPUTS", "MUTABLE_INPUTS: tuple[str, ...]",
         "input names the call may change in place (mla_decode's cache); every other input is checked "
         "unchanged after every call", required=False, kind="names", default=()),
    Name("GPU_POOL", "GPU_POOL: int",
         "worker processes per target on a GPU when `--pool` is not given (default: `--processes`). "
         "Each process carries an offset of its own (about 1% on the H100) that only more processes "
         "average out: a task whose kernels take a few microseconds sets 8 (docs/measurement.md, "
         "\"Processes\")", required=False, kind="processes", default=None),
    Name("generate_timed", "generate_timed(case: dict, device: str, seed: int) -> dict",
         "a timed call's inputs: the case's own structure (from `case[\"seed\"]`) with fresh values "
         "drawn from `seed` on the device, for tasks whose `generate` is slow on the host "
         "(block_sparse_attn); default: `generate` with the timed call's seed", required=False, args=3),
    Name("generate_host", "generate_host(case: dict) -> dict",
         "`generate(case, device)`'s inputs as host tensors (kbench moves them to the device), for "
         "tasks whose `generate` draws on the host anyway: kbench then draws the next case's while "
         "this one runs (block_sparse_attn's original generator: a second a case)", required=False, args=1),
    Name("roofline", "roofline(case: dict) -> dict",
         "`{\"bytes\": int, \"flops\": int}`: the fewest bytes to move and flops to do in one call; "
         "gives each case its GB/s, TFLOP/s and fraction of the card's limits", required=False, args=1),
    Name("native_score", "native_score(results: list[dict], suite: str) -> NativeScore",
         "the original challenge's own score from kbench's case records, as `kbench.tasks.check.score(...)` "
         "(GPU runs only)", required=False, args=2),
    Name("exact", "exact(inputs: dict) -> tuple[Tensor, ...]",
         "the reference's math in float64, not rounded, for the suites' health check "
         "(`kbench/tasks/suites.py`, `tests/tasks/test_suite_health.py`)", required=False, args=1),
))

CONTRACT = Interface("contract.py", (
    Name("ENTRY_POINTS", "ENTRY_POINTS: tuple[str, ...]",
         "top-level names whose definition in a `.py` file marks a submission for this task (read with "
         "`ast`, never imported)", kind="names"),
    Name("SUBMISSION_FILES", "SUBMISSION_FILES: tuple[str, ...]",
         "file names looked for in a submission folder, in order", kind="names"),
    Name("load", "load(path: Path) -> entry",
         "import the submission file at `path` (the one kbench found with SUBMISSION_FILES) and return "
         "what `call` needs; raise `ContractError` for a broken contract (the case is `invalid`)", args=1),
    Name("call", "call(entry, args) -> tuple[Tensor, ...]",
         "call the submission on the (prepared) inputs and return its outputs in the order of "
         "`task.reference`", args=2),
    Name("prepare", "prepare(inputs: dict) -> args",
         "before each call, outside the timed region: build what `call` takes (objects, reset "
         "state); default: the inputs as they are", required=False, args=1, default=same_inputs),
    Name("setup", "setup(entry, cases: list[dict], device: str) -> None",
         "once per worker, after `load`, before it reports ready, with every case's parameters "
         "(compile everything here); an exception fails the load as `setup failed: ...`",
         required=False, args=3),
    Name("after_run", "after_run(entry) -> None",
         "in each of the submission's loaded workers still running, after the last case; an exception "
         "fails the run (block_sparse_attn: no compile cache changed after setup)", required=False, args=1),
))


# -- loader --------------------------------------------------------------------------------
# Where kbench's data lives, how task code is loaded (by path, never by name), and how a file's
# top-level names are read without running it.

_PACKAGE_DIR = Path(__file__).resolve().parent.parent   # kbench/


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


# -- submission ----------------------------------------------------------------------------
# Loading a submission and checking what it returns: the one way every task's contract does it.
#
# Worker side: a contract's ``load`` finds the file (``find``), imports it (``import_file``) and
# takes its entry point (``entry_point``); its ``call`` passes the entry point's return through
# ``returned``. Each raises ``ContractError`` with one line naming what is wrong, which the
# worker reports as an ``invalid`` case. Whether every output is a real ``torch.Tensor`` is
# checked by the worker itself, with the type it captured before the submission was imported.

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
