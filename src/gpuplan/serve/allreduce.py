"""Tensor-parallel all-reduce at inference message sizes: which algorithm the engine runs, and its time.

A decode step all-reduces a few KB to a few MB per layer (tokens x hidden x 2 bytes), a prefill
chunk tens of MB, where a collective's fixed latencies and its protocol's bandwidth both matter.
Two families of kernels run it inside one NVLink domain:

* **NCCL**, timed by NCCL's own cost model (``nccl_s``; estimate/nccl.py, from src/graph/tuning.cc
  of NVIDIA/nccl at 5067397c): ring LL / LL128 / Simple, tree, and on NVSwitch boards of Hopper
  and Blackwell NVLink SHARP (NVLS), whichever its model predicts fastest. NVLS raises the bus
  bandwidth of an all-reduce over n GPUs to 2 B eff (n-1)/(n+1) (eff 0.85 Hopper, 0.74
  Blackwell): above the ring's B from 5 GPUs, +32% on 8 H100s, +15% on 8 B200s; with its 25 us
  latency NCCL's model prefers it from ~2 MiB on 8 GPUs. Measured (tests/data/collectives) NVLS
  reaches that rate only above ~128 MiB: at 4-64 MiB on 8 H100s it runs 20-35% slower than
  NCCL's model says, as fast as the ring there.
* **Custom one-/two-shot kernels** of the serving engines (vLLM csrc/custom_all_reduce.cuh,
  TensorRT-LLM cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.cu, which
  SGLang reuses), which read the peers' registered buffers over NVLink directly (``custom_s``).
  One-shot: every GPU reads the whole buffer from each of the n-1 others and sums it, one barrier;
  two-shot: a reduce-scatter then an all-gather, each reading (n-1)/n of the buffer, two
  barriers. Time = barriers x ``CUSTOM_SYNC_S`` + bytes read / B: the loads run at the NVLink rate
  (vLLM's H100 one-shot reaches 330-390 GB/s of reads at 2-4 MiB, PR #24111), and a barrier with
  its launch costs ~6 us under CUDA graphs (vLLM PR #37756: the one-shot kernel takes 7 us at
  16-256 KiB on B300; SGLang PR #2904: TensorRT-LLM's kernel 3.7-5.9 us at 512 B on H100 with
  its launch). vLLM's two-shot kernel measures slower than this at TP4 (43 us at 4 MiB where the
  model says 29, PR #24111): its fixed 36-block grid keeps fewer loads in flight.

Which one runs is the engine's choice (``ALGORITHMS``), read from its source:

* ``vllm`` (vLLM, and SGLang's vLLM-derived kernel): custom within a fully NVLink-connected group
  of 2, 4, 6 or 8 GPUs up to its 8 MiB buffer (vllm/distributed/device_communicators/
  custom_all_reduce.py ``max_size``); one-shot for 2 GPUs, below 512 KiB on 4 and below 256 KiB on
  6-8 (custom_all_reduce.cuh ``allreduce``), else two-shot; NCCL otherwise.
* ``trtllm`` (the PyTorch backend's ``AllReduceStrategy.AUTO``, cpp/tensorrt_llm/thop/
  allreduceOp.cpp ``selectImplementation``): NCCL above the workspace (16 MB for 2 GPUs, 8 MB for
  more: common/customAllReduceUtils.h ``getMaxRequiredWorkspaceSize``); 2 GPUs always the fused
  MIN_LATENCY kernel; more GPUs the MIN_LATENCY kernel up to 128 tokens
  (``ALLREDUCE_AUTO_HEURISTIC_MIN_LATENCY_THRESHOLD_TOKEN_NUM``: "NCCL is faster than MIN_LATENCY
  when the token number is greater than 256"), NCCL above. MIN_LATENCY is one-shot up to 128
  tokens (``kOneShotMaxToken``), two-shot above.
* ``nccl``: NCCL only (gpuplan's engine-neutral default; TensorRT-LLM's TensorRT engines before
  v0.7 built without ``--use_custom_all_reduce``).

Across nodes, over PCIe or on AMD GPUs the engines use NCCL / RCCL, timed by the training model's
alpha-beta collective (estimate/comm.py).
"""

from __future__ import annotations

from gpuplan.estimate import nccl
from gpuplan.estimate.comm import Group, collective_time, efficiency, nccl_choice
from gpuplan.specs.hardware import GPUSpec

