"""The MLA decode attention as a warp-specialised Gluon kernel for Hopper (sm_90), on FlashMLA's
schedule: the two consumer warpgroups take the cache tiles in turn for the scores.

One program: one sequence, 64 heads, one split of the context; three partitions of 4 warps. A
producer issues the TMA loads of 64-row cache tiles (latent and raw RoPE columns) into a ring of
2 stages (a third does not fit beside the 72 KB query block). Consumer w owns output columns
w*256.. and the scores of tiles u = w, w+2, ... Per own tile u, in this order:
  1. tile u-1 (the other's): its P . c on my columns, P from shared memory as the other
     warpgroup published it, with the rescale and running max published beside it;
  2. tile u's keys rotated in place (RoPE, the original's bf16 steps) while that P . c runs;
  3. S = q_lat . c^T + rope(q_pe) . kpe^T   (64 x 64, wgmma, q and keys from shared memory)
  4. P = exp2(S * scale - m)                (online softmax in registers)
  5. P, its rescale and the new max published (shared memory, an mbarrier), P . c from registers.
So one warpgroup's softmax runs while the other's MMAs do, and each score tile is computed once,
by one warpgroup. Step 1 comes before step 3 because tile u's load can only start once both
warpgroups are done with tile u-2 (two stages): issuing the other's P . c first gives that load
the other warpgroup's softmax to land in. Each warpgroup's row sums cover its own tiles; the two
are added at the end. Every MMA is waited for in the iteration that issued it.

q_lat's 64 rows come in by TMA too, and o leaves by TMA through the query buffer once both
warpgroups are done with it. Against per-thread loads and stores from the MMA layout, that takes
~6.5 us off each program: two waves of 1-tile programs went from 38.6 to 25.3 us. The cache
descriptors' row count is the context length, so rows past it read as zeros. Rows of a tile past
this split's end are masked to -inf. Heads past H read as zeros and are not written. The numbers
are the Triton kernel's: the same bf16 inputs to every product, fp32 accumulation, RoPE with the
original's bf16 roundings, o rounded to bf16 once. README.md has the figures
and the variants that lost.
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

from mla_launch import DescriptorLauncher, arg_class, raw_stream

BLOCK_H = 64
BLOCK_N = 64
CONSUMER_REGS = gl.constexpr(240)  # each consumer; the producer keeps 3 x 168 - 2 x 240 = 24


@gluon.jit
def _rotated(x, partner, c, s, FIRST_HALF: gl.constexpr):
    """One half of a rotate-half RoPE output with the original's bf16 steps, on bf16 tensors:
    bf16(bf16(x c) - bf16(partner s)) for the first half, bf16(bf16(x c) + bf16(partner s)) for the
    second. Written as bf16x2 instructions with explicit rounding (mul.rn, sub.rn/add.rn), which the
    compiler may not fuse: from fp32 arithmetic with bf16 round trips it made bf16 fmas, one rounding
    where the original makes two (the GPU test test_gpu_rope_rounds_each_step_as_the_original).
    The sum of two bf16 values rounded once equals the original's fp32 sum rounded to bf16."""
    if FIRST_HALF:
        asm: gl.constexpr = "{ .reg .b32 a, b; mul.rn.bf16x2 a, $1, $2; mul.rn.bf16x2 b, $3, $4; sub.rn.bf16x2 $0, a, b; }"
    else:
        asm: gl.constexpr = "{ .reg .b32 a, b; mul.rn.bf16x2 a, $1, $2; mul.rn.bf16x2 b, $3, $4; add.rn.bf16x2 $0, a, b; }"
    return gl.inline_asm_elementwise(asm, "=r,r,r,r,r", [x, c, partner, s], dtype=gl.bfloat16, is_pure=True, pack=2)


