"""Measure a GPU's MoE kernels as PyTorch runs them: the routed experts' grouped GEMMs and the
router and token permutation around them.

    python scripts/measure_moe_gpu.py --out measurements/h100-sxm/kernels   # on the GPU machine

Writes ``moe.json`` under ``--out``:
* ``grouped``: the experts' fc1 (gate and up) and fc2 GEMMs of real MoE models (Qwen3-30B-A3B,
  Qwen3-235B-A22B, gpt-oss-120b, DeepSeek-V3, Mixtral-8x7B) with 1-128 local experts and 128-8192
  tokens per expert, forward, input-gradient and weight-gradient, in bf16:
  - ``grouped_mm``: one ``torch._grouped_mm`` kernel per GEMM (what torchtitan's MoE runs);
  - ``loop``: one ``torch.mm`` per expert on one stream, and ``loop4``: round-robin over 4
    streams (TransformerEngine's GroupedLinear on Hopper: multi_stream_cublas_gemm);
  each over ``balanced`` counts (every expert the mean) and ``routed`` counts (top-k of i.i.d.
  Gaussian router logits: multinomial noise only); the counts themselves are stored.
* ``fp8_grouped``: ``torch._scaled_grouped_mm`` forward with row-wise scales where this build has it.
* ``routing``: the kernels around the experts for T tokens: router GEMM, softmax + top-k, the
  argsort of expert ids, the gather of each routed copy (permute) and the weighted index_add back
  (unpermute), with the bytes each moves.

Timing as in ``measure_gpu.py`` (its ``graph_time``: CUDA graphs, warm-up, median of replays,
inputs rotated so small shapes are not timed from L2, random data).
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_gpu import DEV, graph_time, n_sets, parse_args, smi  # noqa: E402

# (hidden, expert intermediate, experts, top-k) from each model's Hugging Face config.json
MOE_MODELS = {
    "qwen3-30b-a3b": (2048, 768, 128, 8),
    "qwen3-235b-a22b": (4096, 1536, 128, 8),
    "gpt-oss-120b": (2880, 2880, 128, 4),
    "deepseek-v3": (7168, 2048, 256, 8),
    "mixtral-8x7b": (4096, 14336, 8, 2),
}
MAX_ROWS = 65536  # routed rows per call: 8192 tokens x top-8, one micro-batch of a large run


def counts_for(experts: int, per_expert: int, kind: str, topk: int, gen: torch.Generator) -> list[int]:
    """Tokens per local expert: ``balanced`` every expert the mean; ``routed`` the counts a top-k
    of i.i.d. Gaussian logits gives over ``experts`` local experts out of ``experts * 8`` routed
    (the other experts' tokens leave for other GPUs), scaled to the same total."""
    if kind == "balanced" or experts == 1:
        return [per_expert] * experts
    total_experts = max(experts * 8, topk)
    tokens = per_expert * total_experts // topk
    logits = torch.randn(tokens, total_experts, generator=gen)
    ids = logits.topk(topk, dim=1).indices.flatten()
    local = torch.bincount(ids, minlength=total_experts)[:experts].tolist()
    scale = per_expert * experts / max(1, sum(local))
    out = [max(0, round(c * scale)) for c in local]
    out[0] += per_expert * experts - sum(out)
    return out


def shapes(quick: bool) -> list[dict]:
    out = []
    for name, (h, ffn, experts, topk) in MOE_MODELS.items():
        if quick:
            h, ffn = h // 64, ffn // 64
        locals_ = sorted({experts, max(1, experts // 8), max(1, experts // 32)}, reverse=True)
        for e in locals_[:2] if experts > 8 else (experts, 1):
            for tpe in (128, 512, 2048, 8192) if not quick else (16, 48):
                if e * tpe > MAX_ROWS or (quick and e > 8):
                    continue
                for fc, (n, k) in {"fc1": (2 * ffn, h), "fc2": (h, ffn)}.items():
                    out.append(dict(model=name, fc=fc, experts=e, per_expert=tpe, topk=topk, n=n, k=k))
    return out


def offsets(counts: list[int]) -> torch.Tensor:
    return torch.tensor(counts, device=DEV).cumsum(0).to(torch.int32)


def bench_grouped(shape: dict, counts: list[int]) -> dict:
    """Seconds of fwd (X @ W^T), dgrad (dY @ W) and wgrad (dY^T @ X per expert) of one
    GroupedLinear with ``counts`` rows per expert, as one grouped kernel and as per-expert GEMMs."""
    e, n, k = shape["experts"], shape["n"], shape["k"]
    rows = sum(counts)
    bf = torch.bfloat16
    sets = n_sets(2.0 * (rows * k + e * n * k))
    xs = [torch.randn(rows, k, device=DEV, dtype=bf) for _ in range(sets)]
    dys = [torch.randn(rows, n, device=DEV, dtype=bf) for _ in range(sets)]
    ws = [torch.randn(e, n, k, device=DEV, dtype=bf) for _ in range(sets)]
    offs = offsets(counts)
    flops = 2.0 * rows * n * k
    calls = max(1, min(20, int(2e11 // max(flops, 1))))
    res: dict = {}
    ops = {
        "fwd": lambda i: torch._grouped_mm(xs[i], ws[i].transpose(-2, -1), offs=offs),
        "dgrad": lambda i: torch._grouped_mm(dys[i], ws[i], offs=offs),
        "wgrad": lambda i: torch._grouped_mm(dys[i].t(), xs[i], offs=offs),
    }
    for op, fn in ops.items():
        try:
            res[f"grouped_mm_{op}_s"] = graph_time(fn, sets, calls=calls)
        except RuntimeError as err:  # a layout this build's kernel refuses: say so, keep going
            res[f"grouped_mm_{op}_error"] = str(err).splitlines()[0][:200]
    starts = [0, *torch.tensor(counts).cumsum(0).tolist()]
    spans = [(a, b) for a, b in zip(starts[:-1], starts[1:])]

    def loop(op: str, i: int, streams: list | None):
        x, dy, w = xs[i], dys[i], ws[i]
        cur = torch.cuda.current_stream() if streams else None
        if streams:
            for s in streams:
                s.wait_stream(cur)
        for j, (a, b) in enumerate(spans):
            if b <= a and op != "wgrad":
                continue
            ctx = torch.cuda.stream(streams[j % len(streams)]) if streams else contextlib.nullcontext()
            with ctx:
                if op == "fwd":
                    torch.mm(x[a:b], w[j].t())
                elif op == "dgrad":
                    torch.mm(dy[a:b], w[j])
                else:
                    torch.mm(dy[a:b].t(), x[a:b])
        if streams:
            for s in streams:
                cur.wait_stream(s)

    if e > 1 and DEV == "cuda":
        four = [torch.cuda.Stream() for _ in range(4)]
        few = min(calls, 3)  # a loop is many kernels already: few calls amortise the graph's launch
        for op in ops:
            res[f"loop_{op}_s"] = graph_time(lambda i, op=op: loop(op, i, None), sets, calls=few)
            res[f"loop4_{op}_s"] = graph_time(lambda i, op=op: loop(op, i, four), sets, calls=few)
    return res


def bench_fp8_grouped(shape: dict, counts: list[int]) -> dict:
    """Forward of the same GroupedLinear in FP8 e4m3 with row-wise scales (torch._scaled_grouped_mm)."""
    if DEV != "cuda" or not hasattr(torch, "_scaled_grouped_mm"):
        return {}
    e, n, k = shape["experts"], shape["n"], shape["k"]
    rows = sum(counts)
    f8 = torch.float8_e4m3fn
    x = torch.randn(rows, k, device=DEV).to(f8)
    w = torch.randn(e, n, k, device=DEV).to(f8)
    sx = torch.ones(rows, device=DEV, dtype=torch.float32)
    sw = torch.ones(e, n, device=DEV, dtype=torch.float32)
    offs = offsets(counts)
    calls = max(1, min(20, int(2e11 // max(2.0 * rows * n * k, 1))))
    try:
        s = graph_time(
            lambda i: torch._scaled_grouped_mm(
                x, w.transpose(-2, -1), sx, sw, offs=offs, out_dtype=torch.bfloat16, use_fast_accum=True
            ),
            1,
            calls=calls,
        )
        return {"fp8_grouped_mm_fwd_s": s}
    except (RuntimeError, TypeError) as err:
        return {"fp8_grouped_mm_fwd_error": str(err).splitlines()[0][:200]}


def routing_ops(tokens: int, h: int, experts: int, topk: int) -> dict:
    """{op: (callable, bytes read + written)} of the kernels around the experts for ``tokens`` tokens."""
    bf = torch.bfloat16
    x = torch.randn(tokens, h, device=DEV, dtype=bf)
    wr = torch.randn(experts, h, device=DEV, dtype=bf)
    logits = torch.randn(tokens, experts, device=DEV, dtype=torch.float32)
    probs, idx = torch.softmax(logits, -1).topk(topk, dim=-1)
    flat = idx.flatten()
    perm = torch.argsort(flat, stable=True)
    src = perm // topk  # the token each routed copy comes from
    y = torch.randn(tokens * topk, h, device=DEV, dtype=bf)
    wts = probs.flatten()[perm].to(bf)[:, None]
    out = torch.zeros(tokens, h, device=DEV, dtype=bf)
    a, routed = 2, tokens * topk  # bytes per bf16 element; routed copies
    return {
        "router_gemm": (lambda _: torch.mm(x, wr.t()), a * (tokens * h + experts * h + tokens * experts)),
        # softmax reads and writes the fp32 logits; top-k reads them again, writes values and indices
        "softmax_topk": (
            lambda _: torch.softmax(logits, -1).topk(topk, dim=-1),
            4 * 3 * tokens * experts + 12 * routed,
        ),
        "argsort": (lambda _: torch.argsort(flat, stable=True), 16 * routed),
        # read each routed row and write it in expert order
        "permute_gather": (lambda _: x.index_select(0, src), a * 2 * routed * h + 8 * routed),
        # scale each expert output by its router weight (read, write), add it into its token's row
        "unpermute_index_add": (lambda _: out.index_add_(0, src, y * wts), a * (3 * routed * h + 2 * tokens * h)),
    }


def bench_routing(quick: bool) -> list[dict]:
    """Router and permutation kernels for 4K and 16K tokens of each model (one GPU, no EP)."""
    rows = []
    for name, (h, _, experts, topk) in MOE_MODELS.items():
        h = h // 64 if quick else h
        for tokens in (64,) if quick else (4096, 16384):
            for op, (fn, nbytes) in routing_ops(tokens, h, experts, topk).items():
                s = graph_time(fn, 1, calls=10)
                rows.append(
                    dict(model=name, tokens=tokens, experts=experts, topk=topk, hidden=h, op=op, s=s, bytes=nbytes)
                )
    return rows


def main() -> None:
    out, quick = parse_args(__doc__)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    data: dict = {"torch": torch.__version__, "device": DEV, "smi_before": smi(), "grouped": [], "routing": []}
    if DEV == "cuda":
        data["name"] = torch.cuda.get_device_properties(0).name

    def save():
        (out / "moe.json").write_text(json.dumps(data, indent=1))

    for shape in shapes(quick):
        for kind in ("balanced", "routed"):
            counts = counts_for(shape["experts"], shape["per_expert"], kind, shape["topk"], gen)
            row = {**shape, "counts": kind, "rows_per_expert": counts}
            row.update(bench_grouped(shape, counts))
            if kind == "balanced":
                row.update(bench_fp8_grouped(shape, counts))
            data["grouped"].append(row)
            print(
                shape["model"],
                shape["fc"],
                shape["experts"],
                shape["per_expert"],
                kind,
                {k: round(v * 1e6, 1) for k, v in row.items() if k.endswith("_s")},
                flush=True,
            )
        save()
    data["routing"] = bench_routing(quick)
    data["smi_after"] = smi()
    save()
    print("wrote moe.json", flush=True)


if __name__ == "__main__":
    main()
