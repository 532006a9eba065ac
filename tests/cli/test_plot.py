"""kbench plot and compare --plot: charts of real H100 results, read back; bad input is one line, exit 2."""
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from kbench import api
from kbench.cli.commands import cli
from kbench.cli.main import _workers_per_run
from kbench.cli.plot import VERDICT_COLOURS, draw
from kbench.errors import KbenchError
from tests.helpers import FIXTURES

RESULTS = FIXTURES / "results"
A = RESULTS / "qknorm-quick-h100.json"            # kbench eval --json on an H100, quick suite
B = RESULTS / "qknorm-quick-h100-rerun.json"      # the same submission, run again
MLA = RESULTS / "mla_decode-quick-h100.json"
CPU = RESULTS / "qknorm-smoke-cpu.json"           # CPU mode: no meaningful timings
CASES = [c["case"] for c in json.loads(A.read_text())["cases"]]


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args])


def svg_ids(path) -> dict[str, ET.Element]:
    return {e.get("id"): e for e in ET.parse(path).iter() if e.get("id")}


def text_of(element: ET.Element) -> str:
    return "".join(element.itertext())


def marks(element: ET.Element) -> int:
    """How many marks a scatter or marker group draws: each a <use> of a marker defined in its
    <defs>, or its own <path>."""
    if element.tag.endswith("defs"):
        return 0
    return int(element.tag.endswith(("use", "path"))) + sum(marks(child) for child in element)


@pytest.fixture(scope="module")
def charts(tmp_path_factory):
    """One result as SVG and PNG, two as an HTML page and (through compare --plot) as SVG: drawn once."""
    out = tmp_path_factory.mktemp("charts")
    for args in ([A, "-o", out / "one.svg"], [A, "-o", out / "one.png"], [A, B, "-o", out / "two.html"]):
        result = invoke("plot", *args)
        assert result.exit_code == 0, result.output
    result = invoke("compare", A, B, "--plot", out / "compare.svg")
    assert result.exit_code == 0 and "B/A geomean time" in result.stdout
    return out


def test_one_result_is_a_roofline_and_every_timed_call(charts):
    path = charts / "one.svg"
    assert 20_000 < path.stat().st_size < 3_000_000
    ids = svg_ids(path)
    assert {"roofline", "calls", "ceiling-copy", "ceiling-matmul", "roofline-submission",
            "roofline-baseline"} <= set(ids)
    run = json.loads(A.read_text())
    assert "3005 GB/s" in text_of(ids["roofline"]) and "732 TFLOP/s" in text_of(ids["roofline"])  # its card's
    assert "qknorm / quick on NVIDIA H100 80GB HBM3" in text_of(ids["roofline"])
    assert marks(ids["roofline-submission"]) == marks(ids["roofline-baseline"]) == len(CASES)
    for case in run["cases"]:
        name = case["case"]
        assert text_of(ids[f"label-{name}"]).strip() == name
        assert f"interval-{name}" in ids and f"median-{name}" in ids
        for j, calls in enumerate(case["samples_ms"]):   # every timed call, a row per process
            assert marks(ids[f"calls-{name}-{j}"]) == len(calls)


