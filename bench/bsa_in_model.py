"""block_sparse_attn timed inside a model's layer stack: which plain-process figure is the real one?

    python3 bench/bsa_in_model.py [--suite quick] [--cases a,b] [--layers 16] [--rounds 12]
    (after `source bench/gpu_env.sh`; a GPU is needed)

Before the interlude (kbench/interlude.py), kbench read the bundled kernel 1.5-3.3% faster on
quick-global-1 than bench/crosscheck.py's plain process did, which computes each call's ground
truth in the kernel's own context. Neither says what the kernel costs where it is used: in a
model, after the kernels that wrote its inputs and while the model's weights pass through the
same device. This script builds that: a stack of transformer layers with
the case's shapes (hidden = heads x 128; per layer a layer norm, the QKV projection, the copy
that lays q, k, v out as (B, H, T, D), the attention on the case's CSR, the output projection and
a 4x MLP; ~100 MB of weights a layer at 16 heads) and times the attention of every layer but the
first with events, behind a gate long enough that the device never waits for the host.

Per case and target (the bundled kernel and the task's first baseline), medians of:
- model: as a model runs it (its inputs just written, partly in L2);
- model, L2 flushed: kbench's flush between the copy and the attention, in-context, so the data
  starts cold as under kbench while the rest of the device's state is the model's;
- model, L2 flushed, primed: the same attention called once before, untimed, as kbench's primer;
- plain, W between: kbench's CallTimer in this process, its interlude off (primer, then W, then
  gate, flush...), on 6 input sets made ahead, cycled. W: nothing (kbench's protocol before the
  interlude), a sweep over 1 GB reading one byte of every 2 MB page (by a copy, by a sum), a
  GEMM, the other target's call, one or every layer of the stack without its attention;
  bench/interference_probe.py runs some of these for any task;
- plain, kbench's interlude: the CallTimer as kbench runs it;
- plain, ground truth between: the same, as bench/crosscheck.py, a fresh input set and its
  ground truth made in this context before every call.
Figures: docs/measurement.md, "What a call's own previous call leaves".
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from crosscheck import Plain, bundled_and_baseline  # noqa: E402  (bench/ is the script's folder)
from kbench.call_timer import CallTimer  # noqa: E402
from kbench.runner import Options, Runner  # noqa: E402
from kbench.timing import flush_bytes  # noqa: E402

# "every layer without attention" puts the whole stack's GEMMs before each call, and the attention
# after them reads ~5-10% slower, FlexAttention as much as the kernel: the card at its power cap
# (nvidia-smi: reason "SW power cap", up to 712 W, SM clock 1350-1970 MHz against 1980), not the
# kernel's caches. Measured on an H200 (2026-11-28): the variant run right after it started 6-25%
# slow and took 20-40 calls to come back. So it runs last for each target, and every plain variant
# starts after a rest and drops its first calls.
SETTLE_S = 1.0
WARMUP_CALLS = 10


class Stack:
    """A model's layers for attention inputs of `shape` (B, H, T, D); weights random, activations
    kept finite by the norms. `csr`: the block_sparse_attn case's row_ptr, col_idx and seq_lens."""

    def __init__(self, shape: tuple, layers: int, csr: dict | None = None):
        b, h, t, d = self.shape = shape
        hidden = h * d
        w = lambda rows, cols: (torch.randn(rows, cols, device="cuda") * rows ** -0.5).to(torch.bfloat16)
        self.weights = [(w(hidden, 3 * hidden), w(hidden, hidden), w(hidden, 4 * hidden), w(4 * hidden, hidden))
                        for _ in range(layers)]
        self.x0 = torch.randn(b * t, hidden, device="cuda", dtype=torch.bfloat16)
        self.csr = csr or {}

    def without_attention(self) -> None:
        """Every layer once, q standing in for the attention's output: a model's other work."""
        self.run(None, None, False, [(None, None)] * len(self.weights))

    def run(self, target: Plain | None, flush, primed: bool, events: list) -> None:
        """Every layer once; events[i] = (start, end) around layer i's attention (no target: q for its output)."""
        b, h, t, d = self.shape
        x = self.x0
        for (w_qkv, w_o, w_up, w_down), (start, end) in zip(self.weights, events):
            qkv = (F.layer_norm(x, x.shape[-1:]) @ w_qkv).view(b, t, 3, h, d)
            q, k, v = (qkv[:, :, i].transpose(1, 2).contiguous() for i in range(3))  # as a RoPE kernel writes them
            if target is None:
                o = q
            else:
                args = target.prepare(dict(q=q, k=k, v=v, **self.csr))
                if primed:   # the same call once before, untimed: what kbench's primer leaves
                    target.invoke(target.prepare(dict(q=q, k=k, v=v, **self.csr)))
                if flush is not None:
                    flush()
                start.record()
                o = target.invoke(args)[0]
                end.record()
            x = x + o.permute(0, 2, 1, 3).reshape(b * t, h * d) @ w_o
            x = x + F.gelu(F.layer_norm(x, x.shape[-1:]) @ w_up) @ w_down


