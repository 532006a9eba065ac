"""Block-sparse causal attention forward as a Gluon kernel for Hopper (sm_90): TMA loads into a
ring of shared-memory stages and warpgroup MMAs, which Triton's tile language on this host
(3.6) does not give an attention kernel (docs/benchmarks-block_sparse_attn.md).

One program: one 128-token query block of one (batch, head), its CSR row walked in order, two
warpgroups of 64 query rows each (the softmax of a row never leaves its warp). Per 128-key block:
  S  = q . k^T                  (wgmma, q and k from shared memory; fp32 accumulation)
  P  = exp2(S * scale - m)      (online softmax in registers; the row's last block, the
                                 diagonal one, masked causally)
  O += P . v                    (wgmma, P from registers in fp16, v from shared memory in fp16)
V is converted bf16 -> fp16 in place in shared memory (each thread rewrites the 16-byte pieces
it read).

The kernel is warp-specialised. A producer warpgroup issues the TMA loads into a 3-stage ring
(K and V of a block freed apart) and converts V; the two consumer warpgroups take turns (an
mbarrier ping-pong, FA3's schedule) to issue a block's scores and the previous block's P.V, and
each runs its softmax while the other's MMAs run. (A single partition of 8 warps in lockstep was
25% slower, and the ptxas of triton 3.6's wheel, CUDA 12.8, crashed on one form of it:
docs/benchmarks-block_sparse_attn.md, `git show cc4547c:submissions/block_sparse_attn/bsa_gluon.py`.)

The numbers are submission.py's Triton kernel's (PV_MODE = DIAG_MODE = "fp16", whose comment
says why): q.k^T of bf16 inputs accumulated in fp32, P and V in fp16 for P.V, o rounded to bf16
once, lse in natural log; padded query rows (token >= seq_len) and empty rows give o = 0,
lse = -inf.
"""
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

BLOCK = 128       # query rows per program, keys per CSR block
STAGES = 3        # K and V ring: 3 x 64 KB beside the 32 KB query block
LOG2E = gl.constexpr(1.4426950408889634)
WS_CONSUMER_REGS = gl.constexpr(232)
WS_PRODUCER_REGS = gl.constexpr(40)


@gluon.jit
def _v_to_fp16(v_buf, num_warps: gl.constexpr, CHUNKS: gl.constexpr = 1):
    """Rewrites a V block in place as fp16 (exact for the challenge's randn values; see
    submission.py). Each thread writes back the very 16-byte pieces it read, so no thread
    overwrites another's input; the caller fences and syncs before an MMA reads it."""
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
    vh = v_buf._reinterpret(gl.float16, v_buf.shape, v_buf.layout)
    ROWS: gl.constexpr = v_buf.shape[0] // CHUNKS
    for i in gl.static_range(CHUNKS):
        x = v_buf.slice(i * ROWS, ROWS).load(ld)
        vh.slice(i * ROWS, ROWS).store(x.to(gl.float16))


