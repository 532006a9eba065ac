"""``reference`` as an original GPU MODE mla-decode submission imports it.

Gives the original's names (RoPE, KVCache, Config, MLA, generate_input, ref_kernel).
Only code lives here: the worker never sees an expected output.
"""
from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from kbench.tasks.interface import load_sibling

_model = load_sibling(Path(__file__).resolve().parent.parent, "mla_model")

RoPE = _model.RoPE
KVCache = _model.KVCache
Config = _model.Config


class MLA(nn.Module):
    """The original's module: five bias-free bf16 linears and the reference forward."""

    def __init__(self, config: Config):
        super().__init__()
        self.config = config

    def forward(self, x: torch.Tensor, kv_cache: KVCache):
        return _model.mla_forward(self.config, x, kv_cache,
                                  batch_chunk=_model.batch_chunk_for(self.config, kv_cache.seq_len + 1))


def generate_input(batchsize, dim, dq, prefill, seed, **kwargs):
    return _model.generate_input(batchsize, dim, dq, prefill, seed, **kwargs)


def ref_kernel(data):
    config, x, kv_cache = data
    return MLA(config)(x, kv_cache)


def check_implementation(data, output):
    raise RuntimeError("kbench checks outputs in its own process; check_implementation is not available")
