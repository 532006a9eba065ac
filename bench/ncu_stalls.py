"""Where a kernel's warps stall, per SASS instruction and per region, from Nsight Compute's sampling.

    ncu --section SourceCounters --section WarpStateStats -k regex:NAME -s 2 -c 1 -f -o rep python3 script.py
    ncu -i rep.ncu-rep --page source --csv --print-source sass | gzip > rep.sass.csv.gz
    python3 bench/ncu_stalls.py rep.sass.csv.gz [--top 25]

(`bench/ncu_profile.sh` runs both ncu steps on the GPU host.) Prints the kernel's stall mix,
the instructions with the most samples, and the samples of each region between partition
switches (USETMAXREG) and before each TMA store (UTMASTG: the --before 400 instructions), with
the share of `no_inst` (the warp waiting for its next instruction to be fetched).
"""
from __future__ import annotations

import argparse
import csv
import gzip
import itertools
import sys


def load(path: str) -> tuple[list[str], list[list[str]]]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    start = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    return rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--before", type=int, default=400, help="instructions before each TMA store to sum (default 400)")
    args = ap.parse_args(argv)
    hdr, data = load(args.csv)
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    src = [r[ix["Source"]].strip() for r in data]
    samples = [int(r[ix["# Samples"]] or 0) for r in data]
    by = {s: [int(r[ix[s]] or 0) for r in data] for s in stalls}
    total = sum(samples)
    if not total:
        print("no samples in the report", file=sys.stderr)
        return 1
    print(f"{len(data)} instructions, {total} samples")
    for s in sorted(stalls, key=lambda s: -sum(by[s]))[:10]:
        print(f"  {s[6:]:18s} {sum(by[s]):7d}  {sum(by[s]) / total:6.1%}")

    def mix(a: int, b: int) -> str:
        n = sum(samples[a:b]) or 1
        top = sorted(stalls, key=lambda s: -sum(by[s][a:b]))[:3]
        return ", ".join(f"{s[6:]} {sum(by[s][a:b]) / n:.0%}" for s in top)

    print(f"\nthe {args.top} instructions with the most samples:")
    for i in sorted(sorted(range(len(data)), key=lambda i: -samples[i])[:args.top]):
        print(f"  {i:5d} {samples[i]:6d}  {src[i][:60]:60s} {mix(i, i + 1)}")
    cuts = [0] + [i for i, s in enumerate(src) if "USETMAXREG" in s] + [len(data)]
    print("\nregions between partition switches (USETMAXREG):")
    for a, b in itertools.pairwise(cuts):
        if b - a > 20:
            print(f"  {a:5d}-{b:5d} {sum(samples[a:b]):7d} samples ({sum(samples[a:b]) / total:5.1%}): {mix(a, b)}")
    print(f"\nthe {args.before} instructions before each TMA store (UTMASTG):")
    for i, s in enumerate(src):
        if "UTMASTG" in s:
            a = max(0, i - args.before)
            print(f"  {a:5d}-{i:5d} {sum(samples[a:i + 1]):7d} samples: {mix(a, i + 1)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
