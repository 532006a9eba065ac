"""Block-sparse causal attention forward (attention-kernel challenge contract).

On a Hopper GPU the call runs the Gluon kernel of bsa_gluon.py (persistent and warp-specialised:
a TMA producer, two consumer warpgroups in ping-pong; README.md); the
Triton kernel below runs everywhere else (the interpreter, other GPUs, other shapes). Both
compute the same numbers.

One program per (batch, head, 128-token query block) walks its CSR row with an online
softmax in fp32: the row's off-diagonal key blocks with no mask at all, then its last
entry (the diagonal block) with the causal mask (BLOCK_M = 64 splits a row in two programs). Padded query blocks (at or past
seq_len) only write o = 0 and lse = -inf; padded rows of the last valid block are
zeroed at the store.

Precision: q, k, v arrive in bf16, so QK^T on bf16 tensor cores with fp32 accumulation
computes the same products as an fp32 matmul: the scores (hence lse, checked at 1e-5)
are fp32-exact up to summation order. The PV product takes P and V in fp16 (PV_MODE,
below, says why): P rounded to bf16 misses the o tolerance by one element on about 2% of
fresh seeds, as FlexAttention in bf16 does; fp16 keeps 3 more mantissa bits at the same
tensor-core rate. Never TF32 (10-bit mantissa on the scores would miss the lse tolerance).
V is converted bf16 -> fp16 in registers: exact for |v| in [6e-5, 65504] (the challenge's
randn inputs); smaller values lose bits below 2^-24, larger ones would overflow.

Under TRITON_INTERPRET=1 (constexpr UPCAST) the operands are upcast to fp32, since Triton's
interpreter multiplies bf16 bit patterns in tl.dot (triton-lang/triton#11584), and the
CSR walk is a while loop (triton 3.6's interpreter fails on range() over loaded bounds).

Assumes the challenge's CSR invariants: each row sorted ascending, causal (kb <= qb),
below ceil(seq_len/128), the diagonal block last.
"""
import math
import os

import torch
import triton
import triton.language as tl

try:  # Hopper only; Triton builds without Gluon's Hopper API, and the interpreter, use the Triton kernel
    import bsa_gluon as _gluon
except ImportError:
    _gluon = None

BLOCK = 128
HEAD_DIM = 128
LOG2E = 1.4426950408889634
QK_SCALE = LOG2E / math.sqrt(HEAD_DIM)  # scores in log2 units: exp2 is one instruction

# One variant per family; they share one kernel (the family is not known at call time and
# the CSR makes every row self-describing), tuned per size in CONFIGS.
VARIANT_MANIFEST = [
    {"name": "sliding-window", "families": ["sliding_window"]},
    {"name": "window-global", "families": ["sliding_window_global"]},
    {"name": "window-retrieval", "families": ["sliding_window_retrieval"]},
]

# (BLOCK_M, BLOCK_N, num_warps, num_stages) by t_max; swept on an H100
# (8375f69, bench/block_sparse_attn/block_sparse_attn_sweep.py): 2 stages beat
# 3 by 0.8-1.6% on every full case (all t_max = 8192); 4 stages, BLOCK_N = 64, BLOCK_M = 64
# and 4 or 16 warps were slower.
CONFIGS = {"default": (128, 128, 8, 2)}


@triton.jit
def _attend(acc, m_i, l_i, q, k_ptrs, v_ptrs, kv_tok, q_tok, qk_scale,
            CAUSAL: tl.constexpr, PRECISE: tl.constexpr, UPCAST: tl.constexpr):
    k = tl.load(k_ptrs)
    v = tl.load(v_ptrs)
    if UPCAST:
        s = tl.dot(q, tl.trans(k.to(tl.float32)), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = s * qk_scale
    if CAUSAL:
        s = tl.where(kv_tok[None, :] <= q_tok[:, None], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, 1))
    alpha = tl.math.exp2(m_i - m_new)
    p = tl.math.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    if UPCAST:
        acc = tl.dot(p, v.to(tl.float32), acc, input_precision="ieee")
    elif PRECISE == 2:  # P and V in fp16: P good to 2^-12 (bf16 V converts exactly)
        acc = tl.dot(p.to(tl.float16), v.to(tl.float16), acc)
    elif PRECISE == 1:  # P = hi + lo in two bf16 parts: PV good to ~2^-16
        p_hi = p.to(v.dtype)
        p_lo = (p - p_hi.to(tl.float32)).to(v.dtype)
        acc = tl.dot(p_hi, v, acc)
        acc = tl.dot(p_lo, v, acc)
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, m_new, l_i


