"""Write the sample logs under tests/data/runs, each line printed with the format string of the
framework version it names (sources in gpuplan/runs/readers.py and trace.py), so the samples are
the real formats with chosen numbers. Run from the repository root:

    python tests/data/runs/make_samples.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def megatron_2021() -> str:
    """Megatron-LM v2.6 (2021), megatron/training.py training_log and megatron/utils.py report_memory."""
    out = [
        "using world size: 8, data-parallel-size: 1, tensor-model-parallel size: 8, pipeline-model-parallel size: 1",
        "[after model, optimizer, and learning rate scheduler are built] datetime: 2021-08-01 10:00:00",
        "training ...",
    ]
    for it, ms in ((10, 61234.5), (20, 44012.3), (30, 44550.1), (40, 43890.7)):
        s = f" iteration {it:8d}/{500000:8d} |"
        s += f" consumed samples: {it * 512:12d} |"
        s += f" elapsed time per iteration (ms): {ms:.1f} |"
        s += f" learning rate: {1.5e-4 * it / 40:.3E} |"
        s += f" global batch size: {512:5d} |"
        s += " {}: {:.6E} |".format("lm loss", 9.5 - it / 20)
        s += f" loss scale: {65536.0:.1f} |"
        s += f" grad norm: {1.234:.3f} |"
        s += f" number of skipped iterations: {0:3d} |"
        s += f" number of nan iterations: {0:3d} |"
        out.append(s)
        if it == 10:
            mb = 1024.0 * 1024.0
            r = f"(after {it} iterations)" + " memory (MB)"
            r += f" | allocated: {9876543210 / mb}"
            r += f" | max allocated: {14876543210 / mb}"
            r += f" | reserved: {16106127360 / mb}"
            r += f" | max reserved: {16106127360 / mb}"
            out.append(f"[Rank {0}] {r}")
    return "\n".join(out) + "\n"


def megatron_core(with_micro: bool) -> str:
    """Megatron-Core r0.8 (timestamp to the second) and main (to the microsecond):
    megatron/training/training.py training_log, megatron/training/utils.py report_memory (:.2f)."""
    out = [
        "> building GPT model ...",
        " > number of parameters on (tensor, pipeline) model parallel rank (0, 0): 2008227840",
    ]
    stamp = "2024-07-10 12:00:{:02d}.{:06d}" if with_micro else "2024-07-10 12:00:{:02d}"
    for it, ms, tf in (
        (1, 15234.9, 201.3),
        (10, 7712.4, 399.8),
        (20, 7698.1, 400.5),
        (30, 7705.6, 400.1),
        (40, 7721.0, 399.3),
    ):
        ts = stamp.format(it % 60, 123456) if with_micro else stamp.format(it % 60)
        s = f" [{ts}]"
        s += f" iteration {it:8d}/{1000:8d} |"
        s += f" consumed samples: {it * 128:12d} |"
        s += f" elapsed time per iteration (ms): {ms:.1f} |"
        s += f" throughput per GPU (TFLOP/s/GPU): {tf:.1f} |"
        s += f" learning rate: {3e-4 * it / 40:.6E} |"
        s += f" global batch size: {128:5d} |"
        s += " {}: {:.6E} |".format("lm loss", 10.5 - it / 10)
        s += f" loss scale: {1.0:.1f} |"
        s += f" grad norm: {2.345:.3f} |"
        s += f" number of skipped iterations: {0:3d} |"
        s += f" number of nan iterations: {0:3d} |"
        out.append(s)
        if it in (1, 10):
            mb = 1024.0 * 1024.0
            for rank in (0, 4):  # dp rank 0 of each tensor/pipeline group prints; the busiest decides
                extra = 0 if rank == 0 else 734003200
                r = f"(after {it} iterations) memory (MB)"
                r += f" | allocated: {(30064771072 + extra) / mb:.2f}"
                r += f" | max allocated: {(41875931136 + extra) / mb:.2f}"
                r += f" | reserved: {(44023414784 + extra) / mb:.2f}"
                r += f" | max reserved: {(44023414784 + extra) / mb:.2f}"
                out.append(f"[Rank {rank}] {r}")
    return "\n".join(out) + "\n"


def nemo1() -> str:
    """NeMo 1.x (PyTorch Lightning progress bar with NeMo's train_step_timing)."""
    return (
        "\n".join(
            f"Epoch 0: : {100 * s // 50:3d}%|##########| {s}/50 [31:51<00:00, reduced_train_loss=6.130, global_step={s - 1}.0, "
            f"consumed_samples={(s) * 1536}.0, train_step_timing in s={t:.3f}]"
            for s, t in ((1, 12.402), (10, 5.912), (20, 5.905), (30, 5.897), (50, 5.900))
        )
        + "\n"
    )


class C:  # torchtitan's Color (torchtitan/tools/utils.py)
    red, green, yellow, blue, magenta, cyan, reset = (f"\033[{n}m" for n in (31, 32, 33, 34, 35, 36, 39))
    orange, turquoise = "\033[38;2;180;60;0m", "\033[38;2;54;234;195m"


def torchtitan(version: str) -> str:
    """torchtitan train.py (2024-09, wps), components/metrics.py v0.1.0 (tps, tflops) and main
    (grad_norm, turquoise memory, mfu N/A under FP8); logger format "[titan] %(asctime)s - ..."."""
    out = [
        "[titan] 2025-06-17 17:30:11,000 - root - INFO - Starting job: Llama 3 8B training",
        "[titan] 2025-06-17 17:30:12,000 - root - INFO - CUDA memory usage for model: 3.74GiB(4.72%)",
    ]
    for step, tps in ((1, 1011), (10, 7612), (20, 7655), (30, 7640)):
        mem, pct = 36.21, 45.72
        mfu = 100 * 6 * 8.03e9 * tps / 989e12
        tf = 6 * 8.03e9 * tps / 1e12
        if version == "2024":
            msg = (
                f"{C.cyan}step: {step:2}  {C.green}loss: {9.5 - step / 10:7.4f}  "
                f"{C.yellow}memory: {mem:5.2f}GiB({pct:.2f}%)  {C.blue}wps: {round(tps):,}  "
                f"{C.magenta}mfu: {mfu:.2f}%{C.reset}"
            )
        elif version == "v0.1":
            msg = (
                f"{C.red}step: {step:2}  {C.green}loss: {9.5 - step / 10:7.4f}  "
                f"{C.yellow}memory: {mem:5.2f}GiB({pct:.2f}%)  {C.blue}tps: {round(tps):,}  "
                f"{C.cyan}tflops: {tf:,.2f}  {C.magenta}mfu: {mfu:.2f}%{C.reset}"
            )
        else:
            msg = (
                f"{C.red}step: {step:2}  {C.green}loss: {9.5 - step / 10:8.5f}  {C.orange}grad_norm: {1.5:7.4f}  "
                f"{C.turquoise}memory: {mem:5.2f}GiB({pct:.2f}%)  {C.blue}tps: {round(tps):,}  "
                f"{C.cyan}tflops: {tf:,.2f}  {C.magenta}mfu: {'N/A'}{C.reset}"
            )
        out.append(f"[titan] 2025-06-17 17:31:{step:02d},000 - root - INFO - {msg}")
    out.append(
        f"[titan] 2025-06-17 17:32:00,000 - root - INFO - {C.yellow}validate step: 30  {C.green}loss:  8.1234  "
        f"{C.turquoise}memory: 30.00GiB(37.88%)  {C.blue}tps: 20,000{C.reset}"
    )
    return "\n".join(out) + "\n"


def hf(v5: bool) -> str:
    """Hugging Face Trainer's printed logs: 4.x prints floats, 5.x '{v:.4g}' strings
    (trainer_callback.py ProgressCallback.on_log)."""
    steps = [
        {"loss": 2.3456 - i / 10, "grad_norm": 1.2345, "learning_rate": 5e-05 * (1 - i / 5), "epoch": 0.2 * (i + 1)}
        for i in range(4)
    ]
    final = {
        "train_runtime": 203.4567,
        "train_samples_per_second": 314.58,
        "train_steps_per_second": 4.915,
        "train_loss": 2.1,
        "epoch": 1.0,
    }
    out = ["***** Running training *****", "  Num examples = 64,000", "  Total optimization steps = 1,000"]
    for d in [*steps, final]:
        out.append(str({k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in d.items()}) if v5 else str(d))
    return "\n".join(out) + "\n"


def trainer_state() -> str:
    hist = [
        {"epoch": 0.5, "grad_norm": 1.1, "learning_rate": 2.5e-05, "loss": 2.2, "step": 500},
        {
            "epoch": 1.0,
            "step": 1000,
            "total_flos": 1.2e17,
            "train_loss": 2.1,
            "train_runtime": 203.4567,
            "train_samples_per_second": 314.58,
            "train_steps_per_second": 4.915,
        },
    ]
    return (
        json.dumps(
            {
                "best_metric": None,
                "epoch": 1.0,
                "eval_steps": 500,
                "global_step": 1000,
                "is_world_process_zero": True,
                "log_history": hist,
                "logging_steps": 500,
                "max_steps": 1000,
                "num_train_epochs": 1,
                "total_flos": 1.2e17,
                "train_batch_size": 4,
            },
            indent=2,
        )
        + "\n"
    )


def trace(old: bool) -> str:
    """A Kineto trace: torch >= 1.10 categories (kernel, user_annotation, ncclDevKernel_ names of
    NCCL >= 2.19) or torch 1.8-1.9 ones (Kernel, Operator, ncclKernel_ names)."""
    kernel = "Kernel" if old else "kernel"
    step_cat = "Operator" if old else "user_annotation"
    nccl = "ncclKernel_{}_RING_LL_Sum_bfloat16" if old else "ncclDevKernel_{}_Sum_bf16_RING_LL"
    gemm = (
        "ampere_bf16_s16816gemm_bf16_256x128_ldg8_f2f_stages_64x3_tn"
        if old
        else "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__5x_cublas"
    )
    attn = (
        "flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t>, true>"
        if old
        else "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90>>>"
    )
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "python"}}]
    t = 1000.0
    for step in range(2):
        start = t
        events.append(
            {
                "ph": "X",
                "cat": step_cat,
                "name": f"ProfilerStep#{step + 3}",
                "pid": 1234,
                "tid": 1234,
                "ts": start,
                "dur": 10000.0,
                "args": {},
            }
        )
        for name, dur, stream in (
            (gemm, 3000.0, 7),
            (attn, 1500.0, 7),
            ("vectorized_elementwise_kernel<4, ...>", 500.0, 7),
            (nccl.format("AllGather"), 800.0, 20),
            (gemm, 2000.0, 7),
            (nccl.format("ReduceScatter"), 1200.0, 20),
            ("Memcpy DtoD (Device -> Device)", 100.0, 7),
        ):
            cat = "gpu_memcpy" if name.startswith("Memcpy") else kernel
            events.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": t,
                    "dur": dur,
                    "args": {"device": 0, "stream": stream, "correlation": 1},
                }
            )
            t += dur if stream == 7 else 0.0  # the NCCL stream runs beside the compute stream
        t = start + 10000.0
        events.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1234, "tid": 1234, "ts": start + 10, "dur": 20}
        )
    return (
        json.dumps(
            {
                "schemaVersion": 1,
                "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                "traceEvents": events,
                "traceName": "rank0.pt.trace.json",
            }
        )
        + "\n"
    )