def test_a_png_is_one_figure_of_the_same_charts(charts):
    data = (charts / "one.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and 20_000 < len(data) < 3_000_000
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width == 1200 and height > 800   # 10 inches at 120 dpi; the roofline over the calls


def test_two_results_add_b_against_a_with_compares_verdicts(charts):
    comparison = api.compare(str(A), str(B))
    ids = svg_ids(charts / "compare.svg")
    assert {"comparison", "ratio-one", "geomean", "geomean-interval", "A-roofline", "A-calls", "B-roofline",
            "B-calls", "A-ceiling-copy", "B-ceiling-matmul"} <= set(ids)
    for row in comparison["rows"]:
        mark = ids[f"verdict-{row['verdict']}-{row['case']}"]
        assert VERDICT_COLOURS[row["verdict"]] in ET.tostring(mark, encoding="unicode")
        assert f"ratio-interval-{row['case']}" in ids
    lo, hi = comparison["summary"]["geomean_ratio_ci95"]
    assert f"geomean {comparison['summary']['geomean_ratio']:.3f} ({lo:.3f}-{hi:.3f})" in text_of(ids["comparison"])


def test_the_html_page_holds_the_charts_and_the_tables_and_nothing_from_outside(charts):
    page = (charts / "two.html").read_text()
    assert 20_000 < len(page) < 3_000_000
    figures = re.findall(r'<figure class="chart" id="chart-([\w-]+)"><svg', page)
    assert figures == ["comparison", "A-roofline", "A-calls", "B-roofline", "B-calls"]
    assert page.count("<table>") == 3   # B against A, then each result's cases
    assert all(page.count(f"<td>{case}") == 3 for case in CASES)
    assert "UNSURE" in page and "geomean speedup 1.525x vs flashinfer" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "<link" not in page
    assert "<script" not in page
    ids = re.findall(r' id="([^"]+)"', page)
    assert len(ids) == len(set(ids))   # five figures' own ids, none repeated


def test_a_result_without_per_call_samples_shows_each_process_median_and_says_so(tmp_path):
    run = json.loads(A.read_text())
    for case in run["cases"]:
        del case["samples_ms"], case["baseline_samples_ms"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(run))
    draw([old], tmp_path / "old.svg")
    ids = svg_ids(tmp_path / "old.svg")
    assert "per-call samples were not kept" in text_of(ids["calls"])
    for case in run["cases"]:
        assert [marks(ids[f"calls-{case['case']}-{j}"]) for j in range(len(case["process_ids"]))] == [1, 1]


def test_file_json_name_picks_one_run_of_several(tmp_path):
    several = tmp_path / "several.json"
    several.write_text(json.dumps({"runs": [json.loads(A.read_text()), json.loads(MLA.read_text())]}))
    assert invoke("plot", f"{several}:mla_decode", "-o", tmp_path / "mla.svg").exit_code == 0
    ids = svg_ids(tmp_path / "mla.svg")
    assert "label-prefill512" in ids and "label-" + CASES[0] not in ids
    result = invoke("plot", several, "-o", tmp_path / "both.svg")
    assert result.exit_code == 2 and "pick one as" in result.stderr and not (tmp_path / "both.svg").exists()


def test_the_markdown_summary_links_the_page(tmp_path):
    page, summary = tmp_path / "charts.html", tmp_path / "summary.md"
    result = invoke("compare", A, B, "--plot", page, "--markdown", summary)
    assert result.exit_code == 0 and page.stat().st_size > 10_000
    assert summary.read_text().rstrip().splitlines()[-1] == f"Charts: [charts.html]({page})"


def test_compared_folders_get_the_comparison_alone(tmp_path):
    draw((), tmp_path / "folders.svg", api.compare(str(A), str(B)))
    ids = svg_ids(tmp_path / "folders.svg")
    assert "comparison" in ids and "roofline" not in ids and "A-roofline" not in ids
    with pytest.raises(KbenchError, match="CPU mode results carry no meaningful timings"):
        draw((), tmp_path / "cpu.svg", api.compare(str(CPU), str(CPU)))


def _bad_inputs(tmp):
    (tmp / "bad.json").write_text("{")
    (tmp / "a_file").write_text("")
    png = tmp / "out.png"
    return [
        (["plot", tmp / "nope.json", "-o", png], f"{tmp / 'nope.json'}: no such file or directory"),
        (["plot", tmp / "bad.json", "-o", png], f"{tmp / 'bad.json'}: not a kbench JSON result"),
        (["plot", A, MLA, "-o", png], f"{MLA} is a mla_decode result but {A} is qknorm"),
        (["plot", CPU, "-o", png], f"{CPU}: CPU mode results carry no meaningful timings"),
        (["plot", A, B, A, "-o", png], "3 results: plot one, or two to compare (A B)"),
        (["plot", A, "-o", tmp / "out.pdf"], f"-o {tmp / 'out.pdf'}: a chart is written as .png, .svg or .html"),
        (["plot", A, "-o", tmp], f"-o {tmp}: is a folder"),
        (["plot", A, "-o", tmp / "a_file" / "x.png"], f"{tmp / 'a_file'} is a file, not a folder"),
        (["compare", A, B, "--plot", tmp / "out.txt"], f"--plot {tmp / 'out.txt'}: a chart is written as"),
        (["compare", CPU, CPU, "--plot", png], f"{CPU}: CPU mode results carry no meaningful timings"),
    ]


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args, message in _bad_inputs(tmp_path):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], (args, lines)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "bad.json"]


