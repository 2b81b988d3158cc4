"""The eager profile's memory-bound kernels against the ops PyTorch really runs.

Oracle: a TorchDispatchMode that sees every aten op of transformers' own modules (forward and
autograd's backward) on CPU and sums the bytes each one reads and writes (its tensor arguments and
results; views move nothing). gpuplan counts the same chains by hand from the modeling code; the
two must agree per element. Step-level truth is in ``test_measured_h100.py``.
"""

import pytest

from gpuplan.estimate.compute import eager_norm_bytes

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

VIEWS = {
    "view",
    "_unsafe_view",
    "t",
    "transpose",
    "expand",
    "slice",
    "unsqueeze",
    "squeeze",
    "detach",
    "alias",
    "split",
    "split_with_sizes",
    "narrow",
}


class ByteCounter(TorchDispatchMode):
    """Bytes read + written and kernels launched by every non-view aten op."""

    def __init__(self):
        super().__init__()
        self.bytes = 0
        self.kernels = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in VIEWS:
            return out
        tensors = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        results = [r for r in torch.utils._pytree.tree_leaves(out) if isinstance(r, torch.Tensor)]
        self.bytes += sum(t.numel() * t.element_size() for t in tensors + results)
        self.kernels += 1
        return out


def _count(module, x):
    x = x.detach().requires_grad_(True)
    with ByteCounter() as fwd:
        y = module(x)
    g = torch.randn_like(y)
    with ByteCounter() as bwd:
        y.backward(g)
    return fwd, bwd


@pytest.mark.parametrize("stream", [torch.bfloat16, torch.float32], ids=["bf16-stream", "fp32-stream-autocast"])
def test_eager_rmsnorm_moves_the_bytes_of_transformers_llama_rmsnorm(stream):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    h, tokens = 512, 256
    norm = LlamaRMSNorm(h).to(stream)  # the weight in the stream's dtype (fp32 parameters under autocast)
    fwd, bwd = _count(norm, torch.randn(tokens, h, dtype=stream))
    elements = tokens * h
    want_f, want_b, _, _ = eager_norm_bytes("rmsnorm", stream.itemsize)
    # the per-row statistics and the weight are O(tokens + h): under 2% at these sizes
    assert fwd.bytes / elements == pytest.approx(want_f, rel=0.03)
    assert bwd.bytes / elements == pytest.approx(want_b, rel=0.03)


def test_eager_swiglu_is_two_kernels_forward_and_three_backward():
    import torch.nn.functional as F

    tokens, ffn = 256, 1024
    gate = torch.randn(tokens, ffn, dtype=torch.bfloat16, requires_grad=True)
    up = torch.randn(tokens, ffn, dtype=torch.bfloat16, requires_grad=True)
    with ByteCounter() as fwd:
        y = F.silu(gate) * up  # transformers' LlamaMLP: down_proj(act_fn(gate_proj(x)) * up_proj(x))
    g = torch.randn_like(y)
    with ByteCounter() as bwd:
        y.backward(g)
    # gpuplan: 5 a forward, 9 a backward per ffn element (a = 2 bytes)
    assert fwd.bytes / (tokens * ffn) == pytest.approx(5 * 2, rel=0.01)
    assert bwd.bytes / (tokens * ffn) == pytest.approx(9 * 2, rel=0.01)
    assert (fwd.kernels, bwd.kernels) == (2, 3)


@pytest.mark.parametrize("autocast", [False, True], ids=["bf16", "autocast-fp32-tables"])
def test_eager_rotary_moves_the_bytes_of_transformers_apply_rotary_pos_emb(autocast):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    b, heads, seq, d = 2, 32, 64, 64  # many heads: the broadcast cos/sin reads are 1/heads of q's
    q = torch.randn(b, heads, seq, d, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, heads, seq, d, dtype=torch.bfloat16, requires_grad=True)
    # under autocast over fp32 parameters the rotary tables come out fp32 (cast to the fp32 stream)
    table = torch.float32 if autocast else torch.bfloat16
    cos, sin = torch.randn(b, seq, d, dtype=table), torch.randn(b, seq, d, dtype=table)
    with ByteCounter() as fwd:
        qe, ke = apply_rotary_pos_emb(q, k, cos, sin)
        if autocast:  # SDPA is on autocast's lower-precision list: it casts q and k to bf16
            qe, ke = qe.to(torch.bfloat16), ke.to(torch.bfloat16)
    grads = [torch.randn_like(qe), torch.randn_like(ke)]
    with ByteCounter() as bwd:
        torch.autograd.backward([qe, ke], grads)
    elements, a = 2 * q.numel(), 2
    want_f, want_b = (6 * a + 24, 13 * a + 28) if autocast else (10 * a, 14 * a)
    assert fwd.bytes / elements == pytest.approx(want_f, rel=0.06)
    assert bwd.bytes / elements == pytest.approx(want_b, rel=0.06)


