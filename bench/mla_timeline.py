"""mla_decode's Gluon attention: where a program's time goes, from %globaltimer stamps.

    python3 bench/mla_timeline.py [--dir submissions/mla_decode] [--kv-lens 129,513,1025]

Writes a copy of DIR/mla_decode_gluon.py with stamps per program (entry, the prologue's end, q ready,
tile 0 ready, its scores done, every tile done, row sums added, o's store issued and done, the SM)
into a temporary folder, runs the submission's `mla_attention` with it at bs 128 and 128 heads
(random inputs, 6 launches after a 256 MB flush, the last 4 kept), and prints for two of them, per
wave of programs, the median time of each step after a program's entry, the span from the first
entry to the last store, and the gap between one program leaving an SM and the next entering it.
The events around each launch include the host's launch path: the span is the device's figure.
The stamps are inserted by matching the kernel's text: a kernel whose lines differ from the
bundled one's fails with the line not found. Figures: docs/benchmarks-mla_decode.md, "The
attention at short contexts, timed inside the kernel".
"""
import argparse
import math, statistics, sys, tempfile, importlib.util
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
parser = argparse.ArgumentParser(description="mla_decode Gluon attention timeline")
parser.add_argument("--dir", default="submissions/mla_decode")
parser.add_argument("--kv-lens", default="129,513,1025")
ARGS = parser.parse_args()
DIR = ARGS.dir
SRC = Path(DIR, "mla_decode_gluon.py").read_text()
NOW = 'gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=gl.int64, is_pure=False, pack=1)'
SMID = 'gl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=gl.int32, is_pure=False, pack=1)'
SLOTS = 16

def rep(s, old, new, count=1):
    assert s.count(old) == count, (old, s.count(old))
    return s.replace(old, new)

s = SRC
# consumer: extra arg pp
s = rep(s, "              s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b,\n              SPLIT: gl.constexpr, WG: gl.constexpr):",
        "              s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b,\n              SPLIT: gl.constexpr, WG: gl.constexpr, pp):")
s = rep(s, "s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 0)),", "s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 0, pp)),")
s = rep(s, "s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 1)),", "s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 1, pp)),")
def st(slot, cond="WG == 0", ind="    "):
    return f"{ind}if {cond}:\n{ind}    gl.store(pp + {slot}, {NOW})\n"
s = rep(s, "    mbarrier.wait(q_bar.index(0), 0)\n    for u in range(WG, n_tiles, 2):\n",
        "    mbarrier.wait(q_bar.index(0), 0)\n" + st(2) + "    for u in range(WG, n_tiles, 2):\n")
s = rep(s, "        mbarrier.wait(ready.index(st), (u // STAGES) & 1)\n",
        "        mbarrier.wait(ready.index(st), (u // STAGES) & 1)\n" + st(3, "(WG == 0) & (u == 0)", "        "))
s = rep(s, "        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))\n",
        "        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))\n" + st(4, "(WG == 0) & (u == 0)", "        "))
s = rep(s, "    # The row sums: this warpgroup's tiles' plus the other's.\n",
        st(5) + "    # The row sums: this warpgroup's tiles' plus the other's.\n")
s = rep(s, "    l_i = l_i + x_s.index(3 - WG).load(rows_s)\n", "    l_i = l_i + x_s.index(3 - WG).load(rows_s)\n" + st(6))
s = rep(s, "        tma.store_wait(0)\n", st(7, ind="        ") + "        tma.store_wait(0)\n" + st(8, ind="        ") + st(10, "WG == 1", "        "))
# kernel: pp arg, entry stamp, prologue end, smid
s = rep(s, "SPLIT: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr", "SPLIT: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr, stamps=None")
s = rep(s, "    h0 = gl.program_id(0) * BH\n",
        "    pp = stamps + ((gl.program_id(2) * gl.num_programs(1) + gl.program_id(1)) * gl.num_programs(0) + gl.program_id(0)) * "
        f"{SLOTS}\n    gl.store(pp + 0, {NOW})\n    gl.store(pp + 9, {SMID}.to(gl.int64))\n    h0 = gl.program_id(0) * BH\n")
