"""mla_decode's Gluon attention: where a program's time goes, from %globaltimer stamps.

    python3 submissions/mla_decode/dev/mla_timeline.py [--dir submissions/mla_decode] [--kv-lens 129,513,1025]

(on the GPU host, from the repository root.)

Writes a copy of DIR/mla_decode_gluon.py with stamps per program (entry, the prologue's end, q ready,
tile 0 ready, its scores done, every tile done, row sums added, o's store issued and done, the SM)
into a temporary folder, runs the submission's `mla_attention` with it at bs 128 and 128 heads
(random inputs, 6 launches after a 256 MB flush, the last 4 kept), and prints for two of them, per
wave of programs, the median time of each step after a program's entry, the span from the first
entry to the last store, and the gap between one program leaving an SM and the next entering it.
The events around each launch include the host's launch path: the span is the device's figure.
The stamps are inserted by matching the kernel's text: a kernel whose lines differ from the
bundled one's fails with the line not found (tests/bench/test_timeline_stamps.py checks the stamps
still apply to the bundled kernel, on CPU).
"""
from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
import tempfile
from pathlib import Path

from kernel_stamps import NOW, SMID, SourceEdit  # this script's folder

ROOT = Path(__file__).resolve().parents[3]   # the repository

SLOTS = 16   # int64 stamps per program
# slot -> step; 0 is the entry, 9 the SM, 11 the program's tile count
STEPS = {1: "prologue end", 2: "q ready (WG0)", 3: "tile0 ready", 4: "scores0 done", 5: "tiles done",
         6: "l summed", 7: "o store in", 8: "o stored", 10: "WG1 stored"}
H, R, ROPE, BS = 128, 512, 64, 128


def _stamp(slot: int, cond: str = "WG == 0", indent: str = "    ") -> str:
    return f"{indent}if {cond}:\n{indent}    gl.store(pp + {slot}, {NOW})\n"


def stamped(source: str) -> str:
    """The Gluon kernel's source with the stamps of STEPS written to `stamps` (SLOTS per program)."""
    rep = SourceEdit(source, "mla_timeline")

    rep("              SPLIT: gl.constexpr, WG: gl.constexpr):", "              SPLIT: gl.constexpr, WG: gl.constexpr, pp):")
    rep("s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 0)),", "s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 0, pp)),")
    rep("s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 1)),", "s_op_s, s_op_b, s_op_h, s_lse_s, s_lse_b, SPLIT, 1, pp)),")
    rep("    mbarrier.wait(q_bar.index(0), 0)\n    for u in range(WG, n_tiles, 2):\n",
        "    mbarrier.wait(q_bar.index(0), 0)\n" + _stamp(2) + "    for u in range(WG, n_tiles, 2):\n")
    rep("        mbarrier.wait(ready.index(st), (u // STAGES) & 1)\n",
        "        mbarrier.wait(ready.index(st), (u // STAGES) & 1)\n" + _stamp(3, "(WG == 0) & (u == 0)", "        "))
    rep("        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))\n",
        "        s = warpgroup_mma_wait(num_outstanding=0, deps=(s_tok,))\n" + _stamp(4, "(WG == 0) & (u == 0)", "        "))
    rep("    # The row sums: this warpgroup's tiles' plus the other's.\n",
        _stamp(5) + "    # The row sums: this warpgroup's tiles' plus the other's.\n")
    rep("    l_i = l_i + x_s.index(3 - WG).load(rows_s)\n", "    l_i = l_i + x_s.index(3 - WG).load(rows_s)\n" + _stamp(6))
    rep("        tma.store_wait(0)\n", _stamp(7, indent="        ") + "        tma.store_wait(0)\n"
        + _stamp(8, indent="        ") + _stamp(10, "WG == 1", "        "))
    rep("SPLIT: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr",
        "SPLIT: gl.constexpr, STAGES: gl.constexpr, num_warps: gl.constexpr, stamps=None")
    rep("    h0 = gl.program_id(0) * BH\n",
        "    pp = stamps + ((gl.program_id(2) * gl.num_programs(1) + gl.program_id(1)) * gl.num_programs(0)"
        f" + gl.program_id(0)) * {SLOTS}\n    gl.store(pp + 0, {NOW})\n    gl.store(pp + 9, {SMID}.to(gl.int64))\n"
        "    h0 = gl.program_id(0) * BH\n")
    rep("    # The producer is the default partition,",
        f"    gl.store(pp + 1, {NOW})\n    gl.store(pp + 11, n_tiles.to(gl.int64))\n    # The producer is the default partition,")
    rep("NOPE=nope, SPLIT=split, STAGES=stages, num_warps=4, maxnreg=168",
        "NOPE=nope, SPLIT=split, STAGES=stages, num_warps=4, maxnreg=168, stamps=STAMPS[0]")
    rep("BLOCK_H = 64\n", "BLOCK_H = 64\nSTAMPS = [None]  # the stamps buffer of the next launch\n")
    return rep.source


