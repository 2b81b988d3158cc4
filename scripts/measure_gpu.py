"""Measure one GPU's kernel rates for gpuplan's performance model, as PyTorch runs them.

    python scripts/measure_gpu.py --out measurements/h100-sxm   # on the GPU machine

Writes one JSON file per family under ``--out`` (the data committed beside this script):
* ``env.json``: torch/CUDA versions, the device, nvidia-smi's clocks and power before and after;
* ``gemm.json``: the GEMMs of real transformer layers (QKV, output, MLP up/gate, down of
  Llama-3.2-1B, Llama-3.1-8B and -70B at TP 1-8, forward, input-gradient and weight-gradient
  shapes, 2K-16K tokens) in bf16 through ``torch.mm`` and in FP8 (e4m3, per-tensor scales) through
  ``torch._scaled_mm``, the call TransformerEngine's and torchao's FP8 linears reduce to;
* ``attention.json``: ``scaled_dot_product_attention`` forward and forward+backward per backend
  (flash = FlashAttention-2, cudnn, efficient), causal and not, head dim 64/128/256, 512-32K tokens;
* ``memory.json``: streaming kernels (copy, add, RMSNorm, SiLU x mul, fp32 cross-entropy over a
  128K vocabulary) and fused/foreach AdamW steps, in bytes moved and seconds;
* ``launch.json``: seconds per tiny eager kernel launch (the floor of a small model's step);
* ``sustained.json``: one 8192^3 bf16 GEMM back to back for ``--sustain`` seconds, TFLOP/s per
  second of it with the SM clock and power read by nvidia-smi meanwhile (what the power limit
  does to a dense GEMM load).

Timing follows the usual rules: CUDA events around the region, warm-up first, the median of
repeats, GEMMs captured in a CUDA graph (kernel time without the eager CPU launch gap, which
``launch.json`` measures on its own), inputs rotated over several buffers so small shapes are not timed from L2, random data
(never zeros). Each family is written as soon as it is done, so a run cut short keeps what it has.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import threading
import time
from pathlib import Path

import torch
import torch.nn.functional as F

DEV = "cuda" if torch.cuda.is_available() else "cpu"
# (hidden, intermediate, heads, kv heads, head dim) of the layers whose GEMMs are measured
MODELS = {
    "llama-3.2-1b": (2048, 8192, 32, 8, 64),
    "llama-3.1-8b": (4096, 14336, 32, 8, 128),
    "llama-3.1-70b": (8192, 28672, 64, 8, 128),
}


def parse_args(doc: str) -> tuple[Path, bool]:
    """(output folder, made; --quick) of a measurement script whose docstring is ``doc``."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="tiny shapes: checks the script on a CPU")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    return out, args.quick


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def graph_time(fn, sets: int = 1, reps: int = 10, calls: int = 20) -> float:
    """Median seconds of one ``fn(i)`` as a kernel runs in a training step, without the CPU's
    launch gap between kernels: ``calls`` calls (rotating over the input sets) captured in one CUDA
    graph, the graph replayed ``reps`` times. On a CPU, ``timeit``."""
    if DEV != "cuda":
        return timeit(fn, sets, reps)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside the graph: cuBLAS picks and allocates its workspace
        for i in range(3):
            fn(i % sets)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i % sets)
    return timeit(lambda _: g.replay(), reps=reps) / calls


def timeit(fn, sets: int = 1, reps: int = 10, warmup: int = 3) -> float:
    """Median seconds of ``fn(i)`` over ``reps`` calls, ``i`` rotating over ``sets`` input sets."""
    for i in range(warmup):
        fn(i % sets)
    sync()
    times = []
    for i in range(reps):
        if DEV == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn(i % sets)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn(i % sets)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def smi(query: str = "clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active"):
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return dict(zip(query.split(","), [v.strip() for v in out.stdout.strip().split(",")]))
    except (OSError, subprocess.SubprocessError):
        return {}