@gluon.jit
def _load_tile(kv_desc, kpe_desc, b, n0, bar, kv_buf, kpe_buf):
    """TMA loads of cache rows n0.. of sequence b (latent and RoPE columns) into one ring stage."""
    mbarrier.expect(bar, kv_desc.block_type.nbytes + kpe_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(kv_desc, [b, n0, 0], bar, kv_buf)
    tma.async_copy_global_to_shared(kpe_desc, [b, n0, 0], bar, kpe_buf)


@gluon.jit
def _rope_queries(qpe_s, q_ptr, cos_ptr, sin_ptr, b, h0, H, pos_q, s_q_b, s_q_h,
                  NOPE: gl.constexpr, ROPE: gl.constexpr, BLOCK_H: gl.constexpr, num_warps: gl.constexpr):
    """q's RoPE part of heads h0.., rotated at pos_q (bf16 steps), into qpe_s: rotate-half, column j of
    the first half pairing with j + HALF."""
    HALF: gl.constexpr = ROPE // 2
    ld: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [num_warps, 1], [1, 0])
    heads = h0 + gl.arange(0, BLOCK_H, layout=gl.SliceLayout(1, ld))
    hmask = heads[:, None] < H
    j = gl.arange(0, HALF, layout=gl.SliceLayout(0, ld))
    row = q_ptr + b * s_q_b + heads[:, None] * s_q_h + NOPE
    xa = gl.load(row + j[None, :], mask=hmask, other=0.0)
    xb = gl.load(row + HALF + j[None, :], mask=hmask, other=0.0)
    c = gl.load(cos_ptr + pos_q * HALF + j)[None, :]
    s = gl.load(sin_ptr + pos_q * HALF + j)[None, :]
    qpe_s.slice(0, HALF, dim=1).store(_rotated(xa, xb, c, s, True))
    qpe_s.slice(HALF, HALF, dim=1).store(_rotated(xb, xa, c, s, False))


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
    c = trig[0]
    s = trig[1]
    lo = kpe.slice(0, HALF, dim=1)
    hi = kpe.slice(HALF, HALF, dim=1)
    xa = lo.load(ld)
    xb = hi.load(ld)
    lo.store(_rotated(xa, xb, c, s, True))
    hi.store(_rotated(xb, xa, c, s, False))
    fence_async_shared()
    gl.thread_barrier()


