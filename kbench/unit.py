"""One unit of scale-out work: one submission on some of a suite's cases, run in this process.

A unit runs where its inputs and ground truth are made (a per-GPU child of ``kbench eval
--gpus``, kbench/gpu_child.py, or a Ray task, kbench/ray_pool.py), and its verdicts are decided
there; the submission still runs in its own spawned worker (kbench/runner.py), exactly as in a
plain run. Each case's baseline and submission are timed on this process's one device,
alternating call by call, so every speedup compares like with like.
"""
from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path

from .runner import Options, evaluate
from .tasks import get_task
from .timing import StopRule

# what a unit needs of the parent's Options (all JSON-able); which cases is the unit's own
OPTION_FIELDS = ("suite", "device", "baseline", "timeout", "seed", "warmup_ms", "cuda_graph", "processes", "pool",
                 "cuda_connections")


def options_spec(opts: Options) -> dict:
    spec = {k: getattr(opts, k) for k in OPTION_FIELDS}
    spec["stop"] = dataclasses.asdict(opts.stop)
    return spec


def _options(spec: dict, cases: list[str], on_case) -> Options:
    spec = dict(spec)
    stop = StopRule(**spec.pop("stop"))
    # The card is calibrated once per process (calibration() below), not once per unit.
    return Options(**spec, stop=stop, only=tuple(cases), calibrate=False, on_case=on_case)


_calibrations: dict[str, dict] = {}


def calibration(device: str) -> dict:
    """This process's card, named and measured once (a child runs many units, so does a Ray worker)."""
    if device not in _calibrations:
        from . import timing

        info = timing.calibrate(device, measure=device == "cuda")
        if device == "cuda":
            info.update(card_identity())
        _calibrations[device] = info
    return _calibrations[device]


def card_identity() -> dict:
    """Which physical card (its UUID) and what CUDA_VISIBLE_DEVICES made of it: two cards of the
    same model still differ by a percent or so."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = getattr(props, "uuid", None)
    return {"uuid": str(uuid) if uuid else None, "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def run_unit(task_name: str, submission: Path, cases: list[str], spec: dict, on_case=None) -> dict:
    """Run one submission on ``cases``. Each case's record goes to ``on_case`` as it ends (as
    the runner made it, before the run's roofline figures, which the merge adds with this
    card's calibration); returns the records and what the merge needs besides."""
    records = []

    def keep(record: dict) -> None:
        records.append(copy.deepcopy(record))
        if on_case is not None:
            on_case(records[-1])

    run = evaluate(get_task(task_name), Path(submission), _options(spec, cases, keep))
    return {"cases": records, "notes": run["notes"], "fatal": run["summary"]["fatal"],
            "startup": run["wall"].get("startup", {}), "wall_s": run["wall"].get("total_s"),
            "other_contexts": run["wall"].get("other_contexts", [])}
