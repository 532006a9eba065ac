"""qknorm: RMSNorm of q and k heads in ONE Triton launch, read in place from the fused QKV.

The GPU work is tiny (at most a few MB in the original cases), so the host side of a
call decides the time: after the first call for a given layout the compiled kernel is
launched directly (no argument binding or specialisation in Python), and each output
is one plain allocation. q and k stay strided views: no .contiguous() copies.
"""
import os

import torch
import triton
import triton.language as tl

EPS = 1e-6
ROW_ELEMS = 2048   # elements a program normalises: rows per program = ROW_ELEMS // head_dim
NUM_WARPS = 4


@triton.jit
def _qknorm_kernel(q_ptr, k_ptr, w_ptr, qo_ptr, ko_ptr,
                   Q_ROWS: tl.constexpr, K_ROWS: tl.constexpr,
                   Q_HEADS: tl.constexpr, K_HEADS: tl.constexpr,
                   Q_TOKEN_STRIDE: tl.constexpr, Q_HEAD_STRIDE: tl.constexpr,
                   K_TOKEN_STRIDE: tl.constexpr, K_HEAD_STRIDE: tl.constexpr,
                   D: tl.constexpr, BLOCK_ROWS: tl.constexpr, Q_PROGRAMS: tl.constexpr,
                   EPS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, D)
    w = tl.load(w_ptr + cols).to(tl.float32)
    if pid < Q_PROGRAMS:  # uniform per program: the first programs normalise q, the rest k
        rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        mask = rows < Q_ROWS
        src = (rows // Q_HEADS) * Q_TOKEN_STRIDE + (rows % Q_HEADS) * Q_HEAD_STRIDE
        x = tl.load(q_ptr + src[:, None] + cols[None, :], mask=mask[:, None], other=0.0).to(tl.float32)
        y = x * tl.rsqrt(tl.sum(x * x, axis=1) / D + EPS)[:, None] * w[None, :]
        tl.store(qo_ptr + rows[:, None] * D + cols[None, :], y.to(qo_ptr.dtype.element_ty), mask=mask[:, None])
    else:
        rows = (pid - Q_PROGRAMS) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        mask = rows < K_ROWS
        src = (rows // K_HEADS) * K_TOKEN_STRIDE + (rows % K_HEADS) * K_HEAD_STRIDE
        x = tl.load(k_ptr + src[:, None] + cols[None, :], mask=mask[:, None], other=0.0).to(tl.float32)
        y = x * tl.rsqrt(tl.sum(x * x, axis=1) / D + EPS)[:, None] * w[None, :]
        tl.store(ko_ptr + rows[:, None] * D + cols[None, :], y.to(ko_ptr.dtype.element_ty), mask=mask[:, None])


def _token_layout(x):
    """(tokens, heads, token stride, head stride) of a (..., heads, D) view with unit last stride,
    or None when its leading dimensions cannot be walked as one strided token index."""
    if x.dim() < 2 or x.stride(-1) != 1:
        return None
    heads, head_stride = x.shape[-2], x.stride(-2)
    tokens, token_stride = 1, heads * head_stride
    lead = list(zip(x.shape[:-2], x.stride()[:-2]))
    if lead:
        token_stride = lead[-1][1]
        expected = token_stride
        for size, stride in reversed(lead):
            if size != 1 and stride != expected:
                return None
            expected = stride * size
            tokens *= size
    return tokens, heads, token_stride, head_stride


def _block_rows(d):
    return max(1, ROW_ELEMS // d)


def _interpreted(x):
    return x.device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


_LAUNCHERS = {}


def _build(q, k, w):
    """A launcher specialised to this layout: strides and sizes are compile-time constants."""
    lq, lk = _token_layout(q), _token_layout(k)
    if lq is None or lk is None or w.stride(-1) != 1 or q.shape[-1] & (q.shape[-1] - 1):
        return None
    d = q.shape[-1]
    block = _block_rows(d)
    q_rows, k_rows = lq[0] * lq[1], lk[0] * lk[1]
    q_programs = triton.cdiv(q_rows, block)
    grid = (q_programs + triton.cdiv(k_rows, block),)
    meta = dict(Q_ROWS=q_rows, K_ROWS=k_rows, Q_HEADS=lq[1], K_HEADS=lk[1],
                Q_TOKEN_STRIDE=lq[2], Q_HEAD_STRIDE=lq[3], K_TOKEN_STRIDE=lk[2], K_HEAD_STRIDE=lk[3],
                D=d, BLOCK_ROWS=block, Q_PROGRAMS=q_programs, EPS=EPS)
    q_shape, k_shape, dtype, device = q.shape, k.shape, q.dtype, q.device
    if _interpreted(q):
        def launch(q, k, w):
            qo = torch.empty(q_shape, dtype=dtype, device=device)
            ko = torch.empty(k_shape, dtype=dtype, device=device)
            _qknorm_kernel[grid](q, k, w, qo, ko, **meta, num_warps=NUM_WARPS)
            return qo, ko
        return launch

    consts = tuple(meta.values())  # in the kernel's parameter order
    # torch.empty_like costs the host less than torch.empty with a shape, dtype and device (3.8 against
    # 6.9 us on the H100 host); it gives a contiguous tensor for a strided view, but copies a dense
    # layout's strides, which the kernel's row-major writes would not match: then torch.empty.
    like_q, like_k = torch.empty_like(q).is_contiguous(), torch.empty_like(k).is_contiguous()
    state = {}

    def launch(q, k, w):
        qo = torch.empty_like(q) if like_q else torch.empty(q_shape, dtype=dtype, device=device)
        ko = torch.empty_like(k) if like_k else torch.empty(k_shape, dtype=dtype, device=device)
        run = state.get("run")
        if run is not None:
            run(q, k, w, qo, ko)
            return qo, ko
        compiled = _qknorm_kernel[grid](q, k, w, qo, ko, **meta, num_warps=NUM_WARPS)
        state["run"] = _direct_launcher(compiled, grid, consts, (q, k, w, qo, ko))
        return qo, ko
    return launch


def _direct_launcher(compiled, grid, consts, args):
    """Call the compiled kernel's C launcher directly, the pointers as integers: no argument binding,
    specialisation, hook or knob lookups in Python, and no driver query per pointer, on each call (they
    cost more than the kernel here: 8.5 us a launch with tensors, 5.4 with integers, on the H100 host).
    Launchers of some Triton versions take the constexpr values too, others not: try both on the first
    call's arguments (it rewrites the same outputs); the C launcher rejects a wrong argument count."""
    g0, g1, g2 = tuple(grid) + (1,) * (3 - len(grid))
    try:
        compiled._init_handles()
        launcher = compiled.run
        if launcher.global_scratch_size or launcher.profile_scratch_size or launcher.launch_cooperative_grid:
            raise TypeError("a launch this does not make")
        raw = launcher.launch
        base = (compiled.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                compiled.packed_metadata, None, None, None)
        current_stream = torch._C._cuda_getCurrentRawStream
        device = args[0].device.index
    except Exception:  # noqa: BLE001 - any Triton API difference: keep the JIT path
        raw = None
    for extra in (consts, ()):
        if raw is None:
            break
        try:
            raw(g0, g1, g2, current_stream(device), *base, *(a.data_ptr() for a in args), *extra)
        except TypeError:
            continue
        return lambda q, k, w, qo, ko: raw(g0, g1, g2, current_stream(device), *base, q.data_ptr(), k.data_ptr(),
                                           w.data_ptr(), qo.data_ptr(), ko.data_ptr(), *extra)
    return lambda *a: _qknorm_kernel[grid](*a, *consts, num_warps=NUM_WARPS)


def _fallback(q, k, w):
    return _rms(q, w), _rms(k, w)


def _rms(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * w.float()).to(x.dtype)


def qknorm(q, k, norm_weight):
    key = (q.shape, q.stride(), k.shape, k.stride(), q.dtype, q.device,
           q.data_ptr() & 15, k.data_ptr() & 15, norm_weight.data_ptr() & 15)
    launch = _LAUNCHERS.get(key)
    if launch is None:
        if q.dtype != k.dtype or q.dtype != norm_weight.dtype or q.shape[-1] != k.shape[-1]:
            launch = _fallback
        else:
            launch = _build(q, k, norm_weight) or _fallback
        _LAUNCHERS[key] = launch
    return launch(q, k, norm_weight)
