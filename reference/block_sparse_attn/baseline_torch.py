"""Plain PyTorch block-sparse attention, written as an original-challenge submission.

One step per query block: gather every (batch, head)'s listed key blocks (padded to the
row's largest degree), dense fp32 scores over them with the masks, softmax, weighted sum.
A byte-identical copy lives at tests/fixtures/block_sparse_attn/torch_submission/submission.py.
"""
import math

import torch

BLOCK = 128
SCALE = 1.0 / math.sqrt(128)

VARIANT_MANIFEST = [{"name": "torch-any-shape"}]


def setup(suite_specs, device, variants):
    return None


@torch.no_grad()
def block_sparse_attn_fwd(q, k, v, row_ptr, col_idx, seq_lens):
    B, H, T, D = q.shape
    n_blocks = row_ptr.shape[-1] - 1
    BH = B * H
    dev = q.device
    kb_all = k.reshape(BH * n_blocks, BLOCK, D)
    vb_all = v.reshape(BH * n_blocks, BLOCK, D)
    qf = q.reshape(BH, T, D)
    rp = row_ptr.reshape(BH, n_blocks + 1).long()
    ci = col_idx.reshape(BH, -1).long()
    lens = seq_lens.long().repeat_interleave(H)
    offs = torch.arange(BLOCK, device=dev)
    base = torch.arange(BH, device=dev)[:, None] * n_blocks

    o = torch.zeros(BH, T, D, device=dev, dtype=torch.float32)
    lse = torch.full((BH, T), -math.inf, device=dev, dtype=torch.float32)
    degree_all = rp[:, 1:] - rp[:, :-1]
    max_degree = degree_all.max(dim=0).values.tolist()  # one host sync per call
    for qb in range(n_blocks):
        width = int(max_degree[qb])
        if width == 0:
            continue
        slots = torch.arange(width, device=dev)
        used = slots[None, :] < degree_all[:, qb, None]                       # (BH, W)
        blocks = ci.gather(1, (rp[:, qb, None] + slots[None, :]).clamp(max=ci.shape[1] - 1))
        blocks = torch.where(used, blocks, torch.zeros_like(blocks))
        flat = (base + blocks).reshape(-1)
        kk = kb_all[flat].reshape(BH, width * BLOCK, D).float()
        vv = vb_all[flat].reshape(BH, width * BLOCK, D).float()
        q_pos = qb * BLOCK + offs                                              # (128,)
        k_pos = (blocks[:, :, None] * BLOCK + offs).reshape(BH, width * BLOCK)
        k_used = used[:, :, None].expand(BH, width, BLOCK).reshape(BH, width * BLOCK)
        on_diag = (blocks == qb)[:, :, None].expand(BH, width, BLOCK).reshape(BH, width * BLOCK)
        q_ok = q_pos[None, :] < lens[:, None]                                  # (BH, 128)
        keep = (k_used & (k_pos < lens[:, None]))[:, None, :] & q_ok[:, :, None]
        keep &= ~on_diag[:, None, :] | (k_pos[:, None, :] <= q_pos[None, :, None])
        s = torch.bmm(qf[:, qb * BLOCK:(qb + 1) * BLOCK].float(), kk.transpose(1, 2)) * SCALE
        s = s.masked_fill(~keep, -math.inf)
        row_lse = torch.logsumexp(s, dim=-1)                                   # -inf when empty
        ok = torch.isfinite(row_lse)
        p = torch.exp(s - torch.where(ok, row_lse, torch.zeros_like(row_lse))[..., None])
        o[:, qb * BLOCK:(qb + 1) * BLOCK] = torch.where(ok[..., None], torch.bmm(p, vv), 0.0)
        lse[:, qb * BLOCK:(qb + 1) * BLOCK] = row_lse
    return o.reshape(B, H, T, D).to(torch.bfloat16), lse.reshape(B, H, T)
