"""The load gate of a run over several GPUs (kbench/load_gate.py): one holder at a time, every
wait bounded, the workers' replies left for the runner, and the per-GPU children taking it."""
import multiprocessing
import subprocess
import sys
import threading
import time

from kbench import load_gate
from kbench.gpu_pool import run_on_slots
from kbench.tasks import get_task
from tests.helpers import FIXTURES, cpu_options, statuses

HOLDER = """
import sys, time
from kbench import load_gate
with load_gate.held(sys.argv[1]):
    start = time.time()
    time.sleep(0.4)
    print(start, time.time())
"""


def test_one_holder_at_a_time():
    """Two processes ask at once: their holds do not overlap."""
    def start(path):
        return subprocess.Popen([sys.executable, "-c", HOLDER, path], stdout=subprocess.PIPE, text=True)

    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/load.lock"
        procs = [start(path), start(path)]
        (a0, a1), (b0, b1) = sorted(tuple(map(float, p.communicate(timeout=60)[0].split())) for p in procs)
    assert a1 <= b0, ((a0, a1), (b0, b1))


def test_a_gate_held_elsewhere_is_waited_for_at_most_wait_s(tmp_path):
    path = str(tmp_path / "load.lock")
    with load_gate.held(path):   # a second open file of the same process conflicts, as another process's does
        began = time.monotonic()
        with load_gate.held(path, wait_s=0.3):
            waited = time.monotonic() - began
    assert 0.3 <= waited < 2.0
    with load_gate.held(None):   # no gate: nothing to wait for
        pass


def test_waiting_for_the_workers_reads_none_of_their_replies():
    """Returns once each connection has its first reply waiting or is closed; the reply is
    still there for the runner."""
    pairs = [multiprocessing.Pipe() for _ in range(2)]
    pairs[1][1].close()   # a worker that died
    threading.Timer(0.3, lambda: pairs[0][1].send({"kind": "ready"})).start()
    began = time.monotonic()
    load_gate.wait_loaded([parent for parent, _ in pairs])
    assert 0.25 <= time.monotonic() - began < 5
    assert pairs[0][0].recv() == {"kind": "ready"}
    # a worker that never answers holds the gate for hold_s at most
    quiet = multiprocessing.Pipe()
    began = time.monotonic()
    load_gate.wait_loaded([quiet[0]], hold_s=0.2)
    assert 0.2 <= time.monotonic() - began < 2


def test_per_gpu_children_load_under_the_gate_their_environment_names(tmp_path):
    """The children of kbench/gpu_pool.py take the file the environment names (made on first
    use) and run their units as without it."""
    gate = tmp_path / "load.lock"
    slots = [(f"cpu:{i}", {load_gate.ENV: str(gate)}) for i in range(2)]
    task = get_task("qknorm")
    fixture = FIXTURES / "honest" / "qknorm" / "triton_plain"
    runs = run_on_slots(task, [fixture, fixture], cpu_options(), slots)
    assert gate.exists()
    assert all(set(statuses(run).values()) == {"passed"} for run in runs)
