"""Baseline ``reference``: the original's eager PyTorch math (worker side).

The original materialises per-head K and V for the whole context; at bs 128 and
prefill 6144 that is over 100 GB, so this runs it a few sequences at a time (the
same numbers; see tests/test_mla_decode.py).
"""
from __future__ import annotations

from pathlib import Path

import torch

from kbench.tasks.interface import load_sibling

_model = load_sibling(Path(__file__).resolve().parent, "mla_model")


@torch.no_grad()
def custom_kernel(data):
    config, x, kv_cache = data
    chunk = _model.batch_chunk_for(config, kv_cache.seq_len + 1)
    return _model.mla_forward(config, x, kv_cache, batch_chunk=chunk)
