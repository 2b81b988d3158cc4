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

Token embeddings, the LM head, norms and MoE routers stay 16-bit in the vLLM/TensorRT-LLM
formats (their quantisation configs skip ``lm_head`` and embeddings); GGUF quantises the token
embedding like the body and the output matrix at Q6_K (Q8_0 for q8_0).

KV formats: bf16/fp16 2 bytes; fp8 1 byte (vLLM ``kv_cache_dtype=fp8``, per-tensor scale);
int8 1 byte + an fp16 scale and zero per head and token (LMDeploy's int8 KV), i.e. 4/head_dim
bytes more per value.
"""

from __future__ import annotations

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

    @property
    def bytes(self) -> float:
        return self.bits / 8


_Q4_K, _Q6_K, _Q8_0 = 4.5, 6.5625, 8.5
WEIGHT_FORMATS: dict[str, WeightFormat] = {f.name: f for f in (
    WeightFormat("bf16", 16, "bf16", False, description="16-bit brain float"),
    WeightFormat("fp16", 16, "fp16", False, description="16-bit float"),
    WeightFormat("fp8", 8, "fp8", False, description="fp8 e4m3 W8A8 on fp8 tensor cores"),
    WeightFormat("fp8-wo", 8, "fp16", True, description="fp8 weights, 16-bit compute (Marlin W8A16)"),
    WeightFormat("int8", 8 + 16 / 4096, "int8", False, description="int8 W8A8 (SmoothQuant), per-channel scales"),
    WeightFormat("int4-awq", 4 + 20 / 128, "fp16", True, description="4-bit AWQ, group 128, weight-only"),
    WeightFormat("int4-gptq", 4 + 20 / 128, "fp16", True, description="4-bit GPTQ, group 128, weight-only"),
    WeightFormat("nf4", 4 + 8 / 64 + 32 / (64 * 256), "bf16", True, description="bitsandbytes NF4, double quant"),
    WeightFormat("q4_k_m", _Q4_K, "fp16", True, head_bits=_Q6_K, embed_bits=_Q4_K, q6_share=0.5,
                 description="GGUF Q4_K_M"),
    WeightFormat("q8_0", _Q8_0, "fp16", True, head_bits=_Q8_0, embed_bits=_Q8_0, description="GGUF Q8_0"),
)}


@dataclass(frozen=True)
class KVFormat:
    name: str
    bytes: float  # per value, before per-head metadata
    meta_bytes_per_head: float = 0.0  # per head and token (scale and zero point)


KV_FORMATS: dict[str, KVFormat] = {f.name: f for f in (
    KVFormat("bf16", 2.0), KVFormat("fp16", 2.0), KVFormat("fp8", 1.0), KVFormat("int8", 1.0, 4.0),
)}


def weight_format(name: str, gpu: GPUSpec) -> WeightFormat:
    """The format, checked against the GPU's tensor cores."""
    fmt = WEIGHT_FORMATS.get(name.lower())
    if fmt is None:
        raise GpuplanError("weights", f"unknown weight format {name!r}", f"use one of {', '.join(WEIGHT_FORMATS)}")
    if fmt.compute not in gpu.peak_flops:
        fallback = {"fp8": "fp8-wo (fp8 weights dequantised to 16 bits, as vLLM's Marlin kernels run fp8 "
                           "checkpoints on GPUs without fp8 tensor cores)",
                    "int8": "int4-awq or fp16"}.get(fmt.compute, "fp16")
        raise GpuplanError("weights", f"{gpu.name} has no {fmt.compute} tensor cores for --weights {fmt.name}",
                           f"use --weights {fallback}")
    return fmt


def kv_format(name: str) -> KVFormat:
    fmt = KV_FORMATS.get(name.lower())
    if fmt is None:
        raise GpuplanError("kv", f"unknown KV-cache format {name!r}", f"use one of {', '.join(KV_FORMATS)}")
    return fmt
