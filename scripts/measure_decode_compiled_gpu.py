"""Measure a Llama-3.1-8B decode step as vLLM V1 runs its GPU side, and count its kernels by kind.

    python scripts/measure_decode_compiled_gpu.py --out measurements/h100-sxm/kernels   # on the GPU
    python scripts/measure_decode_compiled_gpu.py --out /tmp/d --quick                   # CPU check

Why: ``measure_decode_gpu.py``'s ``step`` runs the decoder as eager PyTorch writes it (about 25
kernels a layer: rotary alone is a dozen), so its CUDA-graph step is not what an engine's GPU does.
vLLM V1 compiles the model with torch.compile (Inductor fuses the norms, rotary, residual adds,
SiLU x mul and the FP8 activation quantisation into a few Triton kernels) and replays a CUDA graph
per batch size. This runs the same decoder (``measure_decode_gpu.Decoder``, random weights, real
shapes, contiguous cache) that way:

* ``compiled``: one decoder layer through ``torch.compile`` (compiled once per batch size, reused
  by all 32 layers), the whole step (embedding, 32 layers, final norm, LM head, argmax) in one
  CUDA graph, bf16 and FP8 W8A8 (row-wise ``_scaled_mm``), 1-128 sequences at 1K context:
  ``graph_s`` compiled beside ``eager_graph_s`` (the same step uncompiled, also in a graph).
* ``kernels``: the profiler's kernels of one step, eager and compiled, at 32 sequences: count and
  summed GPU seconds by kind (GEMM, attention, Triton, other), the step's graph time beside them:
  the graph time less the kernels' sum is what the GPU spends between kernels.
* ``prefill``: one prompt of 512-8192 tokens through the same decoder (causal SDPA over the
  prompt, the LM head on its last token), compiled, in one CUDA graph, bf16 and FP8: the GPU side
  of a request's time to first token.

Each family is written as soon as it is done, so a run cut short keeps what it has.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_decode_gpu import LLAMA, Decoder, shrink  # noqa: E402
from measure_gpu import DEV, graph_time, parse_args, smi  # noqa: E402

KINDS = {  # kernel name fragments by kind, first match wins
    "attention": ("flash", "fmha", "attention", "attn", "cudnn"),
    "gemm": ("gemm", "nvjet", "cutlass", "xmma", "sm90", "scaled_mm", "splitk", "gemv", "cublas"),
    "triton": ("triton",),
}


def kind(name: str) -> str:
    low = name.lower()
    return next((k for k, frags in KINDS.items() if any(f in low for f in frags)), "other")


def release() -> None:
    """Free the last model: Dynamo's compiled code holds its tensors (16 GB of bf16 weights) until reset."""
    torch._dynamo.reset()
    gc.collect()
    if DEV == "cuda":
        torch.cuda.empty_cache()


def record(rows: list[dict], row: dict, measure: Callable[[], dict]) -> None:
    """Run one measurement into ``row`` (a compile or shape failure is data too: the other rows go
    on), keep it, print it and free its model before the next."""
    try:
        row.update(measure())
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    rows.append(row)
    print({k: v for k, v in row.items() if k != "kinds"}, flush=True)
    release()


def compiled(model: Decoder) -> Decoder:
    """The same decoder with its layer compiled (Inductor's default mode: fusion, no autotuning)."""
    model.layer = torch.compile(model.layer, dynamic=False, fullgraph=False)
    return model


def bench_compiled(quick: bool) -> list[dict]:
    dims = shrink(LLAMA["llama-3.1-8b"], quick)
    rows = []
    for fp8 in (False, True) if DEV == "cuda" else (False,):
        for b in (1, 4) if quick else (1, 8, 32, 64, 128):
            ctx = 32 if quick else 1024
            row = {"model": "llama-3.1-8b", "fp8": fp8, "batch": b, "context": ctx}
            record(rows, row, lambda: compiled_step(Decoder(dims, b, ctx, fp8)))  # noqa: B023 (called at once)
    return rows


def compiled_step(model: Decoder) -> dict:
    """The step in a CUDA graph as written, then with its layer compiled (the model goes with this frame)."""
    row = {"eager_graph_s": graph_time(lambda _: model.step(), calls=1, reps=10)}
    t0 = time.perf_counter()
    fast = compiled(model)
    fast.step()  # compiles
    row["compile_s"] = time.perf_counter() - t0
    row["graph_s"] = graph_time(lambda _: fast.step(), calls=1, reps=10)
    return row


def kernel_profile(model: Decoder) -> dict:
    """Count and summed seconds of the kernels of one step, by kind (median step of three)."""
    from torch.profiler import ProfilerActivity, profile

    model.step()
    steps = 3
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEV == "cuda" else [])
    with profile(activities=acts) as prof:
        for _ in range(steps):
            model.step()
        if DEV == "cuda":
            torch.cuda.synchronize()
    by: dict[str, dict] = {}
    for ev in prof.events():
        if DEV == "cuda" and ev.device_type != torch.autograd.DeviceType.CUDA:
            continue
        k = by.setdefault(kind(ev.name), {"count": 0, "s": 0.0, "names": {}})
        k["count"] += 1
        dur = (ev.device_time if DEV == "cuda" else ev.cpu_time) * 1e-6
        k["s"] += dur
        k["names"][ev.name[:90]] = k["names"].get(ev.name[:90], 0) + 1
    for k in by.values():  # per step
        k["count"] /= steps
        k["s"] /= steps
        k["names"] = dict(sorted(k["names"].items(), key=lambda kv: -kv[1])[:12])
    return by


