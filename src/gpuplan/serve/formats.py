"""Weight and KV-cache storage formats: bytes per value, what the GEMMs compute in, what stays 16-bit.

Bytes per weight include the quantisation metadata:

* fp8 (W8A8, e4m3 with per-tensor or per-channel scales; vLLM/TensorRT-LLM "fp8"): 1 byte, and
  the GEMMs run on fp8 tensor cores at twice the 16-bit peak (Hopper, Ada, Blackwell, MI300).
* int8 W8A8 (SmoothQuant, Xiao et al. 2023): 1 byte + a 16-bit scale per output channel, int8 GEMMs.
* int4 AWQ (Lin et al. 2024) and GPTQ (Frantar et al. 2023), group size 128: 4-bit weights plus
  an fp16 scale and a 4-bit zero point per group of 128 = 4 + (16 + 4)/128 = 4.156 bits; weight-
  only, dequantised to fp16 inside the GEMM.
* NF4 (QLoRA, Dettmers et al. 2023, section 3): 4 bits + double-quantised block absmax
  (8 bits per 64 values + an fp32 per 256 blocks) = 4.127 bits; weight-only.
* GGUF (llama.cpp ggml-quants): Q8_0 = 34 bytes per 32 values (8.5 bits); Q4_K = 144 bytes per
  256 (4.5 bits), Q6_K = 210 bytes per 256 (6.5625 bits). Q4_K_M stores attention V and MLP down
  projections of about half the layers, and the output matrix, as Q6_K (llama.cpp
  ``llama_tensor_get_type``); here: half of those tensors, which gives 4.8-4.9 bits per weight
  over a Llama, as llama.cpp's own size tables show.
* fp8 weight-only (W8A16, Marlin kernels): how vLLM runs fp8 checkpoints on GPUs without fp8
  tensor cores (Ampere).
* Block-scaled microscaling formats (OCP Microscaling Formats (MX) v1.0 specification, 2023;
  NVIDIA Blackwell NVFP4): each block of consecutive values along a row's input dimension shares
  one scale, stored beside the values, so the bytes are exact per row: ``bits + scale_bits *
  ceil(in / block) / in``. NVFP4 = E2M1 values, a block of 16 with an FP8 E4M3 scale, and one FP32
  scale per tensor (4.5 bits + 4 bytes per matrix); MXFP4 = E2M1, a block of 32 with an E8M0
  (8-bit power-of-two) scale (4.25 bits); MXFP8 = E4M3, a block of 32 with an E8M0 scale
  (8.25 bits). Their GEMMs need block-scale tensor cores: NVIDIA Blackwell (B200, GB200, B300)
  and AMD CDNA 4 (MI355X) for the MX formats; NVFP4 is NVIDIA's. ``mxfp4-wo`` is how vLLM runs
  MXFP4 checkpoints on earlier GPUs (dequantised to 16 bits in the kernel), and ``mxfp4-experts``
  is the gpt-oss checkpoint as shipped: only the MoE experts in MXFP4, attention, router,
  embeddings and head in bf16 (its quantization_config's modules_to_not_convert).

Token embeddings, the LM head, norms and MoE routers stay 16-bit in the vLLM/TensorRT-LLM
formats (their quantisation configs skip ``lm_head`` and embeddings); GGUF quantises the token
embedding like the body and the output matrix at Q6_K (Q8_0 for q8_0).

KV formats: bf16/fp16 2 bytes; fp8 1 byte (vLLM ``kv_cache_dtype=fp8``, per-tensor scale);
int8 1 byte + an fp16 scale and zero per head and token (LMDeploy's int8 KV), i.e. 4/head_dim
bytes more per value; nvfp4 (TensorRT-LLM's NVFP4 KV cache on Blackwell) 4 bits + an FP8 scale
per 16 values = 0.5625 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import GpuplanError
from gpuplan.specs.hardware import GPUSpec


@dataclass(frozen=True)
class WeightFormat:
    name: str
    bits: float  # bits per weight of the quantised body, metadata included
    compute: str  # dtype the tensor cores run: "fp16" for 16-bit and weight-only formats
    weight_only: bool  # dequantised to 16 bits inside the GEMM (the "unpacking tax")
    head_bits: float = 16.0  # LM head / output matrix
    embed_bits: float = 16.0  # token embedding table
    q6_share: float = 0.0  # GGUF K-quant mixes: share of V and down-projection tensors kept at Q6_K
    description: str = ""
    # block scaling (MX, NVFP4): values per scale along the input dimension, scale bits, per-matrix scale bits
    block: int = 0
    scale_bits: float = 0.0
    tensor_scale_bits: float = 0.0
    experts_only: bool = False  # only routed-expert weights are stored in the format (gpt-oss)
    block_scaled_compute: bool = False  # the GEMMs need block-scale tensor cores (Blackwell, CDNA 4)
    vendor: str = ""  # a vendor's own format (NVFP4: NVIDIA)

    @property
    def bytes(self) -> float:
        """Bytes per quantised weight, block scales included (rows a multiple of the block long)."""
        return (self.bits + (self.scale_bits / self.block if self.block else 0.0)) / 8

    def matrix_bits(self, n_in: int, n_out: int, matrices: int = 1) -> float:
        """Bits per element of an ``n_out`` x ``n_in`` weight: values, one scale per block of each row
        (a partial last block still has its scale) and a per-matrix scale for each of the
        ``matrices`` checkpoint tensors stacked along its rows (q, k, v: 3; gate and up: 2)."""
        if not self.block:
            return self.bits
        return (
            self.bits
            + self.scale_bits * math.ceil(n_in / self.block) / n_in
            + matrices * self.tensor_scale_bits / (n_in * n_out)
        )


_Q4_K, _Q6_K, _Q8_0 = 4.5, 6.5625, 8.5
WEIGHT_FORMATS: dict[str, WeightFormat] = {
    f.name: f
    for f in (
        WeightFormat("bf16", 16, "bf16", False, description="16-bit brain float"),
        WeightFormat("fp16", 16, "fp16", False, description="16-bit float"),
        WeightFormat("fp8", 8, "fp8", False, description="fp8 e4m3 W8A8 on fp8 tensor cores"),
        WeightFormat("fp8-wo", 8, "fp16", True, description="fp8 weights, 16-bit compute (Marlin W8A16)"),
        WeightFormat("int8", 8 + 16 / 4096, "int8", False, description="int8 W8A8 (SmoothQuant), per-channel scales"),
        WeightFormat("int4-awq", 4 + 20 / 128, "fp16", True, description="4-bit AWQ, group 128, weight-only"),
        WeightFormat("int4-gptq", 4 + 20 / 128, "fp16", True, description="4-bit GPTQ, group 128, weight-only"),
        WeightFormat("nf4", 4 + 8 / 64 + 32 / (64 * 256), "bf16", True, description="bitsandbytes NF4, double quant"),
        WeightFormat(
            "q4_k_m", _Q4_K, "fp16", True, head_bits=_Q6_K, embed_bits=_Q4_K, q6_share=0.5, description="GGUF Q4_K_M"
        ),
        WeightFormat("q8_0", _Q8_0, "fp16", True, head_bits=_Q8_0, embed_bits=_Q8_0, description="GGUF Q8_0"),
        WeightFormat(
            "nvfp4",
            4,
            "fp4",
            False,
            block=16,
            scale_bits=8,
            tensor_scale_bits=32,
            block_scaled_compute=True,
            vendor="nvidia",
            description="NVFP4 W4A4: 16-value blocks, FP8 E4M3 scales + FP32 per tensor",
        ),
        WeightFormat(
            "mxfp4",
            4,
            "fp4",
            False,
            block=32,
            scale_bits=8,
            block_scaled_compute=True,
            description="MXFP4 W4A4: 32-value blocks, E8M0 scales",
        ),
        WeightFormat(
            "mxfp4-wo",
            4,
            "bf16",
            True,
            block=32,
            scale_bits=8,
            description="MXFP4 weights dequantised to bf16 in the kernel (pre-Blackwell)",
        ),
        WeightFormat(
            "mxfp4-experts",
            4,
            "bf16",
            True,
            block=32,
            scale_bits=8,
            experts_only=True,
            description="gpt-oss checkpoint: MoE experts MXFP4, the rest bf16",
        ),
        WeightFormat(
            "mxfp8",
            8,
            "fp8",
            False,
            block=32,
            scale_bits=8,
            block_scaled_compute=True,
            description="MXFP8 W8A8: 32-value blocks, E8M0 scales",
        ),
    )
}


@dataclass(frozen=True)
class KVFormat:
    name: str
    bytes: float  # per value (block scales included), before per-head metadata
    meta_bytes_per_head: float = 0.0  # per head and token (scale and zero point)
    needs: str = ""  # tensor-core dtype the attention kernels need ("fp4": Blackwell)
    vendor: str = ""


KV_FORMATS: dict[str, KVFormat] = {
    f.name: f
    for f in (
        KVFormat("bf16", 2.0),
        KVFormat("fp16", 2.0),
        KVFormat("fp8", 1.0),
        KVFormat("int8", 1.0, 4.0),
        KVFormat("nvfp4", 0.5 + 1 / 16, needs="fp4", vendor="nvidia"),
    )
}


def weight_format(name: str, gpu: GPUSpec) -> WeightFormat:
    """The format, checked against the GPU's tensor cores."""
    fmt = WEIGHT_FORMATS.get(name.lower())
    if fmt is None:
        raise GpuplanError("weights", f"unknown weight format {name!r}", f"use one of {', '.join(WEIGHT_FORMATS)}")
    if fmt.vendor and gpu.vendor != fmt.vendor:
        raise GpuplanError(
            "weights",
            f"{fmt.name} is an {fmt.vendor.upper()} format; {gpu.name} cannot run it",
            "use `weights=mxfp4` (the OCP format) or fp8",
        )
    if fmt.block_scaled_compute and "fp4" not in gpu.peak_flops:
        # block-scale (MX/NVFP4) tensor cores came with the generation that added FP4: Blackwell, CDNA 4
        raise GpuplanError(
            "weights",
            f"{gpu.name} has no block-scaled (MX/NVFP4) tensor cores for `weights` "
            f"{fmt.name}; they need NVIDIA Blackwell or AMD CDNA 4 (MI355X)",
            "use `weights=mxfp4-wo` (MXFP4 weights dequantised to 16 bits, as vLLM runs them there), fp8 or int4-awq",
        )
    if fmt.compute not in gpu.peak_flops:
        fallback = {
            "fp8": "fp8-wo (fp8 weights dequantised to 16 bits, as vLLM's Marlin kernels run fp8 "
            "checkpoints on GPUs without fp8 tensor cores)",
            "int8": "int4-awq or fp16",
        }.get(fmt.compute, "fp16")
        raise GpuplanError(
            "weights",
            f"{gpu.name} has no {fmt.compute} tensor cores for `weights={fmt.name}`",
            f"use `weights={fallback}`",
        )
    return fmt


def kv_format(name: str, gpu: GPUSpec | None = None) -> KVFormat:
    """The format, checked against the GPU's tensor cores when one is given."""
    fmt = KV_FORMATS.get(name.lower())
    if fmt is None:
        raise GpuplanError("kv", f"unknown KV-cache format {name!r}", f"use one of {', '.join(KV_FORMATS)}")
    if gpu is not None and fmt.needs and (fmt.needs not in gpu.peak_flops or (fmt.vendor and gpu.vendor != fmt.vendor)):
        raise GpuplanError(
            "kv", f"{gpu.name} cannot run a {fmt.name} KV cache (it needs NVIDIA Blackwell)", "use `kv=fp8`"
        )
    return fmt
