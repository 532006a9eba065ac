"""block_sparse_attn: a CPU model of the Gluon kernel's persistent schedule, to weigh a tile order
before spending GPU time on it.

The model, fitted to `bsa_timeline.py`'s figures on the H100 (docs/benchmarks-block_sparse_attn.md):
one program per SM; its first tile starts START_US after entry; a live tile of n key blocks takes
TILE_US + BLOCK_US * n start to start; the next tile is taken at the row's step the kernel takes it
at (its third block, its second on rows of 1-2), first dealt round-robin (tile p, p + P, ...) up to
the static part, then from the counter in the order programs reach that step. A padded tile (past
its sequence's end) the producer skips costs SKIP_US (the consumers' zero stores), up to four in a
row; a fifth is handed over as a tile of its own, HANDED_US. The kernel's span is the last exit.
It leaves out L2, the atomic's wait and the clock, so read its ratios, not its microseconds: on
the H100 the query-block-major third measured full 0.986 and quick 0.971-0.975 against (batch,
head) order, where the model says 0.979 and 0.961, and a half measured worse than a third, where
the model has them even (more tiles behind the atomic).

By default each case's own lengths and block lists, the ones kbench's timed calls keep (they draw
fresh q, k, v only); ``--seeds N`` adds N other draws of them.

    python3 bench/bsa_schedule_model.py --suite full [--seeds 8]
"""
from __future__ import annotations

import argparse
import heapq
import sys
import tomllib
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbench.loader import load_sibling  # noqa: E402

PROGRAMS = 132
START_US, TILE_US, BLOCK_US, SKIP_US, HANDED_US = 3.7, 2.8, 1.7, 0.5, 1.4
MAX_SKIPS = 4

# order name -> the share of the (batch, head)s the counter hands out query block major (0: none,
# the whole grid (batch, head) after (batch, head), with three quarters of the tiles dealt)
ORDERS = {"bh": 0, "qb-quarter": 4, "qb-third": 3, "qb-half": 2}


def tile_order(order: str, heads: int, nqb: int, programs: int) -> tuple[list, int]:
    """(the tiles' (batch x head, query block) in the order the kernel numbers them, the static tiles)."""
    n_tiles = heads * nqb
    share = ORDERS[order]
    tail = 0 if share == 0 else (heads + share - 1) // share
    tiles = [(t // nqb, nqb - 1 - t % nqb) for t in range((heads - tail) * nqb)]
    tiles += [(heads - tail + d % tail, nqb - 1 - d // tail) for d in range(tail * nqb)]
    static = (n_tiles * 3 // 4 if share == 0 else n_tiles - tail * nqb) // programs * programs
    return tiles, static


def simulate(entries: np.ndarray, live_blocks: np.ndarray, order: str, programs: int = PROGRAMS):
    """entries[bh, qb]: key blocks of each row; live_blocks[bh]: query blocks inside the sequence.
    Returns (each program's exit in us, each program's tiles in the order it ran them)."""
    heads, nqb = entries.shape
    tiles, static = tile_order(order, heads, nqb, programs)
    programs = min(programs, len(tiles))
    counter = max(static, programs)

    def following(t):
        nonlocal counter
        if t + programs < static:
            return t + programs
        counter += 1
        return counter - 1

    def padded(t):
        bh, qb = tiles[t]
        return qb >= live_blocks[bh]

    def cost(t):
        n = int(entries[tiles[t]])
        return HANDED_US if padded(t) or n == 0 else TILE_US + BLOCK_US * n

    def take_at(t):
        n = 0 if padded(t) else int(entries[tiles[t]])
        return 0.2 if n == 0 else 0.3 + BLOCK_US * max(min(n - 1, 2), min(n, 1))

    exits, ran = np.zeros(programs), [[] for _ in range(programs)]
    takes = [(START_US + take_at(p), p, p, START_US) for p in range(programs)]
    heapq.heapify(takes)
    while takes:
        _, p, t, start = heapq.heappop(takes)
        ran[p].append(t)
        end = start + cost(t)
        nxt, skips = following(t), 0
        while nxt < len(tiles) and padded(nxt) and skips < MAX_SKIPS:
            ran[p].append(nxt)
            skips, end = skips + 1, end + SKIP_US
            nxt = following(nxt)
        if nxt >= len(tiles):
            exits[p] = end
        else:
            heapq.heappush(takes, (end + take_at(nxt), p, nxt, end))
    return exits, ran


def case_rows(case: dict, seed: int | None):
    """(entries per row (B*H, NQB), live query blocks per (batch, head)) of a case, as the original draws them."""
    ref = ROOT / "reference" / "block_sparse_attn"
    gen, spec_mod = load_sibling(ref, "generate"), load_sibling(ref, "spec")
    params = {k: v for k, v in case.items() if k not in ("case_id", "public_suite")}
    if seed is not None:
        params["seed"] = seed
    spec = spec_mod.spec_from_case(params)
    lens = gen.sample_seq_lens(spec)
    row_ptr, _ = gen.build_csr(spec, lens.tolist())
    entries = np.diff(row_ptr, axis=-1).reshape(spec.batch_size * spec.num_heads, -1)
    live = np.repeat(-(-lens // 128), spec.num_heads)
    return entries, live


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="full")
    ap.add_argument("--seeds", type=int, default=0, help="other lengths and block lists (seeds 1000, 1001, ...)")
    ap.add_argument("--orders", default="bh,qb-quarter,qb-third,qb-half")
    ap.add_argument("--programs", type=int, default=PROGRAMS)
    args = ap.parse_args()
    cases = tomllib.loads((ROOT / "cases" / "block_sparse_attn.toml").read_text())["suites"][args.suite]["cases"]
    orders = args.orders.split(",")
    print(f"model span (last exit), us, mean over {args.seeds + 1} draws; then each order's span / {orders[0]}'s")
    print(f"{'case':18s}" + "".join(f"{o:>12s}" for o in orders))
    logs = {o: [] for o in orders}
    for case in cases:
        spans = {o: [] for o in orders}
        for seed in [None] + list(range(1000, 1000 + args.seeds)):
            entries, live = case_rows(case, seed)
            for o in orders:
                spans[o].append(simulate(entries, live, o, args.programs)[0].max())
        base = np.array(spans[orders[0]])
        cells = [f"{base.mean():12.1f}"]
        for o in orders[1:]:
            ratio = np.array(spans[o]) / base
            logs[o].append(np.log(ratio).mean())
            cells.append(f"{ratio.mean():12.3f}")
        print(f"{case['name']:18s}" + "".join(cells))
    print(f"{'geomean':18s}{'':12s}" + "".join(f"{np.exp(np.mean(logs[o])):12.3f}" for o in orders[1:]))


if __name__ == "__main__":
    main()
