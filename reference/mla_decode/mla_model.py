"""The original challenge's types, input recipe and eager math (GPU MODE amd-mla-decode).

Neutral module: both sides load it. The worker gets the input types (Config, KVCache)
and the eager baseline from it; the parent gets the generator and, through task.py, the
ground truth. It holds no expected outputs, only code.

What the original graded against is its published reference.py (heads split with
``permute``; the keys' RoPE applied at positions 0..kv_len-1; ``wo`` scaled by
1/sqrt(n_heads * v_head_dim)). See `git show 1e2a4e4:docs/benchmarks-mla_decode.md`, "Which reference".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

DEFAULTS = dict(n_heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                v_head_dim=128, max_seq_len=8192)


class RoPE(nn.Module):
    """Rotate-half RoPE exactly as the original: theta and the angles in bfloat16."""

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        theta = 10000 ** (-torch.arange(0, d_model // 2, dtype=torch.bfloat16) / (d_model // 2))
        self.register_buffer("theta", theta)

    @staticmethod
    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        seq_len = x.size(-2)  # positions run along dim -2
        assert x.size(-1) == self.d_model
        pos = torch.arange(start_pos, start_pos + seq_len, device=x.device)
        angle = torch.einsum("s,d->sd", pos, self.theta.to(x.device))  # int64 x bf16 -> bf16
        angle = torch.cat([angle, angle], dim=-1)
        cos = angle.cos().to(torch.bfloat16)
        sin = angle.sin().to(torch.bfloat16)
        return x * cos + self.rotate_half(x) * sin


class KVCache(nn.Module):
    """The original's latent KV cache: ``data`` (bs, max_seq_len, kv_lora_rank + rope) and ``seq_len``."""

    def __init__(self, kv_cache_shape: tuple, **kwargs) -> None:
        super().__init__(**kwargs)
        self.register_buffer("data", torch.zeros(kv_cache_shape, dtype=torch.bfloat16))
        self.seq_len = 0

    @classmethod
    def wrap(cls, data: torch.Tensor, seq_len: int) -> "KVCache":
        """A cache around an existing buffer (no 1.2 GB allocation), holding ``seq_len`` rows."""
        cache = cls.__new__(cls)
        nn.Module.__init__(cache)
        cache.register_buffer("data", data)
        cache.seq_len = int(seq_len)
        return cache

    def zero(self) -> None:
        self.data.zero_()

    def get_data(self) -> torch.Tensor:
        return self.data

    def forward(self, c_kv: torch.Tensor):
        assert self.seq_len + c_kv.size(1) <= self.data.size(1), "KV Cache Exceeded"
        self.data = self.data.to(c_kv.dtype)
        self.data[:, self.seq_len:self.seq_len + c_kv.size(1), :] = c_kv
        self.seq_len += c_kv.size(1)
        return self.data[:, :self.seq_len], self.seq_len


@dataclass
class Config:
    batch_size: int
    dim: int
    n_heads: int
    q_lora_rank: int
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    seq_len: int
    max_seq_len: int
    kv_cache_shape: tuple
    Q_proj_down_weight: torch.Tensor
    Q_proj_up_weight: torch.Tensor
    KV_proj_down_weight: torch.Tensor
    KV_proj_up_weight: torch.Tensor
    wo_weight: torch.Tensor


WEIGHTS = ("Q_proj_down_weight", "KV_proj_down_weight", "Q_proj_up_weight",
           "KV_proj_up_weight", "wo_weight")

# A case's inputs travel between kbench's processes as one flat dict of tensors and ints:
# the Config's ints and weights, x, the cache buffer under KV_KEY and its length ``prefill``.
CONFIG_INTS = ("batch_size", "dim", "n_heads", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
               "qk_rope_head_dim", "v_head_dim", "max_seq_len")
KV_KEY = "kv_data"


def flatten(config: Config, x: torch.Tensor, kv_cache: KVCache) -> dict:
    """The flat inputs of one call: what ``generate_input`` returns, as tensors and ints."""
    inputs = {k: getattr(config, k) for k in CONFIG_INTS}
    inputs.update({w: getattr(config, w) for w in WEIGHTS})
    inputs.update(x=x, prefill=int(kv_cache.seq_len))
    inputs[KV_KEY] = kv_cache.data
    return inputs


def config_of(inputs: dict) -> Config:
    """The Config of one decode step (seq_len 1) from the flat inputs."""
    return Config(seq_len=1, kv_cache_shape=tuple(inputs[KV_KEY].shape),
                  **{k: int(inputs[k]) for k in CONFIG_INTS},
                  **{w: inputs[w] for w in WEIGHTS})