def test_autocast_casts_each_weight_once_and_each_reading_gemms_input_again():
    """Three projections of one fp32 input (q, k, v as transformers' Llama has them) under autocast:
    the casts and gradient sums are what ``layer_times``' autocast_cast part counts."""
    from gpuplan import catalog
    from gpuplan.estimate.compute import autocast_input_casts

    tokens, h = 128, 256
    projections = [torch.nn.Linear(h, h, bias=False) for _ in range(3)]
    # the norm's output, not a leaf: autocast caches casts of leaves (the weights) only
    x = torch.randn(tokens, h, requires_grad=True) * 1.0
    with ByteCounter() as fwd, torch.autocast("cpu", dtype=torch.bfloat16):
        ys = [p(x) for p in projections]
    grads = [torch.randn_like(y) for y in ys]
    with ByteCounter() as bwd:
        torch.autograd.backward(ys, grads, inputs=[x, *(p.weight for p in projections)])
    mm = 2 * (tokens * h + h * h + tokens * h)  # one bf16 GEMM's operands and result
    cast_f = (4 + 2) * (3 * h * h + 3 * tokens * h)  # weights once, the input once per GEMM
    assert fwd.bytes - 3 * mm == pytest.approx(cast_f, rel=0.01)
    # backward: dX and dW GEMMs, each gradient cast to fp32, the three input gradients summed
    cast_b = (2 + 4) * (3 * h * h + 3 * tokens * h) + 2 * 3 * 4 * tokens * h
    cast_b += 2 * 4 * tokens * h  # the test's own: autograd copies the fp32 sum into x.grad
    assert bwd.bytes - 2 * 3 * mm == pytest.approx(cast_b, rel=0.01)
    # and gpuplan counts three such inputs for attention and two (gate, up) for Llama's MLP
    assert autocast_input_casts(catalog.model("llama-3.2-1b"), moe=False) == 3 + 2
    assert autocast_input_casts(catalog.model("pythia-1.4b"), moe=False) == 1 + 1


