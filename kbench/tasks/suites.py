"""Suites of cases read from cases/<task>.toml, their seeds, and whether a suite's check is fair."""
from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from kbench.errors import KbenchError


@dataclass(frozen=True)
class Case:
    """One case: ``params`` are the generator's keyword arguments, ``seed`` included."""

    name: str
    params: dict

    @property
    def seed(self) -> int:
        return int(self.params.get("seed", 0))


@dataclass
class Suite:
    name: str
    reason: str
    cases: list[Case]
    devices: tuple[str, ...] = ("cpu", "cuda")
    extra: dict = field(default_factory=dict)


def load_suites(path: Path) -> dict[str, Suite]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise KbenchError(f"{path}: not valid TOML ({exc})") from exc
    suites = {}
    for name, body in data.get("suites", {}).items():
        cases = []
        for i, raw in enumerate(body.get("cases", [])):
            raw = dict(raw)
            case_name = str(raw.pop("name", f"{name}-{i}"))
            cases.append(Case(case_name, raw))
        names = [c.name for c in cases]
        if len(set(names)) != len(names):
            raise KbenchError(f"{path}: suite {name!r} has duplicate case names")
        extra = {k: v for k, v in body.items() if k not in ("cases", "reason", "devices")}
        suites[name] = Suite(name, body.get("reason", ""), cases,
                             tuple(body.get("devices", ("cpu", "cuda"))), extra)
    return suites


def select_cases(suite: Suite, only: tuple[str, ...] | None) -> list[Case]:
    """The suite's cases, or only those named (each name must exist)."""
    if not only:
        return list(suite.cases)
    by_name = {c.name: c for c in suite.cases}
    missing = [n for n in only if n not in by_name]
    if missing:
        raise KbenchError(f"no case {missing[0]!r} in suite {suite.name!r} (known: {', '.join(by_name)})")
    return [by_name[n] for n in only]


# -- health --------------------------------------------------------------------------------
# Is a suite's check fair? The exact answer, rounded to the outputs' dtypes, must pass it.
#
# A task may define ``exact(inputs)``: its reference's math in float64, not rounded. For a
# case and a list of seeds, ``exact_answer_misses`` counts the seeds on which that answer,
# rounded to each output's dtype, fails the task's own check against its ground truth. A
# case where it ever fails is a broken case (the check rejects a perfect kernel), not a
# strict one: at contexts of a few dozen rows mla_decode's bf16 ground truth was noisy
# enough for that to happen on 0.5-1% of seeds.

def health_seeds(case: Case, n: int) -> list[int]:
    """``n`` seeds for a case, fixed (a test must not be flaky) and none of them the case's own."""
    return [derive_seed("suite-health", case.name, i) for i in range(n)]


def exact_answer_misses(module, case: Case, seeds: list[int], device: str = "cpu") -> tuple[int, str | None]:
    """(seeds on which the rounded exact answer fails the check, the first failure's reason)."""
    misses, first = 0, None
    for seed in seeds:
        inputs = module.generate(dict(case.params, seed=seed), device)
        expected = tuple(module.reference(inputs))
        rounded = tuple(e.to(r.dtype) for e, r in zip(module.exact(inputs), expected))
        result = module.check(rounded, expected, inputs)
        if not result.passed:
            misses += 1
            first = first or f"seed {seed}: {result.reason}"
    return misses, first


def derive_seed(*parts) -> int:
    digest = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 1)
