"""``task`` as an original GPU MODE mla-decode submission imports it (``from task import input_t, output_t``)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Tuple, TypeVar

import torch

_key = "_kbench_mla_decode__load"
if _key not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_key, Path(__file__).resolve().parent.parent / "_load.py")
    sys.modules[_key] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules[_key])
_model = sys.modules[_key].sibling("mla_model")

Config = _model.Config
KVCache = _model.KVCache

input_t = TypeVar("input_t", bound=Tuple[Config, torch.Tensor, KVCache])
output_t = TypeVar("output_t", bound=Tuple[torch.Tensor, torch.Tensor])


class TestSpec(dict):
    """Keyword arguments of one case (as in the original's task.py)."""