s = rep(s, "    # The producer is the default partition,", f"    gl.store(pp + 1, {NOW})\n    gl.store(pp + 11, n_tiles.to(gl.int64))\n    # The producer is the default partition,")
s = rep(s, "NOPE=nope, SPLIT=split, STAGES=stages, num_warps=4, maxnreg=168", "NOPE=nope, SPLIT=split, STAGES=stages, num_warps=4, maxnreg=168, stamps=STAMPS[0]")
s = rep(s, "BLOCK_H = 64\n", "BLOCK_H = 64\nSTAMPS = [None]\n")
d = Path(tempfile.mkdtemp())
(d / "mla_decode_gluon.py").write_text(s)
spec = importlib.util.spec_from_file_location("mla_decode_gluon", d / "mla_decode_gluon.py")
G = importlib.util.module_from_spec(spec); sys.modules["mla_decode_gluon"] = G; spec.loader.exec_module(G)
sys.path.insert(0, DIR)
import submission as S
assert S._gluon is G
names = ["prologue end", "q ready (WG0)", "tile0 ready", "scores0 done", "tiles done", "l summed", "o store in", "o stored", "", "WG1 stored"]
H, R, bs = 128, 512, 128
flush = torch.empty(256 * 2**20 // 4, device="cuda")
for kv_len in (int(k) for k in ARGS.kv_lens.split(",")):
    torch.manual_seed(0)
    q_lat = (torch.randn(H, bs, R, device="cuda") / 8).bfloat16()
    q = torch.randn(bs, H, 64, device="cuda").bfloat16()
    kv = torch.randn(bs, kv_len + 64, 576, device="cuda").bfloat16()
    n_prog = 2 * bs * 1
    G.STAMPS[0] = torch.zeros(n_prog * SLOTS, dtype=torch.int64, device="cuda")
    ref = None
    runs = []
    for it in range(6):
        flush.fill_(float("nan"))
        G.STAMPS[0].zero_()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        o = S.mla_attention(q_lat, q, kv, kv_len, 0, 1.0 / math.sqrt(192))
        e1.record(); torch.cuda.synchronize()
        if it >= 2:
            runs.append((G.STAMPS[0].view(n_prog, SLOTS).cpu(), e0.elapsed_time(e1) * 1e3))
    print(f"\n== kv_len {kv_len}: events {[round(r[1], 1) for r in runs]} us; programs {n_prog}")
    for t, ev in runs[:2]:
        entry = t[:, 0]; t0 = entry.min().item()
        end = torch.maximum(t[:, 8], t[:, 10])
        print(f"  span first entry -> last store {(end.max().item() - t0) / 1e3:.1f} us (events {ev:.1f}); "
              f"entries: first wave {(entry.sort().values[:132] - t0).float().median().item() / 1e3:.2f} us median, "
              f"second wave from {(entry.sort().values[132] - t0).item() / 1e3:.2f} to {(entry.max().item() - t0) / 1e3:.2f} us")
        order = entry.argsort()
        for wave, idx in (("wave 1", order[:132]), ("wave 2", order[132:])):
            tt = t[idx]
            row = []
            for slot, name in zip(range(1, 11), names):
                if not name:
                    continue
                row.append(f"{name} {statistics.median(((tt[:, slot] - tt[:, 0]).float() / 1e3).tolist()):.2f}")
            print(f"  {wave}: " + "; ".join(row) + f"; tiles {tt[0, 11].item()}")
        # gap between a program's exit and the next program's entry on the same SM
        sm = t[:, 9]; gaps = []
        for s_ in sm.unique():
            ps = t[sm == s_]
            if len(ps) > 1:
                ps = ps[ps[:, 0].argsort()]
                gaps.append((ps[1, 0] - torch.maximum(ps[0, 8], ps[0, 10])).item() / 1e3)
        print(f"  same SM, exit -> next entry: median {statistics.median(gaps):.2f} us, max {max(gaps):.2f} (n {len(gaps)})")