US = 1e-6
GB = 1e9
MiB = 2**20
ALGORITHMS = ("nccl", "vllm", "trtllm")

# --- custom kernels -----------------------------------------------------------------------------
CUSTOM_SYNC_S = 6.0 * US  # one barrier with its launch under CUDA graphs (see the module docstring)
VLLM_SIZES = (2, 4, 6, 8)  # world sizes vLLM's custom all-reduce compiles
VLLM_MAX_BYTES = 8 * MiB  # vllm/distributed/device_communicators/custom_all_reduce.py max_size
TRTLLM_WORKSPACE_BYTES = {2: 16_000_000, 0: 8_000_000}  # getMaxRequiredWorkspaceSize: <= 2 GPUs, more
TRTLLM_MIN_LATENCY_TOKENS = 128  # allreduceOp.cpp AUTO threshold; ar_fusion::kOneShotMaxToken


def nvlink_bus_bytes_per_s(gpu: GPUSpec) -> float:
    """NCCL's ring bus bandwidth inside one NVLink domain: the link rate (one direction) times the
    catalog's measured NCCL fraction."""
    return gpu.intra_bytes_per_s * efficiency(gpu).intra_bus


def nccl_s(size: float, n: int, gpu: GPUSpec) -> tuple[float, str]:
    """(seconds, "nccl <algorithm> <protocol>") of NCCL's all-reduce of ``size`` bytes over ``n``
    GPUs of one NVLink domain, by NCCL's tuning model (estimate/nccl.py)."""
    choice = nccl_choice("all-reduce", size, Group("tp", n, 1, n, 1), gpu)
    assert choice is not None
    return choice.time_s, choice.name


def custom_s(size: float, n: int, gpu: GPUSpec, one_shot: bool) -> tuple[float, str]:
    """(seconds, algorithm) of a one- or two-shot custom all-reduce of ``size`` bytes over ``n`` GPUs:
    its barriers, and the bytes each GPU reads from its peers at the NVLink rate."""
    read = (n - 1) * size if one_shot else 2 * (n - 1) / n * size
    syncs = 1 if one_shot else 2
    t = syncs * CUSTOM_SYNC_S + read / nvlink_bus_bytes_per_s(gpu)
    return t, "custom one-shot" if one_shot else "custom two-shot"


def _nvlink_group(group: Group, gpu: GPUSpec) -> bool:
    return not group.crosses_nodes and gpu.vendor == "nvidia" and gpu.interconnect in nccl.GENERATION


def choose(algorithm: str, size: float, n: int, tokens: float) -> str:
    """What the engine runs for an all-reduce of ``size`` bytes (``tokens`` rows) over ``n`` GPUs of
    one NVLink domain: "nccl", "one-shot" or "two-shot" (see the module docstring)."""
    if algorithm == "vllm":
        if n not in VLLM_SIZES or size > VLLM_MAX_BYTES:
            return "nccl"
        small = n == 2 or (n <= 4 and size < 512 * 1024) or (n <= 8 and size < 256 * 1024)
        return "one-shot" if small else "two-shot"
    if algorithm == "trtllm":
        if size > TRTLLM_WORKSPACE_BYTES[2 if n <= 2 else 0]:
            return "nccl"
        if n > 2 and tokens > TRTLLM_MIN_LATENCY_TOKENS:
            return "nccl"
        return "one-shot" if tokens <= TRTLLM_MIN_LATENCY_TOKENS else "two-shot"
    return "nccl"


def tp_allreduce(
    size: float, group: Group, gpu: GPUSpec, algorithm: str = "nccl", tokens: float = 1.0
) -> tuple[float, str]:
    """(seconds, algorithm) of one tensor-parallel all-reduce of ``size`` bytes (``tokens`` rows)
    under an engine whose all-reduce policy is ``algorithm`` (one of ``ALGORITHMS``)."""
    n = group.size
    if n <= 1 or size <= 0:
        return 0.0, "none"
    if not _nvlink_group(group, gpu):
        return collective_time("all-reduce", size, group, gpu), "nccl"
    kind = choose(algorithm, size, n, tokens)
    if kind == "nccl":
        return nccl_s(size, n, gpu)
    return custom_s(size, n, gpu, kind == "one-shot")
