"""The MLA decode attention as a Gluon kernel for Hopper (sm_90): what Triton's tile language
cannot hold in this kernel is the 64 heads x 576 query block kept in shared memory, so the
registers are left to the 64 x 512 fp32 output.

One program: one sequence, 64 heads, one split of the context. Its 8 warps form two
warpgroups; every warpgroup MMA is laid out warps [4, 2], so each warpgroup computes half of
a 64 x 64 score tile and owns 256 of the 512 output columns. Per 64-row tile of the cache:
  S  = q_lat . c^T + rope(q_pe) . kpe^T     (wgmma, queries and keys from shared memory)
  P  = exp2(S * scale - m)                  (online softmax in registers, P to shared memory)
  O += P . c                                (wgmma: the latent rows are the values too)
Cache tiles arrive by TMA into a ring of STAGES buffers (2: a third does not fit beside the
query block), the next ones in flight while this one is used. The TMA descriptors' row count is
the context length, so rows past it read as zeros; rows of the tile past this split's end are
masked to -inf. The next tile's scores are issued behind this tile's P.V, and (FUSE_ROPE) its
keys' RoPE columns are rotated in shared memory while P.V runs, so no pass over the cache
rotates them first. docs/benchmarks-mla_decode.md has the figures and the variants that lost.

The numbers are the Triton kernel's: the same bf16 inputs to every product, fp32 accumulation,
q's RoPE with the original's bf16 roundings, o rounded to bf16 once.
"""
import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

BLOCK_H = 64
BLOCK_N = 64
NUM_WARPS = 8


@gluon.jit
def _bf16(x):
    return x.to(gl.bfloat16).to(gl.float32)


@gluon.jit
def _rotated(x, partner, c, s):
    """One rotate-half RoPE output with the original's bf16 steps: bf16(bf16(x c) + bf16(partner s)),
    partner being the other half's value with its sign (-x_b for the first half, x_a for the second)."""
    return _bf16(_bf16(x * c) + _bf16(partner * s))


@gluon.jit
def _load_tile(kv_desc, kpe_desc, b, n0, bar, kv_buf, kpe_buf):
    """TMA loads of cache rows n0.. of sequence b (latent and RoPE columns) into one ring stage."""
    mbarrier.expect(bar, kv_desc.block_type.nbytes + kpe_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(kv_desc, [b, n0, 0], bar, kv_buf)
    tma.async_copy_global_to_shared(kpe_desc, [b, n0, 0], bar, kpe_buf)


@gluon.jit
def _load_queries(q_s, qpe_s, qlat_ptr, q_ptr, cos_ptr, sin_ptr, b, h0, H, pos_q,
                  s_ql_h, s_ql_b, s_q_b, s_q_h,
                  NOPE: gl.constexpr, R: gl.constexpr, ROPE: gl.constexpr, BLOCK_H: gl.constexpr,
                  num_warps: gl.constexpr):
    """q_lat rows of heads h0.. into q_s; q's RoPE part rotated at pos_q (bf16 steps) into qpe_s."""
    HALF: gl.constexpr = ROPE // 2
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    heads = h0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ld))
    hmask = heads[:, None] < H
    cols = gl.arange(0, R, layout=gl.SliceLayout(0, ld))
    ql = gl.load(qlat_ptr + heads[:, None] * s_ql_h + b * s_ql_b + cols[None, :], mask=hmask, other=0.0)
    q_s.store(ql)
    # Rotate-half RoPE over the whole row: column j pairs with j +- HALF, sign - on the first half.
    j = gl.arange(0, ROPE, layout=gl.SliceLayout(0, ld))
    partner = (j + HALF) % ROPE
    sign = gl.where(j < HALF, -1.0, 1.0)
    row = q_ptr + b * s_q_b + heads[:, None] * s_q_h + NOPE
    x = gl.load(row + j[None, :], mask=hmask, other=0.0).to(gl.float32)
    xp = gl.load(row + partner[None, :], mask=hmask, other=0.0).to(gl.float32)
    c = gl.load(cos_ptr + pos_q * HALF + j % HALF).to(gl.float32)
    s = gl.load(sin_ptr + pos_q * HALF + j % HALF).to(gl.float32)
    rot = _rotated(x, sign[None, :] * xp, c[None, :], s[None, :])
    qpe_s.store(rot.to(gl.bfloat16))


@gluon.jit
def _trig_rows(cos_ptr, sin_ptr, n0, kv_len, BN: gl.constexpr, ROPE: gl.constexpr, num_warps: gl.constexpr):
    """cos, sin (bf16 tables) of cache rows n0.. (zeros past kv_len), for _rotate_keys."""
    HALF: gl.constexpr = ROPE // 2
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [num_warps, 1], [1, 0])
    rows = n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, ld))
    j = gl.arange(0, HALF, layout=gl.SliceLayout(0, ld))
    live = rows[:, None] < kv_len
    return (gl.load(cos_ptr + rows[:, None] * HALF + j[None, :], mask=live, other=0.0),
            gl.load(sin_ptr + rows[:, None] * HALF + j[None, :], mask=live, other=0.0))