@triton.jit
def _kv_block(acc, m_i, l_i, q, k_base, v_base, kb, qb, q_start, q_tok, offs_n, offs_d, qk_scale,
              DIAGONAL: tl.constexpr, PRECISE: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, D: tl.constexpr, UPCAST: tl.constexpr):
    """One 128-token key block, in BLOCK_N slices. DIAGONAL: mask causally when kb == qb
    and skip slices entirely above the diagonal."""
    for sub in tl.static_range(128 // BLOCK_N):
        kv_tok = kb * 128 + sub * BLOCK_N + offs_n
        off = kv_tok[:, None] * D + offs_d[None, :]
        if DIAGONAL:
            if kb != qb:
                acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_base + off, v_base + off, kv_tok, q_tok,
                                        qk_scale, False, PRECISE, UPCAST)
            elif kb * 128 + sub * BLOCK_N < q_start + BLOCK_M:
                acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_base + off, v_base + off, kv_tok, q_tok,
                                        qk_scale, True, PRECISE, UPCAST)
        else:
            acc, m_i, l_i = _attend(acc, m_i, l_i, q, k_base + off, v_base + off, kv_tok, q_tok,
                                    qk_scale, False, PRECISE, UPCAST)
    return acc, m_i, l_i


@triton.jit(do_not_specialize=["H", "NNZ"])
def _bsa_fwd(Q, K, V, O, LSE, ROW_PTR, COL_IDX, SEQ_LENS, H, NNZ, T_MAX, qk_scale,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr, UPCAST: tl.constexpr,
             PV_MODE: tl.constexpr = 1, DIAG_MODE: tl.constexpr = 1, REVERSE: tl.constexpr = False):
    pid = tl.program_id(0)         # fastest: neighbouring programs share K/V blocks in L2
    if REVERSE:                    # the heavy (late) query blocks of a head first
        pid = tl.num_programs(0) - 1 - pid
    bh = tl.program_id(1)
    b = bh // H
    n_blocks = T_MAX // 128
    seq_len = tl.load(SEQ_LENS + b)
    q_start = pid * BLOCK_M        # BLOCK_M = 128 (one CSR row) or 64 (half a row)
    qb = q_start // 128
    head = bh.to(tl.int64) * T_MAX * D
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    q_tok = q_start + offs_m
    o_ptrs = O + head + q_tok[:, None] * D + offs_d[None, :]
    lse_ptrs = LSE + bh.to(tl.int64) * T_MAX + q_tok
    row = ROW_PTR + bh * (n_blocks + 1) + qb
    row_start = tl.load(row)
    row_end = tl.load(row + 1)
    if (q_start >= seq_len) | (row_end <= row_start):
        tl.store(o_ptrs, tl.zeros([BLOCK_M, D], dtype=O.dtype.element_ty))
        tl.store(lse_ptrs, tl.full([BLOCK_M], float("-inf"), tl.float32))
    else:
        q = tl.load(Q + head + q_tok[:, None] * D + offs_d[None, :])
        if UPCAST:
            q = q.to(tl.float32)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        cols = COL_IDX + bh.to(tl.int64) * NNZ
        # Off-diagonal blocks: nothing to mask. (Interpreted: a while loop, since triton
        # 3.6's interpreter cannot take loaded bounds in range() under numpy >= 2.4; compiled:
        # range(), which Triton software-pipelines.)
        if UPCAST:
            j = row_start
            while j < row_end - 1:
                acc, m_i, l_i = _kv_block(acc, m_i, l_i, q, K + head, V + head, tl.load(cols + j), qb,
                                          q_start, q_tok, offs_n, offs_d, qk_scale, False, PV_MODE,
                                          BLOCK_M, BLOCK_N, D, UPCAST)
                j += 1
        else:
            for j in range(row_start, row_end - 1):
                acc, m_i, l_i = _kv_block(acc, m_i, l_i, q, K + head, V + head, tl.load(cols + j), qb,
                                          q_start, q_tok, offs_n, offs_d, qk_scale, False, PV_MODE,
                                          BLOCK_M, BLOCK_N, D, UPCAST)
        # The diagonal block: causal mask. Its first query rows see only a few keys of it,
        # which can carry most of the softmax weight: bf16 P there misses the o tolerance
        # (seen on an H100: once in 8M elements on a fresh quick-window seed, a 2-ulp error
        # at |o| ~ 0.3); DIAG_MODE (fp16 by default, like the other blocks) sets its P.
        kb = tl.load(cols + row_end - 1)
        acc, m_i, l_i = _kv_block(acc, m_i, l_i, q, K + head, V + head, kb, qb, q_start, q_tok,
                                  offs_n, offs_d, qk_scale, True, DIAG_MODE, BLOCK_M, BLOCK_N, D, UPCAST)
        live = q_tok < seq_len
        o = tl.where(live[:, None], acc / l_i[:, None], 0.0)
        lse = tl.where(live, (m_i + tl.math.log2(l_i)) / 1.4426950408889634, float("-inf"))
        tl.store(o_ptrs, o.to(O.dtype.element_ty))
        tl.store(lse_ptrs, lse)