@gluon.jit
def _softmax_step(s, m_i, l_i, qk_scale, mask, MASKED: gl.constexpr):
    """Online softmax of one score tile in base 2: P (fp32), the old rows' rescale, new max and sum."""
    if MASKED:
        s = gl.where(mask, s, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
    alpha = gl.exp2(m_i - m_new)
    p = gl.exp2(s * qk_scale - m_new[:, None])
    return p, alpha, m_new, l_i * alpha + gl.sum(p, 1)


@gluon.jit
def _ws_producer(q_desc, k_desc, v_desc, q_s, k_s, v_s, q_bar, k_bar, v_bar, v16_bar, k_empty, v_empty, cols, base,
                 q_start, n):
    """TMA loads (the query block, then each key block's K and V as soon as both consumers are done
    with the K or V of block i-STAGES), and each V block converted to fp16 in place once it has landed."""
    STAGES: gl.constexpr = k_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    mbarrier.expect(q_bar, q_desc.block_type.nbytes)
    tma.async_copy_global_to_shared(q_desc, [base + q_start, 0], q_bar, q_s)
    for i in range(n + 1):
        if i < n:  # K once both consumers' scores of block i-STAGES are done, V once their P.V is
            st = i % STAGES
            row0 = base + gl.load(cols + i) * BN
            mbarrier.wait(k_empty.index(st), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(k_bar.index(st), k_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(k_desc, [row0, 0], k_bar.index(st), k_s.index(st))
            mbarrier.wait(v_empty.index(st), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(v_bar.index(st), v_desc.block_type.nbytes)
            tma.async_copy_global_to_shared(v_desc, [row0, 0], v_bar.index(st), v_s.index(st))
        if i > 0:  # block i-1's V, behind block i's loads
            sj = (i - 1) % STAGES
            mbarrier.wait(v_bar.index(sj), ((i - 1) // STAGES) & 1)
            _v_to_fp16(v_s.index(sj), 4, 8)  # in 16-row pieces: the producer has few registers
            fence_async_shared()
            gl.thread_barrier()
            mbarrier.arrive(v16_bar.index(sj), count=1)


@gluon.jit
def _ws_turn(turn_bar, WG: gl.constexpr, k):
    """Waits for this warpgroup's k-th turn to issue MMAs (warpgroup 0 goes first)."""
    mbarrier.wait(turn_bar.index(WG), (k & 1) ^ (1 - WG))


@gluon.jit
def _ws_softmax(s, m_i, l_i, qk_scale, diagonal, p_op: gl.constexpr, WG: gl.constexpr):
    """Block softmax of 64 rows (the diagonal block masked causally): P in fp16 as the next P.V's
    register operand, the accumulator's rescale, new max and sum."""
    BM: gl.constexpr = s.shape[0]
    BN: gl.constexpr = s.shape[1]
    if diagonal:
        rows = gl.arange(0, BM, layout=gl.SliceLayout(1, s.type.layout)) + WG * BM
        keys = gl.arange(0, BN, layout=gl.SliceLayout(0, s.type.layout))
        pf, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale, keys[None, :] <= rows[:, None], True)
    else:
        pf, alpha, m_i, l_i = _softmax_step(s, m_i, l_i, qk_scale, 0, False)
    return gl.convert_layout(pf.to(gl.float16), p_op), alpha, m_i, l_i


@gluon.jit
def _ws_consumer(q_s, k_s, v_s, o_desc, q_bar, k_bar, v16_bar, k_empty, v_empty, turn_bar, lse_ptr,
                 base, q_start, seq_len, n, qk_scale, WG: gl.constexpr):
    """64 query rows: per key block, its scores and the previous block's P.V issued in this warpgroup's
    turn, then its softmax while the other warpgroup's MMAs run."""
    STAGES: gl.constexpr = k_s.shape[0]
    BN: gl.constexpr = k_s.shape[1]
    D: gl.constexpr = k_s.shape[2]
    BM: gl.constexpr = o_desc.block_type.shape[0]
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    p_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    q_mine = q_s.slice(WG * BM, BM)
    m_i = gl.full([BM], float("-inf"), gl.float32, layout=gl.SliceLayout(1, mma))
    l_i = gl.zeros([BM], gl.float32, layout=gl.SliceLayout(1, mma))
    acc = gl.zeros([BM, D], gl.float32, layout=mma)
    s_zero = gl.zeros([BM, BN], gl.float32, layout=mma)
    mbarrier.wait(q_bar, 0)
    # Block 0: scores only.
    mbarrier.wait(k_bar.index(0), 0)
    _ws_turn(turn_bar, WG, 0)
    s_tok = warpgroup_mma(q_mine, k_s.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    mbarrier.arrive(turn_bar.index(1 - WG), count=1)
    s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(0), count=1)
    p, alpha, m_i, l_i = _ws_softmax(s, m_i, l_i, qk_scale, n == 1, p_op, WG)
    for t in range(1, n):  # block t's scores and block t-1's P.V in one turn
        st = t % STAGES
        sp = (t - 1) % STAGES
        mbarrier.wait(k_bar.index(st), (t // STAGES) & 1)
        mbarrier.wait(v16_bar.index(sp), ((t - 1) // STAGES) & 1)
        _ws_turn(turn_bar, WG, t)
        s_tok = warpgroup_mma(q_mine, k_s.index(st).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        v16 = v_s.index(sp)._reinterpret(gl.float16, [BN, D], v_s.layout)
        acc_tok = warpgroup_mma(p, v16, acc, is_async=True)
        mbarrier.arrive(turn_bar.index(1 - WG), count=1)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))  # the scores; P.V runs on under the softmax
        mbarrier.arrive(k_empty.index(st), count=1)  # this warpgroup is done with block t's K
        p, alpha, m_i, l_i = _ws_softmax(s, m_i, l_i, qk_scale, t == n - 1, p_op, WG)
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
        mbarrier.arrive(v_empty.index(sp), count=1)  # and with block t-1's V
        acc = acc * alpha[:, None]
    # The last block's P.V.
    sp = (n - 1) % STAGES
    mbarrier.wait(v16_bar.index(sp), ((n - 1) // STAGES) & 1)
    _ws_turn(turn_bar, WG, n)
    v16 = v_s.index(sp)._reinterpret(gl.float16, [BN, D], v_s.layout)
    acc_tok = warpgroup_mma(p, v16, acc, is_async=True)
    mbarrier.arrive(turn_bar.index(1 - WG), count=1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))
    mbarrier.arrive(v_empty.index(sp), count=1)

    # o through this warpgroup's half of the query buffer (its scores are all done) and a TMA store.
    q_rows = q_start + WG * BM + gl.arange(0, BM, layout=gl.SliceLayout(1, mma))
    live = q_rows < seq_len
    gl.store(lse_ptr + base + q_rows, gl.where(live, (m_i + gl.log2(l_i)) / LOG2E, float("-inf")))
    q_mine.store(gl.where(live[:, None], acc / l_i[:, None], 0.0).to(gl.bfloat16))
    fence_async_shared()
    gl.thread_barrier()
    tma.async_copy_shared_to_global(o_desc, [base + q_start + WG * BM, 0], q_mine)
    tma.store_wait(0)


@gluon.jit(do_not_specialize=["H", "NNZ"])
def _bsa_fwd_ws(q_desc, k_desc, v_desc, o_desc, o_ptr, lse_ptr, row_ptr, col_idx, seq_lens, H, NNZ, T_MAX, qk_scale,
                STAGES: gl.constexpr, num_warps: gl.constexpr):
    BM: gl.constexpr = q_desc.block_type.shape[0]
    D: gl.constexpr = q_desc.block_type.shape[1]
    BN: gl.constexpr = k_desc.block_type.shape[0]
    qb = gl.program_id(0)
    bh = gl.program_id(1)
    seq_len = gl.load(seq_lens + bh // H)
    row = row_ptr + bh * (T_MAX // BM + 1) + qb
    start = gl.load(row)
    n = gl.load(row + 1) - start
    q_start = qb * BM
    base = bh * T_MAX
    if (q_start >= seq_len) | (n <= 0):
        zl: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [num_warps, 1], [1, 0])
        rows = q_start + gl.arange(0, BM, layout=gl.SliceLayout(1, zl))
        cols_d = gl.arange(0, D, layout=gl.SliceLayout(0, zl))
        gl.store(o_ptr + (base + rows)[:, None].to(gl.int64) * D + cols_d[None, :],
                 gl.zeros([BM, D], gl.bfloat16, layout=zl))
        gl.store(lse_ptr + base + rows, gl.full([BM], float("-inf"), gl.float32, layout=gl.SliceLayout(1, zl)))
    else:
        q_s = gl.allocate_shared_memory(gl.bfloat16, [BM, D], q_desc.layout)
        k_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, D], k_desc.layout)
        v_s = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BN, D], v_desc.layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        k_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v16_bar = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
        turn_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        mbarrier.init(q_bar, count=1)
        for i in gl.static_range(STAGES):
            mbarrier.init(k_bar.index(i), count=1)
            mbarrier.init(v_bar.index(i), count=1)
            mbarrier.init(v16_bar.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)  # one arrival per consumer
            mbarrier.init(v_empty.index(i), count=2)
        for i in gl.static_range(2):
            mbarrier.init(turn_bar.index(i), count=1)
        fence_async_shared()
        cols = col_idx + bh.to(gl.int64) * NNZ + start
        gl.warp_specialize([
            (_ws_consumer, (q_s, k_s, v_s, o_desc, q_bar, k_bar, v16_bar, k_empty, v_empty, turn_bar, lse_ptr,
                            base, q_start, seq_len, n, qk_scale, 0)),
            (_ws_consumer, (q_s, k_s, v_s, o_desc, q_bar, k_bar, v16_bar, k_empty, v_empty, turn_bar, lse_ptr,
                            base, q_start, seq_len, n, qk_scale, 1)),
            (_ws_producer, (q_desc, k_desc, v_desc, q_s, k_s, v_s, q_bar, k_bar, v_bar, v16_bar, k_empty, v_empty, cols,
                            base, q_start, n)),
        ], [4, 4], [WS_CONSUMER_REGS, WS_PRODUCER_REGS])


def supported(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """Whether this kernel runs the call: a Hopper GPU, bf16, head dim 128, contiguous tensors TMA can
    read (16-byte aligned bases), t_max a multiple of the block."""
    B, H, T, D = q.shape
    return (q.is_cuda and torch.cuda.get_device_capability(q.device)[0] == 9 and D == BLOCK and T % BLOCK == 0
            and all(t.dtype == torch.bfloat16 and t.shape == q.shape and t.is_contiguous() and t.data_ptr() % 16 == 0
                    for t in (q, k, v)))


_LAYOUTS = {}


def _descriptor(t: torch.Tensor, block_rows: int = BLOCK) -> TensorDescriptor:
    """A TMA descriptor over a contiguous (..., 128) tensor seen as (rows, 128), blocks of block_rows."""
    d = t.shape[-1]
    layout = _LAYOUTS.get(block_rows)
    if layout is None:
        layout = _LAYOUTS[block_rows] = gl.NVMMASharedLayout.get_default_for([block_rows, d], gl.bfloat16)
    return TensorDescriptor(t, [t.numel() // d, d], [d, 1], [block_rows, d], layout)


N_RUNTIME_ARGS = 13  # the kernel's arguments before the constexprs


def grid(q) -> tuple:
    B, H, T, D = q.shape
    return (T // BLOCK, B * H)


def arguments(q, k, v, row_ptr, col_idx, seq_lens, o, lse, qk_scale: float, stages: int) -> tuple:
    """The kernel's arguments, runtime ones then constexprs (STAGES, num_warps), for a direct launch.
    o leaves in 64-row blocks, one per consumer warpgroup."""
    return (_descriptor(q), _descriptor(k), _descriptor(v), _descriptor(o, BLOCK // 2),
            *other_arguments(q, row_ptr, col_idx, seq_lens, o, lse, qk_scale, stages))


def other_arguments(q, row_ptr, col_idx, seq_lens, o, lse, qk_scale: float, stages: int) -> tuple:
    """The arguments after the four descriptors."""
    return (o, lse, row_ptr, col_idx, seq_lens, q.shape[1], col_idx.shape[-1], q.shape[2], qk_scale, stages, 4)


class DirectLauncher:
    """Launches a compiled kernel through the raw C launcher under Triton's Python one, with the
    four TMA descriptors (q, k, v, o) encoded once per address instead of on every call.

    Per call Triton 3.6 builds a TensorDescriptor object per tensor and its launcher encodes each
    (cuTensorMapEncodeTiled) before the launch: in the original's native protocol, where every
    host step is slow, that was ~0.1 ms of a 0.3 ms return (docs/benchmarks-block_sparse_attn.md).
    An encoded descriptor is a function of the tensor's address, its (rows, 128) shape and the
    block, never of its contents, so one cached by those cannot go stale: a later tensor at the
    same address and size gets the same descriptor it would be encoded to. The cache keeps the
    last 64. Built from the compiled kernel's launcher internals; ``create`` returns None where
    they differ (another Triton), and the caller keeps the ordinary launch."""

    CACHE = 64

    def __init__(self, kernel, n_args: int, fill, dtype_to_host):
        run = kernel.run
        cells = dict(zip(run.launch.__code__.co_freevars, (c.cell_contents for c in run.launch.__closure__)))
        self.raw, self.meta = cells["launcher"], cells["tensordesc_meta"]
        if (len(self.meta) != 4 or any(m is None for m in self.meta) or run.global_scratch_size
                or run.profile_scratch_size or run.launch_cooperative_grid):
            raise TypeError("not the launcher this was written for")
        self.base = (kernel.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                     kernel.packed_metadata, None, None, None)
        self.n_args, self.fill, self.to_host, self.maps = n_args, fill, dtype_to_host, {}

    @classmethod
    def create(cls, kernel, n_args: int):
        try:
            from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
            from triton.runtime.driver import driver
            return cls(kernel, n_args, driver.active.utils.fill_tma_descriptor, TMA_DTYPE_DEVICE_TO_HOST)
        except Exception:  # noqa: BLE001 - any difference in Triton's internals: the ordinary launch
            return None

    def _map(self, t: torch.Tensor, meta: dict) -> list:
        rows, d = t.numel() // t.shape[-1], t.shape[-1]
        key = (t.data_ptr(), rows, d, tuple(meta["block_size"]))
        found = self.maps.get(key)
        if found is None:
            if len(self.maps) >= self.CACHE:
                self.maps.pop(next(iter(self.maps)))
            found = self.maps[key] = [self.fill(t.data_ptr(), meta["swizzle"], meta["elem_size"],
                                                self.to_host[meta["elem_type"]], meta["block_size"],
                                                [rows, d], [d, 1], 0), rows, d, d, 1]
        return found

    def __call__(self, grid, stream, q, k, v, o, rest: tuple) -> None:
        """``rest``: the arguments after the four descriptors (as ``arguments`` gives them)."""
        args = [*self._map(q, self.meta[0]), *self._map(k, self.meta[1]), *self._map(v, self.meta[2]),
                *self._map(o, self.meta[3]), *rest]
        self.raw(grid[0], grid[1], 1, stream, *self.base, *args[:self.n_args + 4 * 4])


def launch(q, k, v, row_ptr, col_idx, seq_lens, o, lse, qk_scale: float, stages: int = STAGES):
    """Runs the kernel over (query blocks, batch x heads) through Triton's JIT and returns the compiled
    kernel; q, k, v, o contiguous (B, H, T, 128) bf16. 4 warps per partition, 12 in all: at 168
    registers each they fill the register file, and the partitions then rebalance them."""
    args = arguments(q, k, v, row_ptr, col_idx, seq_lens, o, lse, qk_scale, stages)[:N_RUNTIME_ARGS]
    return _bsa_fwd_ws[grid(q)](*args, STAGES=stages, num_warps=4, maxnreg=168)