def bench_kernels(quick: bool) -> list[dict]:
    dims = shrink(LLAMA["llama-3.1-8b"], quick)
    b = 4 if quick else 32
    rows = []
    for fp8 in (False, True) if DEV == "cuda" else (False,):
        for comp in (False, True):
            row = {"model": "llama-3.1-8b", "fp8": fp8, "batch": b, "compiled": comp}
            record(rows, row, lambda: profiled_step(Decoder(dims, b, 32 if quick else 1024, fp8), comp))  # noqa: B023
    return rows


def profiled_step(model: Decoder, comp: bool) -> dict:
    model = compiled(model) if comp else model
    return {"kinds": kernel_profile(model), "graph_s": graph_time(lambda _: model.step(), calls=1, reps=10)}


class Prefill:
    """One prompt of ``tokens`` through a Decoder's weights: causal attention over the prompt itself
    (no cache before it), rotary at each position, the LM head on the last token."""

    def __init__(self, model: Decoder, tokens: int):
        self.m, self.tokens = model, tokens
        d = model.d
        inv = 1.0 / (500000.0 ** (torch.arange(0, d, 2, device=DEV).float() / d))
        ang = torch.arange(tokens, device=DEV).float()[:, None] * inv
        self.cos, self.sin = ang.cos().to(torch.bfloat16), ang.sin().to(torch.bfloat16)
        self.ids = torch.randint(0, model.embed.shape[0], (tokens,), device=DEV)

    def rope(self, x: torch.Tensor) -> torch.Tensor:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.cat((a * self.cos - b * self.sin, a * self.sin + b * self.cos), dim=-1)

    def layer(self, x: torch.Tensor, p: dict) -> torch.Tensor:
        m, t = self.m, self.tokens
        y = F.rms_norm(x, x.shape[-1:], m.norm)
        q, k, v = m.linear(y, p["qkv"]).split((m.heads * m.d, m.kv * m.d, m.kv * m.d), dim=-1)
        q = self.rope(q.view(t, m.heads, m.d).transpose(0, 1))[None]
        k = self.rope(k.view(t, m.kv, m.d).transpose(0, 1))[None]
        v = v.view(t, m.kv, m.d).transpose(0, 1)[None]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + m.linear(o[0].transpose(0, 1).reshape(t, -1), p["out"])
        y = F.rms_norm(x, x.shape[-1:], m.norm)
        g, u = m.linear(y, p["up_gate"]).chunk(2, dim=-1)
        return x + m.linear(F.silu(g) * u, p["down"])

    def step(self) -> torch.Tensor:
        x = self.m.embed[self.ids]
        for p in self.m.layers:
            x = self.layer(x, p)
        last = F.rms_norm(x[-1:], x.shape[-1:], self.m.norm)
        return torch.mm(last, self.m.head.t()).argmax(dim=-1)


def bench_prefill(quick: bool) -> list[dict]:
    dims = shrink(LLAMA["llama-3.1-8b"], quick)
    rows = []
    for fp8 in (False, True) if DEV == "cuda" else (False,):
        for tokens in (64, 128) if quick else (512, 1024, 2048, 4096, 8192):
            row = {"model": "llama-3.1-8b", "fp8": fp8, "tokens": tokens}
            record(rows, row, lambda: prefill_times(Prefill(Decoder(dims, 1, 1, fp8), tokens)))  # noqa: B023
    return rows


def prefill_times(pre: Prefill) -> dict:
    pre.layer = torch.compile(pre.layer, dynamic=False)
    pre.step()  # compiles
    return {"graph_s": graph_time(lambda _: pre.step(), calls=1, reps=10)}


def main() -> None:
    out, quick = parse_args(__doc__)
    torch.manual_seed(0)
    torch._dynamo.config.cache_size_limit = 64
    doc: dict = {"env": {"torch": torch.__version__, "device": DEV, "smi_idle": smi()}}
    families = {"kernels": bench_kernels, "compiled": bench_compiled, "prefill": bench_prefill}
    only = os.environ.get("ONLY")  # e.g. ONLY=prefill: one family, written to decode_compiled_prefill.json
    name = f"decode_compiled_{only}.json" if only else "decode_compiled.json"
    for family, bench in families.items():
        if only and family != only:
            continue
        t0 = time.perf_counter()
        doc[family] = bench(quick)
        doc[f"{family}_wall_s"] = time.perf_counter() - t0
        doc["smi_after"] = smi()
        (out / name).write_text(json.dumps(doc, indent=1))
        print(f"wrote {name} ({family})", flush=True)


if __name__ == "__main__":
    main()