def n_sets(nbytes: float) -> int:
    """Input sets to rotate over so that consecutive calls never hit a warm 50 MB L2."""
    return max(1, min(8, int(200e6 // max(nbytes, 1)) + 1))


# -- GEMMs ------------------------------------------------------------------------------------------


def gemm_shapes(quick: bool) -> list[dict]:
    """(m, n, k) of y = x @ W^T for every linear of the layers in MODELS, and the two backward
    GEMMs of each: dgrad (m, k, n) and wgrad (n, k, m: the reduction runs over the tokens)."""
    out, seen = [], set()
    for name, dims in MODELS.items():
        h, ffn, heads, kv, d = (x // 32 if quick and x > 8 else x for x in dims)
        for tp in (1, 2, 4, 8):
            if heads % tp:
                continue
            linears = {
                "qkv": ((heads + 2 * max(kv // tp, 1) * tp) * d // tp, h),
                "out": (h, heads * d // tp),
                "up_gate": (2 * ffn // tp, h),
                "down": (h, ffn // tp),
            }
            for tokens in (64,) if quick else (2048, 8192, 16384):
                for layer, (n, k) in linears.items():
                    for op, (M, N, K) in {
                        "fwd": (tokens, n, k),
                        "dgrad": (tokens, k, n),
                        "wgrad": (n, k, tokens),
                    }.items():
                        if (M, N, K) in seen:
                            continue
                        seen.add((M, N, K))
                        out.append({"model": name, "tp": tp, "layer": layer, "op": op, "m": M, "n": N, "k": K})
    for s in (1024, 2048, 4096, 8192, 16384) if not quick else (128,):
        out.append({"model": "square", "tp": 1, "layer": "square", "op": "fwd", "m": s, "n": s, "k": s})
    return out


def bench_gemm(shape: dict, dtype: str) -> float | None:
    m, n, k = shape["m"], shape["n"], shape["k"]
    nbytes = (m * k + n * k) * (1 if dtype == "fp8" else 2)
    sets = n_sets(nbytes)
    # enough calls in one graph that the graph's own launch is noise; one for the large GEMMs
    calls = max(1, min(20, int(2e11 // (2 * m * n * k))))
    a = [torch.randn(m, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
    w = [torch.randn(n, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
    if dtype == "bf16":
        return graph_time(lambda i: torch.mm(a[i], w[i].t()), sets, calls=calls)
    if DEV != "cuda" or k % 16 or n % 16:
        return None
    f8 = torch.float8_e4m3fn
    a8 = [x.to(f8) for x in a]
    w8 = [x.to(f8) for x in w]
    one = torch.ones((), device=DEV, dtype=torch.float32)
    return graph_time(
        lambda i: torch._scaled_mm(a8[i], w8[i].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        sets,
        calls=calls,
    )


# -- attention --------------------------------------------------------------------------------------


def bench_attention(quick: bool) -> list[dict]:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
    }
    if DEV != "cuda":
        backends = {"math": SDPBackend.MATH}
    rows = []
    tokens = 256 if quick else 32768  # batch x sequence per measurement: fills the chip
    for d in (64, 128, 256) if not quick else (64,):
        heads = 2048 // d if not quick else 2  # 2048 = a 16K-hidden model at TP 8, or 2K at TP 1
        for seq in (512, 1024, 2048, 4096, 8192, 16384, 32768) if not quick else (128,):
            b = max(1, tokens // seq)
            for causal in (True, False):
                for name, backend in backends.items():
                    q, k, v = (
                        torch.randn(b, heads, seq, d, device=DEV, dtype=torch.bfloat16, requires_grad=True)
                        for _ in range(3)
                    )
                    grad = torch.randn(b, heads, seq, d, device=DEV, dtype=torch.bfloat16)
                    row = {"backend": name, "d": d, "heads": heads, "batch": b, "seq": seq, "causal": causal}
                    try:
                        with sdpa_kernel(backend):

                            def fwd(_, q=q, k=k, v=v, causal=causal):
                                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

                            def fwd_bwd(_, q=q, k=k, v=v, causal=causal, grad=grad):
                                F.scaled_dot_product_attention(q, k, v, is_causal=causal).backward(grad)

                            row["fwd_s"] = timeit(fwd, reps=10)
                            row["fwd_bwd_s"] = timeit(fwd_bwd, reps=10)
                    except RuntimeError as exc:  # a backend that does not take this shape
                        row["error"] = str(exc).splitlines()[0][:200]
                    # forward FLOPs: QK^T and PV, 2 x 2 b h s^2 d, halved by the causal mask
                    row["flops_fwd"] = 4.0 * b * heads * seq * seq * d * (0.5 if causal else 1.0)
                    rows.append(row)
    return rows


# -- memory-bound kernels ---------------------------------------------------------------------------


def bench_memory(quick: bool) -> list[dict]:
    rows = []
    n = 1 << (16 if quick else 28)  # 2^28 bf16 elements = 512 MiB
    x = torch.randn(n, device=DEV, dtype=torch.bfloat16)
    y = torch.randn(n, device=DEV, dtype=torch.bfloat16)
    rows.append({"op": "copy", "bytes": 4 * n, "s": timeit(lambda _: x.clone())})
    rows.append({"op": "add", "bytes": 6 * n, "s": timeit(lambda _: x + y)})
    rows.append({"op": "silu_mul", "bytes": 6 * n, "s": timeit(lambda _: F.silu(x) * y)})
    tokens, h = (64, 64) if quick else (16384, 8192)
    a = torch.randn(tokens, h, device=DEV, dtype=torch.bfloat16)
    wn = torch.ones(h, device=DEV, dtype=torch.bfloat16)

    def rmsnorm(_):  # the Llama RMSNorm of transformers: fp32 inside, then the weight
        f = a.float()
        return wn * (f * torch.rsqrt(f.pow(2).mean(-1, keepdim=True) + 1e-5)).to(torch.bfloat16)

    rows.append({"op": "rmsnorm_eager", "bytes": 4 * tokens * h, "s": timeit(rmsnorm)})
    rows.append({"op": "rms_norm_fused", "bytes": 4 * tokens * h, "s": timeit(lambda _: F.rms_norm(a, (h,), wn))})
    rows.append({"op": "layer_norm", "bytes": 4 * tokens * h, "s": timeit(lambda _: F.layer_norm(a, (h,), wn))})
    tokens, vocab = (64, 512) if quick else (8192, 128256)
    logits = torch.randn(tokens, vocab, device=DEV, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,), device=DEV)

    def xent(_):  # as transformers' ForCausalLMLoss: upcast the logits, then cross-entropy
        F.cross_entropy(logits.float(), target).backward()

    rows.append({"op": "cross_entropy_fp32_fwd_bwd", "bytes": tokens * vocab * (2 + 4 + 4 + 4 + 2), "s": timeit(xent)})
    params = 1 << (14 if quick else 27)  # 134M fp32 parameters in 8 tensors
    for impl in ("fused", "foreach"):
        if impl == "fused" and DEV != "cuda":
            continue
        ps = [torch.randn(params // 8, device=DEV, requires_grad=True) for _ in range(8)]
        for p in ps:
            p.grad = torch.randn_like(p)
        opt = torch.optim.AdamW(ps, lr=1e-4, **{impl: True})
        # AdamW reads param, grad, exp_avg, exp_avg_sq and writes param, exp_avg, exp_avg_sq: 7 x 4 B
        rows.append(
            {"op": f"adamw_{impl}", "bytes": 28 * params, "params": params, "s": timeit(lambda _, opt=opt: opt.step())}
        )
    return rows


def bench_waves(quick: bool) -> list[dict]:
    """bf16 GEMMs whose M steps across many tile-wave boundaries (132 SMs): a staircase in time
    if a partly filled last wave costs a full wave, a straight line if the kernels balance the
    tiles over the SMs (persistent / stream-K scheduling)."""
    rows = []
    for n in (4096, 8192) if not quick else (64,):
        step = 256 if n == 4096 else 512
        for m in range(1024, 16385, step) if not quick else (64, 128):
            s = bench_gemm({"m": m, "n": n, "k": n}, "bf16")
            rows.append({"m": m, "n": n, "k": n, "s": s, "tflops": 2.0 * m * n * n / s / 1e12})
    return rows


def bench_eltwise(quick: bool) -> list[dict]:
    """The memory-bound kernels an eager autocast step is made of, each with the bytes it must move:
    mixed-dtype products and sums with broadcasts, dtype casts, a transposed copy."""
    tokens, h = (64, 64) if quick else (16384, 2048)
    n = tokens * h
    xb = torch.randn(tokens, h, device=DEV, dtype=torch.bfloat16)
    xf = torch.randn(tokens, h, device=DEV)
    wf = torch.randn(h, device=DEV)
    rf = torch.randn(tokens, 1, device=DEV)
    t4 = torch.randn(tokens // 128, 128, 16, h // 16, device=DEV, dtype=torch.bfloat16)
    cases = {
        "cast_bf16_to_fp32": (lambda _: xb.float(), 6 * n),
        "cast_fp32_to_bf16": (lambda _: xf.to(torch.bfloat16), 6 * n),
        "mul_fp32_by_row": (lambda _: xf * rf, 8 * n),
        "mul_fp32_weight_by_bf16": (lambda _: wf * xb, 6 * n),
        "add_fp32_bf16": (lambda _: xf + xb, 10 * n),
        # these two read one tensor twice: their bytes over-count DRAM traffic (kept as measured)
        "add_fp32_fp32": (lambda _: xf + xf, 12 * n),
        "mul_bf16_bf16": (lambda _: xb * xb, 6 * n),
        "pow_fp32": (lambda _: xf.pow(2), 8 * n),
        "mean_fp32": (lambda _: xf.mean(-1, keepdim=True), 4 * n),
        "transpose_copy_bf16": (lambda _: t4.transpose(1, 2).contiguous(), 4 * n),
    }
    return [{"op": k, "bytes": b, "s": timeit(f, reps=20)} for k, (f, b) in cases.items()]


def bench_launch() -> dict:
    x = torch.randn(16, device=DEV)
    for _ in range(100):
        x.add_(1.0)
    sync()
    t0 = time.perf_counter()
    for _ in range(2000):
        x.add_(1.0)
    sync()
    return {"op": "tiny_add_eager", "per_kernel_s": (time.perf_counter() - t0) / 2000}


def bench_sustained(seconds: float) -> dict:
    n = 8192
    a = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEV, dtype=torch.bfloat16)
    samples, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            samples.append({"t": time.perf_counter(), **smi()})
            time.sleep(0.5)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    rates, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        for _ in range(20):
            torch.mm(a, b)
        sync()
        dt = time.perf_counter() - t0
        rates.append({"t": t0, "tflops": 20 * 2 * n**3 / dt / 1e12})
    stop.set()
    th.join()
    return {"n": n, "rates": rates, "smi": samples}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="tiny shapes: checks the script on a CPU")
    ap.add_argument("--sustain", type=float, default=20.0, help="seconds of back-to-back GEMMs")
    ap.add_argument("--only", default="env,sustained,gemm,attention,memory,launch")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = set(args.only.split(","))
    torch.manual_seed(0)

    def save(name, data):
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))
        print(f"wrote {name}.json", flush=True)

    if "env" in only:
        env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": DEV, "smi_idle": smi()}
        if DEV == "cuda":
            p = torch.cuda.get_device_properties(0)
            env.update(name=p.name, sm_count=p.multi_processor_count, memory_bytes=p.total_memory)
            env["cudnn"] = torch.backends.cudnn.version()
        save("env", env)
    if "sustained" in only and DEV == "cuda":
        save("sustained", bench_sustained(args.sustain))
    if "gemm" in only:
        rows = []
        for shape in gemm_shapes(args.quick):
            for dtype in ("bf16", "fp8"):
                s = bench_gemm(shape, dtype)
                if s is not None:
                    flops = 2.0 * shape["m"] * shape["n"] * shape["k"]
                    rows.append({**shape, "dtype": dtype, "s": s, "tflops": flops / s / 1e12})
        save("gemm", {"smi_after": smi(), "rows": rows})
    if "attention" in only:
        save("attention", bench_attention(args.quick))
    if "memory" in only:
        save("memory", bench_memory(args.quick))
    if "waves" in only:
        save("waves", bench_waves(args.quick))
    if "eltwise" in only:
        save("eltwise", bench_eltwise(args.quick))
    if "launch" in only:
        save("launch", bench_launch())


if __name__ == "__main__":
    main()