def model_us(target: Plain, stack: Stack, flush, primed: bool, rounds: int, gate_ms: float) -> tuple[list, float]:
    """Attention times (us) of layers 1.. over `rounds` held rounds; the gate doubles until held."""
    layers = len(stack.weights)
    times, tries = [], 0
    while len(times) < rounds * (layers - 1):
        tries += 1
        if tries > 4 * rounds:
            raise SystemExit(f"{target.label}: the device caught up with the host at a {gate_ms:.0f} ms gate")
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(layers)]
        gate_end = torch.cuda.Event()
        torch.cuda.synchronize()
        torch.cuda._sleep(int(gate_ms * target.timer.cycles_per_ms))
        gate_end.record()
        stack.run(target, flush, primed, events)
        held = not gate_end.query()   # the host enqueued every layer before the device left the gate
        torch.cuda.synchronize()
        if not held:
            gate_ms *= 2
            continue
        times += [s.elapsed_time(e) * 1e3 for s, e in events[1:]]
    return times, gate_ms


def plain_us(target: Plain, between, task, case, sets: list | None, calls: int, interlude: bool = False) -> list:
    """Samples (us) of a CallTimer that runs `between` after its primer, before the gate, with or
    without its own interlude after that: cycling the sets made ahead, or a fresh set and its
    ground truth before each call. The device first rests SETTLE_S and WARMUP_CALLS calls are
    dropped: a variant must not inherit the clocks the previous one left (see SETTLE_S)."""
    timer = CallTimer("cuda", flush_bytes("cuda"))
    if not interlude:
        timer.interlude = None
    prime = timer._prime
    timer._prime = lambda invoke: (prime(invoke), between())   # `between` after the primer, before the gate
    runner = Runner(task, Options(device="cuda"))
    timer.start_case()
    torch.cuda.synchronize()
    time.sleep(SETTLE_S)
    out = []
    for i in range(WARMUP_CALLS + calls):
        inputs = sets[i % len(sets)] if sets else runner._make(case, 1 + i)[0]
        out.append(timer.timed(target.invoke, target.prepare, inputs)[1].device_ms * 1e3)
        del inputs
    return out[WARMUP_CALLS:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default="quick")
    ap.add_argument("--cases", default=None, help="comma-separated case names (default: the whole suite)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=12, help="held rounds per target and variant, interleaved")
    ap.add_argument("--calls", type=int, default=60, help="CallTimer calls per plain variant")
    ap.add_argument("--out", type=Path, default=None, help="folder for the JSON of every sample")
    args = ap.parse_args()
    task, targets, cases = bundled_and_baseline("block_sparse_attn", args.suite, args.cases)
    flush = targets[0].timer.flush
    variants = ["model", "model, L2 flushed", "model, L2 flushed, primed"]
    plain = ["plain", "plain, 1 GB page sweep by copy", "plain, 1 GB page sweep by sum",
             "plain, a 2048^3 bf16 GEMM", "plain, the other target's call",
             "plain, one layer without attention"]
    between = ["plain, kbench's interlude", "plain, ground truth between"]
    heavy = "plain, every layer without attention"   # last: see SETTLE_S
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    pages = torch.zeros(1 << 30, dtype=torch.uint8, device="cuda")[::2 << 20]   # one byte per 2 MB page
    sink = torch.empty(pages.numel(), dtype=torch.uint8, device="cuda")
    record = {}
    for case in cases:
        runner = Runner(task, Options(device="cuda"))
        sets = [runner._make(case, 100 + i)[0] for i in range(6)]
        csr = {k: sets[0][k] for k in ("row_ptr", "col_idx", "seq_lens")}
        stack = Stack(tuple(sets[0]["q"].shape), args.layers, csr)
        for t in targets:   # warm-up: the stack's own kernels, the target's compilation for these strides
            model_us(t, stack, None, False, 1, 20.0)
        res = {(t.label, v): [] for t in targets for v in variants + plain + between + [heavy]}
        gates = {t.label: 20.0 for t in targets}
        for rnd in range(args.rounds):
            for t in (targets if rnd % 2 else targets[::-1]):
                for variant, fl, primed in zip(variants, (None, flush, flush), (False, False, True)):
                    times, gates[t.label] = model_us(t, stack, fl, primed, 1, gates[t.label])
                    res[(t.label, variant)] += times
        nothing = lambda: None
        one_layer = Stack(stack.shape, 1)
        for t in targets:
            other = next(o for o in targets if o is not t)
            other_args = other.prepare(sets[0])
            works = [nothing, lambda: sink.copy_(pages), pages.sum, lambda: a @ a, lambda: other.invoke(other_args),
                     one_layer.without_attention]
            for name, work in zip(plain, works):
                res[(t.label, name)] = plain_us(t, work, task, case, sets, args.calls)
            res[(t.label, between[0])] = plain_us(t, nothing, task, case, sets, args.calls, interlude=True)
            res[(t.label, between[1])] = plain_us(t, nothing, task, case, None, args.calls, interlude=True)
            res[(t.label, heavy)] = plain_us(t, stack.without_attention, task, case, sets, args.calls)
        print(f"{case.name}: attention us, median (q1-q3); {args.layers - 1} layers x {args.rounds} rounds "
              f"per model variant, {args.calls} calls per plain one")
        for t in targets:
            base = statistics.median(res[(t.label, "model, L2 flushed")])
            for variant in variants + plain + between + [heavy]:
                v = res[(t.label, variant)]
                q = statistics.quantiles(v, n=4)
                print(f"  {t.label:26s} {variant:44s} {statistics.median(v):9.2f} ({q[0]:.2f}-{q[2]:.2f})"
                      f"  x{statistics.median(v) / base:.4f}", flush=True)
        record[case.name] = {f"{k[0]} | {k[1]}": v for k, v in res.items()}
        del sets, stack
        torch.cuda.empty_cache()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"bsa-in-model-{args.suite}.json").write_text(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
