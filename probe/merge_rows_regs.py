"""Registers and stack of _merge_rows_kernel compiled for sm_90, no GPU needed (after
`git apply probe/mla-pending.patch`): for each batch and split count of the lean path, the launch
shape _merge_rows_shape picks, at 8 warps and 2 stages, read back with the cuobjdump Triton ships.
    python probe/merge_rows_regs.py"""
import importlib.util
import os
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

sys.path.insert(0, "submissions/mla_decode")
spec = importlib.util.spec_from_file_location("sol", "submissions/mla_decode/submission.py")
sol = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sol)
fn = sol._merge_rows_kernel
CUOBJDUMP = os.path.join(os.path.dirname(triton.backends.nvidia.__file__), "bin", "cuobjdump")
SIG = {n: "*fp32" if n in ("opart_ptr", "lse_ptr") else ("*bf16" if n.endswith("_ptr") else "i32")
       for n in fn.arg_names[:16]}


def usage(kernel) -> str:
    path = os.path.join(tempfile.mkdtemp(), "k.cubin")
    with open(path, "wb") as f:
        f.write(kernel.asm["cubin"])
    out = subprocess.run([CUOBJDUMP, "--dump-resource-usage", path], capture_output=True, text=True, check=True)
    line = next(line for line in out.stdout.splitlines() if "REG" in line)
    return " ".join(x for x in line.split() if x.startswith(("REG", "STACK")))


for bs, splits in ((1, 32), (1, 64), (2, 32), (4, 16), (8, 8), (16, 4), (32, 2), (57, 2)):
    block_m, n_splits, block_k = sol._merge_rows_shape(bs, splits, 512, 128)
    const = {"R": 512, "VD": 128, "SPLITS": n_splits, "BLOCK_M": block_m, "BLOCK_K": block_k, "DOT_F32": False}
    kernel = triton.compile(ASTSource(fn, {**SIG, **dict.fromkeys(const, "constexpr")}, const),
                            target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 2})
    print(f"bs {bs:3d} splits {splits:3d} (BLOCK_M, SPLITS, BLOCK_K) {(block_m, n_splits, block_k)}: {usage(kernel)}")
