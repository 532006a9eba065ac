"""Suites of cases, read from ``cases/<task>.toml``."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .errors import KbenchError


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
