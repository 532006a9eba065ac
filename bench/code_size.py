"""How much machine code a kernel is, compiled for the GPU on any machine (no GPU needed).

    python3 bench/code_size.py [--arch 90] [--bsa FOLDER] [--where N]
    (with the GPU host's triton, 3.6: `pip install --target DIR triton==3.6.0` and PYTHONPATH=DIR)

A kernel's code is what block_sparse_attn's bundled kernel fetches again on every call of a model,
where other code ran since its last call (docs/measurement.md, "What a call's own previous call
leaves"): less of it is less to fetch. This compiles, for sm_{arch}a, the bundled Gluon kernel at a
full case's shapes and bench/interlude_parts.py's Triton kernels, each specialised on its arguments
as Triton's JIT specialises a launch (types, 16-byte alignment, integers divisible by 16), and
prints per kernel the size of its .text (the instructions: 16 bytes each), of the whole cubin
(which interlude_parts prints on the GPU), and the shared memory Triton reports. `--bsa`: the
block_sparse_attn kernel from another folder's bsa_gluon.py (a variant being sized before any
device time is spent on it). `--where N`: where the block_sparse_attn kernel's instructions come
from, per function of its bsa_gluon.py and its N largest source lines (nvdisasm's line table; an
inlined function's instructions count at its own lines, summed over its call sites).
"""
from __future__ import annotations

import argparse
import ast
import re
import struct
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.compiler.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

ROOT = Path(__file__).resolve().parents[1]


