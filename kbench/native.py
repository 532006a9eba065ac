"""A task's native score: the original challenge's own figure, in one shape for every task.

A task's ``native_score(results, suite)`` returns ``score(...)``; the run record carries it
as ``summary["native"]`` (GPU runs only: CPU timings mean nothing). Example, qknorm::

    {"name": "Frontier-CS score", "value": 100.0, "unit": "points", "lower_is_better": False,
     "reason": None, "details": {"score_unbounded": 148.6}}
"""
from __future__ import annotations

from typing import TypedDict

from .errors import KbenchError


class NativeScore(TypedDict):
    name: str              # what the original challenge calls the figure
    value: float | None    # None: no score for this run; ``reason`` says why
    unit: str              # "points", "us", "ms", ...
    lower_is_better: bool
    reason: str | None     # why there is no value, or why the rules forced it (a failed case scores 0)
    details: dict          # the other figures the original reports, by name (units in the names)


_TYPES = {"name": str, "value": (int, float, type(None)), "unit": str, "lower_is_better": bool,
          "reason": (str, type(None)), "details": dict}


def score(name: str, value: float | None, *, unit: str, lower_is_better: bool,
          reason: str | None = None, **details) -> NativeScore:
    """A native score; ``details`` are the original's other figures (worst family, unbounded score...)."""
    return NativeScore(name=name, value=None if value is None else float(value), unit=unit,
                       lower_is_better=lower_is_better, reason=reason, details=details)


def validate(result, task_name: str) -> NativeScore:
    """``result`` when it has the shape above; a one-line KbenchError naming the task otherwise."""
    where = f"task {task_name}: native_score"
    if not isinstance(result, dict):
        raise KbenchError(f"{where} returned {type(result).__name__}, expected kbench.native.score(...)")
    keys = set(result)
    if keys != set(_TYPES):
        missing, extra = sorted(set(_TYPES) - keys), sorted(keys - set(_TYPES))
        raise KbenchError(f"{where} returned keys {sorted(keys)}: missing {missing}, unknown {extra} "
                          f"(use kbench.native.score)")
    for key, kind in _TYPES.items():
        if not isinstance(result[key], kind) or (key == "value" and isinstance(result[key], bool)):
            raise KbenchError(f"{where}: {key} is {type(result[key]).__name__}")
    return result
