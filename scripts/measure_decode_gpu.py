"""Measure a GPU's decode-step kernels as a serving engine runs them: skinny GEMMs, decode attention,
and a whole Llama decode step with and without CUDA graphs.

    python scripts/measure_decode_gpu.py --out measurements/h100-sxm/kernels   # on the GPU machine
    python scripts/measure_decode_gpu.py --out /tmp/d --quick                   # checks it on a CPU

Why: the published vLLM V1 and SGLang decode steps (Llama-3.1-8B FP8 on an H200 at ~48 sequences:
9.0 and 10.4 ms) are 3-5 ms longer than gpuplan's GPU-side model (serve/timing.py). This splits
that gap into what the kernels cost and what the host adds, on one GPU, without an engine:

* ``skinny``: y = x @ W^T for the four linears of Llama-3.1-8B (TP 1) and Llama-3.1-70B at TP 4
  and 8, with 1-512 token rows: bf16 ``torch.mm`` and FP8 W8A8 as vLLM runs it on Hopper
  (per-token dynamic activation scales, per-channel weight scales: ``torch._scaled_mm`` row-wise),
  the activation quantization (amax, scale, cast) timed on its own. Weight bytes over seconds is
  the bandwidth a memory-bound decode GEMM reaches at that row count.
* ``block``: DeepSeek-V3's GEMMs at TP 8 (its attention projections, one routed or shared expert's
  gate+up and down) with 1-512 rows in bf16, FP8 row-wise and FP8 with DeepSeek's block scales
  (1x128 activation, 128x128 weight blocks) through ``torch.nn.functional.scaled_mm`` where this
  build has it: published block-FP8 kernels at decode sizes run far below the HBM roofline (vLLM
  PR #23280 on an H100: N=2112 K=7168 at 64 rows in 30 us, a third of bf16's rate), and the
  DeepSeek-R1 decode steps of vLLM and SGLang are 1.6-2x gpuplan's.
* ``attention``: one query token per sequence over a contiguous KV cache (GQA 32/8 heads, head dim
  128) through ``scaled_dot_product_attention`` per backend, 1-256 sequences x 512-8192 tokens: KV
  bytes over seconds.
* ``moe``: the routed experts' fc1 (gate+up) and fc2 at decode sizes (1-256 tokens, each routed to
  its top-k of Gaussian logits) as one ``torch._grouped_mm`` in bf16 and ``_scaled_grouped_mm``
  FP8 row-wise: Mixtral-8x7B at TP 1 and 2, Qwen3-30B-A3B at TP 1, DeepSeek-V3's 32 local experts
  at EP 8. The experts some token picked, the weight bytes they hold and the kernel's seconds: how
  near the HBM roofline a grouped GEMM reads a few rows per expert (vLLM's fused_moe is a Triton
  kernel of the same shape; the Mixtral maximum-throughput rows are 12-20% too fast).
* ``step``: a Llama-3.1-8B-shaped decoder (random weights, real shapes: RMSNorm, fused QKV,
  rotary, SDPA over a contiguous cache, output, gate+up, SiLU x mul, down, final norm, LM head,
  greedy argmax) decoding one token for B sequences at a context of L tokens, in bf16 and with FP8
  W8A8 linears: the GPU time of the step in one CUDA graph (``graph_s``), the eager step
  (``eager_s``: the host launching ~15 kernels a layer from Python), and the graph step followed by
  the sampled tokens' copy to the host and the next step's inputs copied back (``loop_s``: the
  smallest host round trip an engine that reads its tokens every step pays).

Timing as in ``measure_gpu.py`` (``graph_time``/``timeit``: CUDA events, warm-up, median, inputs
rotated so that small shapes are not timed from L2, random data). Each family is written as soon
as it is done, so a run cut short keeps what it has.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_gpu import DEV, graph_time, n_sets, parse_args, smi, sync, timeit  # noqa: E402

# (hidden, intermediate, heads, kv heads, head dim, layers, vocab) from the models' config.json
LLAMA = {
    "llama-3.1-8b": (4096, 14336, 32, 8, 128, 32, 128256),
    "llama-3.1-70b": (8192, 28672, 64, 8, 128, 80, 128256),
}
ROWS = (1, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 512)
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0


def shrink(dims: tuple[int, ...], quick: bool) -> tuple[int, ...]:
    """Tiny stand-ins for a CPU check: every width / 32, layers 2, vocab 512."""
    if not quick:
        return dims
    h, ffn, heads, kv, d, layers, vocab = dims
    return h // 32, ffn // 32, heads // 4, kv // 4, d // 8, 2, 512


# -- FP8 W8A8 as vLLM's CUTLASS path runs it on Hopper ---------------------------------------------


def quant_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token dynamic FP8: one scale per row (amax / 448), the row cast to e4m3."""
    scale = x.abs().amax(dim=-1, keepdim=True).float().clamp(min=1e-6) / FP8_MAX
    return (x / scale).to(FP8), scale


