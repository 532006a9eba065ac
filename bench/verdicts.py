"""Does `kbench compare` call a small real change, and never one that is not there?

    python3 bench/verdicts.py planted qknorm --pct 3 --suite full --out DIR   # bundled vs planted
    python3 bench/verdicts.py null qknorm --runs 20 --suite quick --out DIR   # bundled vs itself
    python3 bench/verdicts.py plant mla_decode --pct 2 --out DIR/planted      # only write the folder
    python3 bench/verdicts.py --summarize DIR [DIR ...] [--markdown --commit SHA] [--rejudge]

A planted submission is the bundled kernel plus device work of a known share of its time:
- mla_decode, block_sparse_attn: a one-program kernel stamps the global timer before the call and
  another spins after it until PCT% of the time between them has passed. The two launches cost
  the stream time of their own (1.5-3.9% of a block_sparse_attn call on the H100), so `planted`
  also times the same plant at 0% and judges the ratio between the two runs.
- qknorm (4-8 us: two extra launches would cost more than the plant): a copy of the bundled kernel
  whose programs (one wave) each spin PCT% of the case's median first, in SM cycles at the case's
  SM clock, both from a `kbench eval --json` run of the bundled kernel (`--sizes`; `planted` makes
  one).
Each compare is the interleaved two-folder run (`kbench compare A B`), saved with its samples.
Extra `kbench eval` settings: `--processes`, `--pool`, `--noise`, `--budget`.
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench import api
from kbench.run.records import widen_by_process_spread
from kbench.stats.compare import compare_interleaved
from kbench.stats.estimates import pool

CALLED = ("FASTER", "SLOWER")

WRAPPER = '''"""{task}, planted: the bundled kernel (_bundled.py), then device work of {pct:g}% of the
call's own stream time (written by bench/verdicts.py)."""
import torch
import triton
import triton.language as tl

import _bundled
from _bundled import *  # noqa: F401,F403 - the task's other names (VARIANT_MANIFEST, setup)

FRACTION = {fraction!r}


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _stamp(t_ptr):
    tl.store(t_ptr, _now())


@triton.jit
def _spin(t_ptr, FRACTION: tl.constexpr):
    start = tl.load(t_ptr, volatile=True)
    now = _now()
    end = now + ((now - start).to(tl.float32) * FRACTION).to(tl.int64)
    while now < end:
        now = _now()


_STAMPS = {{}}


def {entry}(*args):
    device = _device(args)
    if device is None:
        return _bundled.{entry}(*args)
    t = _STAMPS.get(device)
    if t is None:
        t = _STAMPS[device] = torch.zeros(1, dtype=torch.int64, device=device)
    _stamp[(1,)](t)
    out = _bundled.{entry}(*args)
    _spin[(1,)](t, FRACTION=FRACTION)
    return out


def _device(args):
    """The CUDA device of the first tensor in the arguments (one level into tuples), else None."""
    for a in args:
        for x in (a if isinstance(a, (tuple, list)) else (a,)):
            if isinstance(x, torch.Tensor):
                return x.device if x.is_cuda else None
    return None
'''

# qknorm: three exact edits of a copy of the bundled submission.py (each must match once).
QKNORM_EDITS = (
    ("@triton.jit\ndef _qknorm_kernel(",
     ("@triton.jit\ndef _clock():\n"
     "    return tl.inline_asm_elementwise(\"mov.u64 $0, %clock64;\", \"=l\", [], dtype=tl.int64, is_pure=False, "
     "pack=1)\n\n\n@triton.jit\ndef _qknorm_kernel(")),
    ("EPS: tl.constexpr):\n    pid = tl.program_id(0)\n",
     ("EPS: tl.constexpr, SPIN_CYCLES: tl.constexpr):\n    pid = tl.program_id(0)\n"
     "    if SPIN_CYCLES > 0:  # planted: every program starts late (one wave: the kernel ends late)\n"
     "        start = _clock()\n        now = start\n        while now - start < SPIN_CYCLES:\n"
     "            now = _clock()\n")),
    ("Q_PROGRAMS=q_programs, EPS=EPS)", "Q_PROGRAMS=q_programs, EPS=EPS, SPIN_CYCLES=_spin_cycles(q, k))"),
)
QKNORM_TAIL = '''

