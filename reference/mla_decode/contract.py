"""Worker side of mla_decode: load an original-style submission and call it.

``custom_kernel(data)`` with ``data = (config, x, kv_cache)`` exactly as in GPU MODE's
amd-mla-decode; it returns ``(y, kv_cache_data)``. Never imports task.py.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

from kbench.loader import load_sibling

from kbench.errors import ContractError

ENTRY_POINTS = ("custom_kernel",)
SUBMISSION_FILES = ("submission.py", "solution.py")
COMPAT_DIR = "compat"

_HERE = Path(__file__).resolve().parent
_model = load_sibling(Path(__file__).resolve().parent, "mla_model")

CONFIG_INTS = ("batch_size", "dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
               "qk_rope_head_dim", "v_head_dim", "max_seq_len")
KV_KEY = "kv_data"


COMPAT_NAMES = ("task", "reference", "utils")


def _put_on_path(folder: Path) -> None:
    """sys.path starts with the submission's folder, then COMPAT_DIR; stale ``task``/``reference``/``utils`` go."""
    dirs = (str(_HERE / COMPAT_DIR), str(folder))
    for p in dirs:  # ends with: submission dir, then compat
        if p in sys.path:
            sys.path.remove(p)
        sys.path.insert(0, p)
    for name in COMPAT_NAMES:
        mod = sys.modules.get(name)
        where = str(Path(getattr(mod, "__file__", "") or "").resolve().parent) if mod else None
        if mod is not None and where not in dirs:
            del sys.modules[name]


def load(path: Path):
    """Import the submission file at ``path`` and return its ``custom_kernel``."""
    path = Path(path).resolve()
    if path.is_dir():
        found = [path / f for f in SUBMISSION_FILES if (path / f).is_file()]
        if not found:
            raise ContractError(f"no {' or '.join(SUBMISSION_FILES)} in {path}")
        path = found[0]
    _put_on_path(path.parent)
    name = f"_kbench_submission_{abs(hash(str(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    entry = getattr(module, "custom_kernel", None)
    if not callable(entry):
        raise ContractError(f"{path.name} defines no callable custom_kernel(data)")
    return entry


def prepare(inputs: dict):
    """Build ``(config, x, kv_cache)`` with the cache at seq_len == prefill (outside the timer).

    The row a previous call appended is zeroed again, so every call starts from the
    state the generator made.
    """
    prefill = int(inputs["prefill"])
    kv = inputs[KV_KEY]
    kv[:, prefill].zero_()
    ints = {k: int(inputs[k]) for k in CONFIG_INTS}
    config = _model.Config(
        seq_len=1, kv_cache_shape=tuple(kv.shape),
        **ints, **{w: inputs[w] for w in _model.WEIGHTS})
    return config, inputs["x"], _model.KVCache.wrap(kv, prefill)


def call(entry, args) -> tuple:
    """Call ``custom_kernel(data)``; it must return ``(y, kv_data)``."""
    out = entry(args)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ContractError(f"custom_kernel must return (y, kv_cache_data), got {type(out).__name__}"
                            + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    for name, t in zip(("y", "kv_cache_data"), out):
        if type(t) is not torch.Tensor:
            raise ContractError(f"custom_kernel's {name} is a {type(t).__name__}, expected a torch.Tensor")
    return tuple(out)
