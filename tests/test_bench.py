"""bench/: every script is listed in bench/README.md with the figures it backs, and compiles."""
import py_compile
import re

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