@gluon.jit
def _rotate_keys(kpe, trig, ROPE: gl.constexpr, num_warps: gl.constexpr):
    """Rotates a tile's raw RoPE columns in shared memory in place (the original's bf16 steps,
    as _rope_keys_kernel does), then makes them visible to the warpgroup MMAs."""
    HALF: gl.constexpr = ROPE // 2
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [num_warps, 1], [1, 0])
    c = trig[0].to(gl.float32)
    s = trig[1].to(gl.float32)
    lo = kpe.slice(0, HALF, dim=1)
    hi = kpe.slice(HALF, HALF, dim=1)
    xa = lo.load(ld).to(gl.float32)
    xb = hi.load(ld).to(gl.float32)
    gl.thread_barrier()  # not needed by the data (each thread writes back what it read); dropping it gained nothing
    lo.store(_rotated(xa, -xb, c, s).to(gl.bfloat16))
    hi.store(_rotated(xb, xa, c, s).to(gl.bfloat16))
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _scores(q_s, qpe_s, kv_tile, kpe_tile, s_zero, BN: gl.constexpr, R: gl.constexpr, ROPE: gl.constexpr):
    """q_lat . c^T + rope(q_pe) . kpe^T of one cache tile, issued (two wgmma groups, not waited for)."""
    s = warpgroup_mma(q_s, kv_tile.reshape([BN, R]).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    return warpgroup_mma(qpe_s, kpe_tile.reshape([BN, ROPE]).permute((1, 0)), s, is_async=True)


@gluon.jit
def _softmax_step(s, m_i, l_i, valid, qk_scale):
    """Online softmax of one score tile (base 2): P in bf16, the old rows' rescale, new max and sum."""
    s = gl.where(valid[None, :], s * qk_scale, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1))
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s - m_new[:, None])
    return p.to(gl.bfloat16), alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _mla_decode_kernel(kv_desc, kpe_desc, qlat_ptr, q_ptr, cos_ptr, sin_ptr, o_ptr, opart_ptr, lse_ptr,
                       H, kv_len, tiles_per_split, qk_scale,
                       s_ql_h, s_ql_b, s_q_b, s_q_h, s_o_b, s_o_h, s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b,
                       NOPE: gl.constexpr, SPLIT: gl.constexpr, STAGES: gl.constexpr, FUSE_ROPE: gl.constexpr,
                       num_warps: gl.constexpr):
    R: gl.constexpr = kv_desc.block_type.shape[2]
    ROPE: gl.constexpr = kpe_desc.block_type.shape[2]
    BN: gl.constexpr = kv_desc.block_type.shape[1]
    BH: gl.constexpr = BN  # the score tile is square: 64 heads x 64 cache rows
    h0 = gl.program_id(0) * BH
    b = gl.program_id(1)
    split = gl.program_id(2)
    n_start = split * tiles_per_split * BN
    n_end = gl.minimum(n_start + tiles_per_split * BN, kv_len)
    n_tiles = gl.cdiv(n_end - n_start, BN)

    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, BN // 2, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 2],
                                                       instr_shape=[16, R // 2, 16])
    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, R], gl.bfloat16)
    qpe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, ROPE], gl.bfloat16)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, BN], gl.bfloat16)

    kv_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES] + kv_desc.block_type.shape, kv_desc.layout)
    kpe_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES] + kpe_desc.block_type.shape, kpe_desc.layout)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [BH, R], q_layout)
    qpe_s = gl.allocate_shared_memory(gl.bfloat16, [BH, ROPE], qpe_layout)
    p_s = gl.allocate_shared_memory(gl.bfloat16, [BH, BN], p_layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)

    for i in gl.static_range(STAGES):  # the first tiles fly while the queries are loaded
        if i < n_tiles:
            _load_tile(kv_desc, kpe_desc, b, n_start + i * BN, ready.index(i), kv_s.index(i), kpe_s.index(i))

    _load_queries(q_s, qpe_s, qlat_ptr, q_ptr, cos_ptr, sin_ptr, b, h0, H, kv_len - 1,
                  s_ql_h, s_ql_b, s_q_b, s_q_h, NOPE, R, ROPE, BH, num_warps)
    fence_async_shared()
    gl.thread_barrier()

    m_i = gl.full([BH], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BH], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BH, R], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BH, BN], gl.float32, layout=s_layout)
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    # The next tile's scores are issued behind this tile's P.V, so the tensor cores run them back
    # to back, and the wait for P.V, the barrier and the next load overlap the scores. With
    # FUSE_ROPE the next tile's keys are rotated while this tile's P.V runs.
    trig = _trig_rows(cos_ptr, sin_ptr, n_start, kv_len, BN, ROPE, num_warps)
    s = s_zero
    if n_tiles > 0:
        mbarrier.wait(ready.index(0), 0)
        if FUSE_ROPE:
            _rotate_keys(kpe_s.index(0).reshape([BN, ROPE]), trig, ROPE, num_warps)
        s = _scores(q_s, qpe_s, kv_s.index(0), kpe_s.index(0), s_zero, BN, R, ROPE)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
    for t in range(n_tiles):
        st = t % STAGES
        c = kv_s.index(st).reshape([BN, R])
        if FUSE_ROPE:  # in flight during the softmax
            trig = _trig_rows(cos_ptr, sin_ptr, n_start + (t + 1) * BN, kv_len, BN, ROPE, num_warps)
        p, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, n_start + t * BN + cols < n_end, qk_scale)
        p_s.store(p)
        fence_async_shared()
        gl.thread_barrier()  # every warp's part of P written before either warpgroup reads it
        acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
        acc_tok = warpgroup_mma(p_s, c, acc, is_async=True)
        if t + 1 < n_tiles:
            st1 = (t + 1) % STAGES
            mbarrier.wait(ready.index(st1), ((t + 1) // STAGES) & 1)
            if FUSE_ROPE:
                _rotate_keys(kpe_s.index(st1).reshape([BN, ROPE]), trig, ROPE, num_warps)
            s_tok = _scores(q_s, qpe_s, kv_s.index(st1), kpe_s.index(st1), s_zero, BN, R, ROPE)
            acc = warpgroup_mma_wait(num_outstanding=2, deps=(acc_tok,))  # P.V done; the scores' 2 groups run on
            gl.thread_barrier()  # both warpgroups done with this stage and P before they are overwritten
            nt = t + STAGES
            if nt < n_tiles:
                _load_tile(kv_desc, kpe_desc, b, n_start + nt * BN, ready.index(st), kv_s.index(st), kpe_s.index(st))
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))

    l_o = gl.convert_layout(l_i, gl.SliceLayout(1, o_layout))
    heads = h0 + gl.arange(0, BH, layout=gl.SliceLayout(1, o_layout))
    offs_r = gl.arange(0, R, layout=gl.SliceLayout(0, o_layout))
    hmask = heads[:, None] < H
    if SPLIT:
        # An empty split leaves l == 0: its lse is -inf, so the merge gives it no weight.
        lse = gl.where(l_i > 0, m_i + gl.log2(gl.maximum(l_i, 1e-30)), float("-inf"))
        out = acc / gl.maximum(l_o, 1e-30)[:, None]
        gl.store(opart_ptr + split * s_op_s + b * s_op_b + heads[:, None] * s_op_h + offs_r[None, :], out, mask=hmask)
        lse_heads = h0 + gl.arange(0, BH, layout=gl.SliceLayout(1, s_layout))
        gl.store(lse_ptr + split * s_lse_s + b * s_lse_b + lse_heads, lse, mask=lse_heads < H)
    else:
        out = acc / l_o[:, None]
        gl.store(o_ptr + b * s_o_b + heads[:, None] * s_o_h + offs_r[None, :], out.to(gl.bfloat16), mask=hmask)