def generate_input(batchsize: int, dim: int, dq: int, prefill: int, seed: int, *,
                   n_heads: int = 128, kv_lora_rank: int = 512, qk_nope_head_dim: int = 128,
                   qk_rope_head_dim: int = 64, v_head_dim: int = 128, max_seq_len: int = 8192,
                   device: str = "cuda"):
    """The original's recipe: one generator, bf16 draws in this order, these scalings.

    With the default head sizes on CUDA it reproduces the original bit for bit
    (the same calls in the same order on a CUDA generator seeded with ``seed``).
    """
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    bf16 = torch.bfloat16

    def randn(*shape):
        return torch.randn(shape, dtype=bf16, generator=gen, device=device)

    rope, nope = qk_rope_head_dim, qk_nope_head_dim
    q_down = randn(dq, dim) / math.sqrt(dim)
    kv_down = randn(kv_lora_rank + rope, dim) / math.sqrt(dim)
    q_up = randn((nope + rope) * n_heads, dq) / math.sqrt(dq)
    kv_up = randn((nope + v_head_dim) * n_heads, kv_lora_rank) / math.sqrt(kv_lora_rank)
    wo = randn(dim, n_heads * v_head_dim) / math.sqrt(n_heads * v_head_dim)
    config = Config(
        batch_size=batchsize, dim=dim, n_heads=n_heads, q_lora_rank=dq,
        kv_lora_rank=kv_lora_rank, qk_nope_head_dim=nope, qk_rope_head_dim=rope,
        v_head_dim=v_head_dim, seq_len=1, max_seq_len=max_seq_len,
        kv_cache_shape=(batchsize, max_seq_len, kv_lora_rank + rope),
        Q_proj_down_weight=q_down, Q_proj_up_weight=q_up, KV_proj_down_weight=kv_down,
        KV_proj_up_weight=kv_up, wo_weight=wo,
    )
    x = randn(batchsize, 1, dim)
    kv_cache = KVCache.wrap(torch.zeros(config.kv_cache_shape, dtype=bf16, device=device), 0)
    kv_cache(randn(batchsize, prefill, kv_lora_rank + rope))
    return config, x, kv_cache


def _attend(config: Config, q_nope, q_rope, kv: torch.Tensor, rope: RoPE) -> torch.Tensor:
    """Attention of one batch slice: q (b, 1, H, *) against its cache rows kv (b, L, 576).

    Returns the heads' outputs (b, 1, H * v_head_dim), before ``wo``.
    """
    b, kv_len, _ = kv.shape
    H, nope, vdim = config.n_heads, config.qk_nope_head_dim, config.v_head_dim
    kv_nope, k_rope = torch.split(kv, [config.kv_lora_rank, config.qk_rope_head_dim], dim=-1)
    kv_nope = F.linear(kv_nope, config.KV_proj_up_weight).view(b, kv_len, H, nope + vdim)
    k_nope, v = torch.split(kv_nope, [nope, vdim], dim=-1)
    q = torch.cat([q_nope.permute(0, 2, 1, 3), q_rope], dim=-1)          # (b, H, 1, 192)
    k_rope = rope(k_rope[:, None, :, :]).expand(-1, H, -1, -1)          # positions 0..L-1
    k = torch.cat([k_nope.permute(0, 2, 1, 3), k_rope], dim=-1)          # (b, H, L, 192)
    v = v.permute(0, 2, 1, 3)
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(nope + config.qk_rope_head_dim)
    attn = F.softmax(scores, dim=-1).to(v.dtype)   # bf16 as the original; float64 in the suites' health test
    return torch.matmul(attn, v).view(b, 1, -1)


def mla_forward(config: Config, x: torch.Tensor, kv_cache: KVCache, *,
                batch_chunk: int | None = None):
    """The original's forward, with the per-sequence part run ``batch_chunk`` sequences at a time.

    Everything that mixes the batch (the projections) runs on the whole batch as in the
    original; only the K/V up-projection and attention, which are per sequence, are
    chunked, so the result does not depend on ``batch_chunk`` (see the tests).
    Writes the new row into ``kv_cache`` like the original. Returns (y, kv_cache.data).
    """
    bs, seq_len, _ = x.shape
    H, nope, rope_dim = config.n_heads, config.qk_nope_head_dim, config.qk_rope_head_dim
    q_lora = F.linear(x, config.Q_proj_down_weight)
    kv_lora = F.linear(x, config.KV_proj_down_weight)
    kv, kv_len = kv_cache(kv_lora)
    q = F.linear(q_lora, config.Q_proj_up_weight).view(bs, seq_len, H, nope + rope_dim)
    q_nope, q_rope = torch.split(q, [nope, rope_dim], dim=-1)
    rope = RoPE(rope_dim).to(x.device)
    q_rope = rope(q_rope.permute(0, 2, 1, 3), start_pos=kv_len - 1)      # (bs, H, 1, 64)
    step = bs if batch_chunk is None else max(1, int(batch_chunk))
    heads_out = torch.cat([
        _attend(config, q_nope[b0:b0 + step], q_rope[b0:b0 + step], kv[b0:b0 + step], rope)
        for b0 in range(0, bs, step)])
    y = F.linear(heads_out, config.wo_weight)
    return y, kv_cache.get_data()


def batch_chunk_for(config: Config, kv_len: int, budget_bytes: float = 6e9) -> int:
    """Sequences per chunk so the per-head K/V of a chunk stay under ``budget_bytes``."""
    H = config.n_heads
    per_seq = kv_len * H * 2 * (2 * (config.qk_nope_head_dim + config.v_head_dim)
                                + config.qk_nope_head_dim + config.qk_rope_head_dim
                                + config.v_head_dim)
    return max(1, int(budget_bytes // max(per_seq, 1)))