# How P meets V in the PV product, off the diagonal (PV_MODE) and on it (DIAG_MODE):
# "bf16": P rounded to bf16 (8 bits): 9 of 360 timed calls of `full` missed the o tolerance
#   by one element (2 bf16 ulps; bench/block_sparse_attn/bsa_precision_sweep.py, H100, 2026-11-23).
# "split": P = hi + lo, two bf16 parts, two PV dots (~2^-16): 0/288 calls missed, but 1.5x
#   the PV work: 19-28% more time than "bf16".
# "fp16": P and V in fp16 (11 bits, P good to 2^-11 relative; a single key's rounding
#   cannot reach the 1-ulp gap the checker allows): 0/297 + 0/243 calls of full/broad missed (worst
#   |err|/tol 0.744, a 1-ulp disagreement), 0/414 fresh timed calls under kbench eval;
#   ~5% slower than "bf16" (the V conversion), kbench compare vs "split": 0.823x time.
PV = {"split": 1, "fp16": 2, "bf16": 0}
PV_MODE = "fp16"   # off-diagonal blocks
DIAG_MODE = "fp16"  # the diagonal block
# Launch the query blocks of a head last-first (the heavy late rows first, the cheap first
# rows and padded blocks in the tail): kbench compare said SAME (0.995, 0.985-1.005).
REVERSE = False
# ptxas's register cap per thread (0: Triton's default). At 232 the kernel still spills nothing
# (254 registers by default) and kbench compare said FASTER on every full case, geomean 0.983
# (0.973-0.993), 8 processes a side (H100, 420c747; README.md).
MAXNREG = 232
# On a Hopper GPU, the Gluon kernel of bsa_gluon.py (persistent, warp-specialised: TMA producer, ping-pong consumers);
# the Triton kernel above everywhere else (the interpreter, other GPUs, other shapes).
GLUON = True
GLUON_STAGES = 3  # its V ring (3 x 32 KB beside a K ring of 2 and two 32 KB query buffers)


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _config(t_max: int):
    return CONFIGS.get(t_max, CONFIGS["default"])


# Launch path: Triton's JIT dispatch (argument binding, specialisation key, cache lookup,
# global-value checks) costs tens of microseconds of Python per call. Once a launch has
# compiled a kernel for a (config, flags, dtypes, device), later calls whose arguments fall
# in the same specialisation (every pointer 16-byte aligned, T a multiple of 16: the
# contract's contiguous inputs and t_max % 128 == 0) call the compiled kernel directly.
FAST_LAUNCH = True
_COMPILED = {}
_ARG_COUNTS = {}     # key -> how many of the arguments its launcher takes (found on first use)
# The Gluon kernel's launches go one step further down (bsa_gluon.DirectLauncher): its raw C
# launcher, with the TMA descriptors encoded once per address rather than on every call.
DIRECT_DESCRIPTORS = True
_DIRECT = {}         # key -> bsa_gluon.DirectLauncher, or None where Triton's internals differ
N_RUNTIME_ARGS = 12  # _bsa_fwd's arguments before the constexprs