def supported(q_lat: torch.Tensor, kv: torch.Tensor) -> bool:
    """Whether this kernel runs the case: a Hopper GPU, DeepSeek-V3's widths (latent 512, RoPE 64)
    and a cache TMA can read (16-byte aligned base and row strides)."""
    return (kv.is_cuda and torch.cuda.get_device_capability(kv.device)[0] == 9
            and q_lat.shape[-1] == 512 and kv.shape[-1] == 576 and kv.stride(-1) == 1 and q_lat.stride(-1) == 1
            and kv.data_ptr() % 16 == 0 and all(st * kv.element_size() % 16 == 0 for st in kv.stride()[:-1]))


def _descriptor(t: torch.Tensor, block: list) -> TensorDescriptor:
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block,
                            gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))


def launch(q_lat, q, kv, kpe, cos, sin, o, opart, lse, kv_len: int, splits: int, tiles_per_split: int,
           nope: int, qk_scale: float, stages: int = 2, fuse_rope: bool = True):
    """Runs the kernel over (head blocks, sequences, splits) and returns the compiled kernel; the
    cache's latent columns and its RoPE columns (fuse_rope) or the keys rotated by a pass, `kpe`
    (bs, kv_len, 64), are read through TMA descriptors cut at kv_len rows."""
    H, bs, R = q_lat.shape
    kv_desc = _descriptor(kv[:, :kv_len, :R], [1, BLOCK_N, R])
    if fuse_rope:  # the raw RoPE columns of the cache (kpe unused), rotated in the kernel
        kpe_desc = _descriptor(kv[:, :kv_len, R:], [1, BLOCK_N, kv.shape[-1] - R])
    else:
        kpe_desc = _descriptor(kpe, [1, BLOCK_N, kpe.shape[-1]])
    split = splits > 1
    return _mla_decode_kernel[(triton.cdiv(H, BLOCK_H), bs, splits)](
        kv_desc, kpe_desc, q_lat, q, cos, sin, o, opart, lse,
        H, kv_len, tiles_per_split, qk_scale,
        q_lat.stride(0), q_lat.stride(1), q.stride(0), q.stride(1), o.stride(0), o.stride(1),
        opart.stride(0) if split else 0, opart.stride(1) if split else 0, opart.stride(2) if split else 0,
        lse.stride(0) if split else 0, lse.stride(1) if split else 0,
        NOPE=nope, SPLIT=split, STAGES=stages, FUSE_ROPE=fuse_rope, num_warps=NUM_WARPS)
