"""Ground truth: fp32 online softmax over each row's CSR blocks, in CSR order. PARENT ONLY.

Masks, as the original defines them: key blocks outside 0 <= kb <= qb, kb < ceil(seq_len/128)
are skipped; query and key tokens at or beyond seq_len are masked; inside the diagonal block
a key token must not come after the query token. Rows that see nothing (padding) get
o = 0 and lse = -inf. Vectorised over (batch, head) per (query block, CSR slot).
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
def block_sparse_attention(q, k, v, row_ptr, col_idx, seq_lens):
    """(o bf16 (B, H, T, 128), lse fp32 (B, H, T)), natural-log logsumexp of the scaled scores."""
    with _exact_fp32():
        return _forward(q, k, v, row_ptr, col_idx, seq_lens)


def _forward(q, k, v, row_ptr, col_idx, seq_lens):
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
    tok = torch.arange(BLOCK, device=dev)
    bh_all = torch.arange(BH, device=dev)

    out = torch.zeros(BH, n_blocks, BLOCK, D, dtype=torch.float32, device=dev)
    lse = torch.full((BH, n_blocks, BLOCK), -math.inf, dtype=torch.float32, device=dev)
    for qb in range(n_blocks):
        degree = rp[:, qb + 1] - rp[:, qb]
        active = (degree > 0) & (lens > qb * BLOCK)
        if not bool(active.any()):
            continue
        rows = bh_all[active]
        deg = degree[active]
        start = rp[rows, qb]
        q_tok = qb * BLOCK + tok                                   # (128,)
        q_ok = q_tok[None, :] < lens[rows, None]                  # (R, 128)
        qc = qf[rows, qb].float()                                  # (R, 128, D)
        m = torch.full((len(rows), BLOCK), -math.inf, device=dev)
        l = torch.zeros(len(rows), BLOCK, device=dev)
        acc = torch.zeros(len(rows), BLOCK, D, device=dev)
        for slot in range(int(deg.max())):
            in_row = slot < deg
            kb = ci[rows, (start + slot).clamp(max=ci.shape[1] - 1)]
            kb_ok = in_row & (kb >= 0) & (kb <= qb) & (kb < valid_blocks[rows])
            kb_safe = torch.where(kb_ok, kb, torch.zeros_like(kb))
            kc = kf[rows, kb_safe].float()
            vc = vf[rows, kb_safe].float()
            s = torch.matmul(qc, kc.transpose(1, 2)) * SCALE       # (R, 128, 128)
            k_tok = kb_safe[:, None] * BLOCK + tok[None, :]        # (R, 128)
            allow = (kb_ok[:, None, None] & q_ok[:, :, None]
                     & (k_tok[:, None, :] < lens[rows, None, None]))
            diagonal = (kb_safe == qb)[:, None, None]
            allow &= ~diagonal | (k_tok[:, None, :] <= q_tok[None, :, None])
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
        out[rows, qb] = o_blk
        lse[rows, qb] = lse_blk
    return out.reshape(B, H, T, D).to(torch.bfloat16), lse.reshape(B, H, T)