def _run_direct(key, kernel, grid, device, args, n_runtime=N_RUNTIME_ARGS) -> bool:
    """Launch the compiled kernel through its C launcher. Launchers of some Triton versions take
    the constexpr values after the runtime arguments (3.6 does), others not: the first call
    tries both; a launcher that takes neither (a TypeError, raised before anything is
    launched) sends this layout back to the JIT path for good."""
    stream = torch.cuda.current_stream(device).cuda_stream
    counts = _ARG_COUNTS.get(key, (len(args), n_runtime))
    for n in counts:
        try:
            kernel.run(grid[0], grid[1], 1, stream, kernel.function, kernel.packed_metadata, None, None, None,
                       *args[:n])
        except TypeError:
            continue
        _ARG_COUNTS[key] = (n,)
        return True
    _COMPILED.pop(key, None)
    _ARG_COUNTS[key] = ()
    return False


def _launch(q, k, v, row_ptr, col_idx, seq_lens, o, lse):
    B, H, T, D = q.shape
    block_m, block_n, warps, stages = _config(T)
    grid = (T // block_m, B * H)
    interpreted = _interpreted()
    if GLUON and not interpreted and _gluon is not None and _gluon.supported(q, k, v):
        _launch_gluon(q, k, v, row_ptr, col_idx, seq_lens, o, lse)
        return
    args = (q, k, v, o, lse, row_ptr, col_idx, seq_lens, H, col_idx.shape[-1], T, QK_SCALE,
            block_m, block_n, D, interpreted, PV[PV_MODE], PV[DIAG_MODE], REVERSE)
    key = None
    if FAST_LAUNCH and not interpreted and T % 16 == 0 and all(
            t.data_ptr() % 16 == 0 for t in (q, k, v, o, lse, row_ptr, col_idx, seq_lens)):
        key = (block_m, block_n, warps, stages, MAXNREG, D, PV_MODE, DIAG_MODE, REVERSE, q.device, q.dtype,
               row_ptr.dtype, col_idx.dtype, seq_lens.dtype)
        kernel = _COMPILED.get(key)
        if kernel is not None and _run_direct(key, kernel, grid, q.device, args):
            return
    kernel = _bsa_fwd[grid](*args[:N_RUNTIME_ARGS], BLOCK_M=block_m, BLOCK_N=block_n, D=D, UPCAST=interpreted,
                            PV_MODE=PV[PV_MODE], DIAG_MODE=PV[DIAG_MODE], REVERSE=REVERSE,
                            num_warps=warps, num_stages=stages, **({"maxnreg": MAXNREG} if MAXNREG else {}))
    if key is not None and kernel is not None and _ARG_COUNTS.get(key) != ():
        _COMPILED[key] = kernel


def _launch_gluon(q, k, v, row_ptr, col_idx, seq_lens, o, lse):
    """The Gluon kernel, launched directly once compiled (as _launch does the Triton one): through
    the JIT's dispatch the call took ~0.7 ms to return in the native protocol on the H100 host,
    ~0.3 ms launched directly (9018391)."""
    key = ("gluon", GLUON_STAGES, q.device, row_ptr.dtype, col_idx.dtype, seq_lens.dtype)
    aligned = FAST_LAUNCH and all(t.data_ptr() % 16 == 0 for t in (o, lse, row_ptr, col_idx, seq_lens))
    kernel = _COMPILED.get(key) if aligned else None
    if kernel is not None:
        direct = _DIRECT.get(key) if DIRECT_DESCRIPTORS else None
        if direct is not None:
            stream = _gluon.raw_stream(q.device)
            try:
                direct(_gluon.grid(q), stream, q, k, v, o,
                       _gluon.other_arguments(q, row_ptr, col_idx, seq_lens, o, lse, QK_SCALE, GLUON_STAGES, stream))
                return
            except TypeError:   # the C launcher refused the arguments (before launching): launch as before
                _DIRECT[key] = None
        args = _gluon.arguments(q, k, v, row_ptr, col_idx, seq_lens, o, lse, QK_SCALE, GLUON_STAGES)
        if _run_direct(key, kernel, _gluon.grid(q), q.device, args, _gluon.N_RUNTIME_ARGS):
            if DIRECT_DESCRIPTORS and key not in _DIRECT:   # from the next call on (its argument count is known now)
                _DIRECT[key] = _gluon.DirectLauncher.create(kernel, _ARG_COUNTS[key][0])
            return
    kernel = _gluon.launch(q, k, v, row_ptr, col_idx, seq_lens, o, lse, QK_SCALE, GLUON_STAGES)
    if aligned and kernel is not None and _ARG_COUNTS.get(key) != ():
        _COMPILED[key] = kernel


def _outputs(q):
    B, H, T, D = q.shape
    return torch.empty_like(q), q.new_empty((B, H, T), dtype=torch.float32)


# The next call's o and lse, made at the end of a call, after its launch, while the GPU runs: the
# two allocations then leave the path from the call's start to its kernel's (~0.1 ms of it in the
# original's native protocol, where input generation leaves the host's caches cold). At most one
# pair is held, for the last call's (shape, device, stream); the kernel writes every element of
# both, so nothing in them is ever read. Off the lean path, the outputs are made as usual.
_SPARE = {}


def _launch_lean(q, k, v, row_ptr, col_idx, seq_lens):
    """The Gluon kernel's launch once its direct launcher exists, asking torch as little as it can: in
    the native protocol each tensor query costs 1-2 us of a cold host (ff28a0e).
    Checks what _launch and supported() check (the launcher's key stands for the device and the index
    dtypes) and returns (o, lse), launched; or None, having launched nothing, where anything differs."""
    if not (FAST_LAUNCH and GLUON and DIRECT_DESCRIPTORS) or _interpreted():
        return None
    device = q.device
    direct = _DIRECT.get(("gluon", GLUON_STAGES, device, row_ptr.dtype, col_idx.dtype, seq_lens.dtype))
    shape = q.shape
    if (direct is None or shape[3] != _gluon.BLOCK or shape[2] % _gluon.BLOCK or k.shape != shape
            or v.shape != shape or q.dtype != torch.bfloat16 or k.dtype != torch.bfloat16
            or v.dtype != torch.bfloat16 or not (q.is_contiguous() and k.is_contiguous() and v.is_contiguous())
            or not (k.is_cuda and v.is_cuda and row_ptr.is_cuda and col_idx.is_cuda and seq_lens.is_cuda)):
        return None
    q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
    index_ptrs = (row_ptr.data_ptr(), col_idx.data_ptr(), seq_lens.data_ptr())
    if (q_ptr | k_ptr | v_ptr | index_ptrs[0] | index_ptrs[1] | index_ptrs[2]) % 16:
        return None
    stream = _gluon.raw_stream(device)
    key = (shape, device, stream)
    o, lse = _SPARE.pop(key, None) or _outputs(q)   # fresh blocks of the caching allocator: 512-byte aligned
    direct.launch_pointers(device, stream, (q_ptr, k_ptr, v_ptr, o.data_ptr(), lse.data_ptr(), *index_ptrs),
                           shape, col_idx.shape[-1], QK_SCALE, GLUON_STAGES)
    _SPARE.clear()
    try:
        _SPARE[key] = _outputs(q)
    except torch.OutOfMemoryError:   # the call is launched; only the next one's head start is lost
        pass
    return o, lse


def block_sparse_attn_fwd(q, k, v, row_ptr, col_idx, seq_lens):
    row_ptr, col_idx, seq_lens = row_ptr.contiguous(), col_idx.contiguous(), seq_lens.contiguous()
    out = _launch_lean(q, k, v, row_ptr, col_idx, seq_lens) if _DIRECT else None
    if out is None:
        out = _outputs(q)
        _launch(q, k, v, row_ptr, col_idx, seq_lens, *out)
    return out


def setup(suite_specs, device, variants):
    """Compile every configuration the suite's shapes use, on tiny all-empty inputs."""
    seen = set()
    for spec in suite_specs:
        config = _config(spec.t_max)
        if config in seen:
            continue
        seen.add(config)
        t = BLOCK  # one query block is enough: the kernel is specialised on dtypes/constexprs only
        q = torch.zeros((1, 1, t, HEAD_DIM), device=device, dtype=torch.bfloat16)
        row_ptr = torch.zeros((1, 1, t // BLOCK + 1), device=device, dtype=torch.int32)
        col_idx = torch.zeros((1, 1, 1), device=device, dtype=torch.int32)
        seq_lens = torch.full((1,), t, device=device, dtype=torch.int32)
        o, lse = torch.empty_like(q), torch.empty((1, 1, t), device=device, dtype=torch.float32)
        _launch(q, q, q, row_ptr, col_idx, seq_lens, o, lse)   # compiles, and keeps the kernel
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
