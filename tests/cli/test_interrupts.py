"""Ctrl-C at any moment: one line, exit 130, no process and no temp folder left, no traceback.

Each try runs the `kbench` command in its own process group with a private TMPDIR and sends
SIGINT to the whole group, as a terminal's Ctrl-C does (workers that have not yet left the
group get it too). Moments are drawn from the whole run: the torch import, the workers'
start, loading, the cases, the end. They start at kbench's first line (its handler catches
SIGTERM, which Python does not: visible in /proc/<pid>/status); before that, for the ~40 ms
of the interpreter's own start-up, no program's code runs and Python's default applies.
"""
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT

ARGS = ["eval", "submissions/qknorm", "--device", "cpu", "--case", "b3_q5_kv2_d64_f16",
        "--case", "b1_q4_kv4_d128_bf16"]
TRIES = 8   # moments spread over a whole run; each try is a run of its own (~2-4 s)


def _catches_sigterm(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    except (OSError, StopIteration):
        return False
    return bool(int(mask, 16) >> (signal.SIGTERM - 1) & 1)


def _start(tmp, tag: str) -> subprocess.Popen:
    env = dict(os.environ, TMPDIR=str(tmp), KBENCH_INTERRUPT_TRY=tag)
    return subprocess.Popen([sys.executable, "-m", "kbench", *ARGS], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until_handled(proc: subprocess.Popen) -> float:
    """Wait for kbench's first line (its handler installed; 2 s at most); the time then."""
    deadline = time.monotonic() + 2.0
    while not _catches_sigterm(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    return time.monotonic()


def _tagged(tag: str) -> list[int]:
    wanted = f"KBENCH_INTERRUPT_TRY={tag}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if wanted in f.read().split(b"\0"):
                        pids.append(int(entry))
            except OSError:
                pass
    return pids


def _gone(tag: str, tmp) -> tuple[list, list]:
    """What the try left behind, given a few seconds to disappear (processes and folders)."""
    deadline = time.monotonic() + 5
    while True:
        procs, files = _tagged(tag), sorted(os.listdir(tmp))
        if (not procs and not files) or time.monotonic() > deadline:
            return procs, files
        time.sleep(0.1)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc")
def test_interrupts_at_random_moments_leave_nothing_behind():
    # Short paths: multiprocessing's sockets live under TMPDIR, and AF_UNIX paths end at 108 bytes.
    tmp_path = Path(tempfile.mkdtemp(prefix="kbi-"))
    try:
        _interrupt_runs(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _interrupt_runs(tmp_path):
    # A whole run, uninterrupted: how long the moments may range over, and it leaves nothing either.
    ref_tmp = tmp_path / "reference"
    ref_tmp.mkdir()
    proc = _start(ref_tmp, "reference")
    began = _until_handled(proc)
    out, err = proc.communicate(timeout=300)
    length = time.monotonic() - began
    assert proc.returncode == 0, out + err
    assert _gone("reference", ref_tmp) == ([], [])

    rng = random.Random(13)
    done = []
    for attempt in range(2 * TRIES):
        if len(done) == TRIES:
            break
        tag = f"try{attempt}"
        tmp = tmp_path / tag
        tmp.mkdir()
        moment = rng.uniform(0.0, 0.9 * length)
        proc = _start(tmp, tag)
        _until_handled(proc)
        time.sleep(moment)
        if proc.poll() is not None:  # finished first: not an interrupted run
            proc.communicate()
            continue
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        procs, files = _gone(tag, tmp)
        if proc.returncode == 0 and not err.strip():
            # The run was already done when the signal came (between poll() and killpg): not an
            # interrupted run, but it must still leave nothing behind. A run that ignored
            # interrupts would finish every try and fail the count below.
            assert (procs, files) == ([], []), (tag, procs, files)
            continue
        done.append((round(moment, 2), proc.returncode, err.strip().splitlines(), procs, files,
                     "Traceback" in err or "KeyboardInterrupt" in err))
    assert len(done) == TRIES, done
    bad = [d for d in done if d[1:] != (130, ["kbench: interrupted"], [], [], False)]
    assert bad == [], bad
