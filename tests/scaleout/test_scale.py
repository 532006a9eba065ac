"""Scale-out on CPU: units planned and merged, one child per device with a device lost mid-run,
Ray on a local 2-CPU cluster (a plain run's statuses; a Ray worker killed mid-run)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest
from click.testing import CliRunner

from kbench.cli.commands import cli, exit_code, ranking
from kbench.scaleout import gpus
from kbench.scaleout.gpus import parse_gpus, run_on_slots
from kbench.scaleout.plan import Tally, Unit, plan
from kbench.stats.compare import different_cards
from kbench.tasks.task import get_task
from tests.helpers import FIXTURES, ROOT, cpu_options, run_cpu, statuses

GOOD = ROOT / "submissions" / "qknorm"
FAILS_ONE = FIXTURES / "qknorm" / "fails_one_case"
SMOKE = ["b3_q5_kv2_d64_f16", "b1_q4_kv4_d128_bf16", "b2_q3_kv1_d256_bf16", "b2_s3_q4_kv2_d64_bf16",
         "b5_q2_kv1_d128_f16"]


def test_plan_fewest_units_that_keep_every_device_busy():
    assert plan(4, SMOKE, 2) == [Unit(s, SMOKE) for s in range(4)]
    assert plan(1, SMOKE, 2) == [Unit(0, SMOKE[0::2]), Unit(0, SMOKE[1::2])]
    assert [len(u.cases) for u in plan(3, SMOKE, 2)] == [3, 2, 3, 2, 3, 2]
    assert len(plan(1, SMOKE, 8)) == 5   # never more shares than cases


def test_runs_spread_over_devices_record_the_tasks_pool():
    # --gpus and --ray records say what the runs used: qknorm's default pool on a GPU, else --pool
    qknorm = get_task("qknorm")
    assert Tally(qknorm, cpu_options(device="cuda", suite="quick"), []).opts.pool_size == qknorm.module.GPU_POOL
    assert Tally(qknorm, cpu_options(device="cuda", suite="quick", pool=2), []).opts.pool_size == 2
    assert Tally(qknorm, cpu_options(suite="smoke"), []).opts.pool_size == 1


def test_gpu_count_follows_cuda_visible_devices_without_torch(monkeypatch):
    monkeypatch.setattr(gpus.os, "listdir", lambda path: ["0000:01:00.0", "0000:02:00.0"])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpus.gpu_count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus.gpu_count() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,-1,1")   # CUDA stops at the first invalid entry
    assert gpus.gpu_count() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb")
    assert gpus.slots([1]) == [("cuda:1", {"CUDA_VISIBLE_DEVICES": "GPU-bbbb"})]


def test_a_child_started_early_is_used_only_for_its_own_slot(monkeypatch):
    made, dropped = [], []

    class FakeChild:
        def __init__(self, label, env, device, workers):
            self.env, self.device, self.workers = env, device, workers
            made.append(label)

        def discard(self):
            dropped.append(self)

    monkeypatch.setattr(gpus, "Child", FakeChild)
    monkeypatch.setattr(gpus, "_prestarted", {})
    monkeypatch.setattr(gpus, "gpu_count", lambda: 2)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus.prestart("all", 4)
    gpus.prestart("nonsense", 4)   # a bad --gpus starts nothing: the run says what is wrong
    assert made == ["cuda:0", "cuda:1"]
    early = dict(gpus._prestarted)
    assert gpus.child_for("cuda:0", {"CUDA_VISIBLE_DEVICES": "0"}, "cuda", 4) is early["cuda:0"]
    fresh = gpus.child_for("cuda:1", {"CUDA_VISIBLE_DEVICES": "1"}, "cuda", 2)   # other worker count
    assert fresh is not early["cuda:1"] and dropped == [early["cuda:1"]]
    gpus.prestart("1,", 4)
    gpus.discard_prestarted()
    assert gpus._prestarted == {} and len(dropped) == 2


def test_parse_gpus():
    assert parse_gpus("all", 2) == [0, 1]
    assert parse_gpus("1", 2) == [0]
    assert parse_gpus("1,", 2) == [1]
    assert parse_gpus("0,1", 2) == [0, 1]
    with pytest.raises(ValueError, match=r"--gpus 3: this host has 2 GPUs \(for one GPU by index write '3,'\)"):
        parse_gpus("3", 2)
    with pytest.raises(ValueError, match="indices must be distinct, from 0 to 1"):
        parse_gpus("0,0", 2)


def test_gpus_on_cpu_is_one_line_usage_error():
    result = CliRunner().invoke(cli, ["eval", str(GOOD), "--gpus", "all"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == (
        "Error: --gpus needs CUDA GPUs and this run is on CPU (CPU workers on a local cluster: --ray auto)")


def test_ray_missing_says_how_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ray(name, *args, **kw):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *args, **kw)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    result = CliRunner().invoke(cli, ["eval", str(GOOD), "--ray", "auto"])
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == 'Error: --ray needs Ray, not installed here: pip install "kbench[ray]"'


def test_a_ray_address_nothing_answers_is_one_line_in_seconds():
    """Ray itself retries an unreachable head for minutes (over 200 s with Ray 2.60)."""
    import socket
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for address, why in ((f"127.0.0.1:{port}", "no Ray cluster answers there"),
                         ("headnode", "give auto or a cluster head's HOST:PORT")):
        result = CliRunner().invoke(cli, ["eval", str(GOOD), "--device", "cpu", "--ray", address])
        assert result.exit_code == 2
        assert result.output.splitlines()[-1].startswith(f"Error: --ray {address}: {why}")


def test_lost_cases_exit_3_and_rank_below():
    lost = {"submission": "a", "timing": {"meaningful": False},
            "cases": [{"case": "x", "status": "passed"}, {"case": "y", "status": "lost"}],
            "summary": {"passed": 1, "total": 2, "lost": 1, "flagged": 0, "fatal": None, "geomean_speedup": None}}
    failed = {**lost, "summary": {**lost["summary"], "lost": 0}}
    assert exit_code(lost, None) == 3
    assert exit_code(failed, None) == 1
    assert "1/2 (1 lost)" in ranking([lost])


def test_different_cards_warns_per_case():
    def run(node, cards):
        return {"timing": {"meaningful": True}, "host": {"node": node}, "device": {"name": "H200"},
                "devices": {f"cuda:{i}": {"name": "H200", "uuid": u} for i, u in enumerate(cards)},
                "cases": [{"case": "x", "gpu": "cuda:0"}, {"case": "y", "gpu": f"cuda:{len(cards) - 1}"}]}
    assert different_cards(run("h", ["GPU-a"]), run("h", ["GPU-a"])) is None
    assert different_cards(run("h", ["GPU-a"]), run("h", ["GPU-a", "GPU-b"])) == (
        "A and B ran on different cards (1 of 2 cases: y): their ratios include the cards' own difference")
    plain = {"timing": {"meaningful": True}, "host": {"node": "h"}, "device": {"name": "H200"},
             "cases": [{"case": "x"}, {"case": "y"}]}
    assert different_cards(plain, {**plain, "host": {"node": "other"}}).startswith(
        "A and B ran on different cards (2 of 2 cases")


def test_device_lost_mid_run_retried_elsewhere():
    """Two CPU children; the first is killed once its first case is back: that case is kept,
    the rest of its unit runs on the other child, and every case has the plain run's status.
    A case the child had already sent when it was killed (read in the same batch as the first,
    as the raising case can be) came back too, and is kept as well."""
    killed = []
    came_back = []

    def on_event(kind, child, payload):
        if kind == "case" and child.label == "cpu:0":
            came_back.append(payload["case"])
            if not killed:
                killed.append(payload["case"])
                child.popen.send_signal(signal.SIGKILL)

    runs = run_on_slots(get_task("qknorm"), [FAILS_ONE], cpu_options(), [("cpu:0", {}), ("cpu:1", {})],
                        on_event=on_event)
    run = runs[0]
    assert statuses(run) == {c: ("error" if c == "b2_q3_kv1_d256_bf16" else "passed") for c in SMOKE}
    cpu0 = {c["case"] for c in run["cases"] if c["gpu"] == "cpu:0"}
    assert killed[0] in cpu0 and cpu0 == set(came_back)   # what came back before the kill is kept, not run again
    assert len(run["cases"]) == len(SMOKE) == len({c["case"] for c in run["cases"]})
    retried = [c["case"] for c in run["cases"] if any("after the device first given it was lost" in n
                                                      for n in c["notes"])]
    assert retried and set(retried) <= set(SMOKE[0::2]) - cpu0
    assert any(n.startswith("cpu:0 lost (killed by signal 9") and "tried again elsewhere" in n for n in run["notes"])
    assert run["summary"]["lost"] == 0 and exit_code(run, None) == 1
    # each unit says where its time went, the other CUDA contexts too (none on CPU)
    assert run["wall"]["units"] and all(u["other_contexts"] == [] and "startup" in u for u in run["wall"]["units"])


def test_child_starts_the_next_units_workers_once_after_the_first_case(monkeypatch):
    from kbench.run import workers as workers_mod
    from kbench.scaleout import gpus

    warmed, sent = [], []
    monkeypatch.setattr(workers_mod, "keep_warm", warmed.append)
    on_case = gpus.case_sender(sent.append, True, 16)
    on_case({"case": "a"})
    assert warmed == [16]
    on_case({"case": "b"})
    assert sent == [{"case": {"case": "a"}}, {"case": {"case": "b"}}] and warmed == [16]
    gpus.case_sender(sent.append, False, 16)({"case": "c"})
    assert warmed == [16] and sent[-1] == {"case": {"case": "c"}}


def test_units_say_whether_more_follow_for_their_child(monkeypatch):
    """Two submissions on one child: the first unit says more follow (its child starts the next
    unit's workers early), the last does not; both come back whole. On two children neither unit
    has a successor on its child."""
    told = []
    send = gpus.Child.send

    def recording(self, message):
        told.append((message["submission"], message["more"]))
        return send(self, message)

    monkeypatch.setattr(gpus.Child, "send", recording)
    runs = run_on_slots(get_task("qknorm"), [GOOD, FAILS_ONE], cpu_options(), [("cpu:0", {})])
    assert told == [(str(GOOD), True), (str(FAILS_ONE), False)]
    assert [statuses(r) for r in runs] == [{c: "passed" for c in SMOKE},
                                           {c: ("error" if c == "b2_q3_kv1_d256_bf16" else "passed") for c in SMOKE}]
    told.clear()
    run_on_slots(get_task("qknorm"), [GOOD, FAILS_ONE], cpu_options(), [("cpu:0", {}), ("cpu:1", {})])
    assert sorted(told) == [(str(GOOD), False), (str(FAILS_ONE), False)]


@pytest.fixture
def ray_cluster():
    ray = pytest.importorskip("ray")
    temp = tempfile.mkdtemp(prefix="kr", dir="/tmp")   # Ray's sockets need a short path
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_two_submissions_same_statuses_as_plain(ray_cluster, tmp_path):
    out = tmp_path / "ray.json"
    result = CliRunner().invoke(cli, ["eval", str(GOOD), str(FAILS_ONE), "--ray", "auto", "--baseline", "none",
                                      "--json", str(out)])
    assert result.exit_code == 1, result.output
    runs = json.loads(out.read_text())["runs"]
    for path, run in zip((GOOD, FAILS_ONE), runs):
        assert run["submission"] == str(path)
        assert statuses(run) == statuses(run_cpu("qknorm", path))
        assert [c["case"] for c in run["cases"]] == SMOKE
        assert {c["gpu"] for c in run["cases"]} == {f"{os.uname().nodename}:cpu"}
    assert result.output.endswith("\n" + ranking(runs) + "\n")


def test_ray_worker_killed_mid_run_every_case_reported(ray_cluster):
    """A Ray worker running a unit is killed (its process title is ray::run_shipped while it
    does): the unit is tried once more and every case comes back with a verdict."""
    from kbench.scaleout.ray import run_on_ray

    events, before = [], set(os.listdir(tempfile.gettempdir()))

    def kill_a_running_unit(kind, unit, payload):
        events.append(kind)
        if kind == "submitted" and events.count("submitted") == 2:
            pid = _wait_for_process("ray::run_shipped")
            os.kill(pid, signal.SIGKILL)

    runs = run_on_ray(get_task("qknorm"), [GOOD], cpu_options(), on_event=kill_a_running_unit)
    assert events.count("lost") == 1 and events.count("submitted") == 3
    assert statuses(runs[0]) == {c: "passed" for c in SMOKE}
    assert any("tried again elsewhere" in n for n in runs[0]["notes"])
    # the killed task's folder (its submission's copy, its workers' folders), if it got as far
    # as making it, is all it left
    left = [e for e in os.listdir(tempfile.gettempdir()) if e.startswith("kbench-ray-")]
    assert len(left) <= 1
    for entry in left:
        shutil.rmtree(os.path.join(tempfile.gettempdir(), entry))
    # Killed inside its first tempfile.gettempdir() (run_shipped's first step), a worker leaves that
    # function's writability probe: a file of 8 random characters holding at most b"blat". Python's.
    for entry in set(os.listdir(tempfile.gettempdir())) - before:
        path = os.path.join(tempfile.gettempdir(), entry)
        if len(entry) == 8 and os.path.isfile(path):
            with open(path, "rb") as f:
                if b"blat".startswith(f.read()):
                    os.remove(path)


def _wait_for_process(title: str, timeout: float = 120.0) -> int:
    """The pid of a process of this test's own (a descendant: the local Ray cluster's workers
    are the raylet's children) whose command line starts with ``title``, polled until one
    exists. Another test session's on the same host is never taken."""
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        if f.read().startswith(title.encode()) and _descends_from_us(int(entry)):
                            return int(entry)
                except OSError:
                    continue
        time.sleep(0.05)
    raise AssertionError(f"no process {title} within {timeout} s")


def _descends_from_us(pid: int) -> bool:
    me = os.getpid()
    while pid > 1:
        if pid == me:
            return True
        with open(f"/proc/{pid}/stat") as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])   # the field after the state: ppid
    return False