def text_bytes(elf: bytes) -> int:
    """The summed size of an ELF64 file's .text.* sections (a cubin's kernels' instructions)."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(h) -> str:
        start = names_at + h[0]
        return elf[start:elf.index(b"\0", start)].decode()

    return sum(h[5] for h in headers if name(h).startswith(".text."))


_LINE = re.compile(r'//## File "([^"]+)", line (\d+)')
_INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/")


def instructions_by_line(cubin: bytes) -> Counter:
    """(source file, line) -> instructions, from the cubin's line table as nvdisasm prints it
    (Triton's, from its wheel); instructions before any line entry count under ("", 0)."""
    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([knobs.nvidia.nvdisasm.path, "-g", "-c", f.name], capture_output=True, text=True,
                              check=True).stdout
    counts, at = Counter(), ("", 0)
    for line in sass.splitlines():
        if m := _LINE.search(line):
            at = (m.group(1), int(m.group(2)))
        elif _INSTRUCTION.match(line):
            counts[at] += 1
    return counts


def _is(path: str, source: Path) -> bool:
    # By file name: a cubin from Triton's cache carries the path of the checkout that first compiled it.
    return bool(path) and Path(path).name == source.name


def lines_of(counts: Counter, source: Path) -> Counter:
    """line -> instructions, for ``source``'s lines alone."""
    return Counter({line: n for (path, line), n in counts.items() if _is(path, source)})


def by_function(counts: Counter, source: Path) -> Counter:
    """``counts`` (instructions_by_line) of ``source``'s lines summed per innermost enclosing function."""
    defs = [(n.lineno, n.end_lineno, n.name) for n in ast.walk(ast.parse(source.read_text()))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    out = Counter()
    for line, n in lines_of(counts, source).items():
        inside = [(start, name) for start, end, name in defs if start <= line <= end]
        out[max(inside)[1] if inside else "(module)"] += n
    return out


def where(cubin: bytes, source: Path, top: int) -> None:
    """Prints where a kernel's instructions come from: per function of ``source``, then its ``top`` lines."""
    counts = instructions_by_line(cubin)
    lines = lines_of(counts, source)
    elsewhere = Counter()
    for (path, _), n in counts.items():
        if not _is(path, source):
            elsewhere[Path(path).name or "no line"] += n
    print(f"\n{source}: {sum(lines.values())} of {sum(counts.values())} instructions at its lines (the rest: "
          f"{', '.join(f'{name} {n}' for name, n in elsewhere.items()) or 'none'})")
    for name, n in by_function(counts, source).most_common():
        print(f"  {name:24s} {n:5d} instructions  {n * 16 / 1024:5.1f} KB")
    text = source.read_text().splitlines()
    for line, n in lines.most_common(top):
        print(f"  line {line:4d} {n:5d}  {text[line - 1].strip()[:80]}")


def compile_for(fn, target: GPUTarget, args: list, source=ASTSource, **options):
    """``fn`` compiled for ``target`` as its JIT would for a launch with ``args`` (positional, the
    constexprs among them), ``options`` as the launch's (num_warps, num_stages, maxnreg, ...)."""
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    _, specialization, _ = binder(*args)
    signature = {p.name: s[0] for p, s in zip(fn.params, specialization)}
    constexprs = {(i,): a for i, (s, a) in enumerate(zip(specialization, args)) if s[0] == "constexpr"}
    attrs = {(i,): backend.parse_attr(s[1]) for i, s in enumerate(specialization)
             if s[0] != "constexpr" and isinstance(s[1], str)}
    return triton.compile(source(fn, signature, constexprs, attrs), target=target, options=options)


BUNDLED_BSA = ROOT / "submissions" / "block_sparse_attn"


def bundled_bsa(target: GPUTarget, folder: Path = BUNDLED_BSA):
    """The block_sparse_attn kernel of ``folder``'s bsa_gluon.py (the bundled one by default) at
    full-global-1's shapes (1 x 16 heads x 4096 rows of 128), with the arguments and options its
    launch uses (bsa_gluon.launch)."""
    import importlib.util

    from triton.experimental.gluon._runtime import GluonASTSource

    spec = importlib.util.spec_from_file_location("bsa_gluon", Path(folder) / "bsa_gluon.py")
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)

    B, H, T, D = 1, 16, 4096, 128
    q = torch.empty(B, H, T, D, dtype=torch.bfloat16)
    ints = lambda n: torch.empty(n, dtype=torch.int32)  # noqa: E731
    nnz = 1024
    args = [g._descriptor(q), g._descriptor(q), g._descriptor(q), g._descriptor(q, g.BLOCK // 2), q,
            torch.empty(B, H, T), ints(B * H * (T // g.BLOCK) + 1), ints(nnz), ints(B), ints(2),
            *g._scalar_arguments(H, B, nnz, T, 0.0884, g.STAGES)]
    return compile_for(g._bsa_fwd_ws, target, args, source=GluonASTSource, num_warps=4, maxnreg=168)


def interlude_parts(target: GPUTarget):
    """name -> compiled, for interlude_parts.py's Triton kernels as it launches them."""
    import interlude_parts as p  # bench/, the script's folder

    bf16 = lambda *shape: torch.empty(*shape, dtype=torch.bfloat16)  # noqa: E731
    flat = torch.empty(1 << 20)
    a, b, c = bf16(128, p.K), bf16(p.K, 128), bf16(132 * 16384)
    out = {}
    for bk, stages in p.DOT_TILES:
        out[f"Triton dot BK={bk}, {stages} stages"] = compile_for(p._dot, target, [a, b, c, p.K, bk], num_stages=stages)
    for steps in p.LONG_CODE_STEPS:
        out[f"Triton long code, {steps} steps"] = compile_for(p._long_code, target, [flat, steps])
    out["Triton add"] = compile_for(p._add_one, target, [flat, torch.empty_like(flat), flat.numel(), 4096])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (90: H100, H200)")
    ap.add_argument("--bsa", type=Path, default=BUNDLED_BSA, help="folder of the bsa_gluon.py to size")
    ap.add_argument("--where", type=int, metavar="N", help="also: the bsa kernel's instructions per function "
                    "of its bsa_gluon.py and its N largest lines")
    args = ap.parse_args()
    target = GPUTarget("cuda", args.arch, 32)
    print(f"triton {triton.__version__}, sm_{args.arch}a; KB of .text (instructions), cubin, shared memory")
    label = "bundled" if args.bsa.resolve() == BUNDLED_BSA else str(args.bsa)
    kernels = {f"block_sparse_attn {label} (_bsa_fwd_ws)": bundled_bsa(target, args.bsa), **interlude_parts(target)}
    for name, k in kernels.items():
        cubin = k.asm["cubin"]
        text = text_bytes(cubin)
        print(f"{name:44s} .text {text / 1024:6.1f} KB ({text // 16:5d} instructions)  cubin {len(cubin) / 1024:6.1f} KB"
              f"  shared {k.metadata.shared / 1024:6.1f} KB", flush=True)
    if args.where is not None:
        bsa = next(iter(kernels.values()))
        where(bsa.asm["cubin"], args.bsa / "bsa_gluon.py", args.where)
    return 0


if __name__ == "__main__":
    sys.exit(main())
