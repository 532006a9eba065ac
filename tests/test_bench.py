"""bench/: every script is listed in bench/README.md with the figures it backs, and compiles."""
import py_compile
import re

import pytest

from tests.helpers import ROOT

BENCH = ROOT / "bench"


def _readme_tables() -> tuple[set[str], set[str]]:
    """Script names in the README's first table (the scripts here) and in "## Removed"."""
    def first_column(part: str) -> set[str]:
        return {name for cell in re.findall(r"^\| (`.+?`) \|", part, re.M) for name in re.findall(r"`([\w.]+)`", cell)}

    here, removed = (BENCH / "README.md").read_text().split("## Removed")
    return first_column(here), first_column(removed)


def test_every_script_is_mapped_to_its_figures_and_every_mapped_script_exists():
    scripts = {p.name for p in BENCH.iterdir() if p.suffix in (".py", ".sh")}
    listed, removed = _readme_tables()
    assert listed == scripts
    assert not removed & scripts


def test_every_script_compiles(tmp_path):
    for path in BENCH.glob("*.py"):
        py_compile.compile(str(path), cfile=str(tmp_path / (path.stem + ".pyc")), doraise=True)


def _run(submission: str, cases: list[tuple[str, float, float]]) -> dict:
    """A saved run record as scale_out.sh writes them: (case, median ms, relative noise) each."""
    from kbench.compare import Z95

    return {"task": "qknorm", "submission": submission, "notes": [],
            "timing": {"meaningful": True, "processes": 2, "pool": 2},
            "summary": {"geomean_speedup": 1.0, "passed": len(cases), "total": len(cases)},
            "cases": [{"case": name, "params": {"n": i}, "status": "passed", "latency_ms": ms, "noise": noise,
                       "latency_ci95_ms": [ms * (1 - Z95 * noise), ms * (1 + Z95 * noise)]}
                      for i, (name, ms, noise) in enumerate(cases)]}


