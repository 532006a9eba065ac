"""qknorm, worker side: how a submission is loaded and called. No ground truth here.

Two original forms are accepted unchanged:
1. a module defining ``qknorm(q, k, norm_weight) -> (q_out, k_out)``;
2. Frontier-CS: ``class Solution`` whose ``solve(spec_path)`` returns
   ``{"code": source}`` or ``{"program_path": path}`` (a plain string is a path if it
   names an existing file, else source); the module so loaded defines ``qknorm``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

from kbench.errors import ContractError
from kbench.tasks import interface

ENTRY_POINTS = ("qknorm", "Solution")
SUBMISSION_FILES = ("submission.py", "solution.py")


def _from_solution(module, folder: Path):
    answer = module.Solution().solve(None)
    if isinstance(answer, dict):
        if "code" in answer:
            source, path = answer["code"], None
        elif "program_path" in answer:
            source, path = None, answer["program_path"]
        else:
            raise ContractError(f"Solution.solve() returned a dict without 'code' or 'program_path' "
                                f"(keys: {sorted(answer)})")
    elif isinstance(answer, str):
        candidate = Path(answer) if Path(answer).is_absolute() else folder / answer
        is_file = len(answer) < 4096 and "\n" not in answer and candidate.is_file()
        source, path = (None, answer) if is_file else (answer, None)
    else:
        raise ContractError(f"Solution.solve() returned {type(answer).__name__}, expected a dict or str")
    if path is not None:
        program = Path(path) if Path(path).is_absolute() else folder / path
        if not program.is_file():
            raise ContractError(f"Solution.solve() named program_path {path!r}, which does not exist")
    else:
        # Triton reads kernel source through inspect, so the code must live in a real file.
        tmp = Path(tempfile.mkdtemp(prefix="kbench-solution-"))
        program = tmp / "solution_program.py"
        program.write_text(source)
    return interface.import_file(program, "solution_program")


def load(path: Path):
    path = interface.find(path, SUBMISSION_FILES)
    module = interface.import_file(path, "submission")
    if not hasattr(module, "qknorm") and hasattr(module, "Solution"):
        module = _from_solution(module, path.parent)
    return interface.entry_point(module, path, "qknorm", "qknorm(q, k, norm_weight)")


def call(fn, args):
    return interface.returned(fn(args["q"], args["k"], args["norm_weight"]), "qknorm", ("q_out", "k_out"))