def test_a_missing_folder_is_made_and_said_as_for_json(tmp_path):
    out = tmp_path / "new" / "x.svg"
    result = invoke("plot", A, "-o", out)
    assert result.exit_code == 0 and out.stat().st_size > 10_000
    assert result.stderr.strip() == f"kbench: made the folder {out.parent}"


def test_without_matplotlib_it_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib now fails, as when missing
    for args in (["plot", A, "-o", tmp_path / "x.png"], ["compare", A, B, "--plot", tmp_path / "x.png"]):
        result = invoke(*args)
        assert result.exit_code == 2
        assert result.stderr.strip().splitlines() == ['Error: charts need matplotlib: pip install "kbench[plot]"']
        assert result.stdout == ""   # said before compare, not after it


def test_plot_starts_no_worker():
    assert _workers_per_run(["plot", str(A), "-o", "x.png"]) == 0
    assert _workers_per_run(["compare", str(A), str(B), "--plot", "x.png"]) == 0


BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

# Injected first into a copy of the page: records any error (a resource that fails too) and, once
# loaded, each chart's size on screen and the tables, into <pre id="probe"> for --dump-dom.
PROBE = """<script>
window.kbenchErrors = [];
addEventListener("error", e => kbenchErrors.push(String(e.message || (e.target && (e.target.src || e.target.href)))), true);
addEventListener("load", () => {
  const charts = [...document.querySelectorAll("figure.chart")].map(f => {
    const box = f.querySelector("svg").getBoundingClientRect();
    return {id: f.id, width: box.width, height: box.height};
  });
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({charts, tables: document.querySelectorAll("table").length, errors: kbenchErrors});
  document.body.appendChild(probe);
});
</script>"""


def test_the_page_shows_every_chart_in_a_browser_without_an_error(charts, tmp_path):
    if BROWSER is None:
        pytest.skip("no chromium: the page is not opened in a browser (.ci/run installs it)")
    page = (charts / "two.html").read_text()
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("<head>", "<head>" + PROBE, 1))
    with tempfile.TemporaryDirectory(prefix="kb-") as short:   # its socket's path must fit 107 bytes
        env = {**os.environ, "HOME": str(tmp_path), "TMPDIR": short}
        out = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
                              "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
                              "--dump-dom", probed.as_uri()], check=False, capture_output=True, text=True,
                             timeout=120, env=env)
    found = re.search(r'<pre id="probe">(.*?)</pre>', out.stdout, re.DOTALL)
    assert found, out.stderr[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert [c["id"] for c in probe["charts"]] == [f"chart-{k}" for k in
                                                  ("comparison", "A-roofline", "A-calls", "B-roofline", "B-calls")]
    assert all(c["width"] > 300 and c["height"] > 100 for c in probe["charts"]), probe["charts"]
    assert probe["tables"] == 3 and probe["errors"] == []
    assert [line for line in out.stderr.splitlines() if ":CONSOLE" in line] == []   # the page logs nothing
