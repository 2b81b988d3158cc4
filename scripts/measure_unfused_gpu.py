"""Time the elementwise chains Megatron runs unfused for gpt-oss (estimate/unfused_ops.py) on a GPU.

    python scripts/measure_unfused_gpu.py --out measurements/h100-sxm/kernels   # on the GPU machine

Writes ``unfused.json``: forward and backward seconds of Megatron's unfused rotary embedding
(``_apply_rotary_pos_emb_bshd`` with YaRN's mscale, on gpt-oss-120b's queries and keys) and of the
activation clamps before its fused GeGLU (``weighted_bias_quick_geglu_impl``), at 4K-16K tokens
and top-4 routed rows, each with the bytes tests/estimate/test_eager_kernels.py counts. Timed as
``measure_gpu.py`` does (CUDA graphs: kernel time without the host's launch gaps).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure_gpu import DEV, graph_time, parse_args, smi, timeit  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, FFN, TOPK = 64, 8, 64, 2880, 4  # gpt-oss-120b's config.json


def rope(t: torch.Tensor, freqs: torch.Tensor, mscale: float) -> torch.Tensor:
    """Megatron's _apply_rotary_pos_emb_bshd (rope_utils.py at 0d8e0714, lines 92-126)."""
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)
    x1, x2 = torch.chunk(t, 2, dim=-1)
    t = (t * cos_) + (torch.cat((-x2, x1), dim=-1) * sin_)
    return torch.cat((t, t_pass), dim=-1)


def clamp(x: torch.Tensor, limit: float = 7.0) -> torch.Tensor:
    """The clamps of weighted_bias_quick_geglu_impl (fused_bias_geglu.py at 0d8e0714, lines 424-432)."""
    x_glu, x_linear = x.chunk(2, -1)
    return torch.cat((x_glu.clamp(min=None, max=limit), x_linear.clamp(min=-limit, max=limit)), -1)


def fwd_bwd(fn, x: torch.Tensor) -> tuple[float, float]:
    """(forward, forward + backward) kernel seconds of ``fn(x)``."""
    x = x.detach().requires_grad_(True)
    g = torch.randn_like(fn(x))
    fwd = graph_time(lambda _: fn(x), calls=5)

    def both(_):
        y = fn(x)
        torch.autograd.grad(y, x, g)

    try:
        return fwd, graph_time(both, calls=5)
    except RuntimeError:  # a backward this build cannot capture: eager, launch gaps included
        return fwd, timeit(both)


def main() -> None:
    out, quick = parse_args(__doc__)
    bf = torch.bfloat16
    rows = []
    for tokens in (64,) if quick else (4096, 16384):
        s, b = tokens // 4, 4  # [s, b, heads, dim] as Megatron holds q and k
        freqs = torch.randn(s, 1, 1, HEAD_DIM, device=DEV)
        for name, heads in (("rope_q", HEADS), ("rope_k", KV_HEADS)):
            t = torch.randn(s, b, heads, HEAD_DIM, device=DEV, dtype=bf)
            f, fb = fwd_bwd(lambda x, fr=freqs: rope(x, fr, 1.3466), t)
            rows.append(
                dict(
                    op=name,
                    tokens=tokens,
                    elements=t.numel(),
                    fwd_s=f,
                    fwd_bwd_s=fb,
                    fwd_bytes=24 * t.numel(),
                    bwd_bytes=28 * t.numel(),
                )
            )
        routed = tokens * TOPK
        x = torch.randn(routed, 2 * (FFN // 8 if quick else FFN), device=DEV, dtype=bf)
        f, fb = fwd_bwd(clamp, x)
        n = x.numel() // 2
        rows.append(
            dict(op="glu_clamp", tokens=tokens, elements=n, fwd_s=f, fwd_bwd_s=fb, fwd_bytes=16 * n, bwd_bytes=30 * n)
        )
        print(rows[-3:], flush=True)
    (out / "unfused.json").write_text(
        json.dumps({"torch": torch.__version__, "device": DEV, "smi": smi(), "rows": rows}, indent=1)
    )
    print("wrote unfused.json", flush=True)


if __name__ == "__main__":
    main()
