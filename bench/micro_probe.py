import os, time, statistics, torch, triton, triton.language as tl
print({k: v for k, v in os.environ.items() if k.startswith(("CUDA", "PYTORCH", "TORCH", "TRITON", "OMP"))})
print("cpus", os.cpu_count(), "affinity", len(os.sched_getaffinity(0)))
try:
    print(open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0])
except Exception as e: print(e)
def t(label, fn, n=2000, busy=False):
    fn(); torch.cuda.synchronize()
    ts = []
    for i in range(n // 100):
        if busy: torch.cuda._sleep(5_000_000)
        t0 = time.perf_counter()
        for _ in range(100): fn()
        ts.append((time.perf_counter() - t0) * 1e4)
        torch.cuda.synchronize()
    print(f"{label:40s} {'busy' if busy else 'idle'} {statistics.median(ts):8.2f} us")
def py(): pass
a = torch.empty(1024, device="cuda"); w = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
@triton.jit
def k(p):
    pass
k[(1,)](a)
for busy in (False, True):
    t("python call", py, busy=busy)
    t("torch.empty 4KB", lambda: torch.empty(1024, device="cuda"), busy=busy)
    t("torch.empty 1MB bf16", lambda: torch.empty(512, 1024, device="cuda", dtype=torch.bfloat16), busy=busy)
    t("mm 64x64", lambda: w @ w, busy=busy)
    t("triton jit launch", lambda: k[(1,)](a), busy=busy)
    t("a.add_(1)", lambda: a.add_(1), busy=busy)
    t("torch.cuda._sleep(0)", lambda: torch.cuda._sleep(0), busy=busy)
    t("current_stream", lambda: torch.cuda.current_stream(), busy=busy)