class _MegatronCrossEntropy(torch.autograd.Function):
    """The op sequence of Megatron-Core's unfused _VocabParallelCrossEntropy at tp = 1
    (megatron/core/tensor_parallel/cross_entropy.py: calculate_logits_max, calculate_predicted_logits,
    calculate_cross_entropy_loss, calculate_gradients), without the TP all-reduces."""

    @staticmethod
    def forward(ctx, logits, target):
        logits = logits.float()
        logits_max = torch.max(logits, dim=-1)[0]
        logits -= logits_max.unsqueeze(dim=-1)
        predicted = logits[torch.arange(logits.size(0)), target].clone()
        torch.exp(logits, out=logits)
        sum_exp = logits.sum(dim=-1)
        loss = torch.log(sum_exp) - predicted
        logits.div_(sum_exp.unsqueeze(dim=-1))
        ctx.save_for_backward(logits, target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target = ctx.saved_tensors
        softmax[torch.arange(softmax.size(0)), target] -= 1.0
        softmax.mul_(grad_output.unsqueeze(dim=-1))
        return softmax, None


class _TrafficCounter(ByteCounter):
    """ByteCounter that counts what a kernel moves rather than what it is handed: an ``out=``
    tensor is written once (not also read), a gather by index reads only what it returns and a
    scatter by index writes only the values it is given."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in VIEWS:
            return out
        leaves = torch.utils._pytree.tree_leaves
        results = [r for r in leaves(out) if isinstance(r, torch.Tensor)]
        reads = [
            a for a in leaves((args, {k: v for k, v in kwargs.items() if k != "out"})) if isinstance(a, torch.Tensor)
        ]
        if name == "index":  # a gather: one element read per element returned, plus the indices
            reads = reads[1:] + results
        if name in ("index_put", "index_put_"):  # a scatter: writes only the values it is given
            reads, results = reads[1:], reads[-1:]
        self.bytes += sum(t.numel() * t.element_size() for t in reads + results)
        self.kernels += 1
        return out


def test_unfused_cross_entropy_moves_the_bytes_of_megatrons_vocab_parallel_loss():
    from gpuplan.estimate.model_ends import cross_entropy_bytes

    tokens, vocab = 64, 4096
    logits = torch.randn(tokens, vocab, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, vocab, (tokens,))
    with _TrafficCounter() as fwd:
        loss = _MegatronCrossEntropy.apply(logits, target)
    with _TrafficCounter() as bwd:
        loss.sum().backward()  # autograd casts the fp32 gradient back to the bf16 logits
    f_bytes, _, b_bytes, _ = cross_entropy_bytes(2, fused=False)
    n = tokens * vocab
    # per-token reductions, gathers and the target index are O(tokens): a few percent at this size
    assert fwd.bytes / n == pytest.approx(f_bytes, rel=0.05)
    assert bwd.bytes / n == pytest.approx(b_bytes, rel=0.05)


class AllocatingCounter(ByteCounter):
    """ByteCounter, but ops that only allocate (new_zeros, zeros_like) write their result and read
    nothing."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in ("new_zeros", "zeros_like", "new_empty", "empty_like"):
            out = func(*args, **(kwargs or {}))
            self.bytes += out.numel() * out.element_size()
            self.kernels += 1
            return out
        return super().__torch_dispatch__(func, types, args, kwargs)


def _expert_bias(packed: bool, rows: int, h: int, experts: int, fp32_probs: bool = True):
    """Megatron's TEGroupedMLP._apply_bias (megatron/core/transformer/moe/experts.py) on CPU tensors:
    the fc2 output plus each expert's bias scaled by the routing prob, in fp32, cast back; the
    probs and the bias learn. Returns (forward counter, backward counter, bytes autograd keeps)."""
    out = torch.randn(rows, h, dtype=torch.bfloat16, requires_grad=True)
    probs = torch.rand(rows, 1, dtype=torch.float32 if fp32_probs else torch.bfloat16, requires_grad=True)
    split = [rows // experts] * experts
    kept: dict[int, int] = {}

    def pack(t):
        kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    bias = torch.randn(experts, h, dtype=torch.bfloat16, requires_grad=True)
    biases = [torch.randn(h, dtype=torch.bfloat16, requires_grad=True) for _ in range(experts)]
    counts = torch.tensor(split)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), AllocatingCounter() as fwd:
        if packed:  # the CUDA-graph-safe path: the bias repeated over the rows on the device
            rep = torch.repeat_interleave(bias.float(), counts, dim=0, output_size=rows)
            y = (out.view(-1, h).float() + rep * probs.float()).view(rows, h).to(torch.bfloat16)
        else:  # host token counts: a Python loop over the local experts
            parts = zip(torch.split(out.view(-1, h), split), biases, torch.split(probs, split))
            y = torch.cat([t + b * p for t, b, p in parts]).view(rows, h).to(out.dtype)
    g = torch.randn_like(y)
    with AllocatingCounter() as bwd:
        y.backward(g)
    return fwd, bwd, sum(kept.values())


@pytest.mark.parametrize(
    ("packed", "fp32_probs"),
    [(False, True), (False, False), (True, True)],
    ids=["host-counts-loop-fp32-probs", "host-counts-loop-bf16-probs", "cuda-graph-packed"],
)
@pytest.mark.parametrize("experts", [2, 4])
def test_megatrons_weighted_expert_bias_moves_and_keeps_what_gpuplan_counts(packed, fp32_probs, experts):
    from gpuplan.estimate.expert_bias import expert_bias_kept, expert_bias_passes

    rows, h = 4096, 512
    fwd, bwd, kept = _expert_bias(packed, rows, h, experts, fp32_probs)
    (want_f, kernels_f), (want_b, kernels_b) = expert_bias_passes(experts, packed, fp32_probs)
    want_kept = expert_bias_kept(packed)
    # the probs, the biases and the split sizes are O(rows + experts x h): under 1% here
    assert fwd.bytes / (rows * h) == pytest.approx(want_f, rel=0.01)
    assert bwd.bytes / (rows * h) == pytest.approx(want_b, rel=0.01)
    assert (fwd.kernels, bwd.kernels) == (kernels_f, kernels_b)
    assert kept / (rows * h) == pytest.approx(want_kept, abs=0.03)


def _megatron_chains():
    """scripts/measure_unfused_gpu.py: its transcriptions of Megatron's unfused rotary and activation
    clamps are what the GPU timed; here they run on CPU tensors to count what they move."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "measure_unfused_gpu.py"
    spec = importlib.util.spec_from_file_location("measure_unfused_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_megatrons_unfused_yarn_rope_moves_what_gpuplan_counts():
    from gpuplan.estimate.unfused_ops import yarn_rope_passes

    s, b, heads, d = 512, 8, 64, 64  # cos and sin are [s, 1, 1, d]: 1/512 of the rotated tensor
    t = torch.randn(s, b, heads, d, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.randn(s, 1, 1, d)
    with AllocatingCounter() as fwd:
        y = _megatron_chains().rope(t, freqs, 1.347)
    g = torch.randn_like(y)
    with AllocatingCounter() as bwd:
        y.backward(g)
    (want_f, kernels_f), (want_b, kernels_b) = yarn_rope_passes(2)
    assert fwd.bytes / t.numel() == pytest.approx(want_f, rel=0.01)
    assert bwd.bytes / t.numel() == pytest.approx(want_b, rel=0.01)
    assert (fwd.kernels, bwd.kernels) == (kernels_f, kernels_b)


def test_megatrons_activation_clamp_moves_what_gpuplan_counts():
    from gpuplan.estimate.unfused_ops import glu_clamp_passes

    # per element of the activation's output (half of its input)
    rows, ffn = 4096, 256
    x = torch.randn(rows, 2 * ffn, dtype=torch.bfloat16, requires_grad=True)
    clamp = _megatron_chains().clamp
    with AllocatingCounter() as fwd:
        y = clamp(x)
    g = torch.randn_like(y)
    with AllocatingCounter() as bwd:
        y.backward(g)
    (want_f, kernels_f), (want_b, kernels_b) = glu_clamp_passes(2)
    assert fwd.bytes / (rows * ffn) == pytest.approx(want_f, rel=0.01)
    assert bwd.bytes / (rows * ffn) == pytest.approx(want_b, rel=0.01)
    assert (fwd.kernels, bwd.kernels) == (kernels_f, kernels_b)
