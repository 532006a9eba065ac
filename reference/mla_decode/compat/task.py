"""``task`` as an original GPU MODE mla-decode submission imports it (``from task import input_t, output_t``)."""
from __future__ import annotations

from pathlib import Path
from typing import Tuple, TypeVar

import torch

from kbench.tasks.interface import load_sibling

_model = load_sibling(Path(__file__).resolve().parent.parent, "mla_model")

Config = _model.Config
KVCache = _model.KVCache

input_t = TypeVar("input_t", bound=Tuple[Config, torch.Tensor, KVCache])
output_t = TypeVar("output_t", bound=Tuple[torch.Tensor, torch.Tensor])


class TestSpec(dict):
    """Keyword arguments of one case (as in the original's task.py)."""