def test_a_killed_ray_workers_task_folder_is_removed_by_the_next_task(tmp_path):
    from kbench.scaleout.ray import FOLDER_PREFIX, remove_stale_folders

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{FOLDER_PREFIX}{dead.pid}-abc"
    live = tmp_path / f"{FOLDER_PREFIX}{os.getpid()}-def"
    other = tmp_path / "kbench-worker-xyz"
    for folder in (stale, live, other):
        (folder / "sub").mkdir(parents=True)
    assert remove_stale_folders(str(tmp_path)) == [stale.name]
    assert not stale.exists() and live.exists() and other.exists()


def test_cuda_connections_reach_every_worker_before_it_loads(tmp_path, monkeypatch):
    # --cuda-connections is set in the worker on its assignment, before the submission (and
    # CUDA) load; it travels in a unit's options to a --gpus child or a Ray task. Without it the
    # worker drops what the environment says: one connection hides stream races.
    from kbench.run import workers as workers_mod
    from kbench.scaleout.plan import _options, options_spec

    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")   # exported for some other program
    workers_mod._discard_spares()   # so the workers below are spawned with it in their environment
    sub = tmp_path / "qknorm"
    sub.mkdir()
    (sub / "submission.py").write_text(
        'import os\nassert os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS") == "3", '
        'f"connections {os.environ.get(\'CUDA_DEVICE_MAX_CONNECTIONS\')}"\n'
        + (FIXTURES / "qknorm" / "good_torch" / "submission.py").read_text())
    options = _options(options_spec(cpu_options(cuda_connections=3)), ["b3_q5_kv2_d64_f16"], None)
    assert options.cuda_connections == 3
    ran = run_cpu("qknorm", sub, cuda_connections=3)
    assert set(statuses(ran).values()) == {"passed"}
    without = run_cpu("qknorm", sub)
    assert {c["status"] for c in without["cases"]} == {"error"}   # the load failed
    assert "connections None" in without["cases"][0]["reason"]
    assert ran["timing"]["cuda_connections"] is None   # CPU mode: no CUDA in the workers


def test_a_units_host_bound_note_is_left_to_the_whole_run(monkeypatch):
    """Each unit's run used to add its own host-bound note, and the merged run its own again."""
    from kbench.run.runner import Options, Runner
    from kbench.scaleout import plan

    fake = {"notes": ["host-bound on 3 of 3 timed cases: ...", "baseline flashinfer unavailable: ..."],
            "summary": {"fatal": None}, "wall": {}}
    monkeypatch.setattr(Runner, "run", lambda self, path: fake)
    spec = plan.options_spec(Options(suite="smoke", device="cpu"))
    unit = plan.run_unit("qknorm", ROOT / "submissions" / "qknorm", ["b3_q5_kv2_d64_f16"], spec)
    assert unit["notes"] == ["baseline flashinfer unavailable: ..."]
