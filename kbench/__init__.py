"""kbench: an honest, hard-to-fool benchmark and correctness harness for GPU kernels."""

__version__ = "0.1.0"
