"""Inputs of one call, bit-identical to the original's ``materialize_case`` for the same seed.

Worker side (no ground truth): the contract uses it for the canonical warm-up cases.
The numpy and torch generator calls are replayed in the original's order:
seq_lens from default_rng(seed ^ 0xABCDEF); the CSR from default_rng(seed) (one head seed
per (b, h), then a per-head generator for the retrieval picks); q, k, v from a CPU
torch.Generator seeded with ``seed``, three float32 randn draws cast to bfloat16.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from kbench.tasks.interface import load_sibling

spec_mod = load_sibling(Path(__file__).resolve().parent, "spec")
BLOCK_SIZE, HEAD_DIM = spec_mod.BLOCK_SIZE, spec_mod.HEAD_DIM


def ceil_div(value: int, divisor: int) -> int:
    return (value + divisor - 1) // divisor


def sample_seq_lens(spec) -> np.ndarray:
    """(B,) int32: all t_max when the minimum reaches it, else uniform in [min_len, t_max]."""
    min_len = max(BLOCK_SIZE, int(spec.t_max * spec.seq_len_min_ratio))
    rng = np.random.default_rng(spec.seed ^ 0xABCDEF)
    if min_len >= spec.t_max:
        return np.full((spec.batch_size,), spec.t_max, dtype=np.int32)
    return rng.integers(min_len, spec.t_max + 1, size=spec.batch_size, dtype=np.int32)


def window(q_block: int, window_blocks: int) -> range:
    return range(max(0, q_block - window_blocks + 1), q_block + 1)


def retrieval_picks(q_block: int, retrieval_blocks: int, window_blocks: int, local_bias: float,
                    rng: np.random.Generator) -> list[int]:
    """Extra key blocks of a retrieval row: local pool [qb - 4w, qb) first with probability
    ``local_bias`` (a random() is drawn only when both pools are non-empty), else the far pool."""
    if retrieval_blocks <= 0 or q_block <= 0:
        return []
    in_window = set(window(q_block, window_blocks))
    local_start = max(0, q_block - 4 * window_blocks)
    local = [b for b in range(local_start, q_block) if b not in in_window]
    far = [b for b in range(0, local_start) if b not in in_window]
    total = len(local) + len(far)
    picked: set[int] = set()
    while len(picked) < retrieval_blocks and len(picked) < total:
        use_local = bool(local) and (not far or rng.random() < local_bias)
        pool = local if use_local else far
        block = int(rng.choice(pool))
        picked.add(block)
        pool.remove(block)
    return sorted(picked)


def row_blocks(spec, q_block: int, valid_blocks: int, rng: np.random.Generator) -> list[int]:
    allowed = set(window(q_block, spec.window_blocks))
    if spec.family == "sliding_window_global":
        allowed.update(range(min(spec.global_blocks, valid_blocks)))
    elif spec.family == "sliding_window_retrieval":
        allowed.update(retrieval_picks(q_block, spec.retrieval_blocks, spec.window_blocks,
                                       spec.retrieval_local_bias, rng))
    return sorted(b for b in allowed if 0 <= b <= q_block and b < valid_blocks)


def build_csr(spec, seq_lens) -> tuple[np.ndarray, np.ndarray]:
    """row_ptr (B, H, t_max/128 + 1) and col_idx (B, H, max(1, max nnz)), int32, zero padded."""
    q_blocks = ceil_div(spec.t_max, BLOCK_SIZE)
    row_ptr = np.zeros((spec.batch_size, spec.num_heads, q_blocks + 1), dtype=np.int32)
    cols: dict[tuple[int, int], list[int]] = {}
    root = np.random.default_rng(spec.seed)
    for b in range(spec.batch_size):
        valid_blocks = ceil_div(int(seq_lens[b]), BLOCK_SIZE)
        for h in range(spec.num_heads):
            head_rng = np.random.default_rng(int(root.integers(0, 2**31 - 1)))
            row: list[int] = []
            for qb in range(q_blocks):
                if qb < valid_blocks:
                    row.extend(row_blocks(spec, qb, valid_blocks, head_rng))
                row_ptr[b, h, qb + 1] = len(row)
            cols[b, h] = row
    max_nnz = max(1, max(len(r) for r in cols.values()))
    col_idx = np.zeros((spec.batch_size, spec.num_heads, max_nnz), dtype=np.int32)
    for (b, h), row in cols.items():
        col_idx[b, h, :len(row)] = row
    return row_ptr, col_idx


def device_qkv(shape: tuple, seed: int, device: str) -> tuple:
    """q, k, v bf16 drawn from ``seed`` by a generator on ``device`` (not the original's values)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    return tuple(torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16) for _ in range(3))


def materialize(spec, device: str = "cpu", values_on_device: bool = False) -> dict:
    """The six input tensors of one call, on ``device``. ``values_on_device``: q, k, v drawn by
    a generator on the device (same distribution, not the original's values): for warm-up and
    timed calls, where the original's host generator takes over a second per full-size set."""
    spec_mod.validate_spec(spec)
    seq_lens = sample_seq_lens(spec)
    row_ptr, col_idx = build_csr(spec, seq_lens.tolist())
    shape = (spec.batch_size, spec.num_heads, spec.t_max, HEAD_DIM)
    if values_on_device:
        q, k, v = device_qkv(shape, spec.seed, device)
    else:
        gen = torch.Generator(device="cpu")
        gen.manual_seed(spec.seed)
        q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float32).to(torch.bfloat16)
                   for _ in range(3))
    return {
        "q": q.to(device), "k": k.to(device), "v": v.to(device),
        "row_ptr": torch.from_numpy(row_ptr).to(device),
        "col_idx": torch.from_numpy(col_idx).to(device),
        "seq_lens": torch.from_numpy(seq_lens).to(device),
    }