@gluon.jit
def _scores(q_s, qpe_s, kv_tile, kpe_tile, s_zero, BN: gl.constexpr, R: gl.constexpr, ROPE: gl.constexpr):
    """q_lat . c^T + rope(q_pe) . kpe^T of one cache tile, issued (two wgmma groups, not waited for)."""
    s = warpgroup_mma(q_s, kv_tile.reshape([BN, R]).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    return warpgroup_mma(qpe_s, kpe_tile.reshape([BN, ROPE]).permute((1, 0)), s, is_async=True)


@gluon.jit
def _opaque(x):
    """x, through an instruction the compiler cannot see through or move out of a loop."""
    return gl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _producer(kv_desc, kpe_desc, kv_s, kpe_s, ready, empty, b, n_start, n_tiles):
    """The cache tiles after the first STAGES (the prologue issued those): each into its stage once
    both consumers are done with the tile that held it."""
    STAGES: gl.constexpr = kv_s.shape[0]
    BN: gl.constexpr = kv_s.shape[2]
    for t in range(STAGES, n_tiles):
        st = t % STAGES
        mbarrier.wait(empty.index(st), ((t // STAGES) & 1) ^ 1)
        _load_tile(kv_desc, kpe_desc, b, n_start + t * BN, ready.index(st), kv_s.index(st), kpe_s.index(st))


@gluon.jit
def _others_pv(p_s, x_s, p_full, phase, kv_s, sv, acc, l_i, rows_s: gl.constexpr, rows_o: gl.constexpr,
               WG: gl.constexpr):
    """The other warpgroup's published tile on this warpgroup's columns: once P is out (p_full), the
    row sums and acc rescaled by its rescale, and P . c issued (P from shared memory, not waited
    for). Returns the MMA's token, the row sums and the running max published with P."""
    BN: gl.constexpr = kv_s.shape[2]
    R: gl.constexpr = kv_s.shape[3]
    HR: gl.constexpr = R // 2
    mbarrier.wait(p_full.index(0), phase)
    alpha = x_s.index(0).load(rows_s)
    m_i = x_s.index(1).load(rows_s)
    l_i = l_i * alpha
    acc = acc * x_s.index(0).load(rows_o)[:, None]
    c = kv_s.index(sv).reshape([BN, R]).slice(WG * HR, HR, dim=1)
    return warpgroup_mma(p_s, c, acc, is_async=True), l_i, m_i


@gluon.jit
def _consumer(q_s, qpe_s, kv_s, kpe_s, p_s, x_s, q_bar, ready, empty, p_full, l_bar, o_desc, opart_ptr, lse_ptr,
              cos_ptr, sin_ptr, kv_len, h0, b, split, H, n_start, n_end, n_tiles, qk_scale,
              s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b,
              SPLIT: gl.constexpr, WG: gl.constexpr):
    """Output columns WG*256.. of the program's 64 heads, and the scores of tiles WG, WG+2, ...
    (the steps of the module docstring). Tile -1, before tile 0, is the prologue's zero P. x_s rows:
    0 the last published rescale, 1 its running max, 2 and 3 each warpgroup's row sums at the end."""
    STAGES: gl.constexpr = kv_s.shape[0]
    BN: gl.constexpr = kv_s.shape[2]
    R: gl.constexpr = kv_s.shape[3]
    ROPE: gl.constexpr = kpe_s.shape[3]
    BH: gl.constexpr = q_s.shape[1]
    HR: gl.constexpr = R // 2
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HR, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    rows_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    rows_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    m_i = gl.full([BH], float("-inf"), gl.float32, layout=rows_s)
    l_i = gl.zeros([BH], gl.float32, layout=rows_s)
    acc = gl.zeros([BH, HR], gl.float32, layout=o_layout)
    s_zero = gl.zeros([BH, BN], gl.float32, layout=s_layout)
    cols = gl.arange(0, BN, layout=gl.SliceLayout(0, s_layout))
    mbarrier.wait(q_bar.index(0), 0)
    for u in range(WG, n_tiles, 2):
        # (own tiles are always in stage WG: an opaque copy of the index keeps the compiler from
        # hoisting the 72 registers of that stage's MMA descriptors out of the loop)
        st = _opaque(u % STAGES)
        trig = _trig_rows(cos_ptr, sin_ptr, n_start + u * BN, kv_len, BN, ROPE, 4)  # in flight meanwhile
        # Tile u-1 first (the other warpgroup's; for u = 0 the prologue's zero P against tile 0's c):
        # its P . c on these columns, issued before tile u's scores, which need tile u's load.
        sv = gl.maximum(u - 1, 0) % STAGES
        mbarrier.wait(ready.index(0), 0, pred=u == 0)
        pv_tok, l_i, m_i = _others_pv(p_s, x_s, p_full, u & 1, kv_s, sv, acc, l_i, rows_s, rows_o, WG)
        mbarrier.wait(ready.index(st), (u // STAGES) & 1)
        _rotate_keys(kpe_s.index(st).reshape([BN, ROPE]), trig, ROPE, 4)  # while P . c runs
        q_mine = q_s.index(_opaque(0)).reshape([BH, R])  # (the same for q's 36 descriptors)
        s_tok = _scores(q_mine, qpe_s, kv_s.index(st), kpe_s.index(st), s_zero, BN, R, ROPE)
        acc = warpgroup_mma_wait(num_outstanding=2, deps=(pv_tok,))  # the scores' two groups run on
        mbarrier.arrive(empty.index(sv), count=1, pred=u > 0)
        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
        s = gl.where((n_start + u * BN + cols < n_end)[None, :], s * qk_scale, float("-inf"))
        m_new = gl.maximum(m_i, gl.max(s, 1))
        alpha = gl.exp2(m_i - m_new)
        p = gl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + gl.sum(p, 1)
        m_i = m_new
        pb = p.to(gl.bfloat16)
        p_s.store(pb)
        x_s.index(0).store(alpha)
        x_s.index(1).store(m_new)
        fence_async_shared()
        gl.thread_barrier()  # every thread's part of P written before the arrival that publishes it
        mbarrier.arrive(p_full.index(0), count=1)
        acc = acc * gl.convert_layout(alpha, rows_o)[:, None]
        c_own = kv_s.index(st).reshape([BN, R]).slice(WG * HR, HR, dim=1)
        own_tok = warpgroup_mma(gl.convert_layout(pb, p_op), c_own, acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(own_tok,))
        mbarrier.arrive(empty.index(st), count=1)
    last = n_tiles - 1
    if (n_tiles > 0) & (last % 2 != WG):  # the other warpgroup had the last tile
        sv = last % STAGES
        last_tok, l_i, m_i = _others_pv(p_s, x_s, p_full, n_tiles & 1, kv_s, sv, acc, l_i, rows_s, rows_o, WG)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(last_tok,))
        mbarrier.arrive(empty.index(sv), count=1)
    # The row sums: this warpgroup's tiles' plus the other's.
    x_s.index(2 + WG).store(l_i)
    gl.thread_barrier()
    mbarrier.arrive(l_bar.index(0), count=1)
    mbarrier.wait(l_bar.index(0), 0)
    l_i = l_i + x_s.index(3 - WG).load(rows_s)

    l_o = gl.convert_layout(l_i, rows_o)
    heads = h0 + gl.arange(0, BH, layout=rows_o)
    offs_r = WG * HR + gl.arange(0, HR, layout=gl.SliceLayout(0, o_layout))
    hmask = heads[:, None] < H
    if SPLIT:
        # An empty split leaves l == 0: its lse is -inf, so the merge gives it no weight.
        out = acc / gl.maximum(l_o, 1e-30)[:, None]
        gl.store(opart_ptr + split * s_op_s + b * s_op_b + heads[:, None] * s_op_h + offs_r[None, :], out, mask=hmask)
        if WG == 0:
            lse = gl.where(l_i > 0, m_i + gl.log2(gl.maximum(l_i, 1e-30)), float("-inf"))
            lse_heads = h0 + gl.arange(0, BH, layout=rows_s)
            gl.store(lse_ptr + split * s_lse_s + b * s_lse_b + lse_heads, lse, mask=lse_heads < H)
    else:  # through this warpgroup's half of the query buffer (both are done with it) and a TMA store
        q_s.index(0).reshape([BH, R]).slice(WG * HR, HR, dim=1).store((acc / l_o[:, None]).to(gl.bfloat16))
        fence_async_shared()
        gl.thread_barrier()
        # (heads >= H are clipped by the descriptor)
        tma.async_copy_shared_to_global(o_desc, [h0, b, WG * HR], q_s.index(0).slice(WG * HR, HR, dim=2))
        tma.store_wait(0)


# The context's length grows by a row a call in the original's benchmark loop: specialised on it
# (== 1, % 16 == 0), the JIT compiled a new variant, ~2.8 s inside a timed call, when it first
# reached a multiple of 16. Neither value feeds anything but masks and loop bounds.
@gluon.jit(do_not_specialize=["kv_len", "tiles_per_split"])
def _mla_decode_kernel(kv_desc, kpe_desc, qlat_desc, o_desc, q_ptr, cos_ptr, sin_ptr, opart_ptr, lse_ptr,
                       H, kv_len, tiles_per_split, qk_scale,
                       s_q_b, s_q_h, s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b,
                       NOPE: gl.constexpr, SPLIT: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr):
    R: gl.constexpr = kv_desc.block_type.shape[2]
    ROPE: gl.constexpr = kpe_desc.block_type.shape[2]
    BN: gl.constexpr = kv_desc.block_type.shape[1]
    BH: gl.constexpr = 64  # heads a program
    h0 = gl.program_id(0) * BH
    b = gl.program_id(1)
    split = gl.program_id(2)
    n_start = split * tiles_per_split * BN
    n_end = gl.minimum(n_start + tiles_per_split * BN, kv_len)
    n_tiles = gl.cdiv(n_end - n_start, BN)

    q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, 1, R], gl.bfloat16)
    qpe_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, ROPE], gl.bfloat16)
    p_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BH, BN], gl.bfloat16)
    kv_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES] + kv_desc.block_type.shape, kv_desc.layout)
    kpe_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES] + kpe_desc.block_type.shape, kpe_desc.layout)
    # [1, ...]: see _consumer; [.., BH, 1, R]: the TMA boxes of q_lat (H, bs, R) and o (bs, H, R) seen as (H, bs, R)
    q_s = gl.allocate_shared_memory(gl.bfloat16, [1, BH, 1, R], q_layout)
    qpe_s = gl.allocate_shared_memory(gl.bfloat16, [BH, ROPE], qpe_layout)
    p_s = gl.allocate_shared_memory(gl.bfloat16, [BH, BN], p_layout)
    x_s = gl.allocate_shared_memory(gl.float32, [4, BH], gl.SwizzledSharedLayout(1, 1, 1, [0]))
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    q_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    p_full = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    l_bar = gl.allocate_shared_memory(gl.int64, [1, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer
    mbarrier.init(q_bar.index(0), count=2)  # q_lat's TMA load, then the rotated RoPE part
    mbarrier.init(p_full.index(0), count=1)
    mbarrier.init(l_bar.index(0), count=2)
    fence_async_shared()
    for i in gl.static_range(STAGES):  # the first tiles fly while the queries are loaded
        if i < n_tiles:
            _load_tile(kv_desc, kpe_desc, b, n_start + i * BN, ready.index(i), kv_s.index(i), kpe_s.index(i))
    # q_lat's rows of heads h0.. by TMA (heads >= H read as zeros), q's RoPE part rotated meanwhile
    mbarrier.expect(q_bar.index(0), qlat_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(qlat_desc, [h0, b, 0], q_bar.index(0), q_s.index(0))
    _rope_queries(qpe_s, q_ptr, cos_ptr, sin_ptr, b, h0, H, kv_len - 1, s_q_b, s_q_h, NOPE, ROPE, BH, num_warps)
    # The zero tile "before tile 0": P = 0, rescale 1, running max -inf, published as tile -1.
    zl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    p_s.store(gl.zeros([BH, BN], gl.bfloat16, layout=zl))
    xl: gl.constexpr = gl.BlockedLayout([1], [32], [num_warps], [0])
    x_s.index(0).store(gl.full([BH], 1.0, gl.float32, layout=xl))
    x_s.index(1).store(gl.full([BH], float("-inf"), gl.float32, layout=xl))
    fence_async_shared()
    gl.thread_barrier()
    mbarrier.arrive(q_bar.index(0), count=1)
    mbarrier.arrive(p_full.index(0), count=1)
    # The producer is the default partition, so the two consumers are workers compiled alike (as the
    # default partition one of them spilled).
    gl.warp_specialize([
        (_producer, (kv_desc, kpe_desc, kv_s, kpe_s, ready, empty, b, n_start, n_tiles)),
        (_consumer, (q_s, qpe_s, kv_s, kpe_s, p_s, x_s, q_bar, ready, empty, p_full, l_bar, o_desc, opart_ptr, lse_ptr,
                     cos_ptr, sin_ptr, kv_len, h0, b, split, H, n_start, n_end, n_tiles, qk_scale,
                     s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 0)),
        (_consumer, (q_s, qpe_s, kv_s, kpe_s, p_s, x_s, q_bar, ready, empty, p_full, l_bar, o_desc, opart_ptr, lse_ptr,
                     cos_ptr, sin_ptr, kv_len, h0, b, split, H, n_start, n_end, n_tiles, qk_scale,
                     s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 1)),
    ], [4, 4], [CONSUMER_REGS, CONSUMER_REGS])


_HOPPER: dict = {}   # device -> whether it is sm_90: a property of the card, asked once


def supported(q_lat: torch.Tensor, kv: torch.Tensor) -> bool:
    """Whether this kernel runs the case: a Hopper GPU, DeepSeek-V3's widths (latent 512, RoPE 64)
    and a cache and q_lat TMA can read (16-byte aligned bases and row strides)."""
    if not kv.is_cuda:
        return False
    hopper = _HOPPER.get(kv.device)
    if hopper is None:
        hopper = _HOPPER[kv.device] = torch.cuda.get_device_capability(kv.device)[0] == 9
    return (hopper and q_lat.shape[-1] == 512 and kv.shape[-1] == 576 and kv.stride(-1) == 1 and q_lat.stride(-1) == 1
            and all(t.data_ptr() % 16 == 0 and all(st * t.element_size() % 16 == 0 for st in t.stride()[:-1])
                    for t in (kv, q_lat)))


_LAYOUTS: dict = {}


def _descriptor(t: torch.Tensor, block: list) -> TensorDescriptor:
    layout = _LAYOUTS.get(tuple(block))
    if layout is None:
        layout = _LAYOUTS[tuple(block)] = gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16)
    return TensorDescriptor(t, list(t.shape), list(t.stride()), block, layout)


# After a launch through the JIT has compiled the kernel for a specialisation, the next launches
# call its raw launcher with the descriptors encoded by (address, shape, strides) (mla_launch.py):
# ~0.2 ms of Python less a call on the H200 host. dev/mla_timeline.py turns it off (it adds an
# argument the direct launch does not pass).
DIRECT_LAUNCH = True
_DIRECT: dict = {}   # specialisation key -> mla_launch.DescriptorLauncher, or None: always the JIT


def _views(q_lat, kv, o, kv_len: int) -> tuple:
    """The four descriptors' (address, shape, strides), as launch's TensorDescriptors have them: the
    cache's latent columns and raw RoPE columns cut at kv_len rows, q_lat (H, bs, R), o seen as (H, bs, R)."""
    bs, _, width = kv.shape
    H, _, R = q_lat.shape
    base, s_kv = kv.data_ptr(), (kv.stride(0), kv.stride(1), 1)
    return ((base, (bs, kv_len, R), s_kv), (base + R * kv.element_size(), (bs, kv_len, width - R), s_kv),
            (q_lat.data_ptr(), (H, bs, R), (q_lat.stride(0), q_lat.stride(1), 1)),
            (o.data_ptr(), (H, bs, R), (o.stride(1), o.stride(0), 1)))


def launch(q_lat, q, kv, cos, sin, o, opart, lse, kv_len: int, splits: int, tiles_per_split: int,
           nope: int, qk_scale: float, stages: int = 2, jit: bool = False):
    """Runs the kernel over (head blocks, sequences, splits); returns the compiled kernel where the JIT
    launched it, None where its launcher did. Read and written through TMA descriptors: the cache's
    latent columns and its raw RoPE columns (the kernel rotates the keys), cut at kv_len rows; q_lat
    (H, bs, R), a program's 64 heads of one sequence; o (bs, H, R), each warpgroup's 256 columns
    (unsplit). 4 warps per partition, 12 in all: at 168 registers each they fill the register file,
    and the partitions then rebalance them (CONSUMER_REGS). ``jit``: through the JIT even where a
    launcher is kept (the caller wants the compiled kernel back)."""
    H, bs, R = q_lat.shape
    split = splits > 1
    grid = (-(-H // BLOCK_H), bs, splits)
    runtime = (q, cos, sin, opart, lse, H, kv_len, tiles_per_split, qk_scale,
               q.stride(0), q.stride(1),
               opart.stride(0) if split else 0, opart.stride(1) if split else 0, opart.stride(2) if split else 0,
               lse.stride(0) if split else 0, lse.stride(1) if split else 0)
    key = None
    if DIRECT_LAUNCH and o.stride(-1) == 1 and not jit:
        views = _views(q_lat, kv, o, kv_len)
        key = (kv.device, nope, split, stages, tuple(map(arg_class, runtime)),
               tuple((ptr % 16, tuple(map(arg_class, shape)), tuple(map(arg_class, strides)))
                     for ptr, shape, strides in views))
        direct = _DIRECT.get(key)
        if direct is not None:
            descriptors = [a for i, view in enumerate(views) for a in direct.encoded(i, *view)]
            pointers = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in runtime)
            if direct(grid, raw_stream(kv.device), descriptors, pointers, (nope, split, stages, 4)):
                return None
            _DIRECT[key] = None
    kv_desc = _descriptor(kv[:, :kv_len, :R], [1, BLOCK_N, R])
    kpe_desc = _descriptor(kv[:, :kv_len, R:], [1, BLOCK_N, kv.shape[-1] - R])
    qlat_desc = _descriptor(q_lat, [BLOCK_H, 1, R])
    o_desc = _descriptor(o.permute(1, 0, 2), [BLOCK_H, 1, R // 2])  # (H, bs, R), as q_lat
    kernel = _mla_decode_kernel[grid](
        kv_desc, kpe_desc, qlat_desc, o_desc, *runtime,
        NOPE=nope, SPLIT=split, STAGES=stages, num_warps=4, maxnreg=168)
    if key is not None and key not in _DIRECT:
        _DIRECT[key] = DescriptorLauncher.create(kernel, 4)
    return kernel
