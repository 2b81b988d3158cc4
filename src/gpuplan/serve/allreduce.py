"""Tensor-parallel all-reduce at inference message sizes: latency-bound, so the algorithm matters.

A decode step all-reduces a few KB to a few MB per layer (tokens x hidden x 2 bytes), where a
collective costs its fixed latencies far more than its bytes. Two families run it:

* **NCCL**, timed by the training model (estimate/comm.py: the alpha-beta model, ring or tree
  steps of the catalog's per-hop latency plus the bytes at the measured bus bandwidth);
* **Custom all-reduce** of the serving engines (vLLM csrc/custom_all_reduce.cuh, which SGLang and
  TensorRT-LLM's ONESHOT/TWOSHOT strategies resemble): one kernel reads the peers' buffers over
  NVLink directly, one-shot below 256-512 KiB and two-shot (reduce-scatter, then all-gather) above.
  Its kernels reach far less than the link bandwidth (a few dozen thread blocks of loads in
  flight), so it is timed from a measurement rather than from the link: vLLM's kernel on H100
  (NVLink4), SGLang PR #2904 (github.com/sgl-project/sglang/pull/2904, unit test without CUDA
  graphs, so each time includes one launch), at 512 B - 1 MiB for 2, 4 and 8 GPUs; between sizes
  linear, above 1 MiB at the last segment's rate, and for other GPUs that rate scales with their
  NVLink bandwidth. vLLM runs it only on fully NVLink-connected GPUs in groups of 2, 4, 6 or 8
  and for buffers up to 8 MiB (custom_all_reduce.py ``max_size``); NCCL otherwise.

Across nodes the engines use NCCL.
"""

from __future__ import annotations

from gpuplan.estimate.comm import Group, collective_time
from gpuplan.specs.hardware import GPUSpec

US = 1e-6
CUSTOM_SIZES = (2, 4, 6, 8)  # world sizes vLLM's custom all-reduce compiles
CUSTOM_MAX_BYTES = 8 * 2**20  # vllm/distributed/device_communicators/custom_all_reduce.py max_size


# vLLM custom all-reduce on H100 SXM (SGLang PR #2904): buffer bytes -> microseconds, by GPUs
CUSTOM_SIZES_B = (512, 4096, 32768, 262144, 524288, 1048576)
CUSTOM_MEASURED_US = {
    2: (9.5, 8.8, 8.7, 12.9, 17.7, 26.6),
    4: (9.1, 8.5, 9.2, 20.6, 26.9, 40.2),
    8: (10.1, 9.3, 11.8, 24.1, 30.4, 45.0),
}
MEASURED_NVLINK_BYTES_PER_S = 450e9  # H100 SXM NVLink4, per direction


def _measured(size: float, n: int, rate_scale: float) -> float:
    xs, ys = CUSTOM_SIZES_B, CUSTOM_MEASURED_US[n]
    if size <= xs[0]:
        return ys[0] * US
    for i in range(1, len(xs)):
        if size <= xs[i] or i == len(xs) - 1:
            slope = (ys[i] - ys[i - 1]) * US / (xs[i] - xs[i - 1]) / rate_scale  # s per byte
            return ys[i - 1] * US + (size - xs[i - 1]) * slope
    raise AssertionError("unreachable")


def custom_s(size: float, n: int, nvlink_bytes_per_s: float) -> tuple[float, str]:
    """(seconds, algorithm) of vLLM's custom all-reduce of ``size`` bytes over n GPUs."""
    scale = nvlink_bytes_per_s / MEASURED_NVLINK_BYTES_PER_S
    if n in CUSTOM_MEASURED_US:
        t = _measured(size, n, scale)
    else:  # 6 GPUs: between the 4- and 8-GPU measurements
        t = (_measured(size, 4, scale) + _measured(size, 8, scale)) / 2
    one_shot = n == 2 or (n <= 4 and size < 512 * 1024) or (n <= 8 and size < 256 * 1024)
    return t, "custom one-shot" if one_shot else "custom two-shot"


def tp_allreduce(size: float, group: Group, gpu: GPUSpec, custom: bool) -> tuple[float, str]:
    """(seconds, algorithm) of one tensor-parallel all-reduce of ``size`` bytes."""
    n = group.size
    if n <= 1 or size <= 0:
        return 0.0, "none"
    if custom and not group.crosses_nodes and n in CUSTOM_SIZES and size <= CUSTOM_MAX_BYTES:
        return custom_s(size, n, gpu.intra_bytes_per_s)
    return collective_time("all-reduce", size, group, gpu), "nccl"
