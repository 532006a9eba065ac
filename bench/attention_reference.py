"""What the vendor's attention reaches on rows as short as block_sparse_attn's, timed the way kbench
times a call: a yardstick for issue 11's ">= 400 TFLOP/s on every full case".

    python bench/attention_reference.py [--blocks 4,11] [--calls 30]

The full suite's cases are 2 x 16 heads x 8192 tokens, head dim 128, each 128-token query block
attending to a few 128-token key blocks (window-1 and global-1: 4, the last one the causal
diagonal). Per row length n (key blocks per query block), on the same q shape:
- sdpa-<backend> dense: torch's scaled_dot_product_attention, 8192 queries against n x 128 keys, no
  mask: every row n full blocks (the easiest form of such a row: no diagonal, no block list);
- sdpa-<backend> causal n: 8192 tokens causal cut into independent sequences of n blocks (batch x
  8192 / (n x 128) sequences), so rows hold 1..n blocks, the last the diagonal, as at a window's
  start;
- bundled window n: the bundled Gluon kernel on a sliding window of n blocks over the full 8192
  tokens (rows of n blocks, the last the diagonal: the window family's pattern at full length);
- sdpa-<backend> causal 8192: one long causal sequence (rows of 1..64 blocks), the long-row yardstick.
Backends: cuDNN (FlashAttention-3-class on Hopper) and FlashAttention-2. TFLOP/s counts 4 x 128 per
(query, key) pair computed, the diagonal's causal half only (as `task.roofline` does). Each figure
is the median of --calls calls through kbench.call_timer.CallTimer (gate, L2 flushed). CUDA only.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "submissions" / "block_sparse_attn"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from call_median import median_ms  # noqa: E402  (bench/ is the script's folder)

B, H, T, D, BLOCK = 2, 16, 8192, 128, 128


def window_csr(n: int, device: str) -> tuple:
    """row_ptr, col_idx of a sliding window of n blocks (the diagonal last) on every (batch, head)."""
    nqb = T // BLOCK
    rows = [list(range(max(0, qb - n + 1), qb + 1)) for qb in range(nqb)]
    ptr = [0]
    for r in rows:
        ptr.append(ptr[-1] + len(r))
    cols = [c for r in rows for c in r]
    row_ptr = torch.tensor(ptr, dtype=torch.int32, device=device).repeat(B, H, 1).contiguous()
    col_idx = torch.tensor(cols, dtype=torch.int32, device=device).repeat(B, H, 1).contiguous()
    return row_ptr, col_idx


def causal_pairs(tokens: int) -> int:
    """(query, key) pairs of one causal sequence counted as task.roofline counts them: full blocks
    whole, each diagonal block's causal half (129 x 128 / 2 per block)."""
    nb = tokens // BLOCK
    return (nb * (nb - 1) // 2) * BLOCK * BLOCK + nb * BLOCK * (BLOCK + 1) // 2


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", default="4,11", help="key blocks per row, comma-separated")
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("attention_reference: needs a CUDA GPU", file=sys.stderr)
        return 2
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import submission
    from kbench.call_timer import CallTimer
    from kbench.timing import flush_bytes

    timer = CallTimer("cuda", flush_bytes("cuda"))

    def median_us(fn, inputs) -> float:
        return median_ms(timer, fn, inputs, args.calls) * 1e3

    def row(name: str, us: float, pairs: int) -> None:
        print(f"{name:34s} {us:9.1f} {4 * D * pairs / us / 1e6:8.0f}", flush=True)

    torch.manual_seed(0)
    q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16)
    props = torch.cuda.get_device_properties(0)
    print(f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}; "
          f"median of {args.calls} calls each (kbench CallTimer)")
    print(f"{'what':34s} {'us':>9s} {'TFLOP/s':>8s}")
    backends = (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION))

    def sdpa_rows(what: str, causal: bool, inputs: dict, pairs: int) -> None:
        """One row per backend; a backend that refuses the shape says so in its row."""
        for label, backend in backends:
            def call(d, backend=backend):
                with sdpa_kernel([backend]):
                    return (F.scaled_dot_product_attention(d["q"], d["k"], d["v"], is_causal=causal),)
            try:
                row(f"sdpa-{label} {what}", median_us(call, inputs), pairs)
            except RuntimeError as exc:
                print(f"sdpa-{label} {what}: not run ({str(exc).splitlines()[0][:80]})")

    for n in (int(s) for s in args.blocks.split(",")):
        keys = n * BLOCK
        k = torch.randn(B, H, keys, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        sdpa_rows(f"dense {n} blocks", False, {"q": q, "k": k, "v": v}, B * H * T * keys)
        seqs = B * T // keys   # independent causal sequences of n blocks, heads as before
        qc, kc, vc = (torch.randn(seqs, H, keys, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        sdpa_rows(f"causal {n} blocks", True, {"q": qc, "k": kc, "v": vc}, seqs * H * causal_pairs(keys))
        row_ptr, col_idx = window_csr(n, "cuda")
        seq_lens = torch.full((B,), T, dtype=torch.int32, device="cuda")
        kw, vw = torch.randn_like(q), torch.randn_like(q)
        window = {"q": q, "k": kw, "v": vw, "row_ptr": row_ptr, "col_idx": col_idx, "seq_lens": seq_lens}
        full_rows = T // BLOCK - (n - 1)
        pairs = B * H * (full_rows * ((n - 1) * BLOCK * BLOCK + BLOCK * (BLOCK + 1) // 2)
                         + causal_pairs((n - 1) * BLOCK))
        row(f"bundled window {n} blocks",
            median_us(lambda d: submission.block_sparse_attn_fwd(d["q"], d["k"], d["v"], d["row_ptr"], d["col_idx"],
                                                                 d["seq_lens"]), window), pairs)
        del k, v, qc, kc, vc, kw, vw
    k, v = torch.randn_like(q), torch.randn_like(q)
    sdpa_rows("causal 8192", True, {"q": q, "k": k, "v": v}, B * H * causal_pairs(T))
    return 0


if __name__ == "__main__":
    sys.exit(main())
