"""Scale-out work: units of one submission on some cases, run anywhere, and their results put back together.

A unit is one submission on a share of a suite's cases (kbench/scaleout/plan.py runs one). ``plan``
cuts the work into as few units as keep every device equally busy; whoever runs them
(kbench/scaleout/gpus.py: one child process per GPU; kbench/scaleout/ray.py: Ray tasks) reports each
case's record to a ``Tally``, which merges them into the same run records a one-GPU run makes,
in the suite's order, each case naming the card it ran on.

Faults: a device lost with a unit in flight leaves that unit's unfinished cases to be tried
once more elsewhere (``Tally.lose``); lost again, or with nowhere left to go, they get the
status ``lost``: no verdict, not the submission's failure, and the run is incomplete (exit 3).
"""
from __future__ import annotations

import copy
import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

from kbench.run.records import case_record, run_record
from kbench.run.runner import Options, Runner, task_options
from kbench.stats.estimates import StopRule
from kbench.tasks.task import Task, get_task


@dataclass
class Unit:
    submission: int          # index into the run's submissions
    cases: list[str]
    retry: bool = False      # a second try of cases a lost device left unfinished


def plan(submissions: int, cases: list[str], slots: int) -> list[Unit]:
    """Each submission's cases in the fewest equal shares that make the unit count a multiple
    of ``slots``: 4 submissions on 2 GPUs are 4 whole-suite units, 1 on 8 is 8 shares, 3 on 2
    are 6 halves. Fewer units, fewer worker start-ups; shares take every k-th case, so big
    and small cases mix."""
    shares = max(1, min(slots // math.gcd(submissions, slots), len(cases)))
    return [Unit(s, cases[i::shares]) for s in range(submissions) for i in range(shares)]


class Tally:
    """What came back from the units, and what was lost on the way."""

    def __init__(self, task: Task, opts: Options, submissions: list[Path]):
        # the task's defaults filled in (qknorm's pool): the records say what the runs used
        self.task, self.opts, self.submissions = task, task_options(task, opts), list(submissions)
        self.suite, self.cases = task.cases(opts.suite, opts.only, opts.device)
        self.records: dict[tuple[int, str], dict] = {}
        self.lost: dict[tuple[int, str], str] = {}
        self.cards: dict[str, dict] = {}                    # device label -> its calibration
        self.units: list[list[dict]] = [[] for _ in self.submissions]
        self.notes: list[list[str]] = [[] for _ in self.submissions]
        self.fatal: list[list[str]] = [[] for _ in self.submissions]
        self.events: list[str] = []                         # devices lost, cases retried

    @property
    def case_names(self) -> list[str]:
        return [c.name for c in self.cases]

    def add_case(self, unit: Unit, label: str, record: dict) -> None:
        record["gpu"] = label
        if unit.retry:
            record["notes"].append(f"run on {label} after the device first given it was lost")
        self.records[(unit.submission, record["case"])] = record

    def add_done(self, unit: Unit, label: str, meta: dict) -> None:
        """The end of a unit: its notes, its end-of-run check, where its time went."""
        s = unit.submission
        self.notes[s] += [n for n in meta.get("notes", []) if n not in self.notes[s]]
        if meta.get("fatal") and meta["fatal"] not in self.fatal[s]:
            self.fatal[s].append(meta["fatal"])
        self.units[s].append({"gpu": label, "cases": list(unit.cases), "wall_s": meta.get("wall_s"),
                              "startup": meta.get("startup", {}), "other_contexts": meta.get("other_contexts", [])})

    def unfinished(self, unit: Unit) -> list[str]:
        return [c for c in unit.cases if (unit.submission, c) not in self.records]

    def lose(self, unit: Unit, label: str, why: str, elsewhere: bool) -> Unit | None:
        """``label`` was lost (``why``) with ``unit`` in flight: its unfinished cases, as a unit to
        try once more when ``elsewhere`` there is a device left; else (or on a second loss) lost."""
        left = self.unfinished(unit)
        if not left:
            return None
        name = self.submissions[unit.submission]
        if elsewhere and not unit.retry:
            self.events.append(f"{label} lost ({why}) running {name}: {_cases(left)} tried again elsewhere")
            return Unit(unit.submission, left, retry=True)
        again = "lost again" if unit.retry else "lost, no other device left"
        self.events.append(f"{label} {again} ({why}) running {name}: {_cases(left)} missing")
        for case in left:
            self.lost[(unit.submission, case)] = (f"infrastructure: {label} {again} ({why}); not the "
                                                  f"submission's failure, run it again")
        return None

    def abandon(self, units, why: str) -> None:
        """Units no device will run: their cases are lost."""
        for unit in units:
            for case in self.unfinished(unit):
                self.lost[(unit.submission, case)] = f"infrastructure: {why}; not the submission's failure"

    def missing(self) -> str:
        """Which cases have no result yet, per submission (said when a run is interrupted)."""
        parts = []
        for s, path in enumerate(self.submissions):
            left = [c for c in self.case_names if (s, c) not in self.records]
            if left:
                parts.append(f"{path}: {_cases(left, len(self.case_names))}")
        return "missing: " + "; ".join(parts) if parts else ""

    def merge(self, wall_s: float) -> list[dict]:
        """One run record per submission, as a one-GPU run makes it, plus ``devices`` (each card's
        calibration) and each case's ``gpu``."""
        runs = []
        fallback = next(iter(self.cards.values()), {"device": self.opts.device})
        for s, path in enumerate(self.submissions):
            records = []
            for case in self.cases:
                rec = self.records.get((s, case.name))
                if rec is None:
                    rec = case_record(case, "lost", self.lost.get((s, case.name))
                                      or "infrastructure: no result came back; not the submission's failure")
                    rec["gpu"] = None
                records.append(rec)
            used = sorted({r["gpu"] for r in records if r["gpu"] in self.cards})
            devices = {label: self.cards[label] for label in used}
            first = devices[used[0]] if used else fallback
            notes = self.notes[s] + [e for e in self.events if f" running {path}:" in e]
            run = run_record(self.task, self.suite, self.opts, str(path), first, records, notes,
                             "; ".join(self.fatal[s]) or None,
                             wall={"total_s": round(wall_s, 2), "units": self.units[s]},
                             calibration_of=lambda r, first=first: self.cards.get(r["gpu"], first))
            run["devices"] = devices
            runs.append(run)
        return runs


def _cases(names: list[str], total: int | None = None) -> str:
    if total is not None and len(names) == total:
        return f"all {total} cases"
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    return f"{len(names)} case{'s' if len(names) != 1 else ''} ({shown})"


# -- unit ----------------------------------------------------------------------------------
# One unit of scale-out work: one submission on some of a suite's cases, run in this process.
#
# A unit runs where its inputs and ground truth are made (a per-GPU child of ``kbench eval
# --gpus``, kbench/scaleout/gpus.py, or a Ray task, kbench/scaleout/ray.py), and its verdicts are decided
# there; the submission still runs in its own worker process (kbench/run/runner.py), exactly as in a
# plain run. Each case's baseline and submission are timed on this process's one device,
# alternating call by call, so every speedup compares like with like.

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
        from kbench.run import card

        info = card.calibrate(device, measure=device == "cuda")
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

    run = Runner(get_task(task_name), _options(spec, cases, keep)).run(Path(submission))
    # the host-bound note is the whole run's, said once by the parent over every unit's cases
    notes = [n for n in run["notes"] if not n.startswith("host-bound")]
    return {"cases": records, "notes": notes, "fatal": run["summary"]["fatal"],
            "startup": run["wall"].get("startup", {}), "wall_s": run["wall"].get("total_s"),
            "other_contexts": run["wall"].get("other_contexts", [])}
