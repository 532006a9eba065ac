"""A task's verdict tools: tolerance checks that say what went wrong, and the native score."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypedDict

import torch

from kbench.errors import KbenchError

MAX_POSITIONS = 3


@dataclass
class CheckResult:
    """Outcome of comparing outputs with the ground truth.

    ``status`` is ``passed``, ``mismatch`` (values out of tolerance) or ``invalid``
    (not a tensor, wrong shape, dtype or device).
    """

    status: str
    reason: str = ""
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    details: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def validate(name: str, out, ref: torch.Tensor) -> str | None:
    """Why ``out`` cannot stand for ``ref`` (type, shape, dtype, device), or None."""
    if type(out) is not torch.Tensor:  # subclasses could be lazy or lie about their data
        return f"{name}: expected a torch.Tensor, got {type(out).__name__}"
    if tuple(out.shape) != tuple(ref.shape):
        return f"{name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"{name}: dtype {out.dtype}, expected {ref.dtype}"
    if out.device.type != ref.device.type:
        return f"{name}: on {out.device.type}, expected {ref.device.type}"
    return None


def _positions(mask: torch.Tensor) -> list[list[int]]:
    idx = mask.nonzero()[:MAX_POSITIONS]
    return [[int(i) for i in row] for row in idx.tolist()]


# Above this fraction of differing elements the check runs on the whole tensor: gathering most
# of it would cost more than it saves.
GATHER_BELOW = 1 / 8


def compare(name: str, out: torch.Tensor, ref: torch.Tensor, *, rtol: float, atol: float) -> CheckResult:
    """Elementwise ``|out - ref| <= atol + rtol * |ref|``; NaN/inf must match the reference.

    Errors are computed in float64 so the verdict does not depend on the dtype's rounding
    (float32 for 16-bit outputs: their differences to 2^-24 relative, and half the memory traffic
    on the big attention outputs checked after every timed call).

    Only elements whose bits differ from the reference's can be out of tolerance or carry an
    error, so when few differ the float math runs on those alone: an output that repeats most
    of its reference (mla_decode's 1.2 GB cache, one row new per call) costs one comparison,
    not the math on every element. Same verdict, errors and positions either way.
    """
    problem = validate(name, out, ref)
    if problem:
        return CheckResult("invalid", problem)
    out, ref = out.detach(), ref.detach()
    differ = out != ref          # NaN != NaN: NaNs go through the rules below
    n_differ = int(differ.sum())
    if n_differ == 0:
        return CheckResult("passed", max_abs_err=0.0, max_rel_err=0.0)
    if n_differ < GATHER_BELOW * ref.numel():
        flat = differ.reshape(-1).nonzero().squeeze(1)
        max_abs, max_rel, n_bad, bad = _errors(out.reshape(-1)[flat], ref.reshape(-1)[flat], rtol, atol)
        where_bad = lambda: torch.stack(torch.unravel_index(  # noqa: E731
            flat[bad.nonzero().squeeze(1)[:MAX_POSITIONS]], ref.shape), 1).tolist()
    else:
        max_abs, max_rel, n_bad, bad = _errors(out, ref, rtol, atol)
        where_bad = lambda: _positions(bad)  # noqa: E731
    if n_bad == 0:
        return CheckResult("passed", max_abs_err=max_abs, max_rel_err=max_rel)
    finite_ref = torch.isfinite(ref)
    n_nonfinite = int((~torch.isfinite(out) & finite_ref).sum())
    positions = where_bad()
    where = ", ".join(str(p) for p in positions)
    extra = f", {n_nonfinite} NaN/inf" if n_nonfinite else ""
    reason = (f"{name}: {n_bad}/{ref.numel()} elements out of tolerance{extra} "
              f"(max abs err {max_abs:.3g}, rtol={rtol:g} atol={atol:g}) at {where}")
    return CheckResult("mismatch", reason, max_abs, max_rel, {"bad_elements": n_bad, "positions": positions})


def _errors(out: torch.Tensor, ref: torch.Tensor, rtol: float, atol: float):
    """(max abs error, max relative error, how many and which elements are out of tolerance)."""
    wide = torch.float32 if ref.dtype in (torch.float16, torch.bfloat16) else torch.float64
    a = out.to(wide)
    b = ref.to(wide)
    finite_ref = torch.isfinite(b)
    # Non-finite reference entries must be reproduced exactly (same inf sign, NaN where NaN).
    nonfinite_ok = torch.where(finite_ref, torch.ones_like(finite_ref),
                               (a == b) | (torch.isnan(a) & torch.isnan(b)))
    diff = torch.where(finite_ref, (a - b).abs(), torch.zeros_like(a))
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    bad = (diff > atol + rtol * b.abs().where(finite_ref, torch.zeros_like(b))) | ~nonfinite_ok
    # Where the reference is not finite the error is 0 or the element is bad: never a NaN ratio.
    rel = torch.where(finite_ref, diff / b.abs().clamp_min(atol if atol > 0 else 1e-30), torch.zeros_like(diff))
    # One read back to the host, not three: this runs after every timed call.
    max_abs, max_rel, n_bad = torch.stack([diff.max().double(), rel.max().double(), bad.sum().double()]).tolist()
    return max_abs, max_rel, int(n_bad), bad


def combine(results: list[CheckResult]) -> CheckResult:
    """One verdict for several outputs: the first failure wins, errors are the worst seen."""
    def worst(attr):
        vals = [getattr(r, attr) for r in results if getattr(r, attr) is not None]
        return max(vals) if vals else None

    failed = [r for r in results if not r.passed]
    first = failed[0] if failed else CheckResult("passed")
    if first.status == "invalid":  # errors of other outputs say nothing about an invalid one
        return CheckResult("invalid", first.reason + (f" (+{len(failed) - 1} more outputs failing)"
                                                       if len(failed) > 1 else ""))
    reason = first.reason + (f" (+{len(failed) - 1} more outputs failing)" if len(failed) > 1 else "")
    return CheckResult(first.status, reason, worst("max_abs_err"), worst("max_rel_err"), first.details)


# -- native --------------------------------------------------------------------------------
# A task's native score: the original challenge's own figure, in one shape for every task.
#
# A task's ``native_score(results, suite)`` returns ``kbench.tasks.check.score(...)``; the run record carries it
# as ``summary["native"]`` (GPU runs only: CPU timings mean nothing). Example, qknorm::
#
#     {"name": "Frontier-CS score", "value": 100.0, "unit": "points", "lower_is_better": False,
#      "reason": None, "details": {"score_unbounded": 148.6}}



_TYPES = {"name": str, "value": (int, float, type(None)), "unit": str, "lower_is_better": bool,
          "reason": (str, type(None)), "details": dict}


class NativeScore(TypedDict):
    name: str              # what the original challenge calls the figure
    value: float | None    # None: no score for this run; ``reason`` says why
    unit: str              # "points", "us", "ms", ...
    lower_is_better: bool
    reason: str | None     # why there is no value, or why the rules forced it (a failed case scores 0)
    details: dict          # the other figures the original reports, by name (units in the names)


def score(name: str, value: float | None, *, unit: str, lower_is_better: bool,
          reason: str | None = None, **details) -> NativeScore:
    """A native score; ``details`` are the original's other figures (worst family, unbounded score...)."""
    return NativeScore(name=name, value=None if value is None else float(value), unit=unit,
                       lower_is_better=lower_is_better, reason=reason, details=details)


def validate_score(result, task_name: str) -> NativeScore:
    """``result`` when it has the shape above; a one-line KbenchError naming the task otherwise."""
    where = f"task {task_name}: native_score"
    if not isinstance(result, dict):
        raise KbenchError(f"{where} returned {type(result).__name__}, expected kbench.tasks.check.score(...)")
    keys = set(result)
    if keys != set(_TYPES):
        missing, extra = sorted(set(_TYPES) - keys), sorted(keys - set(_TYPES))
        raise KbenchError(f"{where} returned keys {sorted(keys)}: missing {missing}, unknown {extra} "
                          f"(use kbench.tasks.check.score)")
    for key, kind in _TYPES.items():
        if not isinstance(result[key], kind) or (key == "value" and isinstance(result[key], bool)):
            raise KbenchError(f"{where}: {key} is {type(result[key]).__name__}")
    return result
