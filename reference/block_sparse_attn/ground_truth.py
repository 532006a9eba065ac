"""Ground truth: fp32 online softmax over each row's CSR blocks, in CSR order. PARENT ONLY.

Masks, as the original defines them: key blocks outside 0 <= kb <= qb, kb < ceil(seq_len/128)
are skipped; query and key tokens at or beyond seq_len are masked; inside the diagonal block
a key token must not come after the query token. Rows that see nothing (padding) get
o = 0 and lse = -inf. Vectorised over every (batch, head, query block) per CSR slot:
the slot loop is the only Python loop (a few dozen launches per call, not thousands).
"""
from __future__ import annotations

import contextlib
import math

import torch

BLOCK = 128
SCALE = 1.0 / math.sqrt(128)


@contextlib.contextmanager
def _exact_fp32():
    """fp32 matmuls in full precision (no TF32), whatever the caller's global setting."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@torch.no_grad()
def block_sparse_attention(q, k, v, row_ptr, col_idx, seq_lens, dtype=torch.float32):
    """(o bf16 (B, H, T, 128), lse (B, H, T)), natural-log logsumexp of the scaled scores.
    ``dtype``: the arithmetic (float32, the ground truth; float64 for the suites' health test),
    which lse keeps."""
    with _exact_fp32():
        return _forward(q, k, v, row_ptr, col_idx, seq_lens, dtype)


# Rows (one per (batch*head, query block)) are processed this many at a time: bounds the
# (rows, 128, 128) fp32 score tensors to a few hundred MB on the largest suites.
ROW_CHUNK = 2048


def _forward(q, k, v, row_ptr, col_idx, seq_lens, dtype):
    B, H, T, D = q.shape
    n_blocks = row_ptr.shape[-1] - 1
    BH, dev = B * H, q.device
    qf = q.reshape(BH, n_blocks, BLOCK, D)
    kf = k.reshape(BH, n_blocks, BLOCK, D)
    vf = v.reshape(BH, n_blocks, BLOCK, D)
    rp = row_ptr.reshape(BH, n_blocks + 1).long()
    ci = col_idx.reshape(BH, -1).long()
    lens = seq_lens.long().repeat_interleave(H)  # (BH,), b-major like the flattening
    valid_blocks = (lens + BLOCK - 1) // BLOCK
    degree = rp[:, 1:] - rp[:, :-1]                                   # (BH, n_blocks)
    active = (degree > 0) & (lens[:, None] > torch.arange(n_blocks, device=dev) * BLOCK)

    out = torch.zeros(BH, n_blocks, BLOCK, D, dtype=dtype, device=dev)
    lse = torch.full((BH, n_blocks, BLOCK), -math.inf, dtype=dtype, device=dev)
    bh_all, qb_all = active.nonzero(as_tuple=True)
    if len(bh_all):
        slots = int(degree[bh_all, qb_all].max())
        for first in range(0, len(bh_all), ROW_CHUNK):
            bh, qb = bh_all[first:first + ROW_CHUNK], qb_all[first:first + ROW_CHUNK]
            o_blk, lse_blk = _rows(qf, kf, vf, rp, ci, lens, valid_blocks, bh, qb, slots, dtype)
            out[bh, qb] = o_blk
            lse[bh, qb] = lse_blk
    return out.reshape(B, H, T, D).to(torch.bfloat16), lse.reshape(B, H, T)


def _rows(qf, kf, vf, rp, ci, lens, valid_blocks, bh, qb, slots, dtype):
    """Online softmax for the query blocks (bh[i], qb[i]), all at once, slot by slot in CSR order."""
    dev, D = qf.device, qf.shape[-1]
    tok = torch.arange(BLOCK, device=dev)
    deg = rp[bh, qb + 1] - rp[bh, qb]
    start = rp[bh, qb]
    seq = lens[bh]
    q_tok = qb[:, None] * BLOCK + tok[None, :]                 # (R, 128)
    q_ok = q_tok < seq[:, None]
    qc = qf[bh, qb].to(dtype)                                  # (R, 128, D)
    m = torch.full((len(bh), BLOCK), -math.inf, dtype=dtype, device=dev)
    l = torch.zeros(len(bh), BLOCK, dtype=dtype, device=dev)
    acc = torch.zeros(len(bh), BLOCK, D, dtype=dtype, device=dev)
    for slot in range(slots):
        kb = ci[bh, (start + slot).clamp(max=ci.shape[1] - 1)]
        kb_ok = (slot < deg) & (kb >= 0) & (kb <= qb) & (kb < valid_blocks[bh])
        kb_safe = torch.where(kb_ok, kb, torch.zeros_like(kb))
        kc = kf[bh, kb_safe].to(dtype)
        vc = vf[bh, kb_safe].to(dtype)
        s = torch.matmul(qc, kc.transpose(1, 2)) * SCALE       # (R, 128, 128)
        k_tok = kb_safe[:, None] * BLOCK + tok[None, :]        # (R, 128)
        allow = kb_ok[:, None, None] & q_ok[:, :, None] & (k_tok[:, None, :] < seq[:, None, None])
        diagonal = (kb_safe == qb)[:, None, None]
        allow &= ~diagonal | (k_tok[:, None, :] <= q_tok[:, :, None])
        s = s.masked_fill(~allow, -math.inf)
        m_new = torch.maximum(m, s.amax(-1))
        # Rows still at -inf contribute nothing; exp(-inf - -inf) would be NaN.
        m_safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
        alpha = torch.where(torch.isfinite(m), torch.exp(m - m_safe), torch.zeros_like(m))
        p = torch.exp(s - m_safe[..., None])                   # exp(-inf) = 0 where masked
        acc = acc * alpha[..., None] + torch.matmul(p, vc)
        l = l * alpha + p.sum(-1)
        m = m_new
    seen = l > 0
    o_blk = torch.where(seen[..., None], acc / l.clamp_min(1e-30)[..., None], torch.zeros_like(acc))
    lse_blk = torch.where(seen, m + torch.log(l.clamp_min(1e-30)), torch.full_like(l, -math.inf))
    return o_blk, lse_blk