def load(directory: Path):
    """(the submission module, its stamped Gluon module): the stamped copy is imported under the
    Gluon module's name before the submission, which then launches it."""
    folder = Path(tempfile.mkdtemp())
    (folder / "mla_decode_gluon.py").write_text(stamped((directory / "mla_decode_gluon.py").read_text()))
    spec = importlib.util.spec_from_file_location("mla_decode_gluon", folder / "mla_decode_gluon.py")
    gluon_mod = importlib.util.module_from_spec(spec)
    sys.modules["mla_decode_gluon"] = gluon_mod
    sys.path.insert(0, str(directory))   # its sibling modules (mla_launch)
    spec.loader.exec_module(gluon_mod)
    gluon_mod.DIRECT_LAUNCH = False      # every launch through the JIT, which passes the stamps buffer
    import submission
    if submission._gluon is not gluon_mod:
        raise SystemExit("mla_timeline: the submission did not take the stamped Gluon module")
    return submission, gluon_mod


def report(stamps, events_us: float, n_sms: int) -> None:
    """One launch: its span, and per wave the median time of each step after a program's entry."""
    entry = stamps[:, 0]
    t0 = entry.min().item()
    end = stamps[:, [8, 10]].max(1).values
    first = entry.sort().values
    print(f"  span first entry -> last store {(end.max().item() - t0) / 1e3:.1f} us (events {events_us:.1f}); "
          f"entries: first wave {(first[:n_sms] - t0).float().median().item() / 1e3:.2f} us median, "
          f"second wave from {(first[n_sms] - t0).item() / 1e3:.2f} to {(first[-1] - t0).item() / 1e3:.2f} us")
    order = entry.argsort()
    for wave, idx in (("wave 1", order[:n_sms]), ("wave 2", order[n_sms:])):
        rows = stamps[idx]
        steps = [f"{name} {statistics.median(((rows[:, slot] - rows[:, 0]).float() / 1e3).tolist()):.2f}"
                 for slot, name in STEPS.items()]
        print(f"  {wave}: " + "; ".join(steps) + f"; tiles {rows[0, 11].item()}")
    gaps = []   # a program's exit to the next program's entry on the same SM
    for sm in stamps[:, 9].unique():
        on_sm = stamps[stamps[:, 9] == sm]
        if len(on_sm) > 1:
            on_sm = on_sm[on_sm[:, 0].argsort()]
            gaps.append((on_sm[1, 0] - on_sm[0, [8, 10]].max()).item() / 1e3)
    print(f"  same SM, exit -> next entry: median {statistics.median(gaps):.2f} us, max {max(gaps):.2f} (n {len(gaps)})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=str(ROOT / "submissions" / "mla_decode"))
    parser.add_argument("--kv-lens", default="129,513,1025")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import torch
    if not torch.cuda.is_available():
        print("mla_timeline: needs a CUDA GPU", file=sys.stderr)
        return 2
    submission, gluon_mod = load(Path(args.dir))
    n_sms = torch.cuda.get_device_properties(0).multi_processor_count
    n_programs = math.ceil(H / gluon_mod.BLOCK_H) * BS   # one split: bs 128 fills the SMs
    flush = torch.empty(256 * 2**20 // 4, device="cuda")
    for kv_len in (int(k) for k in args.kv_lens.split(",")):
        torch.manual_seed(0)
        q_lat = (torch.randn(H, BS, R, device="cuda") / 8).bfloat16()
        q = torch.randn(BS, H, ROPE, device="cuda").bfloat16()
        kv = torch.randn(BS, kv_len + 64, R + ROPE, device="cuda").bfloat16()
        gluon_mod.STAMPS[0] = torch.zeros(n_programs * SLOTS, dtype=torch.int64, device="cuda")
        runs = []
        for launch in range(6):
            flush.fill_(float("nan"))
            gluon_mod.STAMPS[0].zero_()
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            submission.mla_attention(q_lat, q, kv, kv_len, 0, 1.0 / math.sqrt(192))
            stop.record()
            torch.cuda.synchronize()
            if launch >= 2:
                runs.append((gluon_mod.STAMPS[0].view(n_programs, SLOTS).cpu(), start.elapsed_time(stop) * 1e3))
        print(f"\n== kv_len {kv_len}: events {[round(ev, 1) for _, ev in runs]} us; programs {n_programs}")
        for stamps, events_us in runs[:2]:
            report(stamps, events_us, n_sms)
    return 0


if __name__ == "__main__":
    sys.exit(main())
