"""What runs on the card between two timed calls: a model's other work, and the L2 lines a call kept.

The timer imports this module only when it is built, once the worker has set TRITON_INTERPRET
(CPU mode): Triton reads it once, at import.

In a model, a kernel never runs right after itself: the rest of the layer (norms, projections, an
MLP) runs between two of its calls. kbench's primer calls it once more just before the gate, and
one kernel depended on what that leaves on the device: block_sparse_attn's bundled persistent
kernel ran 9-12% slower inside a stack of transformer layers than kbench had read it, and as slow
with a transformer layer, FlexAttention or a small reduction between. What the primer leaves is
the kernel's own code, still cached: a kernel between with a lot of code takes most of it away
(a Triton kernel with 36 KB of instructions on 4 SMs, no shared memory), one with little code
almost none (3 KB; cuBLAS's GEMM, a layer norm, a GELU). FlexAttention, flashinfer, the qknorm and
mla_decode kernels moved 0-2% (docs/measurement.md, "What runs between calls").
So every call now starts after this: one transformer layer without its attention, captured once
in a CUDA graph and replayed before the gate, untimed.

Its size: hidden 2048 (16 heads of 128), 256 tokens, 96 MB of weights (QKV, output, 4x MLP): ~32 us
of weights at 3 TB/s and 26 GFLOP of matmul on an H100, about what the flush costs. One small
reduction would clear that kernel's state for a few us, but then kbench's choice of kernel would
stand in for a model's other work; the whole layer is what the in-model figures were checked
against.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

HIDDEN = 2048
HEADS = 16
TOKENS = 256


class Interlude:
    """Built (and its graph captured) when the timer is, before any submission is imported; a
    submission that patches torch later changes nothing in it."""

    def __init__(self, device: str):
        gen = torch.Generator(device=device).manual_seed(0)

        def weight(rows, cols):
            return (torch.randn(rows, cols, device=device, generator=gen) * rows ** -0.5).to(torch.bfloat16)

        self.weights = (weight(HIDDEN, 3 * HIDDEN), weight(HIDDEN, HIDDEN),
                        weight(HIDDEN, 4 * HIDDEN), weight(4 * HIDDEN, HIDDEN))
        self.x = torch.randn(TOKENS, HIDDEN, device=device, generator=gen).to(torch.bfloat16)
        side = torch.cuda.Stream(device)   # warm-up off the capture, as torch's graph notes ask
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            self._layer()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.out = self._layer()
        self.replay = self.graph.replay   # bound now: patching the class later changes nothing

    def _layer(self) -> torch.Tensor:
        w_qkv, w_o, w_up, w_down = self.weights
        x = self.x
        qkv = (F.layer_norm(x, x.shape[-1:]) @ w_qkv).view(TOKENS, 3, HEADS, HIDDEN // HEADS)
        q = qkv[:, 0].contiguous()   # laid out for an attention, and standing in for its output
        x = x + q.view(TOKENS, HIDDEN) @ w_o
        return x + F.gelu(F.layer_norm(x, x.shape[-1:]) @ w_up) @ w_down


# -- the L2 lines a call kept ----------------------------------------------------------------
# Evicting the L2 lines a call asked to keep: the part of the L2 flush that plain stores cannot do.
#
# A kernel can mark lines evict_last (a PTX cache hint, or a stream's access policy window with
# persisting hits). The L2 then keeps up to its persisting set-aside of them (9.4 MB by default
# on the H100 seen, up to 31.2 MB of its 50 if the process raises cudaLimitPersistingL2CacheSize)
# and evicts normal lines first, so any amount of normal stores leaves them in place. Measured
# on the H100 (docs/measurement.md, "L2 flush"): a call that sums its own 32 MB table and
# leaves it prefetched with evict_last ran in 0.75-0.88x the time of the same call without
# the mark, through kbench's NaN flush alone; 1.00-1.01x with this release before it.
#
# `release_persisting` writes a buffer of at least the L2's size with evict_last stores (they
# take the set-aside's places from the older evict_last lines) and then demotes each of its
# lines to normal priority (`applypriority`), so the normal fill after it evicts everything and
# the timed call gets the whole L2. CUDA only; Triton compiles the two kernels once per process.

_BLOCK = 4096        # float32 elements a program stores
_LINES = 1024        # 128-byte lines a program demotes
_LINE_ELEMS = 32     # float32 elements in a 128-byte line


@triton.jit
def _store_evict_last(buf, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(buf + offs, tl.full([BLOCK], float("nan"), tl.float32), mask=offs < n,
             eviction_policy="evict_last")


@triton.jit
def _demote_lines(buf, n_lines, LINES: tl.constexpr, LINE_ELEMS: tl.constexpr):
    line = tl.program_id(0).to(tl.int64) * LINES + tl.arange(0, LINES)
    live = (line < n_lines).to(tl.int32)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p applypriority.global.L2::evict_normal [$1], 128; mov.u32 $0, 0; }",
        "=r,l,r", [buf + line * LINE_ELEMS, live], dtype=tl.int32, is_pure=False, pack=1)


def release_persisting(buf) -> None:
    """Fill float32 `buf` (CUDA, 128-byte aligned, at least the L2's size) with NaN through
    evict_last stores, then put each of its lines back to normal eviction priority."""
    n = buf.numel()
    _store_evict_last[(triton.cdiv(n, _BLOCK),)](buf, n, BLOCK=_BLOCK)
    n_lines = n // _LINE_ELEMS
    _demote_lines[(triton.cdiv(n_lines, _LINES),)](buf, n_lines, LINES=_LINES, LINE_ELEMS=_LINE_ELEMS)
