"""The down kernel's launch shapes against cuBLAS's two GEMMs, at bs 128 and 1, L2 flushed (a probe)."""
import statistics, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "submissions" / "mla_decode"))
import torch
import submission as sol
flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
def timed(fn, n=40):
    fn(); torch.cuda.synchronize(); ts = []
    for _ in range(n):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)
for bs in (128, 1):
    x = torch.randn(bs, 7168, device="cuda").bfloat16()
    wq = (torch.randn(1536, 7168, device="cuda") / 85).bfloat16()
    wkv = (torch.randn(576, 7168, device="cuda") / 85).bfloat16()
    buf = torch.zeros(bs, 64, 576, device="cuda").bfloat16()
    want = (x @ wq.t())
    print(f"bs {bs}: cuBLAS Q down {timed(lambda: x @ wq.t()):.1f} us, both {timed(lambda: (x @ wq.t(), x @ wkv.t())):.1f} us", flush=True)
    for bn, bk, splits, warps, stages in ((128, 64, 7, 8, 4), (128, 128, 7, 8, 3), (64, 64, 8, 4, 3), (64, 64, 8, 4, 4), (64, 128, 8, 4, 3), (128, 64, 7, 4, 3), (64, 64, 16, 4, 3)):
        sol.DOWN.update(block_n=bn, block_k=bk, splits=splits, num_warps=warps, num_stages=stages)
        try:
            x1 = sol.down_project(x, wq, wkv, buf, 5)
            ok = torch.allclose(x1.float(), want.float(), atol=2e-2, rtol=2e-2)
            t = timed(lambda: sol.down_project(x, wq, wkv, buf, 5))
            print(f"  bn {bn} bk {bk} splits {splits} warps {warps} stages {stages}: {t:.1f} us ok {ok}", flush=True)
        except Exception as e:
            print(f"  bn {bn} bk {bk} splits {splits} warps {warps} stages {stages}: {type(e).__name__} {str(e)[:80]}", flush=True)
