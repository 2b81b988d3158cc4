"""A GPU as the planner sees it: capacity, bandwidths and dense peak rates, in SI units."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from gpuplan.errors import GpuplanError, require
from gpuplan.units import GB, TFLOP

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Efficiency:
    """Achievable fractions of a GPU's datasheet rates: the performance model's only free numbers.

    Each comes from a published measurement or is marked assumed (catalog/efficiency/*.toml).
    """

    name: str
    gemm: dict[str, float]  # best achievable matmul rate per dtype over the dense peak (MAMF)
    tiles: tuple[tuple[int, int, float], ...]  # (tile M, tile N, relative throughput) cuBLAS picks from
    flash_fwd: float  # attention-kernel rate over peak, long sequences
    flash_bwd: float  # backward, FLOPs counted as 2.5x forward (FlashAttention's convention)
    seq_half: float  # sequence length at which attention runs at half its long-sequence rate
    hbm: float  # streaming kernels' bandwidth over the HBM peak
    intra_bus: float  # NCCL bus bandwidth over the intra-node link rate (one direction)
    inter_bus: float  # NCCL bus bandwidth over the NIC rate
    intra_latency_s: float
    inter_latency_s: float
    kernel_overhead_s: float
    sustained: float = 1.0  # tensor-core rate held in long multi-GPU runs over the short-burst MAMF
    # The rate one GPU holds by itself under back-to-back dense GEMMs, over the MAMF (measured; None:
    # not measured, ``sustained`` stands for it). ``sustained`` is fitted over multi-GPU runs, which
    # also wait at every collective for the slowest of their GPUs: identical GPUs differ by 8% on
    # average (max 22%) under power management (Sinha et al., SC22, "Not All GPUs Are Created
    # Equal"). A job on one GPU waits for none (``for_job``).
    solo_sustained: float | None = None
    # FlashAttention-2 kernels (PyTorch SDPA's flash backend, the flash_attn 2 package) where the GPU's
    # best fused kernel (flash_fwd/bwd: FlashAttention-3 or cuDNN on Hopper) is faster; 0: the same
    fa2_fwd: float = 0.0
    fa2_bwd: float = 0.0
    # PyTorch SDPA's cuDNN backend by head dim: (head_dim, forward, backward) long-sequence rates
    # over peak x the clock they were measured at (one GPU: solo_sustained, else sustained),
    # measured (scripts/fit_attention.py). Where present, SDPA ("sdpa")
    # runs it, as PyTorch >= 2.11 does on sm90/sm100 (sdp_utils.cpp check_prefer_cudnn_attention:
    # the bundled cuDNN > 9.15); where absent, SDPA runs FlashAttention-2 (fa2_fwd/fa2_bwd)
    sdpa_cudnn: tuple[tuple[int, float, float], ...] = ()
    # Tiles scheduled persistently over the SMs (CUTLASS 3 / cuBLAS's Hopper kernels: a fixed grid
    # of CTAs walks the tile list, stream-K splits the last wave's work): a part-filled last wave
    # costs its share, not a full wave. Measured on H100: no staircase across wave boundaries
    # (measurements/h100-sxm-2026-11-23/kernels/waves.json)
    persistent_tiles: bool = False
    # Every attention kernel's rate relative to the fractions above (a calibration profile fits it
    # from the user's runs; 1 in the catalog): one factor for whichever kernel a plan runs
    attention_scale: float = 1.0
    # K-loop elements each output tile pays beyond its K (pipeline fill and epilogue of the mainloop)
    tile_k_fill: float = 0.0
    # SMs a running NCCL collective occupies (one thread block per channel): compute overlapped
    # with communication runs on the rest
    comm_sms: int = 0
    # Seconds every optimizer step pays outside the kernels modelled (host, data loader, framework
    # bookkeeping, logging): 0 in the catalog; a calibration profile fits it from the user's runs
    step_overhead_s: float = 0.0
    # PyTorch's eager elementwise kernels (TensorIterator: casts, broadcasts, strided halves, cat)
    # over the HBM peak, where measured (None: ``hbm``). Megatron's unfused chains run them
    # (estimate/unfused_ops.py, expert_bias.py; kernels.eager_memory_time)
    eager_hbm: float | None = None
    # FLA's chunked Gated DeltaNet kernels (compute.gated_delta_times): the shares of the HBM peak
    # their forward and backward kernels move bytes at (None: ``hbm``) and the time each chunk adds
    # to the state passes that walk a sequence's chunks in order, forward and per backward pass
    # (scripts/fit_gdn.py)
    gdn_hbm_fwd: float | None = None
    gdn_hbm_bwd: float | None = None
    gdn_chunk_fwd_s: float = 0.0
    gdn_chunk_bwd_s: float = 0.0
    # A memory-bound GEMM's fixed time beyond its bytes at ``hbm`` (pipeline fill, drain, split-K's
    # reduction), measured on decode GEMMs (scripts/fit_decode.py); None: kernel_overhead_s
    decode_gemm_latency_s: float | None = None
    # A grouped GEMM over the routed experts at decode sizes: the most bytes/s it reads their
    # weights at whatever the HBM (the bytes its kernels keep in flight per SM over the memory
    # latency), and its fixed time per kernel (scripts/fit_decode.py); None: hbm, decode_gemm_latency_s
    grouped_decode_bytes_per_s: float | None = None
    grouped_decode_latency_s: float | None = None
    assumed: bool = False

    def __post_init__(self) -> None:
        for name in (
            "flash_fwd",
            "flash_bwd",
            "hbm",
            "intra_bus",
            "inter_bus",
            "sustained",
            "solo_sustained",
            "eager_hbm",
            "gdn_hbm_fwd",
            "gdn_hbm_bwd",
        ):
            value = getattr(self, name)
            if value is None:
                continue
            require(0 < value <= 1, f"efficiency.{name}", f"must be in (0, 1], got {value}")
        for dtype, value in self.gemm.items():
            require(0 < value <= 1, f"efficiency.gemm.{dtype}", f"must be in (0, 1], got {value}")
        for head_dim, fwd, bwd in self.sdpa_cudnn:
            require(
                head_dim > 0 and 0 < fwd <= 1 and 0 < bwd <= 1,
                "efficiency.attention.sdpa_cudnn",
                f"needs a positive head dim and fractions in (0, 1], got {(head_dim, fwd, bwd)}",
            )
        require(self.attention_scale > 0, "efficiency.attention_scale", f"must be positive, got {self.attention_scale}")
        require(len(self.tiles) > 0, "efficiency.gemm.tiles", "needs at least one tile")
        require(self.step_overhead_s >= 0, "efficiency.step_overhead_s", f"must be >= 0, got {self.step_overhead_s}")
        for name in ("decode_gemm_latency_s", "grouped_decode_latency_s"):
            value = getattr(self, name)
            require(value is None or value >= 0, f"efficiency.{name}", f"must be >= 0, got {value}")
        rate = self.grouped_decode_bytes_per_s
        require(rate is None or rate > 0, "efficiency.grouped_decode_bytes_per_s", f"must be positive, got {rate}")

    def __hash__(self) -> int:  # every field: a changed efficiency must never hit a cached result
        return hash(
            tuple(
                tuple(sorted(v.items())) if isinstance(v, dict) else v
                for v in (getattr(self, f.name) for f in dataclasses.fields(self))
            )
        )

    def attention_fractions(self, kernel: str, head_dim: int = 128) -> tuple[float, float]:
        """(forward, backward) rate over peak of a flash kernel: ``fa3`` the GPU's best fused kernel
        (FlashAttention-3 or cuDNN), ``fa2`` FlashAttention-2 (PyTorch SDPA's flash backend),
        ``sdpa`` what PyTorch's scaled_dot_product_attention picks on this GPU (the measured cuDNN
        table by head dim, interpolated in log2(head_dim) and held at its ends, else fa2).

        ``fa3``'s rates (flash_fwd/flash_bwd) are stated at head dim 128; where the cuDNN table
        spans several head dims, other head dims scale by the table's ratio to its value at 128:
        the fused kernels share that shape (measured on H100: head dim 64 runs cuDNN's forward at
        0.76x and backward at 0.83x its head-dim-128 rate; FlashAttention-3's paper, Shah et al.
        2024, Figs. 5-6, shows FA3 at 0.77x forward for head dim 64 at 16K tokens)."""
        if kernel == "sdpa" and self.sdpa_cudnn:
            fwd, bwd = _by_head_dim(self.sdpa_cudnn, head_dim)
        elif kernel in ("fa2", "sdpa") and self.fa2_fwd:
            fwd, bwd = self.fa2_fwd, self.fa2_bwd or self.flash_bwd
        else:
            fwd, bwd = self.flash_fwd, self.flash_bwd
            if kernel == "fa3" and len(self.sdpa_cudnn) > 1 and head_dim != 128:
                at, ref = _by_head_dim(self.sdpa_cudnn, head_dim), _by_head_dim(self.sdpa_cudnn, 128)
                fwd, bwd = fwd * at[0] / ref[0], bwd * at[1] / ref[1]
        s = self.attention_scale
        return min(1.0, fwd * s), min(1.0, bwd * s)

    def gemm_fraction(self, dtype: str) -> float:
        """The measured fraction for ``dtype`` (a block-scaled format: its element type's), else the
        lowest measured one."""
        element = {"mxfp8": "fp8", "nvfp4": "fp4"}.get(dtype, dtype)
        return self.gemm.get(dtype, self.gemm.get(element, min(self.gemm.values())))

    @classmethod
    def from_catalog(cls, data: dict) -> Efficiency:
        net = data["network"]
        return cls(
            name=data["name"],
            gemm={
                k: v
                for k, v in data["gemm"].items()
                if k not in ("tiles", "sustained", "solo_sustained", "tile_k_fill", "persistent_tiles")
            },
            tiles=tuple((int(m), int(n), float(r)) for m, n, r in data["gemm"]["tiles"]),
            flash_fwd=data["attention"]["flash_fwd"],
            flash_bwd=data["attention"]["flash_bwd"],
            seq_half=data["attention"]["seq_half"],
            hbm=data["memory"]["hbm"],
            eager_hbm=data["memory"].get("eager_hbm"),
            fa2_fwd=data["attention"].get("fa2_fwd", 0.0),
            fa2_bwd=data["attention"].get("fa2_bwd", 0.0),
            intra_bus=net["intra_bus"],
            inter_bus=net["inter_bus"],
            intra_latency_s=net["intra_latency_us"] * 1e-6,
            inter_latency_s=net["inter_latency_us"] * 1e-6,
            kernel_overhead_s=data["kernel"]["overhead_us"] * 1e-6,
            decode_gemm_latency_s=_scaled(data["kernel"], "decode_gemm_latency_us", 1e-6),
            grouped_decode_bytes_per_s=_scaled(data["kernel"], "grouped_decode_gbps", 1e9),
            grouped_decode_latency_s=_scaled(data["kernel"], "grouped_decode_latency_us", 1e-6),
            sustained=data["gemm"].get("sustained", 1.0),
            solo_sustained=data["gemm"].get("solo_sustained"),
            tile_k_fill=data["gemm"].get("tile_k_fill", 0.0),
            comm_sms=net.get("comm_sms", 0),
            persistent_tiles=data["gemm"].get("persistent_tiles", False),
            sdpa_cudnn=_head_dim_table(data["attention"].get("sdpa_cudnn", {})),
            gdn_hbm_fwd=data.get("linear_attention", {}).get("gdn_hbm_fwd"),
            gdn_hbm_bwd=data.get("linear_attention", {}).get("gdn_hbm_bwd"),
            gdn_chunk_fwd_s=data.get("linear_attention", {}).get("gdn_chunk_fwd_us", 0.0) * 1e-6,
            gdn_chunk_bwd_s=data.get("linear_attention", {}).get("gdn_chunk_bwd_us", 0.0) * 1e-6,
            assumed=data.get("assumed", False),
        )


def _scaled(table: dict, key: str, unit: float) -> float | None:
    """``table[key]`` in SI units (``unit`` per catalog unit), None where the catalog has none."""
    return table[key] * unit if key in table else None


def _head_dim_table(t: dict) -> tuple[tuple[int, float, float], ...]:
    """``[attention.sdpa_cudnn]``'s three equal-length lists as (head_dim, fwd, bwd) rows."""
    dims, fwd, bwd = t.get("head_dim", []), t.get("fwd", []), t.get("bwd", [])
    require(
        len(dims) == len(fwd) == len(bwd),
        "efficiency.attention.sdpa_cudnn",
        f"head_dim, fwd and bwd must be as long as each other, got {len(dims)}, {len(fwd)}, {len(bwd)}",
    )
    return tuple((int(d), float(f), float(b)) for d, f, b in zip(dims, fwd, bwd))


def _by_head_dim(table: tuple[tuple[int, float, float], ...], head_dim: int) -> tuple[float, float]:
    """(fwd, bwd) at ``head_dim``: linear in log2(head_dim) between the table's rows, held at its ends."""
    rows = sorted(table)
    if head_dim <= rows[0][0]:
        return rows[0][1], rows[0][2]
    for (d0, f0, b0), (d1, f1, b1) in zip(rows, rows[1:]):
        if head_dim <= d1:
            t = math.log2(head_dim / d0) / math.log2(d1 / d0)
            return f0 + t * (f1 - f0), b0 + t * (b1 - b0)
    return rows[-1][1], rows[-1][2]


@dataclass(frozen=True)
class GPUSpec:
    id: str
    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops: dict[str, float]  # dense peak FLOP/s per dtype
    interconnect: str
    interconnect_bytes_per_s: float  # per GPU, both directions together (as datasheets quote it)
    pcie_bytes_per_s: float  # both directions together, as quoted
    gpus_per_node: int
    tdp_w: float
    sm_count: int = 0
    compute_capability: float = 0.0  # NVIDIA's major.minor (9.0 Hopper, 10.0 B200/GB200); 0: not stated
    nvlink_domain: int = 0  # GPUs in one NVLink domain when larger than a node (GB200 NVL72)
    vendor: str = "nvidia"
    nics_per_node: int = 0  # scale-out NICs per node
    nic_bytes_per_s: float = 0.0  # per NIC, one direction
    c2c_bytes_per_s: float = 0.0  # NVLink-C2C to the host CPU (Grace), both directions; 0: PCIe
    efficiency: Efficiency | None = None
    source: str = field(default="", compare=False)
    date: str = field(default="", compare=False)

    def __hash__(self) -> int:  # the efficiency too: a recalibrated GPU must not hit a cached result
        return hash(
            (
                self.id,
                self.memory_bytes,
                self.hbm_bytes_per_s,
                tuple(sorted(self.peak_flops.items())),
                self.interconnect_bytes_per_s,
                self.efficiency,
            )
        )

    def __post_init__(self) -> None:
        # 0 < x < inf also refuses nan (every comparison with it is false)
        require(
            0 < self.memory_bytes < math.inf, "memory_bytes", f"must be positive and finite, got {self.memory_bytes}"
        )
        require(
            0 < self.hbm_bytes_per_s < math.inf, "hbm_gbps", f"must be positive and finite, got {self.hbm_bytes_per_s}"
        )
        require(self.gpus_per_node > 0, "gpus_per_node", "must be positive")
        for dtype, flops in self.peak_flops.items():
            require(dtype in DTYPES, "tflops", f"unknown dtype {dtype!r}", f"use one of {DTYPES}")
            require(0 < flops < math.inf, f"tflops.{dtype}", f"must be positive and finite, got {flops}")

    @property
    def fp8_any_layout(self) -> bool:
        """Whether the GPU's FP8 GEMMs take operands in any layout, so a per-tensor-scaled FP8
        tensor serves both the forward and the transposed backward GEMM from one copy:
        TransformerEngine's nvte_is_non_tn_fp8_gemm_supported (transformer_engine/common/
        transformer_engine.cpp, v2.9: compute capability 10.x, or 13.0 and later), which
        Float8Quantizer and Float8CurrentScalingQuantizer read before they allocate a transpose
        (pytorch/csrc/quantizer.cpp: ``with_transpose = columnwise_usage &&
        !nvte_is_non_tn_fp8_gemm_supported()``). Hopper (9.0) runs FP8 GEMMs only in the TN
        layout and keeps a transposed copy."""
        cc = self.compute_capability
        return self.vendor == "nvidia" and (10.0 <= cc < 12.0 or cc >= 13.0)

    @property
    def intra_bytes_per_s(self) -> float:
        """One direction of the per-GPU scale-up link (datasheets quote both directions together)."""
        return self.interconnect_bytes_per_s / 2

    @property
    def inter_bytes_per_s(self) -> float:
        """Scale-out bandwidth per GPU, one direction: the node's NICs shared by its GPUs."""
        return self.nics_per_node * self.nic_bytes_per_s / self.gpus_per_node

    @property
    def host_bytes_per_s(self) -> float:
        """One direction of the GPU's link to host memory: NVLink-C2C where present, else PCIe."""
        return (self.c2c_bytes_per_s or self.pcie_bytes_per_s) / 2

    @property
    def fast_domain(self) -> int:
        """GPUs that reach each other over the scale-up fabric (a node, or an NVL72 rack)."""
        return max(self.gpus_per_node, self.nvlink_domain)

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype. The block-scaled formats run at the rate of their
        element type (MXFP8 at FP8's, NVFP4 at FP4's: NVIDIA Blackwell datasheets) and need the
        block-scale tensor cores that came with FP4 (NVIDIA Blackwell, AMD CDNA 4); NVFP4 is
        NVIDIA's own."""
        if dtype in ("mxfp8", "nvfp4"):
            element = "fp8" if dtype == "mxfp8" else "fp4"
            if "fp4" not in self.peak_flops or element not in self.peak_flops:
                raise GpuplanError(
                    "precision",
                    f"{self.name} has no block-scaled (MX/NVFP4) tensor cores for {dtype}; they need "
                    "NVIDIA Blackwell (B200, B300, GB200) or AMD CDNA 4 (MI355X)",
                    "use `precision=fp8` (per-tensor scaled) where the GPU has fp8, else bf16",
                )
            if dtype == "nvfp4" and self.vendor != "nvidia":
                raise GpuplanError(
                    "precision", f"nvfp4 is an NVIDIA format; {self.name} cannot run it", "use `precision=mxfp8`"
                )
            return self.peak_flops[element]
        if dtype == "tf32" and dtype not in self.peak_flops and "fp32" in self.peak_flops:
            # FP32 training allows TF32 GEMMs; where the GPU has none (AMD CDNA 4's MI355X lists
            # FP32 matrix but no TF32/XF32 rate) they run in FP32: PyTorch's
            # torch.set_float32_matmul_precision docs, "high": TF32 "if the appropriate fast matrix
            # multiplication algorithms are available. Otherwise float32 matrix multiplications are
            # computed as if the precision is 'highest'"
            return self.peak_flops["fp32"]
        if dtype not in self.peak_flops:
            have = ", ".join(sorted(self.peak_flops))
            usable = [p for p in ("bf16", "fp16", "fp8", "fp32") if p in self.peak_flops or p == "fp32"]
            raise GpuplanError(
                "precision",
                f"{self.name} has no {dtype} tensor cores",
                f"use `precision={' or '.join(usable[:2])}` (its tensor-core dtypes: {have})",
            )
        return self.peak_flops[dtype]

    @classmethod
    def from_catalog(cls, gpu_id: str, data: dict, efficiency: Efficiency | None = None) -> GPUSpec:
        return cls(
            id=gpu_id,
            name=data["name"],
            memory_bytes=float(data["memory_bytes"]),
            hbm_bytes_per_s=data["hbm_gbps"] * GB,
            peak_flops={k: v * TFLOP for k, v in data["tflops"].items()},
            interconnect=data["interconnect"],
            interconnect_bytes_per_s=data["interconnect_gbps"] * GB,
            pcie_bytes_per_s=data["pcie_gbps"] * GB,
            gpus_per_node=data["gpus_per_node"],
            tdp_w=data["tdp_w"],
            sm_count=data.get("sm_count", 0),
            compute_capability=float(data.get("compute_capability", 0.0)),
            nvlink_domain=data.get("nvlink_domain", 0),
            vendor=data.get("vendor", "nvidia"),
            nics_per_node=data.get("nics_per_node", 0),
            nic_bytes_per_s=data.get("nic_gbit", 0) * 1e9 / 8,
            c2c_bytes_per_s=data.get("c2c_gbps", 0) * GB,
            efficiency=efficiency,
            source=data["source"],
            date=data["date"],
        )


def for_job(gpu: GPUSpec, gpus: int) -> GPUSpec:
    """``gpu`` as a job on ``gpus`` of them runs it: one GPU alone at the rate it holds by itself
    (``Efficiency.solo_sustained``, measured) where the family states one; several at the
    multi-GPU runs' fitted ``sustained``, which also waits for the slowest of them."""
    e = gpu.efficiency
    if gpus != 1 or e is None or e.solo_sustained is None or e.solo_sustained == e.sustained:
        return gpu
    return dataclasses.replace(gpu, efficiency=dataclasses.replace(e, sustained=e.solo_sustained))
