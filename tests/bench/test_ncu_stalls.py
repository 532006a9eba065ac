"""bench/ncu_stalls.py on a tiny hand-made Nsight Compute source export."""
import csv
import gzip
import importlib.util
import subprocess
import sys
from pathlib import Path

from tests.helpers import ROOT

SCRIPT = ROOT / "bench" / "ncu_stalls.py"


def _export(path):
    """Partition A: 30 instructions, 2 samples each (wait); partition B: 30 instructions, its last
    10 before a TMA store with 5 no_inst samples each."""
    stalls = ["stall_no_inst", "stall_wait", "stall_no_inst (Not Issued)"]
    rows = [["0x0", "USETMAXREG.DEALLOC 0x78", "0", "0", "0", "0"]]
    rows += [[hex(16 * i), "FMUL R1, R1, R2", "2", "0", "2", "0"] for i in range(1, 31)]
    rows += [[hex(16 * 31), "USETMAXREG.TRY_ALLOC 0xe8", "0", "0", "0", "0"]]
    rows += [[hex(16 * i), "IADD3 R1, R1, 1", "0", "0", "0", "0"] for i in range(32, 52)]
    rows += [[hex(16 * i), "FMUL R3, R3, R4", "5", "5", "0", "0"] for i in range(52, 62)]
    rows += [[hex(16 * 62), "@UP0 UTMASTG.2D [UR8], [UR6]", "0", "0", "0", "0"]]
    with gzip.open(path, "wt", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Kernel Name", "k"])
        w.writerow(["Address", "Source", "# Samples", *stalls])
        w.writerows(rows)
    return path


def test_the_samples_are_split_by_partition_and_before_tma_stores(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("ncu_stalls", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = _export(tmp_path / "k.sass.csv.gz")
    assert module.main([str(path), "--top", "3", "--before", "10"]) == 0
    out = capsys.readouterr().out
    assert "63 instructions, 110 samples" in out
    assert out.splitlines()[1].split() == ["wait", "60", "54.5%"]
    assert out.splitlines()[2].split() == ["no_inst", "50", "45.5%"]
    regions = out.split("regions between partition switches (USETMAXREG):")[1].split("the 10 instructions")[0]
    assert "    0-   31      60 samples (54.5%): wait 100%" in regions
    assert "   31-   63      50 samples (45.5%): no_inst 100%" in regions
    assert "52-   62      50 samples: no_inst 100%" in out.split("TMA store (UTMASTG):")[1]


def test_a_report_without_samples_is_an_error_on_the_command_line(tmp_path):
    path = tmp_path / "empty.sass.csv"
    path.write_text("Address,Source,# Samples,stall_wait\n0x0,NOP,0,0\n")
    proc = subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "no samples in the report"


def test_the_profile_wrapper_runs_ncu_twice_and_summarizes_the_export(tmp_path):
    """bench/ncu_profile.sh with a stand-in for ncu (NCU): the profile, the source page exported
    as a gzipped CSV, the details page, and ncu_stalls.py's summary beside them."""
    csv_text = gzip.decompress(_export(tmp_path / "k.sass.csv.gz").read_bytes()).decode()
    (tmp_path / "source.csv").write_text(csv_text)
    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/bin/bash\n"
        'echo "$*" >> "$(dirname "$0")/calls.txt"\n'
        'case " $* " in\n'
        '  *" --page source "*) cat "$(dirname "$0")/source.csv" ;;\n'
        '  *" --page details "*) echo "details" ;;\n'
        '  *) while [ $# -gt 0 ]; do [ "$1" = -o ] && touch "$2.ncu-rep"; shift; done ;;\n'
        "esac\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    proc = subprocess.run(["bash", str(ROOT / "bench" / "ncu_profile.sh"), "k", "my_kernel", "python3", "app.py"],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "NCU": str(fake), "OUT": str(out)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "63 instructions, 110 samples" in proc.stdout
    assert (out / "k.stalls.txt").read_text() == proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["k.details.csv", "k.ncu.log", "k.sass.csv.gz", "k.stalls.txt"]
    profile = (tmp_path / "calls.txt").read_text().splitlines()[0]
    assert "-k regex:my_kernel -s 2 -c 1" in profile and profile.endswith(f"-o {out}/k python3 app.py")
