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