def fp8_weight(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-output-channel FP8 weight, stored K-major as ``_scaled_mm``'s second operand wants it."""
    scale = w.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-6) / FP8_MAX
    return (w / scale).to(FP8).t(), scale.t().contiguous()


def fp8_linear(x: torch.Tensor, w8: torch.Tensor, ws: torch.Tensor) -> torch.Tensor:
    if DEV != "cuda":  # _scaled_mm is a CUDA kernel: the CPU check runs the same arithmetic
        xq, xs = quant_rows(x)
        return ((xq.float() * xs) @ (w8.float() * ws)).to(torch.bfloat16)
    xq, xs = quant_rows(x)
    return torch._scaled_mm(xq, w8, scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)


# -- skinny GEMMs -----------------------------------------------------------------------------------


def linears(name: str, tp: int, quick: bool) -> dict[str, tuple[int, int]]:
    h, ffn, heads, kv, d, _, _ = shrink(LLAMA[name], quick)
    return {
        "qkv": ((heads + 2 * max(kv // tp, 1) * tp) * d // tp, h),
        "out": (h, heads * d // tp),
        "up_gate": (2 * ffn // tp, h),
        "down": (h, ffn // tp),
    }


def bench_skinny(quick: bool) -> list[dict]:
    rows = []
    for name, tps in (("llama-3.1-8b", (1,)), ("llama-3.1-70b", (4, 8))):
        for tp in tps:
            for layer, (n, k) in linears(name, tp, quick).items():
                for m in ROWS[:3] if quick else ROWS:
                    rows.append({"model": name, "tp": tp, "layer": layer, "m": m, "n": n, "k": k, **skinny(m, n, k)})
    return rows


def skinny(m: int, n: int, k: int) -> dict:
    """Seconds of one (m x k) @ (k x n) in bf16 and as FP8 W8A8, and of the activation's quantization."""
    sets = n_sets(n * k * 2)
    w = [torch.randn(n, k, device=DEV, dtype=torch.bfloat16) / k**0.5 for _ in range(sets)]
    x = [torch.randn(m, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
    row = {"bf16_s": graph_time(lambda i: torch.mm(x[i], w[i].t()), sets)}
    if DEV == "cuda":
        w8 = [fp8_weight(t) for t in w]
        try:
            row["fp8_s"] = graph_time(lambda i: fp8_linear(x[i], *w8[i]), sets)
            row["quant_s"] = graph_time(lambda i: quant_rows(x[i]), sets)
        except RuntimeError as e:  # a shape this build's _scaled_mm refuses
            row["fp8_error"] = str(e).splitlines()[0][:160]
    return row


# DeepSeek-V3 at TP 8, (n, k): q_a_proj, q_b_proj, o_proj, an expert's (or the shared expert's)
# gate+up and down; q_a + kv_a fused (2112) as vLLM runs them
DEEPSEEK_TP8 = {
    "q_a_kv_a": (2112, 7168),
    "q_b": (3072, 1536),
    "o": (7168, 2048),
    "expert_up": (512, 7168),
    "expert_down": (7168, 256),
}


def bench_block(quick: bool) -> list[dict]:
    rows = []
    for layer, (n, k) in DEEPSEEK_TP8.items():
        n, k = (n // 16, max(128, k // 16)) if quick else (n, k)
        for m in ROWS[:3] if quick else ROWS:
            row = {"model": "deepseek-v3", "tp": 8, "layer": layer, "m": m, "n": n, "k": k, **skinny(m, n, k)}
            if DEV == "cuda":
                row.update(block_fp8(m, n, k))
            rows.append(row)
    return rows


def block_fp8(m: int, n: int, k: int, device: str = DEV) -> dict:
    """Seconds of x @ W^T with DeepSeek's block scales (activations 1 x 128, weights 128 x 128).
    On the ``meta`` device only the call is checked (torch's own shape and stride rules)."""
    try:
        from torch.nn.functional import ScalingType, SwizzleType, scaled_mm
    except ImportError as e:  # a build without the scaled_mm API
        return {"block_error": str(e)[:160]}
    sets = 1 if device == "meta" else n_sets(n * k)
    kb = -(-k // 128)  # K blocks of 128
    l4 = -(-kb // 4) * 4  # the weight scales' leading dimension, rounded up to 4
    x = [torch.randn(m, k, device=device).to(FP8) for _ in range(sets)]
    w = [torch.randn(n, k, device=device).to(FP8).t() for _ in range(sets)]
    sa = torch.rand(kb, m, device=device).t()  # (m, k/128), stride (1, m), as the kernel wants it
    recipe = (ScalingType.BlockWise1x128, ScalingType.BlockWise128x128)
    none = SwizzleType.NO_SWIZZLE
    err = ""
    # the weight scales, (round_up(k/128, 4), n/128) with stride (1, l4): PyTorch 2.11's CUDA kernel
    # wants a scale for a part-filled last block of 128 outputs (DeepSeek's 2112 = 16.5 x 128),
    # 2.13's shape check only the whole blocks: each is tried
    for cols in dict.fromkeys((-(-n // 128), n // 128)):
        sb = torch.rand(cols, l4, device=device).t()

        def call(i, sb=sb):
            return scaled_mm(x[i], w[i], sa, recipe[0], sb, recipe[1], swizzle_a=none, swizzle_b=none)

        try:
            if device == "meta":
                return {"block_shape": tuple(call(0).shape)}
            return {"block_s": graph_time(call, sets)}
        except (RuntimeError, ValueError) as e:  # a shape or scale layout this build's kernel refuses
            err = str(e).splitlines()[0][:160]
    return {"block_error": err}


# -- decode attention -------------------------------------------------------------------------------


def bench_attention(quick: bool) -> list[dict]:
    heads, kv, d = (8, 2, 16) if quick else (32, 8, 128)
    rows = []
    for b in (1, 8) if quick else (1, 8, 32, 64, 128, 256):
        for ctx in (64,) if quick else (512, 2048, 8192):
            if b * ctx <= 1 << 20:  # 1M cached tokens (4 GiB a layer at 8 KV heads) is enough
                rows.append(decode_attention(b, ctx, heads, kv, d))
    return rows


def decode_attention(b: int, ctx: int, heads: int, kv: int, d: int) -> dict:
    """Seconds of one query token per sequence over ``ctx`` cached tokens, per SDPA backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION}
    backends["cudnn"] = SDPBackend.CUDNN_ATTENTION
    if DEV != "cuda":
        backends = {"math": SDPBackend.MATH}
    q = torch.randn(b, heads, 1, d, device=DEV, dtype=torch.bfloat16)
    k = torch.randn(b, kv, ctx, d, device=DEV, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    row: dict = {"batch": b, "context": ctx, "heads": heads, "kv_heads": kv, "head_dim": d}
    row["kv_bytes"] = 2 * k.numel() * k.element_size()
    for name, backend in backends.items():
        try:
            with sdpa_kernel(backend):
                row[f"{name}_s"] = graph_time(lambda _: F.scaled_dot_product_attention(q, k, v, enable_gqa=True))
        except RuntimeError as e:  # a backend that does not take this shape
            row[f"{name}_s"] = None
            row[f"{name}_error"] = str(e).splitlines()[0][:160]
    return row


# -- routed experts at decode sizes -----------------------------------------------------------------

# (hidden, expert intermediate, experts on this GPU, experts routed over, top-k, tp) from config.json
MOE_DECODE = {
    "mixtral-8x7b-tp1": (4096, 14336, 8, 8, 2, 1),
    "mixtral-8x7b-tp2": (4096, 14336, 8, 8, 2, 2),
    "qwen3-30b-a3b-tp1": (2048, 768, 128, 128, 8, 1),
    "deepseek-v3-ep8": (7168, 2048, 32, 256, 8, 1),
}


def bench_moe(quick: bool) -> list[dict]:
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name, (h, ffn, local, routed, topk, tp) in MOE_DECODE.items():
        if quick:
            h, ffn, local, routed = h // 64, max(16, ffn // 64), min(local, 8), min(routed, 8)
        ffn //= tp
        for tokens in (1, 8) if quick else (1, 4, 16, 32, 64, 128, 256):
            ids = torch.randn(tokens, routed, generator=gen).topk(min(topk, routed), dim=1).indices.flatten()
            counts = torch.bincount(ids, minlength=routed)[:local].tolist()
            for fc, (n, k) in {"fc1": (2 * ffn, h), "fc2": (h, ffn)}.items():
                row = {"model": name, "fc": fc, "tokens": tokens, "n": n, "k": k, "counts": counts}
                row["touched"] = sum(c > 0 for c in counts)
                row["weight_bytes"] = 2 * row["touched"] * n * k
                row.update(grouped(counts, n, k))
                rows.append(row)
    return rows


def grouped(counts: list[int], n: int, k: int) -> dict:
    """Seconds of one grouped X @ W^T over ``counts`` rows per local expert, bf16 and FP8 row-wise."""
    e, m = len(counts), max(1, sum(counts))
    counts = counts if sum(counts) else [1] + counts[1:]
    offs = torch.tensor(counts, device=DEV).cumsum(0).to(torch.int32)
    sets = n_sets(2 * e * n * k)
    w = [torch.randn(e, n, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
    x = [torch.randn(m, k, device=DEV, dtype=torch.bfloat16) for _ in range(sets)]
    res: dict = {}
    if DEV != "cuda":  # the grouped kernels are CUDA's: the CPU check runs one expert's GEMM
        res["bf16_s"] = graph_time(lambda i: torch.mm(x[i][: counts[0]], w[i][0].t()), sets)
        return res
    try:
        res["bf16_s"] = graph_time(lambda i: torch._grouped_mm(x[i], w[i].transpose(-2, -1), offs=offs), sets)
    except RuntimeError as err:
        res["bf16_error"] = str(err).splitlines()[0][:160]
    w8 = [t.to(FP8) for t in w]
    x8 = [t.to(FP8) for t in x]
    sx, sw = torch.ones(m, device=DEV), torch.ones(e, n, device=DEV)
    try:
        res["fp8_s"] = graph_time(
            lambda i: torch._scaled_grouped_mm(
                x8[i], w8[i].transpose(-2, -1), sx, sw, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True
            ),
            sets,
        )
    except (RuntimeError, TypeError, AttributeError) as err:
        res["fp8_error"] = str(err).splitlines()[0][:160]
    return res


# -- a whole decode step ----------------------------------------------------------------------------


class Decoder:
    """A Llama decoder with random weights decoding one token for ``batch`` sequences whose caches
    hold ``context`` tokens (the cache is contiguous: the kernels a paged cache adds are the
    engine's, not the model's)."""

    def __init__(self, dims: tuple[int, ...], batch: int, context: int, fp8: bool):
        h, ffn, heads, kv, d, layers, vocab = dims
        self.heads, self.kv, self.d, self.fp8 = heads, kv, d, fp8

        def lin(n, k):
            w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) / k**0.5
            return fp8_weight(w) if fp8 and DEV == "cuda" else (w,)

        self.layers = [
            {
                "qkv": lin((heads + 2 * kv) * d, h),
                "out": lin(h, heads * d),
                "up_gate": lin(2 * ffn, h),
                "down": lin(h, ffn),
                "k": torch.randn(batch, kv, context + 1, d, device=DEV, dtype=torch.bfloat16),
                "v": torch.randn(batch, kv, context + 1, d, device=DEV, dtype=torch.bfloat16),
            }
            for _ in range(layers)
        ]
        self.embed = torch.randn(vocab, h, device=DEV, dtype=torch.bfloat16)
        self.head = torch.randn(vocab, h, device=DEV, dtype=torch.bfloat16) / h**0.5
        self.norm = torch.ones(h, device=DEV, dtype=torch.bfloat16)
        self.ids = torch.randint(0, vocab, (batch,), device=DEV)
        self.pos = context
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=DEV).float() / d))
        ang = self.pos * inv
        self.cos, self.sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)

    def linear(self, x: torch.Tensor, w: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return fp8_linear(x, *w) if len(w) == 2 else torch.mm(x, w[0].t())

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.cat((a * self.cos - b * self.sin, a * self.sin + b * self.cos), dim=-1)

    def step(self) -> torch.Tensor:
        x = self.embed[self.ids]
        for p in self.layers:
            x = self.layer(x, p)
        logits = torch.mm(F.rms_norm(x, x.shape[-1:], self.norm), self.head.t())
        return logits.argmax(dim=-1)

    def layer(self, x: torch.Tensor, p: dict) -> torch.Tensor:
        """One decoder layer (torch.compile compiles it once and reuses it for every layer)."""
        b = x.shape[0]
        y = F.rms_norm(x, x.shape[-1:], self.norm)
        qkv = self.linear(y, p["qkv"])
        q, k, v = qkv.split((self.heads * self.d, self.kv * self.d, self.kv * self.d), dim=-1)
        q = self.rope(q.view(b, self.heads, 1, self.d))
        p["k"][:, :, self.pos : self.pos + 1] = self.rope(k.view(b, self.kv, 1, self.d))
        p["v"][:, :, self.pos : self.pos + 1] = v.view(b, self.kv, 1, self.d)
        o = F.scaled_dot_product_attention(q, p["k"], p["v"], enable_gqa=True)
        x = x + self.linear(o.reshape(b, -1), p["out"])
        y = F.rms_norm(x, x.shape[-1:], self.norm)
        g, u = self.linear(y, p["up_gate"]).chunk(2, dim=-1)
        x = x + self.linear(F.silu(g) * u, p["down"])
        return x


def bench_step(quick: bool) -> list[dict]:
    dims = shrink(LLAMA["llama-3.1-8b"], quick)
    rows = []
    for fp8 in (False, True) if DEV == "cuda" else (False,):
        for b in (1, 4) if quick else (1, 8, 32, 48, 64, 128):
            for ctx in (32,) if quick else (1024, 2048):
                row = {"model": "llama-3.1-8b", "fp8": fp8, "batch": b, "context": ctx}
                try:
                    row.update(step_times(Decoder(dims, b, ctx, fp8), b))
                except (RuntimeError, torch.OutOfMemoryError) as e:  # keep the other rows
                    row["error"] = str(e).splitlines()[0][:160]
                rows.append(row)
                print(row, flush=True)
                if DEV == "cuda":
                    torch.cuda.empty_cache()
    return rows


def step_times(model: Decoder, b: int) -> dict:
    row = {}
    row["eager_s"] = timeit(lambda _: model.step(), reps=10)
    row["graph_s"] = graph_time(lambda _: model.step(), calls=1, reps=10)
    if DEV == "cuda":
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model.step()
        host = torch.empty(b, dtype=torch.long, pin_memory=True)

        def loop(_):  # replay, read the tokens, send them back as the next inputs
            g.replay()
            host.copy_(out)  # synchronous: waits for the step
            model.ids.copy_(host, non_blocking=True)

        row["loop_s"] = loop_time(loop)
    return row  # the model, its caches and graphs go with this frame


def loop_time(fn, steps: int = 50) -> float:
    """Wall seconds per step of ``steps`` back-to-back steps that each wait for the GPU."""
    for i in range(3):
        fn(i)
    sync()
    t0 = time.perf_counter()
    for i in range(steps):
        fn(i)
    sync()
    return (time.perf_counter() - t0) / steps


def main() -> None:
    out, quick = parse_args(__doc__)
    torch.manual_seed(0)

    def save(name, data):
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))
        print(f"wrote {name}.json", flush=True)

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "device": DEV, "smi_idle": smi()}
    if DEV == "cuda":
        p = torch.cuda.get_device_properties(0)
        env.update(name=p.name, sm_count=p.multi_processor_count, memory_bytes=p.total_memory)
    doc = {"env": env}
    families = (("skinny", bench_skinny), ("block", bench_block), ("attention", bench_attention), ("moe", bench_moe))
    families += (("step", bench_step),)
    for family, bench in families:
        t0 = time.perf_counter()
        doc[family] = bench(quick)
        doc[f"{family}_wall_s"] = time.perf_counter() - t0
        doc["smi_after"] = smi()
        save("decode", doc)


if __name__ == "__main__":
    main()
