"""scaleadd, parent side: inputs, ground truth, checker, baselines, roofline (out = 2x + y)."""
import torch

from kbench.tasks.check import compare

DESCRIPTION = "2x + y, the example task of docs/tasks.md"
BASELINES = {"eager": {"path": "eager.py", "devices": ("cpu", "cuda")}}


def generate(case, device):
    """x and y: case["n"] float32 values each, drawn from case["seed"]."""
    gen = torch.Generator(device=device).manual_seed(case["seed"])
    return {"x": torch.randn(case["n"], generator=gen, device=device),
            "y": torch.randn(case["n"], generator=gen, device=device)}


def reference(inputs):
    return (2 * inputs["x"] + inputs["y"],)


def check(outputs, expected, inputs):
    return compare("out", outputs[0], expected[0], rtol=1e-5, atol=1e-6)


def roofline(case):
    """Read x and y, write out (4 bytes each); two flops per element."""
    return {"bytes": 12 * case["n"], "flops": 2 * case["n"]}
