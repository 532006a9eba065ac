"""block_sparse_attn: where a tile's time goes in the Gluon kernel, from %globaltimer stamps.

    python3 bench/block_sparse_attn/bsa_timeline.py [--dir submissions/block_sparse_attn]
        [--cases full-window-1,full-retrieval-3]

(on the GPU host, from the repository root.)

Writes a copy of DIR/bsa_gluon.py with stamps (consumer warpgroup 0 and the producer, the first
15 tiles of every program) into a temporary folder, runs it 6 times per case on the case's seed
inputs after a 256 MB flush, and prints per row length n the median time of each step after the
tile's start (its place and query block arrived): the next tile's start, the first K block landed,
the first scores issued, their softmax done, the row's other blocks done, the last V block
converted, the last P.V issued and done, o's store issued; the producer's publishing of the tile
(negative: before the consumers took it) and its first V block converted. The first tile of each
program (a cold start) and the last stamped are left out; a padded tile (n = 0) gets its next start
only. Per case also: a program's entry to its first tile's start, and when the programs exit (the
tail). The stamps are inserted by matching the kernel's text: a kernel whose lines differ from the
bundled one's fails with the line not found (tests/bench/test_timeline_stamps.py checks the stamps
still apply to the bundled kernel, on CPU).
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from kernel_stamps import NOW, SourceEdit  # this script's folder

ROOT = Path(__file__).resolve().parents[2]   # the repository
sys.path.insert(0, str(ROOT))

STEPS = ["next start", "K0 landed", "S0 issued", "softmax0", "blocks done", "last V16", "last PV in",
         "last PV done", "o store in", "P:published", "P:V0 fp16"]
SLOTS = 200          # int64 stamps per program
TILES = 15           # tiles stamped per program, 12 fields each from slot 8


def _stamp(field: int, indent: str, cond: str = "WG == 0", tile: str = "tiles") -> str:
    return (f"{indent}if {cond}:\n{indent}    if {tile} < {TILES}:\n"
            f"{indent}        gl.store(pp + 8 + 12 * ({tile}) + {field}, {NOW})\n")


def stamped(source: str) -> str:
    """The kernel's source with the stamps: per program 0 entry, 1 exit, 4 tiles; per tile
    (8 + 12 k + field) 0 start, 1 n, 2-9 the consumer's steps, 10-11 the producer's."""
    rep = SourceEdit(source, "bsa_timeline")

    rep("lse_ptr, T_MAX, qk_scale, WG: gl.constexpr):", "lse_ptr, T_MAX, qk_scale, WG: gl.constexpr, pp):")
    rep("o_ptr, lse_ptr, T_MAX, qk_scale, 0)),", "o_ptr, lse_ptr, T_MAX, qk_scale, 0, pp)),")
    rep("o_ptr, lse_ptr, T_MAX, qk_scale, 1)),", "o_ptr, lse_ptr, T_MAX, qk_scale, 1, pp)),")
    rep("v_empty, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX):",
        "v_empty, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX, pp):")
    rep("v_empty, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX)),",
        "v_empty, row_ptr, col_idx, seq_lens, counter, H, B, NNZ, T_MAX, pp)),")
    rep("    while n >= 0:\n        qi = tiles % QBUF\n",
        "    while n >= 0:\n        qi = tiles % QBUF\n" + _stamp(0, "        ")
        + f"        if WG == 0:\n            if tiles < {TILES}:\n                gl.store(pp + 9 + 12 * tiles, n.to(gl.int64))\n")
    first = ("            s_tok = warpgroup_mma(q_mine, k_s.index(sk).permute((1, 0)), s_zero, use_acc=False, "
             "is_async=True)\n")
    rep("            mbarrier.wait(k_bar.index(sk), (kv // KST) & 1)\n            _ws_turn(turn_bar, WG, turns)\n" + first,
        "            mbarrier.wait(k_bar.index(sk), (kv // KST) & 1)\n" + _stamp(2, "            ")
        + "            _ws_turn(turn_bar, WG, turns)\n" + first + _stamp(3, "            "))
    rep("            p, alpha, m_i, l_i = _ws_softmax(s, m_i, l_i, qk_scale, n == 1, p_op, WG)\n",
        "            p, alpha, m_i, l_i = _ws_softmax(s, m_i, l_i, qk_scale, n == 1, p_op, WG)\n" + _stamp(4, "            "))
    last = ("            j = kv + n - 1\n            sv = j % VST\n            mbarrier.wait(v16_bar.index(sv), (j // VST) & 1)\n")
    pv = ("            _ws_turn(turn_bar, WG, turns + n)\n"
          "            v16 = v_s.index(sv)._reinterpret(gl.float16, [BN, D], v_s.layout)\n"
          "            acc_tok = warpgroup_mma(p, v16, acc, is_async=True)\n")
    rep("            # The last block's P.V.\n" + last + pv,
        "            # The last block's P.V.\n" + _stamp(5, "            ") + last + _stamp(6, "            ") + pv
        + _stamp(7, "            "))
    rep("            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))\n"
        "            mbarrier.arrive(v_empty.index(sv), count=1)\n\n",
        "            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok,))\n"
        "            mbarrier.arrive(v_empty.index(sv), count=1)\n" + _stamp(8, "            ") + "\n")
    rep("            tma.async_copy_shared_to_global(o_desc, [base + q_start + WG * BM, 0], q_mine)\n",
        "            tma.async_copy_shared_to_global(o_desc, [base + q_start + WG * BM, 0], q_mine)\n"
        + _stamp(9, "            "))
    # The call that publishes the next tile, as the kernel writes it (a variant may pass more after n).
    head = "                _publish(q_desc, q_s.index(qi), info_s.index(qi), q_bar.index(qi), nxt[0], nxt[1], nxt[2],\n"
    found = re.search(re.escape(head) + r"\s+gl\.where\(taken < n_tiles, nxt\[4\], -1\),[^\n]*T_MAX\)\n", rep.source)
    if found is None:
        raise SystemExit(f"bsa_timeline: line not found once in the kernel: {head.strip()[:70]!r}")
    publish = found.group(0)
    rep(publish, publish + _stamp(10, "                ", "True", "tiles + 1"))  # the next tile's
    rep("                mbarrier.arrive(v16_bar.index(sv), count=1)\n            if i == take_at:",
        "                mbarrier.arrive(v16_bar.index(sv), count=1)\n                if i == 1:\n"
        + _stamp(11, "                    ", "True") + "            if i == take_at:")
    rep("    tma.store_wait(0)\n\n\n@gluon.jit(do_not",
        f"    tma.store_wait(0)\n    if WG == 0:\n        gl.store(pp + 1, {NOW})\n"
        "        gl.store(pp + 4, tiles.to(gl.int64))\n\n\n@gluon.jit(do_not")
    rep("seq_lens, counter, H, B, NNZ, T_MAX,\n                qk_scale, STAGES",
        "seq_lens, counter, H, B, NNZ, T_MAX,\n                qk_scale, prof, STAGES")
    rep("    BN: gl.constexpr = k_desc.block_type.shape[0]\n    q_s =",
        f"    BN: gl.constexpr = k_desc.block_type.shape[0]\n    pp = prof + gl.program_id(0) * {SLOTS}\n"
        f"    gl.store(pp, {NOW})\n    q_s =")
    runtime = re.search(r"\nN_RUNTIME_ARGS = (\d+)", rep.source)  # one more: the stamps' buffer
    if runtime is None:
        raise SystemExit("bsa_timeline: line not found once in the kernel: 'N_RUNTIME_ARGS = ...'")
    rep(runtime.group(0), f"\nN_RUNTIME_ARGS = {int(runtime.group(1)) + 1}\nPROF = None")
    rep("    return (H, B, nnz, T, qk_scale, stages, K_STAGES, Q_BUFFERS, 4)",
        "    return (H, B, nnz, T, qk_scale, PROF, stages, K_STAGES, Q_BUFFERS, 4)")
    return rep.source


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=str(ROOT / "submissions" / "block_sparse_attn"))
    ap.add_argument("--cases", default="full-window-1,full-retrieval-3")
    args = ap.parse_args()
    import warnings

    import numpy as np
    import torch
    from bsa_case import QK_SCALE, find_case, kernel_inputs

    from kbench.tasks.interface import load_module
    from kbench.tasks.task import get_task

    kernel = Path(tempfile.mkdtemp(prefix="bsa-timeline-")) / "bsa_timeline_kernel.py"
    kernel.write_text(stamped((Path(args.dir) / "bsa_gluon.py").read_text()))
    mod = load_module(kernel, "bsa_timeline_kernel")
    task = get_task("block_sparse_attn")
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for name in args.cases.split(","):
        q, k, v, rp, ci, sl = kernel_inputs(task, find_case(task, name))
        o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
        prof = torch.zeros(torch.cuda.get_device_properties(0).multi_processor_count * SLOTS, dtype=torch.int64,
                           device="cuda")
        mod.PROF = prof
        rows: dict[int, list] = {}
        spans, firsts, ends = [], [], []
        for _ in range(6):
            flush.zero_()
            prof.zero_()
            mod.launch(q, k, v, rp, ci, sl, o, lse, QK_SCALE, mod.STAGES)
            torch.cuda.synchronize()
            p = prof.view(-1, SLOTS).cpu().numpy().astype(np.int64)
            p = p[p[:, 0] > 0]
            spans.append((p[:, 1].max() - p[:, 0].min()) / 1e3)
            firsts.extend((p[:, 8] - p[:, 0]) / 1e3)          # entry to the first tile's start
            ends.append(np.percentile((p[:, 1] - p[:, 0].min()) / 1e3, [0, 50, 100]))
            for r in p:
                stamped_tiles = min(int(r[4]), TILES)
                for t in range(1, stamped_tiles - 1):
                    f = r[8 + 12 * t: 20 + 12 * t]
                    rel = [(x - f[0]) / 1e3 if x and f[1] > 0 else float("nan") for x in f]
                    rel[1] = (r[8 + 12 * (t + 1)] - f[0]) / 1e3   # the next tile's start
                    rows.setdefault(int(f[1]), []).append(rel[1:])
        print(f"== {name}: span median {np.median(spans):.1f} us; us after a tile's start (consumer warpgroup 0), "
              f"median over tiles 2..{TILES - 1} of every program, 6 launches (n = 0: a padded tile or an empty "
              f"row, its next start only)")
        e = np.median(np.array(ends), axis=0)
        print(f"    programs: entry to first tile start {np.median(firsts):.2f} us (median); exits after the first "
              f"entry min / median / max {e[0]:.1f} / {e[1]:.1f} / {e[2]:.1f} us")
        print(f"{'n':>3} {'tiles':>5} " + " ".join(f"{h:>12}" for h in STEPS))
        for n, rr in sorted(rows.items()):
            with warnings.catch_warnings():   # n = 0 rows: every step but the next start is NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                med = np.nanmedian(np.array(rr), axis=0)
            print(f"{n:>3} {len(rr):>5} " + " ".join(f"{x:12.2f}" for x in med), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
