"""FP8 training memory as TransformerEngine and torchao hold it, counted by hand.

Layout (TransformerEngine docs, features/low_precision_training: performance_considerations
"Master weights" and introduction "Linear layer data flow"): BF16 model weights (2 B), an FP8
copy of each GEMM weight plus its transpose on Hopper (1 + 1 B, cached across micro-batches),
FP32 master weights (4 B) and Adam moments (8 B) in the optimizer, and Megatron's FP32 main_grad
(4 B). torchao's Float8Linear keeps no FP8 copy (it recasts the saved BF16 weight in backward).
"""

import pytest

from gpuplan import catalog
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.params import count_params
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

H100 = catalog.gpu("h100-sxm")  # Hopper: FP8 GEMMs in the TN layout only, so a transposed copy

# Llama 3.2 1B (its config.json): hidden 2048, 16 layers, 32 query and 8 KV heads of 64, SwiGLU
# 8192. GEMM weights per layer: q, k and v, o, gate, up, down.
H, KV, FFN, LAYERS = 2048, 8 * 64, 8192, 16
GEMM = LAYERS * (H * H + 2 * H * KV + H * H + 3 * H * FFN)


@pytest.fixture(scope="module")
def llama1b():
    return catalog.model("llama-3.2-1b")


def test_te_fp8_holds_bf16_weights_fp8_copies_fp32_masters_and_fp32_grads(llama1b):
    assert GEMM == 973_078_528
    n = count_params(llama1b).total
    cfg = TrainingConfig(precision="fp8", profile="fused", seq_len=2048)
    s = estimate_memory(llama1b, cfg, ParallelPlan(), H100).per_gpu
    assert s.weights == 2 * n
    assert s.other["fp8_weight_copies"] == 2 * GEMM  # FP8 weight and its transpose
    assert s.master_weights == 4 * n and s.gradients == 4 * n and s.optimizer == 8 * n


def test_fp8_costs_its_copies_over_bf16_and_nothing_else(llama1b):
    plan = ParallelPlan(tp=2, dp=4, zero=1)
    bf16 = estimate_memory(llama1b, TrainingConfig(precision="bf16"), plan, H100).per_gpu
    fp8 = estimate_memory(llama1b, TrainingConfig(precision="fp8"), plan, H100).per_gpu
    assert fp8.model_states == bf16.model_states
    assert fp8.other["fp8_weight_copies"] == 2 * GEMM / 2  # TP halves every block's GEMM weights


def test_torchao_fp8_keeps_no_copy(llama1b):
    cfg = TrainingConfig(precision="fp8", profile="eager")
    s = estimate_memory(llama1b, cfg, ParallelPlan(), H100).per_gpu
    n = count_params(llama1b).total
    assert "fp8_weight_copies" not in s.other
    assert s.weights == 2 * n and s.master_weights == 4 * n and s.gradients == 2 * n


def test_zero3_quantizes_only_the_gathered_blocks(llama1b):
    cfg = TrainingConfig(precision="fp8", profile="fused")
    s = estimate_memory(llama1b, cfg, ParallelPlan(dp=8, zero=3), H100).per_gpu
    assert s.other["fp8_weight_copies"] == 2 * 2 * GEMM / LAYERS  # current and prefetched block


# Activations: TransformerEngine saves each GEMM's input for the weight-gradient GEMM as the
# quantized copy it made for the forward GEMM and drops the BF16 one (module/linear.py,
# _Linear.forward: "Discard row-wise data since it is not needed in backward pass"). Per token of
# a Llama block the GEMM inputs are: the attention norm's output (QKV input, h), the attention
# output (o_proj input, h: the attention kernel keeps its own BF16 O as well) and the MLP norm's
# output (gate/up input, h), and the SwiGLU product (down input, FFN).
def _layer_bytes_per_token(model, precision):
    from gpuplan.estimate.activations import activation_breakdown

    cfg = TrainingConfig(precision=precision, profile="fused", seq_len=4096)
    return activation_breakdown(model, cfg, ParallelPlan()).dense_layer / 4096


def test_te_fp8_saves_gemm_inputs_at_one_byte(llama1b):
    saved_bf16 = _layer_bytes_per_token(llama1b, "bf16")
    saved_fp8 = _layer_bytes_per_token(llama1b, "fp8")
    # QKV and gate/up inputs and the down input drop from 2 to 1 byte; o_proj adds a 1-byte copy
    assert saved_bf16 - saved_fp8 == (2 - 1) * (H + H + FFN) - 1 * H


def test_mxfp8_saved_inputs_carry_their_block_scales(llama1b):
    saved_fp8 = _layer_bytes_per_token(llama1b, "fp8")
    saved_mx = _layer_bytes_per_token(llama1b, "mxfp8")
    # one E8M0 scale byte per 32 elements on every saved GEMM input (OCP MX v1.0, section 5)
    assert saved_mx - saved_fp8 == pytest.approx((H + H + FFN + H) / 32)


def test_torchao_fp8_saves_bf16_gemm_inputs(llama1b):
    from gpuplan.estimate.activations import activation_breakdown

    plan = ParallelPlan()
    eager = [
        activation_breakdown(llama1b, TrainingConfig(precision=p, profile="eager", seq_len=4096), plan).dense_layer
        for p in ("bf16", "fp8")
    ]
    assert eager[0] == eager[1]


@pytest.mark.parametrize("gpu, copies", [("h100-sxm", 2), ("h200", 2), ("b200", 1), ("gb200", 1)])
@pytest.mark.parametrize("scaling", ["delayed", "current"])
def test_per_tensor_fp8_params_keep_two_fp8_copies_on_hopper_and_one_on_blackwell(llama1b, gpu, copies, scaling):
    # Megatron --fp8-param-gather: the block GEMM weights are held as FP8 only (no BF16 copy);
    # TransformerEngine's per-tensor quantizers add the transpose where FP8 GEMMs take the TN
    # layout only (Hopper, compute capability 9.0) and none where they take any (Blackwell 10.x:
    # nvte_is_non_tn_fp8_gemm_supported). The GPU reaches the count only through estimate_memory.
    n = count_params(llama1b).total
    cfg = TrainingConfig(precision="fp8", fp8_scaling=scaling, fp8_params=True, profile="fused", seq_len=2048)
    s = estimate_memory(llama1b, cfg, ParallelPlan(), catalog.gpu(gpu)).per_gpu
    assert s.other["fp8_weight_copies"] == copies * GEMM  # 1 byte per GEMM weight per copy
    assert s.weights + s.other["fp8_weight_copies"] == 2 * (n - GEMM) + copies * GEMM
