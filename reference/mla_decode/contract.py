"""Worker side of mla_decode: load an original-style submission and call it.

``custom_kernel(data)`` with ``data = (config, x, kv_cache)`` exactly as in GPU MODE's
amd-mla-decode; it returns ``(y, kv_cache_data)``. Never imports task.py.
"""
from __future__ import annotations

from pathlib import Path

from kbench.tasks import interface
from kbench.tasks.interface import load_sibling

ENTRY_POINTS = ("custom_kernel",)
SUBMISSION_FILES = ("submission.py", "solution.py")
COMPAT_DIR = Path(__file__).resolve().parent / "compat"   # task, reference, utils as GPU MODE has them

_model = load_sibling(Path(__file__).resolve().parent, "mla_model")


def load(path: Path):
    """Import the submission (a file, or a folder holding one) and return its ``custom_kernel``."""
    path = interface.find(path, SUBMISSION_FILES)
    module = interface.import_file(path, compat_dir=COMPAT_DIR)
    return interface.entry_point(module, path, "custom_kernel", "custom_kernel(data)")


def prepare(inputs: dict):
    """Build ``(config, x, kv_cache)`` with the cache at seq_len == prefill (outside the timer).

    The row a previous call appended is zeroed again, so every call starts from the
    state the generator made.
    """
    prefill = int(inputs["prefill"])
    kv = inputs[_model.KV_KEY]
    kv[:, prefill].zero_()
    return _model.config_of(inputs), inputs["x"], _model.KVCache.wrap(kv, prefill)


def call(entry, args) -> tuple:
    """Call ``custom_kernel(data)``; it must return ``(y, kv_cache_data)``."""
    return interface.returned(entry(args), "custom_kernel", ("y", "kv_cache_data"))
