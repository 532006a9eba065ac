"""kbench: an honest, hard-to-fool benchmark and correctness harness for GPU kernels.

The Python API (kbench/api.py) is the command line's: ``kbench.evaluate``, ``kbench.compare``.
"""

__version__ = "0.1.0"

from kbench.api import compare, evaluate, evaluate_many  # noqa: E402  (light: torch is imported on a call)
from kbench.errors import KbenchError  # noqa: E402

__all__ = ["compare", "evaluate", "evaluate_many", "KbenchError", "__version__"]