def telemetry() -> str:
    plan = {
        "model": "llama-3.1-8b",
        "gpu": "h100-sxm",
        "gpus": 8,
        "tp": 4,
        "seq_len": 4096,
        "global_batch": 128,
        "framework": "megatron",
        "recompute": "selective",
    }
    lines = [{"type": "plan", "schema": 1, "plan": plan}]
    for step, s, stall in (
        (1, 15.2, 0.0),
        (2, 8.1, 0.0),
        (3, 7.82, 0.0),
        (4, 7.79, 0.0),
        (5, 8.95, 1.13),
        (6, 7.81, 0.0),
    ):
        lines.append(
            {
                "step": step,
                "step_s": s,
                "tokens": 65536,
                "tokens_per_s": 65536 / s,
                "loss": 9.0 - step / 10,
                "peak_memory_bytes": 41875931136.0,
                "memory_kind": "cuda",
                "checkpoint_stall_s": stall,
                "peak_allocated_bytes": 41875931136.0,
                "peak_reserved_bytes": 44023414784.0,
            }
        )
    # tensor sizes the runtime summed; activations are what is left of the peak (29% above gpuplan's estimate)
    lines.append(
        {
            "type": "memory",
            "weights": 4.02e9,
            "gradients": 8.03e9,
            "optimizer": 16.06e9,
            "master_weights": 8.03e9,
            "activations": 5.9e9,
        }
    )
    return "\n".join(json.dumps(x) for x in lines) + "\n"


FILES = {
    "megatron_v2.6.log": megatron_2021(),
    "megatron_core_r0.8.log": megatron_core(False),
    "megatron_core_main.log": megatron_core(True),
    "nemo1.log": nemo1(),
    "torchtitan_2024.log": torchtitan("2024"),
    "torchtitan_v0.1.log": torchtitan("v0.1"),
    "torchtitan_main.log": torchtitan("main"),
    "hf_v4.log": hf(False),
    "hf_v5.log": hf(True),
    "trainer_state.json": trainer_state(),
    "trace_kineto.json": trace(False),
    "trace_torch1.9.json": trace(True),
    "telemetry.jsonl": telemetry(),
}

if __name__ == "__main__":
    for name, text in FILES.items():
        (HERE / name).write_text(text)
