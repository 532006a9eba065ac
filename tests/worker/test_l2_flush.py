"""The L2 flush against a call that asks the L2 to keep its data (CUDA only, skipped without one).

Lines marked evict_last stay in the L2 through any amount of normal stores, so a submission
could keep a buffer of its own (a table, a workspace) cached from one timed call to the next.
The timer's flush releases them first (kbench/worker/between_calls.py); this checks, on the card, that the
mark pays off without that release (so the check below can fail) and not with it.
"""
import ctypes
import functools
import statistics

import pytest
import torch

from kbench.run.card import flush_bytes
from kbench.worker.timer import CallTimer

PIECE = 4096   # bytes a bulk prefetch covers
PERSISTING_L2_LIMIT = 0x06            # CU_LIMIT_PERSISTING_L2_CACHE_SIZE
MAX_PERSISTING_L2_ATTRIBUTE = 108     # CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE


@functools.cache
def _prefetch_l2():
    """Bulk L2 prefetch of 4 KB pieces, with the evict_last policy (KEEP) or the normal one. Triton
    is imported when a test runs, not at import: imported while pytest collects, before
    test_block_sparse_attn.py sets TRITON_INTERPRET in-process, it broke that module's interpreted
    kernels ("Cannot call @triton.jit'd outside of the scope of a kernel", in CI)."""
    import triton
    import triton.language as tl

    @triton.jit
    def prefetch(base, n_pieces, KEEP: tl.constexpr):
        i = tl.program_id(0) * 128 + tl.arange(0, 128)
        addr = base + i.to(tl.int64) * 4096
        live = (i < n_pieces).to(tl.int32)
        if KEEP:
            tl.inline_asm_elementwise(
                "{ .reg .pred p; .reg .b64 pol; setp.ne.b32 p, $2, 0; "
                "createpolicy.fractional.L2::evict_last.b64 pol, 1.0; "
                "@p cp.async.bulk.prefetch.L2.global.L2::cache_hint [$1], 4096, pol; mov.u32 $0, 0; }",
                "=r,l,r", [addr, live], dtype=tl.int32, is_pure=False, pack=1)
        else:
            tl.inline_asm_elementwise(
                "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], 4096; mov.u32 $0, 0; }",
                "=r,l,r", [addr, live], dtype=tl.int32, is_pure=False, pack=1)
    return prefetch


def _caller(table, keep: bool):
    """A call that reads its own 32 MB table, then prefetches it again, marked evict_last or not."""
    raw = table.view(torch.uint8)
    n_pieces = raw.numel() // PIECE

    def invoke(args):
        out = table.sum().reshape(1)
        _prefetch_l2()[(-(-n_pieces // 128),)](raw, n_pieces, KEEP=keep, num_warps=4)
        return (out,)
    return invoke


def _medians(timer, calls: int = 40) -> tuple[float, float]:
    # Each arm its own 32 MB table, at the same address for every call: the plain arm must not
    # read what the other arm kept.
    kept, plain = (_caller(torch.randn(8 << 20, device="cuda"), keep) for keep in (True, False))
    times = {True: [], False: []}
    for _ in range(calls):
        for keep, invoke in ((True, kept), (False, plain)):
            timer.start_case()   # no primer: the previous call's mark must come from the other arm
            times[keep].append(timer.timed(invoke, lambda live: live, {})[1].device_ms)
    return statistics.median(times[True]), statistics.median(times[False])


@pytest.fixture
def largest_persisting_set_aside():
    """The most L2 a process may set aside for evict_last lines (cuCtxSetLimit), as a hostile
    submission would ask for; the previous limit back afterwards."""
    cuda = ctypes.CDLL("libcuda.so.1")
    torch.zeros(1, device="cuda")   # the context current in this thread
    old, most = ctypes.c_size_t(0), ctypes.c_int(0)
    assert cuda.cuCtxGetLimit(ctypes.byref(old), PERSISTING_L2_LIMIT) == 0
    assert cuda.cuDeviceGetAttribute(ctypes.byref(most), MAX_PERSISTING_L2_ATTRIBUTE, torch.cuda.current_device()) == 0
    assert cuda.cuCtxSetLimit(PERSISTING_L2_LIMIT, ctypes.c_size_t(most.value)) == 0
    yield most.value
    cuda.cuCtxSetLimit(PERSISTING_L2_LIMIT, old)


@pytest.mark.gpu
def test_a_buffer_kept_with_evict_last_is_not_in_l2_at_the_next_timed_call(largest_persisting_set_aside):
    timer = CallTimer("cuda", flush_bytes("cuda"))
    release = timer.release_persisting
    timer.release_persisting = lambda buf: None   # the flush as it was: NaN stores only
    kept, plain = _medians(timer)
    assert kept < 0.9 * plain, (kept, plain)   # the exploit works against stores alone
    timer.release_persisting = release
    kept, plain = _medians(timer)
    assert kept == pytest.approx(plain, rel=0.03), (kept, plain)
