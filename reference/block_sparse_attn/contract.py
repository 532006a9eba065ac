"""How to load and call an attention-kernel-challenge submission. WORKER SIDE.

The original's contract, unchanged: ``submission.py`` defines
``block_sparse_attn_fwd(q, k, v, row_ptr, col_idx, seq_lens) -> (o, lse)`` and
``VARIANT_MANIFEST`` (exactly one variant must match each case, else the run fails), and
optionally ``setup()``, ``setup(suite_specs, device)`` or ``setup(suite_specs, device,
variants)``, called once with canonical descriptors (one per shape key, never the real
cases). Setup plus one warm-up call per descriptor must finish in 30 s, and no compile
cache may change afterwards (checked by ``after_run``). Imports are limited to torch,
triton, numpy, the standard library and the submission's own files; at most 128 files,
suffixes .py .json .toml .txt .md, no symlinks.
"""
from __future__ import annotations

import hashlib
import inspect
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import ContractError
from kbench.tasks import interface
from kbench.tasks.interface import load_sibling

ENTRY_POINTS = ("block_sparse_attn_fwd", "VARIANT_MANIFEST")
SUBMISSION_FILES = ("submission.py",)
SETUP_BUDGET_S = 30.0
_HERE = Path(__file__).resolve().parent

spec_mod = load_sibling(_HERE, "spec")
gen_mod = load_sibling(_HERE, "generate")
guard_mod = load_sibling(_HERE, "guard")


@dataclass
class Entry:
    fn: object
    setup_fn: object
    variants: tuple
    root: Path
    trusted: bool
    cache: object
    import_guard: object = None
    setup_s: float | None = None
    warmed: set = field(default_factory=set)


def load(path: Path) -> Entry:
    """Check the files and imports, point the compile caches at a private folder, import.
    A load that fails undoes what it installed (cache folder and env vars, import hook)."""
    undo = []
    try:
        return _load(path, undo)
    except BaseException:
        for step in reversed(undo):
            step()
        raise


def _load(path: Path, undo: list) -> Entry:
    path = interface.find(path, SUBMISSION_FILES).resolve()
    root = path.parent
    trusted = root == _HERE  # kbench's own baselines live next to this file
    local = guard_mod.local_modules(str(root))
    if not trusted:
        try:
            files = guard_mod.check_files(str(root))
            guard_mod.check_imports(files, local)
        except guard_mod.PolicyError as exc:
            raise ContractError(str(exc)) from None
    cache = guard_mod.CacheMonitor()
    if not trusted:
        # kbench's own baselines use the shared caches: compiling FlexAttention from scratch,
        # single-threaded, in a fresh folder cost about 20 s of every run on the H100 host.
        cache.install()
        undo.append(cache.remove)
    import_guard = None
    if not trusted:
        import_guard = guard_mod.ImportGuard(str(root), local)
        import_guard.install()
        undo.append(import_guard.remove)
    name = f"contest_submission_{hashlib.sha256(str(root).encode()).hexdigest()[:16]}"
    module = interface.import_file(path, name)
    fn = interface.entry_point(module, path, "block_sparse_attn_fwd",
                                "block_sparse_attn_fwd(q, k, v, row_ptr, col_idx, seq_lens)")
    setup_fn = getattr(module, "setup", None)
    if setup_fn is not None:
        if not callable(setup_fn):
            raise ContractError("setup, if defined, must be callable")
        n = len(inspect.signature(setup_fn).parameters)
        if n not in (0, 2, 3):
            raise ContractError("setup() must take no arguments, (suite_specs, device) or "
                                "(suite_specs, device, variants)")
    try:
        variants = spec_mod.parse_manifest(getattr(module, "VARIANT_MANIFEST", None))
    except (TypeError, ValueError) as exc:
        raise ContractError(str(exc)) from None
    return Entry(fn, setup_fn, variants, root, trusted, cache, import_guard)


def unload(entry: Entry) -> None:
    """Undo load's process-wide changes (import hook, cache env vars): for tests."""
    if entry.import_guard is not None:
        entry.import_guard.remove()
    entry.cache.remove()


def _sync(device: str) -> None:
    if str(device).startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def setup(entry: Entry, cases: list, device: str) -> None:
    """Match variants, run the submission's setup on canonical descriptors, warm each up once."""
    try:
        specs = [spec_mod.spec_from_case(c) for c in cases]
    except (TypeError, ValueError) as exc:
        raise ContractError(f"bad case: {exc}") from None
    for spec in specs:
        try:
            spec_mod.match_variant(spec, entry.variants)
        except ValueError as exc:
            raise ContractError(str(exc)) from None
    descriptors = spec_mod.canonical_descriptors(specs)
    start = time.perf_counter()
    if entry.setup_fn is not None:
        n = len(inspect.signature(entry.setup_fn).parameters)
        args = {0: (), 2: (descriptors, device), 3: (descriptors, device, entry.variants)}[n]
        entry.setup_fn(*args)
    for desc in descriptors:  # warm-up: the values do not matter, so they are drawn on the device
        inputs = gen_mod.materialize(desc, device, values_on_device=True)
        call(entry, inputs)
        _sync(device)
        del inputs
    entry.setup_s = time.perf_counter() - start
    # kbench's own baselines (trusted) are exempt: compiled FlexAttention alone can take longer.
    # So is Triton's interpreter on CPU: it measures nothing the budget is about.
    interpreted = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    if entry.setup_s > SETUP_BUDGET_S and not entry.trusted and not interpreted:
        raise ContractError(f"setup plus warm-up took {entry.setup_s:.1f} s > {SETUP_BUDGET_S:.0f} s")
    entry.cache.freeze()


def call(entry: Entry, args: dict):
    out = entry.fn(args["q"], args["k"], args["v"], args["row_ptr"], args["col_idx"], args["seq_lens"])
    return interface.returned(out, "block_sparse_attn_fwd", ("o", "lse"))


def after_run(entry: Entry) -> None:
    """Fail the run when a compile cache changed after setup (JIT during timing)."""
    changed = entry.cache.changes()
    if changed:
        raise ContractError(f"compile cache changed after setup ({len(changed)} files, e.g. {changed[0]}): "
                            "compile every kernel in setup()")
