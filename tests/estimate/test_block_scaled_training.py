"""MXFP8 and NVFP4 training (Blackwell block-scaled GEMMs): the memory of their cached weight copies
counted from the formats' definitions, their GEMM rate from the catalog's peaks, BF16 for
attention, and one-line refusals on GPUs without block-scale tensor cores.

Format arithmetic, independent of gpuplan's code: OCP Microscaling Formats (MX) v1.0, section 5
(MXFP8: 8-bit E4M3 elements, one 8-bit E8M0 scale per block of 32); NVIDIA NVFP4 (4-bit E2M1
elements, one 8-bit E4M3 scale per block of 16, one FP32 scale per tensor). TransformerEngine
caches a row-wise and a column-wise quantized copy of each GEMM weight (fused profile).
"""

import json

import pytest
from cli_runner import run

from gpuplan import catalog
from gpuplan.estimate.compute import LayerShape, layer_times
from gpuplan.estimate.kernels import gemm_compute_time
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.params import count_params
from gpuplan.estimate.validate import error_band
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

# Llama 3.2 1B (its config.json): hidden 2048, 16 layers, 32 query and 8 KV heads of 64, SwiGLU 8192
H, KV, FFN, LAYERS = 2048, 8 * 64, 8192, 16
GEMM = LAYERS * (H * H + 2 * H * KV + H * H + 3 * H * FFN)
# TransformerEngine's modules per block: LayerNormLinear (fused qkv), Linear (proj), LayerNormMLP (fc1, fc2)
MATRICES = LAYERS * 4


@pytest.fixture(scope="module")
def llama1b():
    return catalog.model("llama-3.2-1b")


def _copies(model, precision, plan=None, profile="fused"):
    cfg = TrainingConfig(precision=precision, profile=profile, seq_len=2048)
    return estimate_memory(model, cfg, plan or ParallelPlan(), catalog.gpu("b200")).per_gpu


def test_mxfp8_copies_carry_one_e8m0_scale_per_32_elements(llama1b):
    s = _copies(llama1b, "mxfp8")
    per_copy = GEMM * 1 + GEMM // 32 * 1  # E4M3 bytes + one byte per 32
    assert s.other["fp8_weight_copies"] == pytest.approx(2 * per_copy, rel=1e-12)


def test_nvfp4_copies_carry_an_e4m3_scale_per_16_and_an_fp32_scale_per_tensor(llama1b):
    s = _copies(llama1b, "nvfp4")
    per_copy = GEMM // 2 + GEMM // 16 + 4 * MATRICES
    assert s.other["fp8_weight_copies"] == pytest.approx(2 * per_copy, rel=1e-12)


def test_block_scaled_training_keeps_bf16_weights_fp32_masters_and_grads(llama1b):
    n = count_params(llama1b).total
    for precision in ("mxfp8", "nvfp4"):
        s = _copies(llama1b, precision)
        assert (s.weights, s.master_weights, s.gradients, s.optimizer) == (2 * n, 4 * n, 4 * n, 8 * n)
    assert "fp8_weight_copies" not in _copies(llama1b, "nvfp4", profile="eager").other  # torchao recasts


def test_expert_weights_each_carry_their_own_tensor_scale():
    mixtral = catalog.model("mixtral-8x7b")  # 8 experts x (fc1, fc2) + qkv, proj per layer; 32 layers
    a = _copies(mixtral, "nvfp4", ParallelPlan(dp=8, ep=8, zero=1)).other["fp8_weight_copies"]
    b = _copies(mixtral, "mxfp8", ParallelPlan(dp=8, ep=8, zero=1)).other["fp8_weight_copies"]
    gemm = b / (2 * (1 + 1 / 32))  # GEMM elements on one GPU
    assert a - 2 * gemm * (0.5 + 1 / 16) == pytest.approx(2 * 4 * 32 * (2 + 2 * 8 / 8))