def test_scale_out_compare_judges_agreement_by_the_ratio_not_only_by_overlap(tmp_path, capsys):
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("scale_out_compare", BENCH / "scale_out_compare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    plain = _run("s1", [("moved", 1.0, 0.01), ("still", 2.0, 0.005)])
    scaled = _run("s1", [("moved", 1.035, 0.01), ("still", 2.0, 0.005)])
    (tmp_path / "plain.json").write_text(json.dumps({"runs": [plain]}))
    (tmp_path / "scaled.json").write_text(json.dumps({"runs": [scaled]}))
    (tmp_path / "plain.wall").write_text("100")
    (tmp_path / "scaled.wall").write_text("55")
    (tmp_path / "gpus.txt").write_text("0, H100\n1, H100\n")
    module.main(tmp_path, "abc")
    out = capsys.readouterr().out
    # 3.5% apart with 1% noise a side: the intervals overlap, but B/A's interval excludes 1
    moved = next(line for line in out.splitlines() if " moved " in line)
    assert " yes " in moved and moved.endswith("SLOWER")
    assert next(line for line in out.splitlines() if " still " in line).endswith("SAME")
    assert "(overlap): 2/2; kbench compare SAME or UNSURE: 1/2" in out
    assert "ratio 0.55" in out


def test_ncu_stalls_splits_the_samples_by_partition_and_before_tma_stores(tmp_path, capsys):
    import csv
    import gzip
    import importlib.util

    spec = importlib.util.spec_from_file_location("ncu_stalls", BENCH / "ncu_stalls.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stalls = ["stall_no_inst", "stall_wait", "stall_no_inst (Not Issued)"]
    # partition A: 30 instructions, 2 samples each (wait); partition B: 30 instructions, its last 10
    # before a TMA store with 5 no_inst samples each
    rows = [["0x0", "USETMAXREG.DEALLOC 0x78", "0", "0", "0", "0"]]
    rows += [[hex(16 * i), "FMUL R1, R1, R2", "2", "0", "2", "0"] for i in range(1, 31)]
    rows += [[hex(16 * 31), "USETMAXREG.TRY_ALLOC 0xe8", "0", "0", "0", "0"]]
    rows += [[hex(16 * i), "IADD3 R1, R1, 1", "0", "0", "0", "0"] for i in range(32, 52)]
    rows += [[hex(16 * i), "FMUL R3, R3, R4", "5", "5", "0", "0"] for i in range(52, 62)]
    rows += [[hex(16 * 62), "@UP0 UTMASTG.2D [UR8], [UR6]", "0", "0", "0", "0"]]
    path = tmp_path / "k.sass.csv.gz"
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(["Address", "Source", "# Samples"] + stalls)
        w.writerows(rows)
    assert module.main([str(path), "--top", "3", "--before", "10"]) == 0
    out = capsys.readouterr().out
    assert "63 instructions, 110 samples" in out
    assert out.splitlines()[1].split() == ["wait", "60", "54.5%"]
    assert out.splitlines()[2].split() == ["no_inst", "50", "45.5%"]
    regions = out.split("regions between partition switches (USETMAXREG):")[1].split("the 10 instructions")[0]
    assert "    0-   31      60 samples (54.5%): wait 100%" in regions
    assert "   31-   63      50 samples (45.5%): no_inst 100%" in regions
    assert "52-   62      50 samples: no_inst 100%" in out.split("TMA store (UTMASTG):")[1]


def test_bsa_case_gives_the_submissions_scale_and_a_cases_kernel_arguments():
    import importlib.util
    import subprocess
    import sys

    from kbench.tasks import get_task

    spec = importlib.util.spec_from_file_location("bsa_case", BENCH / "bsa_case.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    # the submission loaded in a process of its own: loaded here, its Triton kernels would stay
    # bound to this process's (non-interpreter) mode for the interpreted tests that follow
    printed = subprocess.run(
        [sys.executable, "-c", "from kbench.loader import load_module; import sys; "
         f"print(repr(load_module(sys.argv[1], 'sub').QK_SCALE))",
         str(ROOT / "submissions" / "block_sparse_attn" / "submission.py")],
        capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert module.QK_SCALE == float(printed)
    task = get_task("block_sparse_attn")
    case = task.suite("smoke").cases[0]
    assert module.find_case(task, case.name) is case
    q, k, v, row_ptr, col_idx, seq_lens = module.kernel_inputs(task, case, "cpu")
    inputs = task.module.generate(dict(case.params, seed=case.seed), "cpu")
    assert all(a.equal(inputs[n]) for a, n in zip((q, k, v, row_ptr, col_idx, seq_lens),
                                                  ("q", "k", "v", "row_ptr", "col_idx", "seq_lens")))


def test_call_median_drops_the_warm_up_calls_and_takes_the_median():
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("call_median", BENCH / "call_median.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class Timer:   # device times 100, 90 (the warm-ups), then 5, 1, 3
        def __init__(self):
            self.times, self.prepared = [100.0, 90.0, 5.0, 1.0, 3.0], []

        def timed(self, fn, prepare, inputs):
            self.prepared.append(prepare(inputs))
            return fn(inputs), SimpleNamespace(device_ms=self.times.pop(0))

    timer = Timer()
    assert module.median_ms(timer, lambda d: (d["x"],), {"x": 1}, calls=3) == pytest.approx(3.0)
    assert timer.times == [] and timer.prepared == [{"x": 1}] * 5   # the same inputs every call by default
    timer = Timer()
    assert module.median_ms(timer, lambda d: (d,), {"x": 1}, calls=3, prepare=lambda d: {"x": 2}) == pytest.approx(3.0)
    assert timer.prepared == [{"x": 2}] * 5


def _bench_module(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bsa_schedule_model_runs_every_tile_once_in_every_order():
    import numpy as np

    model = _bench_module("bsa_schedule_model")
    rng = np.random.default_rng(5)
    heads, nqb = 7, 6
    entries = rng.integers(0, 6, size=(heads, nqb))
    live = np.array([6, 2, 4, 6, 1, 3, 5])   # padded query blocks past these
    for order in model.ORDERS:
        tiles, static = model.tile_order(order, heads, nqb, programs=5)
        assert sorted(tiles) == [(bh, qb) for bh in range(heads) for qb in range(nqb)], order
        assert static % 5 == 0 and static <= len(tiles)
        exits, ran = model.simulate(entries, live, order, programs=5)
        assert sorted(t for program in ran for t in program) == list(range(heads * nqb)), order
        assert (exits > model.START_US).all()


def test_bsa_schedule_models_tail_is_the_kernels():
    """The model's query-block-major third hands out as many (batch, head)s as the kernel's tail."""
    import json
    import subprocess
    import sys

    model = _bench_module("bsa_schedule_model")
    # the kernel's module read in a process of its own: imported here, Gluon's import would leave this
    # process's Triton unfit for the interpreted tests that follow
    printed = subprocess.run(
        [sys.executable, "-c", "import importlib.util, sys; "
         "spec = importlib.util.spec_from_file_location('bsa_gluon', sys.argv[1]); "
         "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
         "print([m._tail_heads.fn(h) for h in range(1, 70)])",
         str(ROOT / "submissions" / "block_sparse_attn" / "bsa_gluon.py")],
        capture_output=True, text=True, cwd=ROOT, check=True).stdout
    kernel_tails = json.loads(printed)
    for heads, tail in zip(range(1, 70), kernel_tails):
        tiles, _ = model.tile_order("qb-third", heads, 4, programs=132)
        assert {bh for bh, _ in tiles[(heads - tail) * 4:]} == set(range(heads - tail, heads)), heads
        assert {bh for bh, _ in tiles[:(heads - tail) * 4]} == set(range(heads - tail)), heads
        # within the tail, query block after query block: every tail head's last block first
        assert [qb for _, qb in tiles[(heads - tail) * 4:]][:tail] == [3] * tail, heads


def test_code_size_reads_a_kernels_instructions_from_its_cubin():
    """bench/code_size.py compiles for the GPU without one; the .text it reads grows with the code
    a kernel unrolls, in whole 16-byte instructions, and is part of the cubin, not all of it. In a
    process of its own: a compile in this one leaves Triton's interpreter broken for later tests."""
    import json
    import subprocess
    import sys

    script = (
        "import json, torch, code_size, interlude_parts\n"
        "from triton.backends.compiler import GPUTarget\n"
        "t, x = GPUTarget('cuda', 90, 32), torch.empty(1 << 20)\n"
        "ks = [code_size.compile_for(interlude_parts._long_code, t, [x, n]) for n in (64, 768)]\n"
        "lines = code_size.instructions_by_line(ks[1].asm['cubin'])\n"
        "import pathlib; src = pathlib.Path(interlude_parts.__file__)\n"
        "mine = {str(l): n for l, n in code_size.lines_of(lines, src).items()}\n"
        "print(json.dumps([[code_size.text_bytes(k.asm['cubin']), len(k.asm['cubin'])] for k in ks]\n"
        "                 + [sum(lines.values()), mine, code_size.by_function(lines, src)]))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=BENCH, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (short, _), (long, long_cubin), counted, lines, functions = json.loads(proc.stdout.strip().splitlines()[-1])
    assert short > 0 and long % 16 == 0 and short % 16 == 0
    assert long > 8 * short
    assert long < long_cubin
    # --where's attribution: every instruction counted once, and the unrolled step's line, inside
    # _long_code, holds most of them.
    assert counted == long // 16
    step = next(i for i, text in enumerate((BENCH / "interlude_parts.py").read_text().splitlines(), 1)
                if "v = tl.where(v > i * 0.01" in text)
    assert lines[str(step)] > counted // 2, lines
    assert max(functions, key=functions.get) == "_long_code" and functions["_long_code"] >= lines[str(step)]


def test_mla_decode_native_times_as_the_original_a_growing_cache_and_a_full_one(tmp_path):
    """GPU MODE's benchmark loop on CPU: the cache object kept from call to call (a growing context
    for a kernel that advances seq_len), set back only when its buffer is full; at least 3 runs."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, str(BENCH / "mla_decode_native.py"), "--device", "cpu", "--max-runs", "3",
         "--warmup-s", "0", "--cases", "b3_h4_ctx300,b1_h4_ctx511", "--baseline", "none", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = json.loads((tmp_path / "native.json").read_text())["targets"]["submission"]["records"]
    grows, full = records
    assert grows["status"] == full["status"] == "passed"
    # the checked call and 3 timed ones each appended a row: 300 -> 304, nothing set back
    assert (grows["runs"], grows["final_seq_len"], grows["cache_resets"]) == (3, 304, 0)
    # 511 rows in a 512-row buffer: full after the checked call, set back before each timed one
    assert (full["runs"], full["final_seq_len"], full["cache_resets"]) == (3, 512, 3)
    assert grows["mean_ms"] > 0 and grows["err_ms"] >= 0 and grows["best_ms"] <= grows["mean_ms"]
    assert "geomean latency" in proc.stdout


def test_crosscheck_agreement_says_which_medians_were_host_timed():
    import importlib.util

    spec = importlib.util.spec_from_file_location("crosscheck_under_test", BENCH / "crosscheck.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def plain(ms, gate_off):
        return {"median_ms": ms, "noise": 0.002, "do_bench_ms": ms, "gate_off": gate_off}

    rows = [{"case": "c", "submission": plain(0.2000, False), "baseline": plain(16.33, True)}]
    result = {"cases": [{"case": "c", "latency_ms": 0.2010, "noise": 0.003,
                         "baseline_latency_ms": 16.87, "baseline_noise": 0.01}]}
    (sub, base) = module.agreement(rows, result)
    assert sub[:2] == ("c", "submission") and sub[5:] == (True, True, False)
    assert base[:2] == ("c", "baseline") and base[5] is False and base[7] is True   # 3.3% off, host-timed
