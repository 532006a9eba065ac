"""Launches one bundled attention kernel 4 times on one case, for a profiler (bench/ncu_profile.sh).

    python3 bench/kernel_launches.py bsa full-window-1     (the bsa Gluon kernel on a case's seed inputs)
    python3 bench/kernel_launches.py mla 6145             (the mla_decode attention, bs 128, kv_len 6145, random inputs)
"""
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from kbench.loader import load_module  # noqa: E402
from kbench.tasks import get_task  # noqa: E402
from bsa_case import QK_SCALE, find_case, kernel_inputs  # noqa: E402  (bench/ is the script's folder)

what = sys.argv[1]
if what == "bsa":
    mod = load_module(ROOT / "submissions" / "block_sparse_attn" / "bsa_gluon.py", "bsa_gluon")
    task = get_task("block_sparse_attn")
    q, k, v, rp, ci, sl = kernel_inputs(task, find_case(task, sys.argv[2]))
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], device="cuda", dtype=torch.float32)
    for _ in range(4):
        mod.launch(q, k, v, rp, ci, sl, o, lse, QK_SCALE, mod.STAGES)
else:
    sys.path.insert(0, str(ROOT / "submissions" / "mla_decode"))
    import submission as sol
    bs, kv_len = 128, int(sys.argv[2])
    q_lat = torch.randn(128, bs, 512, device="cuda", dtype=torch.bfloat16)
    q = torch.randn(bs, 128, 192, device="cuda", dtype=torch.bfloat16)
    kv = torch.randn(bs, kv_len + 64, 576, device="cuda", dtype=torch.bfloat16) * 0.5
    for _ in range(4):
        sol.mla_attention(q_lat, q, kv, kv_len, 128, 1 / math.sqrt(192))
torch.cuda.synchronize()
print("ok")
