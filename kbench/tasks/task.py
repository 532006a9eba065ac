"""Tasks: a case file plus trusted code under reference/<task>/, found and loaded by path.

Nothing task-specific lives here.
"""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import ModuleType

from kbench.errors import ContractError, KbenchError
from kbench.tasks.interface import CONTRACT, TASK, data_dir, find, load_module, top_level_int, top_level_names
from kbench.tasks.suites import Case, Suite, load_suites, select_cases


@dataclass
class Task:
    name: str
    cases_path: Path
    code_dir: Path

    @property
    def contract_path(self) -> Path:
        return self.code_dir / "contract.py"

    @cached_property
    def module(self) -> ModuleType:
        """Parent-side code: generator, ground truth, checker, baselines, score (checked
        against kbench.tasks.interface.TASK)."""
        module = self._load(self.code_dir / "task.py", f"_kbench_task_{self.name}")
        TASK.check(module, self.code_dir / "task.py")
        return module

    @cached_property
    def contract(self) -> ModuleType:
        """Worker-side code, loaded in the parent only to read its constants (checked against
        kbench.tasks.interface.CONTRACT)."""
        module = self._load(self.contract_path, f"_kbench_contract_{self.name}")
        CONTRACT.check(module, self.contract_path)
        return module

    def _load(self, path: Path, name: str) -> ModuleType:
        """A task module; one that does not import (a syntax error, a missing package) is one line."""
        try:
            return load_module(path, name)
        except KbenchError:
            raise
        except Exception as exc:  # noqa: BLE001  (whatever the task's code raises while it loads)
            where, text = path, str(exc)
            if isinstance(exc, SyntaxError) and exc.filename:
                where, text = exc.filename + (f" line {exc.lineno}" if exc.lineno else ""), exc.msg
            first = (text.strip().splitlines() or [""])[0]
            raise KbenchError(f"{where}: {type(exc).__name__}: {first}") from None

    @cached_property
    def suites(self) -> dict[str, Suite]:
        return load_suites(self.cases_path)

    @property
    def description(self) -> str:
        return TASK.get(self.module, "DESCRIPTION")

    def suite(self, name: str) -> Suite:
        if name not in self.suites:
            known = ", ".join(self.suites)
            raise KbenchError(f"unknown suite {name!r} for task {self.name} (known: {known})")
        return self.suites[name]

    def cases(self, suite: str, only: tuple[str, ...] | None, device: str) -> tuple[Suite, list[Case]]:
        """A run's suite and cases (``only``: these by name), checked against the device: the one
        place a run's selection is validated, each mistake one line naming the fix."""
        found = self.suite(suite)
        if device not in found.devices:
            raise KbenchError(f"suite {found.name!r} of {self.name} needs {' or '.join(found.devices)}; "
                              f"this run is on {device}")
        missing = [n for n in only or () if n not in {c.name for c in found.cases}]
        if missing:
            raise KbenchError(f"no case {missing[0]!r} in suite {found.name!r} of {self.name} "
                              f"(see: kbench show {self.name} --suite {found.name})")
        return found, select_cases(found, only)

    def baselines(self, device: str) -> dict[str, Path]:
        """Baselines that can run on ``device``, by name, best first."""
        out = {}
        for name, spec in TASK.get(self.module, "BASELINES").items():
            if device in spec.get("devices", ("cpu", "cuda")):
                out[name] = self.code_dir / spec["path"]
        return out

    def missing(self, baseline: str) -> list[str]:
        """The modules ``baseline`` requires that are not installed here."""
        spec = TASK.get(self.module, "BASELINES").get(baseline, {})
        return [m for m in spec.get("requires", ()) if importlib.util.find_spec(m) is None]

    def default_baseline(self, device: str) -> str | None:
        """The best baseline that can run here: the first on ``device`` with its modules installed."""
        return next((name for name in self.baselines(device) if not self.missing(name)), None)


def _roots() -> list[tuple[Path, Path]]:
    """kbench's own tasks, then each folder of $KBENCH_TASK_DIRS holding cases/ and reference/."""
    roots = [(data_dir("cases"), data_dir("reference"))]
    for extra in filter(None, os.environ.get("KBENCH_TASK_DIRS", "").split(os.pathsep)):
        roots.append((Path(extra) / "cases", Path(extra) / "reference"))
    return roots


def task_dir_problems() -> list[str]:
    """Folders of $KBENCH_TASK_DIRS that cannot hold a task, one line each (they are skipped)."""
    problems = []
    for extra in filter(None, os.environ.get("KBENCH_TASK_DIRS", "").split(os.pathsep)):
        folder = Path(extra)
        if not folder.is_dir():
            problems.append(f"KBENCH_TASK_DIRS: {folder}: no such folder")
        elif not (folder / "cases").is_dir() or not (folder / "reference").is_dir():
            problems.append(f"KBENCH_TASK_DIRS: {folder}: no cases/ and reference/ folders in it")
    return problems


def all_tasks() -> dict[str, Task]:
    """Every task with both a case file and a reference folder holding contract.py and task.py."""
    tasks = {}
    for cases_dir, reference_dir in _roots():
        for toml in sorted(cases_dir.glob("*.toml")):
            code = reference_dir / toml.stem
            if (code / "task.py").is_file() and (code / "contract.py").is_file():
                tasks.setdefault(toml.stem, Task(toml.stem, toml, code))
    return tasks


def declared_gpu_pool(name: str) -> int:
    """Task ``name``'s ``GPU_POOL`` as its task.py writes it, read without importing it (the
    launcher counts the workers to start before torch is imported); 0 for an unknown task or
    one that declares none."""
    for cases_dir, reference_dir in _roots():
        task_py = reference_dir / name / "task.py"
        if name and (cases_dir / f"{name}.toml").is_file() and task_py.is_file():
            return top_level_int(task_py, "GPU_POOL") or 0
    return 0


def get_task(name: str, tasks: dict[str, Task] | None = None) -> Task:
    tasks = all_tasks() if tasks is None else tasks
    if name not in tasks:
        raise KbenchError(f"unknown task {name!r} (known: {', '.join(tasks) or 'none'})")
    return tasks[name]


def submission_file(task: Task, path: Path) -> Path:
    """The file to import: ``path`` itself, or the task's submission file inside the folder."""
    try:
        return find(path, task.contract.SUBMISSION_FILES)
    except ContractError as exc:
        raise KbenchError(f"{exc} for task {task.name}") from None


def detect_task(path: Path, tasks: dict[str, Task] | None = None) -> Task:
    """Tell the task from the folder's name, else from the entry points its files define.

    The submission is read with ``ast``, never imported: the parent must not run its code.
    """
    tasks = all_tasks() if tasks is None else tasks
    path = Path(path)
    for candidate in (path.name, path.stem, path.parent.name if path.is_file() else None):
        if candidate in tasks:
            return tasks[candidate]
    files = [path] if path.is_file() else sorted(path.glob("*.py"))
    defined = set().union(*(top_level_names(f) for f in files)) if files else set()
    matches = [t for t in tasks.values() if defined & set(t.contract.ENTRY_POINTS)]
    if len(matches) == 1:
        return matches[0]
    hint = f" (could be {', '.join(t.name for t in matches)})" if matches else ""
    raise KbenchError(f"cannot tell the task of {path}{hint}: pass --task")
