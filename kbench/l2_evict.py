"""Evicting the L2 lines a call asked to keep: the part of the L2 flush that plain stores cannot do.

A kernel can mark lines evict_last (a PTX cache hint, or a stream's access policy window with
persisting hits). The L2 then keeps up to its persisting set-aside of them (9.4 MB by default
on the H100 seen, up to 31.2 MB of its 50 if the process raises cudaLimitPersistingL2CacheSize)
and evicts normal lines first, so any amount of normal stores leaves them in place. Measured
on the H100 (docs/measurement.md, "L2 flush"): a call that sums its own 32 MB table and
leaves it prefetched with evict_last ran in 0.75-0.88x the time of the same call without
the mark, through kbench's NaN flush alone; 1.00-1.01x with this release before it.

`release_persisting` writes a buffer of at least the L2's size with evict_last stores (they
take the set-aside's places from the older evict_last lines) and then demotes each of its
lines to normal priority (`applypriority`), so the normal fill after it evicts everything and
the timed call gets the whole L2. CUDA only; Triton compiles the two kernels once per process.
"""
from __future__ import annotations

import triton
import triton.language as tl

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
