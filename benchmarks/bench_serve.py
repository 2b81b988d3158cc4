"""Speed targets of the inference planner: one `serve` estimate and a `serve-sim` of 10,000
requests, as ratios to the reference workload timed in the same process (reference.py; formerly
10 ms and 5 s), and the `serve --offload` placement search of a 70B model on one 24 GB GPU
(formerly 1 s, a wall-clock bound in a test). The estimate is timed cold (new deployment: nothing cached for its
shapes, the way one CLI call runs) after the catalog is read; the simulation in a fresh process.
It also reports how much faster the simulator's bulk decode stretches make it than the plain
per-iteration loop (``simulate(..., bulk=False)``, same results) on 1,000 requests at a low and
a high rate, both timed in the same process, and times a burst (``--rate inf``, vllm bench serve's
default) of 1,000 prompts of 512/128 tokens on an 8B model under the vLLM profile (target: formerly
1 s; it takes well under that).

Run: .venv/bin/python benchmarks/bench_serve.py   (exits 1 if a target is missed)
"""

from __future__ import annotations

import sys

from reference import children, ratio, verdict

ESTIMATE_TARGET_RATIO = ratio(10e-3)
SIM_TARGET_RATIO = ratio(5.0)
BURST_TARGET_RATIO = ratio(1.0)
OFFLOAD_TARGET_RATIO = ratio(1.0)  # formerly a wall-clock bound in tests/serve/test_serve_offload.py

CHILD_OFFLOAD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from reference import reference_s
from gpuplan import catalog
from gpuplan.specs.host import HostSpec
from gpuplan.serve.formats import KV_FORMATS, WEIGHT_FORMATS
from gpuplan.serve.offload import OffloadRequest, plan_offload
g = catalog.gpu("rtx-4090")
h = HostSpec(name="h", cpu_memory_bytes=256e9, cpu_memory_bytes_per_s=65e9, pcie_bytes_per_s=25e9, disk_bytes=2e12,
             disk_read_bytes_per_s=7e9, disk_write_bytes_per_s=3.5e9, cpu_flops=1e12)
req = OffloadRequest(model=catalog.model("llama-3.1-70b"), gpu=g, host=h, weights=WEIGHT_FORMATS["bf16"],
                     kv=KV_FORMATS["bf16"])
t0 = time.perf_counter()
plan_offload(req)
print(json.dumps({"s": time.perf_counter() - t0, "ref": reference_s()}))
"""

CHILD_ESTIMATE = """
import json, sys, time
sys.path.insert(0, sys.argv[3])
from reference import reference_s
from gpuplan import catalog
from gpuplan.serve.plan import ServeRequest, estimate_serving
m, g = catalog.model(sys.argv[1]), catalog.gpu("h100-sxm")
req = ServeRequest(m, g, tp=int(sys.argv[2]), weights="fp8", kv="fp8", input_len=2048, output_len=256,
                   max_throughput=True, price_per_gpu_hour=3.0)
t0 = time.perf_counter()
estimate_serving(req)
s = time.perf_counter() - t0
print(json.dumps({"s": s, "ref": reference_s()}))
"""

CHILD_SIM = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from reference import reference_s
from gpuplan import catalog
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import ServeConfig
from gpuplan.serve.sim import Lengths, Workload, simulate
from gpuplan.serve.timing import Deployment
g = catalog.gpu("h100-sxm")
d = Deployment(catalog.model("llama-3.1-8b"), g, weight_format("bf16", g), kv_format("bf16"))
best = {}
for rate in (5.0, 40.0):  # below and above saturation
    w = Workload.poisson(rate, 10_000, Lengths.parse("512-2048", "i"), Lengths.parse("exp:256", "o"), 0)
    t0 = time.perf_counter()
    r = simulate(d, ServeConfig(max_num_seqs=256), w, rate)
    best[rate] = {"s": time.perf_counter() - t0, "iterations": r.iterations}
ref = reference_s()
plain = {}
for rate in (5.0, 40.0):  # the same runs with and without bulk decode stretches
    w = Workload.poisson(rate, 1_000, Lengths.parse("512-2048", "i"), Lengths.parse("exp:256", "o"), 0)
    t = {}
    for bulk in (True, False):
        t0 = time.perf_counter()
        simulate(d, ServeConfig(max_num_seqs=256), w, rate, bulk=bulk)
        t[bulk] = time.perf_counter() - t0
    plain[rate] = {"bulk_s": t[True], "plain_s": t[False]}
import math
from gpuplan.serve.engines import engine_config
w = Workload.burst(1_000, Lengths.parse("512", "i"), Lengths.parse("128", "o"))
t0 = time.perf_counter()
r = simulate(d, engine_config("vllm", g, 1, None), w, math.inf)
burst = {"s": time.perf_counter() - t0, "iterations": r.iterations, "ref": ref}
print(json.dumps({"runs": {k: {**v, "ref": ref} for k, v in best.items()}, "plain": plain, "burst": burst}))
"""


def main() -> int:
    ok = True
    for model, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4), ("mixtral-8x7b", 2)):
        runs = children(CHILD_ESTIMATE, model, str(tp))
        best = min(runs, key=lambda r: r["s"] / r["ref"])
        _, passed, text = verdict(best["s"], best["ref"], ESTIMATE_TARGET_RATIO)
        ok &= passed
        print(f"serve estimate {model} tp={tp} (max-throughput, curve included): {best['s'] * 1e3:.2f} ms = {text}")
    runs = children(CHILD_OFFLOAD)
    best = min(runs, key=lambda r: r["s"] / r["ref"])
    _, passed, text = verdict(best["s"], best["ref"], OFFLOAD_TARGET_RATIO)
    ok &= passed
    print(f"serve --offload placement search, llama-3.1-70b on one RTX 4090: {best['s'] * 1e3:.1f} ms = {text}")
    out = children(CHILD_SIM, runs=1)[0]
    sims = out["runs"]
    for rate, r in sims.items():
        _, passed, text = verdict(r["s"], r["ref"], SIM_TARGET_RATIO)
        ok &= passed
        print(
            f"serve-sim 10,000 requests at {float(rate):g} req/s: {r['s']:.2f} s, {r['iterations']:,} iterations "
            f"= {text}"
        )
    b = out["burst"]
    _, passed, text = verdict(b["s"], b["ref"], BURST_TARGET_RATIO)
    ok &= passed
    print(
        f"serve-sim burst of 1,000 prompts (512/128, llama-3.1-8b, vllm): {b['s']:.3f} s, {b['iterations']:,} iterations = {text}"
    )
    for rate, p in out["plain"].items():
        print(
            f"serve-sim 1,000 requests at {float(rate):g} req/s: bulk decode stretches {p['bulk_s']:.2f} s, "
            f"plain per-iteration loop {p['plain_s']:.2f} s: {p['bulk_s'] / p['plain_s']:.3f} x the plain loop's time"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