def test_gemms_run_at_the_catalog_peak_of_their_element_type():
    b200 = catalog.gpu("b200")
    big = (8192, 8192, 8192)
    bf16, fp8 = gemm_compute_time(b200, "bf16", *big), gemm_compute_time(b200, "fp8", *big)
    assert gemm_compute_time(b200, "mxfp8", *big) == fp8  # MXFP8 at the FP8 rate (4.5 PFLOP/s dense)
    # NVFP4 at the FP4 peak (9 PFLOP/s dense) times FP4's measured fraction (cuBLAS 8192^3: 58.2%,
    # catalog/efficiency/b200.toml), not FP8's 76.3%
    assert gemm_compute_time(b200, "nvfp4", *big) == pytest.approx(fp8 / 2 * 0.763 / 0.582)
    assert fp8 < bf16


def test_attention_and_norms_stay_bf16(llama1b):
    b200 = catalog.gpu("b200")

    def parts(dtype):
        shape = LayerShape(
            tokens=4096,
            seq=4096,
            micro_batch=1,
            tp=1,
            cp=1,
            ep=1,
            sp=False,
            dtype=dtype,
            act_bytes=2,
            attention="flash",
        )
        return layer_times(llama1b, b200, shape, False).parts

    bf16, nvfp4, mxfp8 = parts("bf16"), parts("nvfp4"), parts("mxfp8")
    for kind in ("attention", "norm", "activation", "rotary"):
        assert nvfp4[kind] == bf16[kind] == mxfp8[kind]
    assert nvfp4["gemm"] < mxfp8["gemm"] < bf16["gemm"]
    assert nvfp4["fp8_cast"] < mxfp8["fp8_cast"]  # writes 2 x 0.5625 bytes per element, not 2 x 1.03125


@pytest.mark.parametrize(
    "gpu, precision, says",
    [
        ("h100-sxm", "mxfp8", "no block-scaled"),
        ("h100-sxm", "nvfp4", "no block-scaled"),
        ("a100-sxm-80gb", "fp8", "no fp8 tensor cores"),
        ("mi355x", "nvfp4", "NVIDIA format"),
    ],
)
def test_gpus_without_the_format_are_refused_in_one_line(gpu, precision, says, capsys):
    code, _, err = run(["train", "llama-3.2-1b", "--gpu", gpu, "--gpus", "8", "--precision", precision], capsys)
    assert code == 2
    err = err.strip()
    assert err.startswith("error: precision:") and says in err and "\n" not in err and "Traceback" not in err


def test_block_scaled_predictions_take_their_band_from_the_published_block_scaled_runs():
    # the held-out Megatron-Bridge runs include MXFP8 Llama 3 8B data-parallel on B200 and GB200:
    # that kind has a measured band; NVFP4 has published runs only with TP/PP (3d), so a
    # data-parallel NVFP4 plan is still a kind with no run, marked uncalibrated
    mx = error_band("b200", TrainingConfig(precision="mxfp8"), ParallelPlan(dp=8), 1.0)
    assert mx["calibrated"] and mx["category"]["precision"] == "mxfp8" and mx["runs"] >= 2
    fp4 = error_band("b200", TrainingConfig(precision="nvfp4"), ParallelPlan(dp=8), 1.0)
    assert fp4["calibrated"] is False and "uncalibrated" in fp4["note"]
    assert error_band("gb200", TrainingConfig(precision="nvfp4"), ParallelPlan(dp=8, tp=2, pp=4), 1.0)["calibrated"]


def test_cli_plans_nvfp4_on_b200_with_json(capsys):
    code, out, _ = run(
        ["train", "llama-3.2-1b", "--gpu", "b200", "--gpus", "8", "--precision", "nvfp4", "--json"], capsys
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["gpu"]["compute_dtype"] == "nvfp4" and doc["gpu"]["peak_flops"] == catalog.gpu("b200").peak("fp4")
    assert doc["memory"]["per_gpu"]["other_breakdown"]["fp8_weight_copies"] > 0
