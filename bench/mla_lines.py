"""Per-step host time of the bundled mla_decode call with the device busy (a probe)."""
import math, statistics, sys, time
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT)); sys.path.insert(0, str(ROOT / "submissions" / "mla_decode"))
import torch
from kbench.tasks.task import get_task
import submission as S
task = get_task("mla_decode")
case = [c for c in task.suite("full").cases if c.name == "prefill128"][0]
inputs = task.module.generate(dict(case.params), "cuda")
prepare = task.contract.prepare
clock = time.perf_counter
rec = {}
def mark(name, t):
    now = clock(); rec.setdefault(name, []).append((now - t) * 1e6); return now
@torch.no_grad()
def ck(data):
    t = clock()
    config, x, kv_cache = data
    bs, dim = x.shape[0], x.shape[-1]
    H, R = config.n_heads, config.kv_lora_rank
    nope, rope, vd = config.qk_nope_head_dim, config.qk_rope_head_dim, config.v_head_dim
    buf = kv_cache.data
    pos = kv_cache.seq_len
    x2 = x.view(bs, dim)
    t = mark("unpack", t)
    side = S._side_stream(x.device)
    main = torch.cuda.current_stream(x.device)
    side.wait_stream(main)
    t = mark("side wait", t)
    with torch.cuda.stream(side):
        t = mark("enter stream", t)
        kvr = x2 @ config.KV_proj_down_weight.t()
        t = mark("kv mm", t)
        buf[:, pos] = kvr
        t = mark("setitem", t)
    t = mark("exit stream", t)
    kv_cache.seq_len = pos + 1
    w = config.KV_proj_up_weight.view(H, nope + vd, R)
    t = mark("seq_len/view", t)
    x1 = x2 @ config.Q_proj_down_weight.t()
    t = mark("q down mm", t)
    fused = S.q_up_absorbed(x1, config.Q_proj_up_weight, w[:, :nope], H, nope, rope)
    t = mark("q_up_absorbed", t)
    (q_lat, q_pe), q_off = fused, 0
    main.wait_stream(side)
    t = mark("main wait", t)
    o = S.mla_attention(q_lat, q_pe, buf, pos + 1, q_off, 1.0 / math.sqrt(nope + rope))
    t = mark("mla_attention", t)
    rows = S.values_to_rows(o, w[:, nope:])
    t = mark("values_to_rows", t)
    y = torch.mm(config.wo_weight, rows.t()).t()
    t = mark("wo mm", t)
    out = y.view(bs, 1, dim), buf
    mark("return", t)
    return out
for i in range(60):
    args = prepare(inputs)
    torch.cuda.synchronize()
    torch.cuda._sleep(20_000_000)
    t0 = clock()
    ck(args)
    rec.setdefault("TOTAL", []).append((clock() - t0) * 1e6)
    torch.cuda.synchronize()
    if i == 9:
        rec.clear()
for k, v in rec.items():
    print(f"{k:16s} {statistics.median(v):8.1f} us")
# the same, through the submission itself
ts = []
for i in range(40):
    args = prepare(inputs); torch.cuda.synchronize(); torch.cuda._sleep(20_000_000)
    t0 = clock(); S.custom_kernel(args); ts.append((clock() - t0) * 1e6); torch.cuda.synchronize()
print("custom_kernel", statistics.median(ts[10:]))
# the config object: what do its attribute reads cost?
cfg = args[0]
t0 = clock()
for _ in range(1000): cfg.KV_proj_down_weight
print("config attr read", (clock() - t0) * 1e3, "us")
kvc = args[2]
t0 = clock()
for _ in range(1000): kvc.data; kvc.seq_len
print("kv_cache attr reads", (clock() - t0) * 1e3, "us")
print(type(cfg), type(kvc), type(kvc).__mro__)
