"""A model's other work between two calls of the kernel being timed.

In a model, a kernel never runs right after itself: the rest of the layer (norms, projections, an
MLP) runs between two of its calls. kbench's primer calls it once more just before the gate, and
one kernel depended on what that leaves on the device: block_sparse_attn's bundled persistent
kernel ran 9-12% slower inside a stack of transformer layers than kbench had read it, and as slow
with a transformer layer, FlexAttention or a small reduction between. What the primer leaves is
the kernel's own code, still cached: a kernel between with a lot of code takes most of it away
(a Triton kernel with 36 KB of instructions on 4 SMs, no shared memory), one with little code
almost none (3 KB; cuBLAS's GEMM, a layer norm, a GELU). FlexAttention, flashinfer, the qknorm and
mla_decode kernels moved 0-2% (docs/measurement.md, "What a call's own previous call leaves").
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
