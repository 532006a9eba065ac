"""Can the GPU host's Triton carry a Gluon Hopper kernel? (issues 10 and 11: the remaining
lever for mla_decode's attention and block_sparse_attn is a kernel Triton's tile language
cannot express: Q kept in shared memory, warpgroups overlapping softmax with the MMAs.)

Prints which Gluon Hopper pieces the installed Triton has (TMA, mbarrier, warpgroup MMA,
warp_specialize), then runs a small pipelined bf16 matmul written in Gluon (TMA loads into
STAGES shared-memory buffers, asynchronous wgmma, one MMA in flight) against torch's matmul:
the largest error and each one's device time under kbench's per-call protocol (CallTimer:
gate, L2 flush, fresh input storages), median of the calls after two warm-ups.

    source bench/gpu_env.sh && python3 bench/gluon_wgmma_check.py
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402
from triton.experimental import gluon  # noqa: E402
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia import hopper  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: E402
from call_median import median_ms  # noqa: E402  (bench/ is the script's folder)


@gluon.jit
def _matmul_kernel(a_desc, b_desc, c_desc, STAGES: gl.constexpr, num_warps: gl.constexpr):
    """C[BM, BN] tile = A[BM, :] @ B[BN, :]^T; B is stored (N, K) and transposed as a view."""
    BM: gl.constexpr = c_desc.block_type.shape[0]
    BN: gl.constexpr = c_desc.block_type.shape[1]
    BK: gl.constexpr = a_desc.block_type.shape[1]
    off_m = gl.program_id(0) * BM
    off_n = gl.program_id(1) * BN
    a_s = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_s = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
    # wgmma's tile: 16 rows a warp along M, all of BN at once, K 16 for 16-bit inputs
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                         instr_shape=[16, BN, 16])
    acc = gl.zeros((BM, BN), dtype=gl.float32, layout=acc_layout)
    tile_bytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    n_k = gl.cdiv(a_desc.shape[1], BK)
    for i in gl.static_range(STAGES - 1):   # fill the pipeline
        mbarrier.expect(ready.index(i), tile_bytes)
        tma.async_copy_global_to_shared(a_desc, [off_m, i * BK], ready.index(i), a_s.index(i))
        tma.async_copy_global_to_shared(b_desc, [off_n, i * BK], ready.index(i), b_s.index(i))
    for k in range(n_k):
        s = k % STAGES
        mbarrier.wait(ready.index(s), phase=(k // STAGES) & 1)
        acc = warpgroup_mma(a_s.index(s), b_s.index(s).permute((1, 0)), acc, is_async=True)
        # one MMA left in flight: the buffer the next load overwrites is no longer read
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc,))
        nk = k + STAGES - 1
        if nk < n_k:
            ns = nk % STAGES
            mbarrier.expect(ready.index(ns), tile_bytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, nk * BK], ready.index(ns), a_s.index(ns))
            tma.async_copy_global_to_shared(b_desc, [off_n, nk * BK], ready.index(ns), b_s.index(ns))
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    for i in gl.static_range(STAGES):
        mbarrier.invalidate(ready.index(i))
    c_s = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    c_s.store(acc.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_s)
    tma.store_wait(pendings=0)


def gluon_matmul(a: torch.Tensor, b: torch.Tensor, bm: int = 128, bn: int = 256, bk: int = 64,
                 stages: int = 3, warps: int = 8) -> torch.Tensor:
    """a (M, K) @ b (N, K)^T in bf16; M, N, K multiples of the tile."""
    (m, _), n = a.shape, b.shape[0]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)

    def desc(t, block):
        return TensorDescriptor(t, list(t.shape), list(t.stride()), block,
                                gl.NVMMASharedLayout.get_default_for(block, gl.bfloat16))

    _matmul_kernel[(m // bm, n // bn)](desc(a, [bm, bk]), desc(b, [bn, bk]), desc(c, [bm, bn]), stages,
                                       num_warps=warps)
    return c


def main() -> int:
    from kbench.call_timer import CallTimer
    from kbench.timing import flush_bytes

    print(f"triton {triton.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name()}")
    print("gluon.language:", [n for n in ("warp_specialize", "NVMMADistributedLayout", "NVMMASharedLayout",
                                          "allocate_shared_memory") if hasattr(gl, n)])
    print("hopper:", sorted(n for n in dir(hopper) if n[0].islower() and not n.startswith("unflatten")))
    print("hopper.tma:", sorted(n for n in dir(tma) if n[0].islower() and n not in ("annotations", "builtin",
                                                                                       "dataclass", "ttgl")))
    print("hopper.mbarrier:", sorted(n for n in dir(mbarrier) if n[0].islower() and n != "builtin"))
    timer = CallTimer("cuda", flush_bytes("cuda"))
    for m, n, k in [(256, 512, 512), (4096, 4096, 4096), (8192, 8192, 8192)]:
        inputs = {"a": torch.randn(m, k, device="cuda", dtype=torch.bfloat16),
                  "b": torch.randn(n, k, device="cuda", dtype=torch.bfloat16)}
        err = (gluon_matmul(inputs["a"], inputs["b"]).float() - (inputs["a"] @ inputs["b"].t()).float()).abs().max()
        row = [f"{m}x{n}x{k}: max |gluon - torch| {err.item():.3g}"]
        for name, fn in (("gluon", lambda a: (gluon_matmul(a["a"], a["b"]),)), ("torch", lambda a: (a["a"] @ a["b"].t(),))):
            ms = median_ms(timer, fn, inputs, 20)
            row.append(f"{name} {ms * 1e3:.1f} us {2 * m * n * k / ms / 1e9:.0f} TFLOP/s")
        print("; ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
