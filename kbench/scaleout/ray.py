"""``kbench eval --ray``: the units of kbench/scaleout/plan.py as Ray tasks, over a cluster of hosts.

Each task takes one GPU (``num_gpus=1``; in CPU mode one CPU) and runs one unit there
(kbench/scaleout/plan.py): its inputs, ground truth and verdicts are made in the task's process, the
submission runs in its own worker process beside it, as in a plain run. The submission's files
travel with the task (a cluster's hosts need not share a disk). Ray's own retries are off: a
task lost with its worker or node is tried once more by this module, then its cases are
``lost`` (kbench/scaleout/plan.py); a task returns its records whole, so a lost task's cases all go again.
"""
from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

from kbench import interrupts
from kbench.errors import KbenchError
from kbench.run.runner import Options
from kbench.scaleout.plan import Tally, options_spec, plan
from kbench.tasks.task import Task

INSTALL = 'pip install "kbench[ray]"'
MAX_FILE_BYTES = 8 << 20   # a submission is source code: a bigger file is not shipped


def connect(address: str):
    """Ray, connected: ``auto`` finds a running cluster (RAY_ADDRESS, or the one this host
    started last) or starts one on this host; anything else is a cluster's address."""
    try:
        import ray
    except ImportError:
        raise KbenchError(f"--ray needs Ray, not installed here: {INSTALL}") from None
    if not ray.is_initialized():
        if address != "auto" and not address.startswith("ray://"):
            reachable(address)
        ray.init(address=None if address == "auto" else address, log_to_driver=False,
                 include_dashboard=False)
    return ray


def reachable(address: str, timeout_s: float = 5.0) -> None:
    """A one-line KbenchError unless ``address`` (HOST:PORT, a cluster's head) answers a TCP
    connection: Ray itself retries an unreachable head for minutes."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except ValueError:
        raise KbenchError(f"--ray {address}: give auto or a cluster head's HOST:PORT") from None
    except OSError as exc:
        raise KbenchError(f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc})") from None


def submission_files(path: Path) -> dict[str, bytes]:
    """A submission's files (relative path -> bytes): a file, or a folder's files but caches."""
    path = Path(path)
    if path.is_file():
        return {path.name: path.read_bytes()}
    files = {}
    for f in sorted(path.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts and f.stat().st_size <= MAX_FILE_BYTES:
            files[str(f.relative_to(path))] = f.read_bytes()
    return files


FOLDER_PREFIX = "kbench-ray-"   # + the Ray worker's pid + "-": a folder its dead owner left is found


def remove_stale_folders(parent: str | None = None) -> list[str]:
    """Remove the task folders of Ray workers that are gone (a worker killed mid-task, SIGKILL or
    a lost node, never reached its clean-up); a live worker's folder is left alone."""
    parent = parent or tempfile.gettempdir()
    removed = []
    for entry in os.listdir(parent):
        pid = entry[len(FOLDER_PREFIX):].split("-", 1)[0]
        if not entry.startswith(FOLDER_PREFIX) or not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's process: alive, and not ours to judge
        pass
    return True


def run_shipped(task_name: str, name: str, files: dict[str, bytes], single_file: bool, cases: list[str],
                spec: dict) -> dict:
    """The body of a Ray task: the submission written to a private folder, then one unit run.
    Returns the unit's records and this card's calibration."""
    from kbench.scaleout.plan import calibration, run_unit

    remove_stale_folders()
    root = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-")
    saved, tempfile.tempdir = tempfile.tempdir, root   # the unit's workers' folders too: one to remove
    try:
        folder = Path(root) / name
        for rel, data in files.items():
            target = (Path(root) / rel) if single_file else folder / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        meta = run_unit(task_name, Path(root) / name if single_file else folder, cases, spec)
        return {"card": calibration(spec["device"]), "node": os.uname().nodename, **meta}
    finally:
        tempfile.tempdir = saved
        shutil.rmtree(root, ignore_errors=True)


def run_on_ray(task: Task, submissions: list[Path], opts: Options, address: str = "auto",
               on_event=None) -> list[dict]:
    """Every submission on every case as Ray tasks; the run records, as a one-GPU run makes them.
    ``on_event(kind, unit, payload)`` is told of "submitted", "done" and "lost" as they happen."""
    ray = connect(address)
    resource = "GPU" if opts.device == "cuda" else "CPU"
    slots = int(ray.cluster_resources().get(resource, 0))
    if slots < 1:
        raise KbenchError(f"the Ray cluster has no {resource} (resources: {ray.cluster_resources()})")
    tally = Tally(task, opts, submissions)
    spec = options_spec(opts)
    shipped = [(Path(p).name, submission_files(p), Path(p).is_file()) for p in submissions]
    need = {"num_gpus": 1} if resource == "GPU" else {"num_cpus": 1}
    remote = ray.remote(max_retries=0, **need)(run_shipped)
    began = time.perf_counter()
    in_flight = {}

    def submit(unit):
        name, files, single = shipped[unit.submission]
        ref = remote.remote(task.name, name, files, single, unit.cases, spec)
        in_flight[ref] = unit
        if on_event:
            on_event("submitted", unit, None)

    def lose(unit, exc) -> None:
        text = str(exc).strip()
        why = text.splitlines()[0][:200] if text else type(exc).__name__
        alive = sum(1 for n in ray.nodes() if n.get("Alive"))
        again = tally.lose(unit, f"a Ray task ({type(exc).__name__})", why, elsewhere=alive > 0)
        if on_event:
            on_event("lost", unit, why)
        if again is not None:
            submit(again)

    for unit in plan(len(submissions), tally.case_names, slots):
        submit(unit)
    total = len(submissions) * len(tally.cases)
    interrupts.on_interrupt(tally.missing)
    try:
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            ref = ready[0]
            unit = in_flight.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayTaskError as exc:
                if isinstance(exc.cause, KbenchError):   # kbench said no (a usage error), not a lost node
                    raise KbenchError(str(exc.cause)) from None
                lose(unit, exc)
                continue
            except ray.exceptions.RayError as exc:
                lose(unit, exc)
                continue
            label = _label(result, resource)
            tally.cards.setdefault(label, result["card"])
            for record in result["cases"]:
                tally.add_case(unit, label, record)
            tally.add_done(unit, label, result)
            if opts.progress:
                opts.progress(f"[{len(tally.records)}/{total}] {len(result['cases'])} cases on {label}")
            if on_event:
                on_event("done", unit, result)
    finally:
        interrupts.forget(tally.missing)
        for ref in in_flight:   # an exception or an interrupt here: the cluster stops them
            ray.cancel(ref, force=True)
    return tally.merge(time.perf_counter() - began)


def _label(result: dict, resource: str) -> str:
    """A card's name in the results: its host, and its UUID on a GPU (Ray picks the GPU)."""
    card = result["card"]
    if resource == "GPU":
        return f"{result['node']}:{card.get('uuid') or card.get('visible_devices')}"
    return f"{result['node']}:cpu"