# planted (bench/verdicts.py): spin cycles by (q shape, k shape), {pct:g}% of the bundled kernel's median
SPIN_BY_SHAPE = {sizes!r}


def _spin_cycles(q, k):
    if _interpreted(q):
        return 0
    key = (tuple(q.shape), tuple(k.shape))
    if key not in SPIN_BY_SHAPE:
        raise RuntimeError(f"planted: no size for shapes {{key}}")
    return SPIN_BY_SHAPE[key]
'''


def qknorm_shapes(params: dict) -> tuple:
    lead = (params["batch"], params["seq"]) if params.get("seq") else (params["batch"],)
    return (lead + (params["num_qo_heads"], params["head_dim"]), lead + (params["num_kv_heads"], params["head_dim"]))


def qknorm_sizes(run: dict, pct: float) -> dict:
    """Spin cycles per shape: pct% of each case's median at its median SM clock."""
    sizes = {}
    for c in run["cases"]:
        if c.get("status") != "passed" or not c.get("latency_ms") or not c.get("sm_clock_mhz"):
            raise SystemExit(f"verdicts: case {c['case']} of the sizes run has no GPU median and SM clock")
        sizes[qknorm_shapes(c["params"])] = round(pct / 100 * c["latency_ms"] * 1e3 * c["sm_clock_mhz"])
    return sizes


def plant(task: str, pct: float, out: Path, sizes_run: dict | None = None) -> Path:
    """Write the planted submission folder ``out`` for ``task`` from submissions/TASK."""
    source = ROOT / "submissions" / task
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for f in source.glob("*.py"):
        shutil.copy(f, out / f.name)
    if task == "qknorm":
        if sizes_run is None:
            raise SystemExit("verdicts: qknorm's plant is sized from a run of the bundled kernel: give --sizes RUN.json")
        text = (source / "submission.py").read_text()
        for old, new in QKNORM_EDITS:
            if text.count(old) != 1:
                raise SystemExit(f"verdicts: submissions/qknorm/submission.py changed: {old.splitlines()[0]!r} "
                                 f"is there {text.count(old)} times, not once; update QKNORM_EDITS")
            text = text.replace(old, new)
        (out / "submission.py").write_text(text + QKNORM_TAIL.format(pct=pct, sizes=qknorm_sizes(sizes_run, pct)))
    else:
        entry = {"mla_decode": "custom_kernel", "block_sparse_attn": "block_sparse_attn_fwd"}[task]
        (out / "submission.py").rename(out / "_bundled.py")
        (out / "submission.py").write_text(WRAPPER.format(task=task, pct=pct, fraction=pct / 100, entry=entry))
    return out


def settings(args) -> dict:
    given = {"suite": args.suite, "processes": args.processes, "pool": args.pool, "noise": args.noise,
             "budget_s": args.budget, "seed": args.seed}
    return {k: v for k, v in given.items() if v is not None}


def timed_compare(task: str, a: Path, b: Path, opts: dict, save: Path) -> dict:
    """One interleaved run of B beside A (``kbench compare A B``), the record and its wall time saved."""
    start = time.perf_counter()
    run = api.evaluate(b, task=task, baseline_path=a, **opts)
    wall = time.perf_counter() - start
    saved = {"wall_s": round(wall, 1), "run": run, "compare": compare_interleaved(run)}
    save.write_text(json.dumps(saved))
    return saved


def _planted_rows(saved: dict, pct: float, zero: dict | None) -> list[dict]:
    """Per case and the geomean: B/A, its interval and verdict; with ``zero`` (the same plant at 0%:
    its launches alone) their B/A (``base``) and the plant's own effect, B/A over theirs (``net``);
    ``off``: net against the planted ratio. ``ratio`` None where the case was not timed."""
    result = saved["compare"]
    base = {r["case"]: r.get("ratio") for r in zero["compare"]["rows"]} if zero else {}
    if zero:
        base["geomean"] = zero["compare"]["summary"]["geomean_ratio"]
    rows = []
    for r in result["rows"] + [{"case": "geomean", "ratio": result["summary"]["geomean_ratio"],
                                "ratio_ci95": result["summary"]["geomean_ratio_ci95"],
                                "verdict": result["summary"]["verdict"]}]:
        row = {"case": r["case"], "verdict": r["verdict"], "ratio": r.get("ratio")}
        if row["ratio"] is not None:
            net = row["ratio"] / base[r["case"]] if base.get(r["case"]) else row["ratio"]
            row.update(lo=r["ratio_ci95"][0], hi=r["ratio_ci95"][1], base=base.get(r["case"]), net=net,
                       off=net / (1 + pct / 100) - 1)
        rows.append(row)
    return rows


def _called(result: dict) -> list[str]:
    """What a compare called FASTER or SLOWER: its cases, and the geomean."""
    return [r["case"] for r in result["rows"] if r["verdict"] in CALLED] + \
        (["geomean"] if result["summary"]["verdict"] in CALLED else [])


def planted_table(task: str, pct: float, saved: dict, zero: dict | None = None) -> list[str]:
    """``_planted_rows`` as text, with the count of cases called."""
    result = saved["compare"]
    lines = [f"{task}: planted {pct:g}% (B/A {1 + pct / 100:.3f}), wall {saved['wall_s']:.1f} s"
             + (f"; the plant's launches alone timed too (wall {zero['wall_s']:.1f} s)" if zero else ""),
             f"{'case':<28} {'B/A':>7} {'95% CI':>17} {'verdict':>8}"
             + (f" {'launches':>8} {'net':>7}" if zero else "") + f" {'off planted':>11}"]
    rows = _planted_rows(saved, pct, zero)
    for r in rows:
        if r["ratio"] is None:
            lines.append(f"{r['case']:<28} {'-':>7} {'':>17} {r['verdict']!s:>8}")
            continue
        lines.append(f"{r['case']:<28} {r['ratio']:7.4f} {r['lo']:8.4f}-{r['hi']:<8.4f} {r['verdict']:>8}"
                     + (f" {r['base'] or math.nan:8.4f} {r['net']:7.4f}" if zero else "")
                     + f" {100 * r['off']:+10.2f}%")
    called = sum(r["verdict"] == "SLOWER" for r in result["rows"])
    worst = max((abs(r["off"]) for r in rows if r["ratio"] is not None), default=math.nan)
    lines.append(f"SLOWER on {called} of {len(result['rows'])} cases, geomean {result['summary']['verdict']}; "
                 f"largest distance from the planted ratio {100 * worst:.2f}%")
    return lines


def upper_95(k: int, n: int) -> float:
    """Clopper-Pearson one-sided 95% upper bound of a rate seen k times in n (bisection)."""
    if k >= n:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        tail = sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))
        lo, hi = (p, hi) if tail > 0.05 else (lo, p)
    return hi


def null_table(task: str, runs: list[dict]) -> list[str]:
    lines = [f"{task}: the bundled kernel against itself, {len(runs)} runs",
             f"{'run':>4} {'wall s':>7} {'cases':>5} {'called':>6} {'geomean':>8} {'95% CI':>17} {'widest case CI':>15}"]
    hits = 0
    for i, saved in enumerate(runs):
        res = saved["compare"]
        called = _called(res)
        hits += bool(called)
        lo, hi = res["summary"]["geomean_ratio_ci95"] or (math.nan, math.nan)
        lines.append(f"{i + 1:>4} {saved['wall_s']:7.1f} {len(res['rows']):>5} {len(called):>6} "
                     f"{res['summary']['geomean_ratio'] or math.nan:8.4f} {lo:8.4f}-{hi:<8.4f} "
                     f"{100 * widest(res):+14.2f}%" + (f"  {', '.join(called)}" if called else ""))
    lines.append(f"runs with any case or the geomean called: {hits} of {len(runs)} "
                 f"(family-wise rate's 95% upper bound {100 * upper_95(hits, len(runs)):.0f}%)")
    return lines


def rejudge(saved: dict) -> dict:
    """``saved`` with its compare made again from the run's samples by this kbench's statistics:
    each case's figure pooled from its processes' calls, the run-level spread, the verdicts."""
    run = json.loads(json.dumps(saved["run"]))
    fields = {"case": ("samples_ms", "latency_ms", "noise", "latency_ci95_ms", "latency_by_process_ms"),
              "baseline": ("baseline_samples_ms", "baseline_latency_ms", "baseline_noise", "baseline_ci95_ms",
                           "baseline_by_process_ms")}
    for rec in run["cases"]:
        for samples, ms, noise, ci, by_process in fields.values():
            if rec.get(samples) and rec.get(ms) and not rec.get("flags"):
                figure = pool(rec[samples])
                rec.update({ms: figure.summary.median, noise: figure.summary.noise,
                            ci: [figure.summary.ci_low, figure.summary.ci_high],
                            by_process: [p.median for p in figure.per_process]})
                rec.pop("noise_df" if samples == "samples_ms" else "baseline_noise_df", None)
    run["timing"]["process_spread_pct"] = widen_by_process_spread(run["cases"])["pct"]
    return {**saved, "run": run, "compare": compare_interleaved(run)}


def _load(path: Path, again: bool) -> dict:
    saved = json.loads(path.read_text())
    return rejudge(saved) if again else saved


def _planted(folder: Path, again: bool):
    """(task, pct, saved compare, the same plant at 0% or None) of each planted record in ``folder``."""
    for f in sorted(folder.glob("planted-*.json")):
        task, pct = f.stem.split("-")[1], float(f.stem.split("-")[2].removesuffix("pct"))
        zero = folder / f"launches-{task}.json"
        yield task, pct, _load(f, again), _load(zero, again) if zero.exists() and pct else None


def summarize(folder: Path, again: bool = False) -> list[str]:
    lines = []
    for task, pct, saved, zero in _planted(folder, again):
        lines += planted_table(task, pct, saved, zero) + [""]
    for task, runs in _null_runs(folder, again).items():
        lines += null_table(task, runs) + [""]
    return lines


def _null_runs(folder: Path, again: bool = False) -> dict:
    out = {}
    for task in sorted({f.stem.split("-")[1] for f in folder.glob("null-*-*.json")}):
        files = sorted(folder.glob(f"null-{task}-*.json"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
        out[task] = [_load(f, again) for f in files]
    return out


def widest(result: dict) -> float:
    """The widest case interval's half-width (B/A, relative): a change of every case's time by
    more than this moves every case's interval off 1, the smallest change called on every case."""
    return max((math.sqrt(r["ratio_ci95"][1] / r["ratio_ci95"][0]) - 1 for r in result["rows"] if r.get("ratio_ci95")),
               default=math.nan)


def _settings(run: dict) -> str:
    t = run["timing"]
    return f"--processes {t['processes']} --pool {t['pool']}" + (f" --noise {t['noise_target']:g}"
                                                                  if t["noise_target"] != 0.01 else "")


def markdown(folders: list[Path], commit: str, again: bool = False) -> list[str]:
    """docs/verdicts.md from ``folders`` of this tool's records."""
    out = ["# Verdicts", "",
           "`kbench compare` of the bundled kernel against a planted copy (device work of a known share of "
           "its time) and against itself (`bench/verdicts.py`; docs/measurement.md, section 6). Each "
           "interval is one of a family that holds together at 95% (every case and the geomean). "
           "*smallest change called*: the widest case interval's half-width, what a change of every "
           "case's time must exceed to be called on every case.", "",
           "Generated by `python bench/verdicts.py " + " ".join(sys.argv[1:]) + "`. Do not edit it by hand: "
           "run the command again on new records.", ""]
    for folder in folders:
        for task, pct, saved, zero in _planted(folder, again):
            run, res = saved["run"], saved["compare"]
            out += [f"## {task}: planted {pct:g}%, {run['suite']} ({_settings(run)})", "",
                    f"Card {run['device'].get('name')}, {run['created'][:10]}, commit {commit}; "
                    f"`python bench/verdicts.py planted {task} --pct {pct:g} --suite {run['suite']} {_settings(run)} "
                    f"--out DIR`; wall {saved['wall_s']:.1f} s a compare"
                    + (f" ({zero['wall_s']:.1f} s for the launches alone)" if zero else "") + ".", ""]
            head = ["case", "B/A", "95% CI", "verdict", *(["launches alone", "net"] if zero else []), "net / planted"]
            out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for r in _planted_rows(saved, pct, zero):
                if r["ratio"] is None:
                    continue
                cells = [r["case"], f"{r['ratio']:.4f}", f"{r['lo']:.4f}-{r['hi']:.4f}", r["verdict"]]
                cells += [f"{r['base']:.4f}", f"{r['net']:.4f}"] if zero else []
                out.append("| " + " | ".join(cells + [f"{100 * r['off']:+.2f}%"]) + " |")
            called = sum(r["verdict"] == "SLOWER" for r in res["rows"])
            out += ["", (f"SLOWER on {called} of {len(res['rows'])} cases, geomean {res['summary']['verdict']}; "
                        f"smallest change called: {100 * widest(res):.2f}%."), ""]
        for task, runs in _null_runs(folder, again).items():
            run = runs[0]["run"]
            hits = sum(bool(_called(saved["compare"])) for saved in runs)
            widths = sorted(widest(s["compare"]) for s in runs)
            walls = sorted(s["wall_s"] for s in runs)
            out += [f"## {task}: against itself, {run['suite']} ({_settings(run)})", "",
                    (f"Card {run['device'].get('name')}, {run['created'][:10]}, commit {commit}; "
                    f"`python bench/verdicts.py null {task} --runs {len(runs)} --suite {run['suite']} --out DIR`."), "",
                    ("| runs | with any case or the geomean called | family-wise rate, 95% upper bound | "
                    "smallest change called (median, range) | wall a compare (median) |"), "|---|---|---|---|---|",
                    (f"| {len(runs)} | {hits} | {100 * upper_95(hits, len(runs)):.0f}% | "
                    f"{100 * widths[len(widths) // 2]:.2f}% ({100 * widths[0]:.2f}-{100 * widths[-1]:.2f}%) | "
                    f"{walls[len(walls) // 2]:.1f} s |"), ""]
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", nargs="?", choices=("planted", "null", "plant"))
    p.add_argument("task", nargs="?", choices=("qknorm", "mla_decode", "block_sparse_attn"))
    p.add_argument("--pct", type=float, default=2.0, help="planted slowdown, percent of the kernel's time")
    p.add_argument("--runs", type=int, default=20, help="null: compares of the bundled kernel with itself")
    p.add_argument("--sizes", type=Path, help="qknorm: a kbench eval --json run of the bundled kernel")
    p.add_argument("--out", type=Path, help="folder for the records (plant: the submission folder)")
    p.add_argument("--summarize", type=Path, nargs="+", metavar="DIR", help="print the tables of DIR's records again")
    p.add_argument("--markdown", action="store_true", help="with --summarize: the page docs/verdicts.md")
    p.add_argument("--commit", default="(not given)", help="with --markdown: the commit the records were made at")
    p.add_argument("--rejudge", action="store_true",
                   help="with --summarize: judge the saved samples again with this kbench's statistics")
    p.add_argument("--suite")
    p.add_argument("--processes", type=int)
    p.add_argument("--pool", type=int)
    p.add_argument("--noise", type=float)
    p.add_argument("--budget", type=float)
    p.add_argument("--seed", type=int)
    args = p.parse_args(argv)
    if args.summarize:
        lines = markdown(args.summarize, args.commit, args.rejudge) if args.markdown else \
            [line for folder in args.summarize for line in summarize(folder, args.rejudge)]
        print("\n".join(lines))
        return 0
    if not (args.what and args.task and args.out):
        p.error("give what to do, a task and --out (or --summarize DIR)")
    bundled = ROOT / "submissions" / args.task
    if args.what == "plant":
        sizes = json.loads(args.sizes.read_text()) if args.sizes else None
        print(plant(args.task, args.pct, args.out, sizes))
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    opts = settings(args)
    if args.what == "planted":
        sizes = json.loads(args.sizes.read_text()) if args.sizes else None
        if args.task == "qknorm" and sizes is None:
            sizes = api.evaluate(bundled, task="qknorm", baseline="none", **opts)
            (args.out / "sizes-qknorm.json").write_text(json.dumps(sizes))
        zero = None
        if args.task != "qknorm" and args.pct:   # the plant's own launches, alone
            folder = plant(args.task, 0.0, args.out / f"planted-{args.task}", sizes)
            zero = timed_compare(args.task, bundled, folder, opts, args.out / f"launches-{args.task}.json")
        folder = plant(args.task, args.pct, args.out / f"planted-{args.task}", sizes)
        save = args.out / f"planted-{args.task}-{args.pct:g}pct.json"
        saved = timed_compare(args.task, bundled, folder, opts, save)
        print("\n".join(planted_table(args.task, args.pct, saved, zero)))
        return 0
    runs = []
    for i in range(args.runs):
        save = args.out / f"null-{args.task}-{i + 1}.json"
        runs.append(timed_compare(args.task, bundled, bundled, opts, save))
        print(null_table(args.task, runs)[-2], flush=True)
    print("\n".join(null_table(args.task, runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
