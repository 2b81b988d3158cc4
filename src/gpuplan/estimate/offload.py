"""Training with offload: ZeRO-Offload and ZeRO-Infinity memory per GPU and per host, and step time.

Memory (Ren et al. 2021, "ZeRO-Offload: Democratizing Billion-Scale Model Training", section 4.1):
mixed-precision Adam keeps 16 bytes per parameter, 2 (fp16 params) + 2 (fp16 grads) + 12 (fp32
master params, momentum, variance). ZeRO-Offload keeps the fp16 parameters on the GPU and moves
the other 14 bytes to the CPU; with data parallelism each rank offloads its 1/dp partition (section
4.2, ZeRO-2 partitioning). ``optimizer+params`` moves the fp16 parameters too and streams them in
layer by layer (ZeRO-Infinity, Rajbhandari et al. 2021, sections 4-5); ``--offload-device nvme``
puts the 12 bytes of optimizer state on NVMe (ZeRO-Infinity's infinity offload engine), the CPU
holding the gradients and swap buffers; with ``optimizer+params`` on NVMe all 16 bytes of the
partitioned model states live on the drives (the offload engine takes every model state to NVMe:
ZeRO-Infinity section 5.1; how it fine-tunes a trillion parameters on one DGX-2, whose 1.5 TB of
DRAM holds the states of under 100B parameters), the CPU keeping only swap buffers.

Step time (ZeRO-Offload sections 4.2 and 5):

* forward + backward on the GPU: the plan's step as ``step_time`` times every plan (kernels and
  communication), less its GPU optimizer step (``_gpu_side``);
* gradients go down over PCIe (2 bytes per parameter of the rank's partition) *during* the
  backward, so only what the backward does not cover shows;
* the CPU Adam step: memory-bound, ~28 bytes per parameter moved through CPU memory (read fp32
  param, momentum, variance and the fp16 grad, write the first three and the fp16 param copy),
  over the node's memory bandwidth shared by the node's ranks (CPU-Adam, section 5.1);
* the updated fp16 parameters go up over PCIe (2 bytes per parameter);
* with ``delayed_update`` (one-step delayed parameter update, section 5.2) the CPU step and the
  parameter upload of step i overlap the GPU's forward and backward of step i+1.

For ``optimizer+params`` the parameters' partition is fetched from CPU memory before the forward
and again before the backward (ZeRO-Infinity's prefetch, overlapped with compute), and nothing is
uploaded after the step. NVMe adds a read and a write of the optimizer state per step, on the
node's drives, overlapped with the CPU step (ZeRO-Infinity section 6.3, overlap-centric design).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpuplan.errors import DoesNotFit, GpuplanError, require
from gpuplan.estimate.flops import training_flops
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.params import count_params
from gpuplan.estimate.step_time import StepTime, step_time
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig
from gpuplan.units import GB

MODES = ("none", "optimizer", "optimizer+params")
DEVICES = ("cpu", "nvme")
CPU_BYTES_PER_PARAM = 14.0  # fp16 grads + fp32 params, momentum, variance (ZeRO-Offload 4.1)
OPT_STATE_BYTES = 12.0  # fp32 params, momentum, variance
ADAM_TRAFFIC_BYTES = 28.0  # CPU memory traffic per parameter of one Adam step (see module doc)
ADAM_FLOPS = 12.0  # per parameter: moments, bias correction, sqrt, divide, decay, update (assumed)
# DeepSpeed's default reduce_bucket_size (5e8 elements) of fp16 gradients held on the GPU before
# they go down to the CPU
GRAD_BUCKET_BYTES = 2 * 5e8
CPU_USABLE = 0.9  # share of CPU memory that can be pinned (the OS keeps the rest; assumed)
_GEMM_EFF = 0.7  # achievable matmul fraction of a GPU with no efficiency data (catalog median)


@dataclass(frozen=True)
class OffloadTrainRequest:
    model: ModelSpec
    gpu: GPUSpec
    host: HostSpec
    plan: ParallelPlan
    config: TrainingConfig
    offload: str = "optimizer"
    device: str = "cpu"
    delayed_update: bool = False
    microbatches: int = 1  # gradient-accumulation steps per optimizer step

    def __post_init__(self) -> None:
        require(self.offload in MODES, "offload", f"unknown mode {self.offload!r}", f"use one of {', '.join(MODES)}")
        require(
            self.device in DEVICES,
            "offload_device",
            f"unknown device {self.device!r}",
            f"use one of {', '.join(DEVICES)}",
        )
        require(
            self.plan.pp == 1,
            "pp",
            "offload here models data (and tensor) parallel ranks only",
            "use `pp=1` with `offload`",
        )
        require(
            self.config.optimizer == "adamw",
            "optimizer",
            "ZeRO-Offload's CPU step is Adam",
            "use `optimizer=adamw` with `offload`",
        )
        if self.device == "nvme":
            require(self.host.disk_bytes > 0, "disk", "`offload_device=nvme` needs a disk", "pass `disk=2TB`")
        # DeepSpeed offloads parameters (offload_param) under ZeRO stage 3 only; this model
        # partitions the states as that stage does, so an explicit stage 1 or 2 contradicts it
        require(
            self.offload != "optimizer+params" or self.plan.zero in (0, 3),
            "zero",
            f"`offload=optimizer+params` partitions the parameters as ZeRO-3 does, got `zero={self.plan.zero}`",
            "use `zero=3` with `offload=optimizer+params`, or `offload=optimizer`",
        )


@dataclass(frozen=True)
class OffloadTrainEstimate:
    request: OffloadTrainRequest
    params: float
    gpu_bytes: dict[str, float]  # per GPU: weights, gradients, activations, other
    cpu_bytes: float  # per node
    disk_bytes: float  # per node
    fwd_s: float
    bwd_s: float
    pcie_down_s: float  # gradients to the CPU
    pcie_up_s: float  # parameters to the GPU (after the step, or fetched per pass)
    cpu_step_s: float  # CPU Adam (and NVMe swap) time
    step_s: float
    exposed_s: float  # step minus GPU compute: what offload costs
    tflops_per_gpu: float  # model FLOP/s achieved per GPU
    max_params: float  # largest parameter count whose states fit GPU, CPU and disk (this model's activations)
    gpu_step: StepTime | None = None  # the plan's step on the GPU (step_time), where the GPU has efficiency data

    @property
    def gpu_total(self) -> float:
        return sum(self.gpu_bytes.values())


def _ranks_per_node(req: OffloadTrainRequest) -> int:
    return min(req.plan.world_size, req.gpu.gpus_per_node)


def _per_param(req: OffloadTrainRequest) -> tuple[float, float, float]:
    """Bytes per parameter of the *model* on one GPU, one node's CPU memory and one node's disk."""
    p, node = req.plan, _ranks_per_node(req)
    shard = 1 / (p.tp * p.dp)  # a rank's partition of the model
    gpu = 2 / p.tp if req.offload == "optimizer" else 0.0  # fp16 params stay resident (ZeRO-Offload)
    host = 2.0 if req.offload == "optimizer+params" else 0.0  # fp16 params move to the host
    states = OPT_STATE_BYTES if req.offload != "none" else 0.0
    grads = 2.0 if req.offload != "none" else 0.0
    if req.device == "cpu":
        return gpu, (states + grads + host) * shard * node, 0.0
    if req.offload == "optimizer+params":  # every model state on the drives (module doc)
        return gpu, 0.0, (states + grads + host) * shard * node
    return gpu, (grads + host) * shard * node, states * shard * node


def _gpu_side(req: OffloadTrainRequest, flops: float) -> tuple[float, float, StepTime | None]:
    """(the GPU's side of the step without its optimizer step, the whole step on the GPU) in
    seconds, and the ``step_time`` they come from.

    A catalog GPU: the plan's step as ``step_time`` times every plan (kernels and communication),
    so that ``train --offload`` and ``search --offload`` rank on one clock. A GPU described only by
    its peak (the published offload runs' machines, no efficiency data): ``flops`` of this rank's
    tokens at the achievable matmul rate of its tensor-parallel group."""
    m, g, p, c = req.model, req.gpu, req.plan, req.config
    if g.efficiency is not None:
        st = step_time(m, c, p, g, req.microbatches)
        return st.step_s - st.breakdown.get("optimizer", 0.0), st.step_s, st
    compute = flops / (g.peak(c.compute_dtype) * _GEMM_EFF * p.tp)
    return compute, compute, None


def estimate_offload_training(req: OffloadTrainRequest) -> OffloadTrainEstimate:
    """Memory per GPU and host, and step time, of ZeRO-Offload / ZeRO-Infinity (see the module doc)."""
    m, g, h, p, c = req.model, req.gpu, req.host, req.plan, req.config
    pc = count_params(m)
    n = float(pc.total)
    mem = estimate_memory(m, c, p, g, req.microbatches)
    st = mem.per_gpu
    if req.offload == "none":
        gpu = {
            "weights": st.weights,
            "gradients": st.gradients,
            "optimizer": st.optimizer + st.master_weights,
            "activations": st.activations,
            "other": st.other_total,
        }
        cpu_b = disk_b = 0.0
    else:
        per_gpu, per_host, per_disk = _per_param(req)
        layer = max(pc.per_layer) / p.tp
        if req.offload == "optimizer":
            weights = per_gpu * n
        else:  # the current and the prefetched layer, plus the embeddings kept resident
            weights = 2 * 2 * layer + 2 * pc.embedding / p.tp
        grads = min(GRAD_BUCKET_BYTES, 2 * n / p.tp)
        # the allocator's reserve scales with what is allocated, which offload shrinks; DeepSpeed's
        # own bucket replaces the framework's gradient buckets
        other = {k: v for k, v in st.other.items() if k not in ("allocator_reserve", "comm_buckets")}
        allocated = weights + grads + st.activations + sum(other.values())
        other["allocator_reserve"] = c.allocator_fraction * allocated
        gpu = {"weights": weights, "gradients": grads, "activations": st.activations, "other": sum(other.values())}
        cpu_b, disk_b = per_host * n, per_disk * n
    fl = training_flops(m, c.seq_len, c.recompute, modules=c.recomputed, document=c.document_len, mtp=c.mtp_layers)
    tokens = c.seq_len * c.micro_batch * req.microbatches  # per rank per step
    compute, whole, gpu_step = _gpu_side(req, tokens * fl.hardware_per_token)
    fwd, bwd = compute / 3, 2 * compute / 3
    node = _ranks_per_node(req)
    pcie = h.pcie_per_gpu(node)
    part = n / (p.tp * p.dp)
    if req.offload == "none":
        down = up = cpu_step = 0.0
        step = whole
    else:
        down = 2 * part / pcie
        up = 2 * part / pcie
        adam = max(ADAM_TRAFFIC_BYTES * part * node / h.cpu_memory_bytes_per_s, ADAM_FLOPS * part * node / h.cpu_flops)
        all_nvme = req.device == "nvme" and req.offload == "optimizer+params"
        if req.device == "nvme":
            # the states read and written back; with everything on the drives also the gradients
            # read and the updated fp16 parameters written
            swap = (OPT_STATE_BYTES + (2.0 if all_nvme else 0.0)) * part * node
            adam = max(adam, swap / h.disk_read_bytes_per_s + swap / h.disk_write_bytes_per_s)
        if all_nvme:  # each pass's parameters come off the drives before they cross PCIe
            up = max(up, 2 * part * node / h.disk_read_bytes_per_s)
        cpu_step = adam
        if req.offload == "optimizer":
            gpu_t = fwd + max(bwd, down)
            host_t = cpu_step + up
        else:  # params fetched before the forward and the backward, gradients down in the backward
            gpu_t = max(fwd, up) + max(bwd, up + down)
            host_t = cpu_step
        step = max(gpu_t, host_t) if req.delayed_update else gpu_t + host_t
    model_flops = tokens * fl.model_per_token
    per_gpu_param, per_host_param, per_disk_param = _per_param(req) if req.offload != "none" else (0, 0, 0)
    fixed = sum(v for k, v in gpu.items() if k != "weights" or req.offload == "optimizer+params")
    limits = []
    if per_gpu_param:
        limits.append((g.memory_bytes - fixed) / per_gpu_param)
    if per_host_param:
        limits.append(h.cpu_memory_bytes * CPU_USABLE / per_host_param)
    if per_disk_param:
        limits.append(h.disk_bytes / per_disk_param)
    if req.offload == "none":
        limits.append(n * (g.memory_bytes - st.activations - st.other_total) / max(st.model_states, 1.0))
    return OffloadTrainEstimate(
        request=req,
        params=n,
        gpu_bytes=gpu,
        cpu_bytes=cpu_b,
        disk_bytes=disk_b,
        fwd_s=fwd,
        bwd_s=bwd,
        pcie_down_s=down,
        pcie_up_s=up,
        cpu_step_s=cpu_step,
        step_s=step,
        exposed_s=max(0.0, step - compute),  # what offload adds to the GPU's side; no rounding below zero
        tflops_per_gpu=model_flops / p.tp / step / 1e12,
        max_params=max(0.0, min(limits)),
        gpu_step=gpu_step,
    )


def check_fits(est: OffloadTrainEstimate) -> None:
    """Raise one line naming the tier that is short and the fix. GPU memory short is
    :class:`DoesNotFit` (exit code 3), as a plan without offload that does not fit; a host short of
    CPU memory or disk names those inputs (exit code 2)."""
    req = est.request
    g, h = req.gpu, req.host
    if est.gpu_total > g.memory_bytes:
        fix = (
            "use `offload=optimizer+params`"
            if req.offload != "optimizer+params"
            else "lower `micro_batch` or use `recompute=full`"
        )
        raise DoesNotFit(
            "offload", f"{est.gpu_total / GB:.1f} GB per GPU exceeds {g.name}'s {g.memory_bytes / GB:.1f} GB", fix
        )
    if est.cpu_bytes > h.cpu_memory_bytes * CPU_USABLE:
        raise GpuplanError(
            "cpu_memory",
            f"offloaded states need {est.cpu_bytes / GB:.0f} GB per node, CPU memory "
            f"holds {h.cpu_memory_bytes * CPU_USABLE / GB:.0f} GB usable",
            f"raise `cpu_memory` to at least {est.cpu_bytes / CPU_USABLE / GB:.0f}GB, add GPUs "
            "(states are partitioned across ranks) or use `offload_device=nvme`",
        )
    if est.disk_bytes > h.disk_bytes:
        raise GpuplanError(
            "disk",
            f"optimizer states need {est.disk_bytes / GB:.0f} GB per node on NVMe, the disk "
            f"holds {h.disk_bytes / GB:.0f} GB",
            f"use `disk={est.disk_bytes / 1e12 * 1.1:.1f}TB` or more",
        )


def to_dict(est: OffloadTrainEstimate) -> dict:
    r = est.request
    return {
        "model": r.model.name,
        "gpu": r.gpu.name,
        "host": r.host.name,
        "offload": r.offload,
        "device": r.device,
        "delayed_update": r.delayed_update,
        "params": est.params,
        "memory_bytes": {
            "per_gpu": {**est.gpu_bytes, "total": est.gpu_total},
            "cpu_per_node": est.cpu_bytes,
            "disk_per_node": est.disk_bytes,
        },
        "step_s": {
            "total": est.step_s,
            "forward": est.fwd_s,
            "backward": est.bwd_s,
            "pcie_grads_down": est.pcie_down_s,
            "pcie_params_up": est.pcie_up_s,
            "cpu_optimizer": est.cpu_step_s,
            "exposed_offload": est.exposed_s,
        },
        "tflops_per_gpu": est.tflops_per_gpu,
        "max_params": est.max_params,
    }


def offloaded_step(est: OffloadTrainEstimate) -> StepTime:
    """The plan's step on the clock every plan is timed on, its optimizer on the CPU: the GPU
    optimizer term replaced by what the offload exposes (the breakdown still sums to the step).
    ``est.step_s`` is the same number (``_gpu_side``); this keeps the kernels' breakdown. A GPU
    with efficiency data only: the others have no ``step_time``."""
    st = est.gpu_step
    if st is None:
        raise GpuplanError("gpu", f"{est.request.gpu.name} has no efficiency data", "pick a GPU from `gpuplan gpus`")
    gpu_opt = st.breakdown.get("optimizer", 0.0)
    breakdown = {**st.breakdown, "optimizer": 0.0, "offload": est.exposed_s}
    return replace(st, step_s=st.step_s - gpu_opt + est.exposed_s, breakdown=breakdown)


def as_run(doc: dict, est: OffloadTrainEstimate, step: StepTime) -> dict:
    """``doc`` (``train --json`` of the plan without offload, estimate/train.py ``to_dict``) as the
    offloaded plan runs: memory per GPU and its verdict from the offload estimate (the plan without
    it kept under ``memory.without_offload``), every figure of the clock (step, days, GPU-hours,
    cost, MFU, tokens/s) on ``step``, the offloaded step, and the offload estimate under
    ``offload``. ``train --offload`` and ``search --offload`` print it."""
    g = est.request.gpu
    memory = doc["memory"]
    memory["without_offload"] = {k: memory[k] for k in ("fits", "tight", "headroom", "per_gpu") if k in memory}
    memory["tight"] = False  # the offload estimate's verdict has no allocator-reserve margin of its own
    zeros = dict.fromkeys(("weights", "gradients", "optimizer", "master_weights", "activations", "other"), 0.0)
    memory["per_gpu"] = {**zeros, **est.gpu_bytes, "total": est.gpu_total}
    memory["fits"] = doc["fits"] = est.gpu_total <= g.memory_bytes
    memory["headroom"] = g.memory_bytes - est.gpu_total
    perf, t = doc["performance"], doc["time"]
    slower = step.step_s / perf["step_s"]  # the offloaded step over the step without offload
    for k in ("step_s", "total_s", "days"):
        t[k] *= slower
    if t.get("step_s_range"):
        t["step_s_range"] = [x * slower for x in t["step_s_range"]]
    for k in ("gpu_hours", "cost_usd"):
        if doc.get(k) is not None:
            doc[k] *= slower
    for k in ("mfu", "hfu", "tokens_per_s_per_gpu"):
        if doc.get(k) is not None:
            doc[k] /= slower
    perf["step_s"], perf["mfu"], perf["hfu"] = step.step_s, perf["mfu"] / slower, perf["hfu"] / slower
    perf["breakdown_s"] = dict(step.breakdown)
    doc["offload"] = to_dict(est)
    return doc
