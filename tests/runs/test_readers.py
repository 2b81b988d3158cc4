"""Each reader on real-format samples (tests/data/runs, written by make_samples.py with the
frameworks' own format strings), two or more versions per framework; malformed input fails in one
line naming the file and line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpuplan.errors import GpuplanError
from gpuplan.runs.readers import read_hf, read_megatron, read_run, read_telemetry, read_torchtitan
from gpuplan.runs.trace import category, read_trace

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"
MB, GIB = 1024.0**2, 1024.0**3


@pytest.mark.parametrize("name", ["megatron_core_r0.8.log", "megatron_core_main.log"])
def test_megatron_core_iteration_and_memory_lines(name):
    run = read_run(DATA / name)
    assert run.format == "megatron"
    # iteration 1 (start-up) left out; median of 7712.4, 7698.1, 7705.6, 7721.0 ms
    assert run.step_s == pytest.approx((7705.6 + 7712.4) / 2 / 1e3)
    assert run.steps == 4
    assert run.tflops_per_gpu == pytest.approx((399.8 + 400.1) / 2)
    # the busiest rank's max allocated / max reserved, printed in MB with 2 decimals
    assert run.peak_allocated_bytes == pytest.approx(41875931136 + 734003200, abs=0.01 * MB)
    assert run.peak_reserved_bytes == pytest.approx(44023414784 + 734003200, abs=0.01 * MB)


def test_megatron_2021_unformatted_memory_floats():
    run = read_run(DATA / "megatron_v2.6.log")
    assert run.step_s == pytest.approx(44.0123)  # 61.2 s first interval left out
    assert run.tflops_per_gpu is None  # no throughput field in 2021
    assert run.peak_allocated_bytes == pytest.approx(14876543210)
    assert run.peak_reserved_bytes == pytest.approx(16106127360)


def test_nemo1_progress_bar():
    run = read_run(DATA / "nemo1.log")
    assert run.format == "nemo"
    assert run.step_s == pytest.approx((5.905 + 5.900) / 2)


@pytest.mark.parametrize(
    "name, tflops", [("torchtitan_2024.log", None), ("torchtitan_v0.1.log", 368.1), ("torchtitan_main.log", 368.1)]
)
def test_torchtitan_versions(name, tflops):
    run = read_run(DATA / name)
    assert run.format == "torchtitan"
    assert run.step_s is None  # tokens/s per GPU: the step time needs the plan's batch
    assert run.tokens_per_s_per_gpu == pytest.approx(7640)  # median of 7612, 7655, 7640 (step 1 left out)
    assert run.peak_reserved_bytes == pytest.approx(36.21 * GIB)  # the validate line is not a train step
    assert run.tflops_per_gpu == (pytest.approx(tflops, abs=0.01) if tflops else None)


@pytest.mark.parametrize("name", ["hf_v4.log", "hf_v5.log", "trainer_state.json"])
def test_hugging_face_trainer_metrics(name):
    run = read_run(DATA / name)
    assert run.format == "hf"
    assert run.step_s == pytest.approx(1 / 4.915)


def test_telemetry_plan_steps_stall_and_memory():
    run = read_run(DATA / "telemetry.jsonl")
    assert run.plan is not None and run.plan.tp == 4 and run.plan.model == "llama-3.1-8b"
    # steps 1-2 left out; step 5's 1.13 s checkpoint stall taken out: 7.82, 7.79, 7.82, 7.81
    assert run.step_s == pytest.approx(7.815)
    assert run.peak_allocated_bytes == 41875931136.0 and run.peak_reserved_bytes == 44023414784.0
    assert run.memory_bytes["activations"] == 5.9e9


def test_telemetry_as_resilient_writes_it_today(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(
        "".join(
            json.dumps(
                {
                    "step": i,
                    "step_s": 0.5,
                    "tokens": 1000,
                    "tokens_per_s": 2000.0,
                    "peak_memory_bytes": 1e9,
                    "memory_kind": "cuda",
                    "checkpoint_stall_s": 0.0,
                }
            )
            + "\n"
            for i in range(1, 6)
        )
    )
    run = read_run(p)
    assert run.step_s == 0.5 and run.peak_allocated_bytes == 1e9 and run.plan is None


@pytest.mark.parametrize("name", ["trace_kineto.json", "trace_torch1.9.json"])
def test_trace_kernel_time_by_category(name):
    run = read_run(DATA / name)
    k = run.kernels_s
    assert run.format == "trace" and run.steps == 2 and run.step_s == pytest.approx(0.010)
    assert k["gemm"] == pytest.approx(5e-3) and k["attention"] == pytest.approx(1.5e-3)
    assert k["nccl_all_gather"] == pytest.approx(0.8e-3) and k["nccl_reduce_scatter"] == pytest.approx(1.2e-3)
    assert k["elementwise"] == pytest.approx(0.5e-3) and k["memcpy"] == pytest.approx(0.1e-3)
    # per step: kernels and NCCL cover 1.0 .. 9.2 ms of the window; the 1.8 ms to the next step is idle
    assert k["idle"] == pytest.approx(0.9e-3)


def test_trace_gzip(tmp_path):
    p = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(p, "wt") as fh:
        fh.write((DATA / "trace_kineto.json").read_text())
    assert read_run(p).kernels_s["gemm"] == pytest.approx(5e-3)


@pytest.mark.parametrize(
    "name, cat",
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
        ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NTN", "gemm"),
        ("void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>", "gemm"),
        ("flash_fwd_kernel<Flash_fwd_kernel_traits<128>>", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3", "attention"),
        ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "nccl_all_reduce"),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t", "nccl_send_recv"),
        ("ncclDevKernel_Broadcast_RING_LL", "nccl_other"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>", "elementwise"),
        ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "elementwise"),
    ],
)
def test_kernel_categories(name, cat):
    assert category(name) == cat


@pytest.mark.parametrize(
    "reader, text, line",
    [
        (
            read_megatron,
            " iteration       10/    1000 | consumed samples: 1280 | elapsed time per iteration (ms): abc |\n",
            1,
        ),
        (read_megatron, "ok\n iteration       10/    1000 | consumed samples: 1280 | learning rate: 1E-4 |\n", 2),
        (read_megatron, "x\ny\n[Rank 0] (after 10 iterations) memory (MB) | allocated: 12 | reserved: 13\n", 3),
        (read_torchtitan, "[titan] INFO - step: 10  loss:  7.1234  memory: lots\n", 1),
        (read_hf, "{'loss': 2.3}\n{'train_runtime': 20.5, 'train_steps_per_second': \n", 2),
        (read_hf, "{'train_runtime': 20.5, 'train_steps_per_second': 'fast'}\n", 1),
        (read_telemetry, '{"step": 1, "step_s": 1.0}\n{"step": 2, "step_s": 1.0\n', 2),
        (read_telemetry, '{"step": 1, "step_s": -1.0}\n', 1),
        (read_telemetry, '{"type": "plan", "plan": {"model": "llama-3.1-8b", "tpp": 2}}\n', 1),
        # a stall is part of its step: one as long as the step leaves nothing to time
        (read_telemetry, '{"step": 1, "step_s": 8}\n{"step": 2, "step_s": 8, "checkpoint_stall_s": 8}\n', 2),
        (read_telemetry, '{"step": 1, "step_s": 8, "checkpoint_stall_s": true}\n', 1),
        # memory and kernel records: bytes and seconds from 0 up, not text, NaN or negatives
        (read_telemetry, '{"step": 1, "step_s": 8}\n{"type": "kernels", "per_step_s": {"gemm": "abc"}}\n', 2),
        (read_telemetry, '{"step": 1, "step_s": 8}\n{"type": "kernels", "per_step_s": {"gemm": null}}\n', 2),
        (read_telemetry, '{"step": 1, "step_s": 8}\n{"type": "memory", "weights": NaN}\n', 2),
        (read_telemetry, '{"step": 1, "step_s": 8}\n{"type": "memory", "weights": -5e9}\n', 2),
        (read_telemetry, '{"step": 1, "step_s": 8}\n{"type": "memory", "weights": true}\n', 2),
    ],
)
def test_malformed_line_is_one_line_error_with_its_number(tmp_path, reader, text, line):
    p = tmp_path / "bad.log"
    p.write_text(text)
    with pytest.raises(GpuplanError) as exc:
        reader(p)
    msg = str(exc.value)
    assert f"bad.log:{line}" in msg and "\n" not in msg


def test_malformed_trace_and_empty_logs(tmp_path):
    p = tmp_path / "t.json"
    p.write_text('{"traceEvents": [\n{"ph": "X", "cat": "kernel", "name": "gemm", "ts": 1,\n')
    with pytest.raises(GpuplanError, match=r"t.json:3"):
        read_trace(p)
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "ts": "soon", "dur": 1}]}')
    with pytest.raises(GpuplanError, match=r"traceEvents\[0\]"):
        read_trace(p)
    q = tmp_path / "empty.log"
    q.write_text("nothing here\n")
    with pytest.raises(GpuplanError, match="cannot tell the log's format"):
        read_run(q)
    with pytest.raises(GpuplanError, match="no Megatron-LM iteration lines"):
        read_run(q, "megatron")
    with pytest.raises(GpuplanError, match="missing.log does not exist"):
        read_run(tmp_path / "missing.log")
    with pytest.raises(GpuplanError, match="is a directory"):
        read_run(tmp_path)


def test_run_file_binds_log_trace_and_plan(tmp_path):
    (tmp_path / "m.log").write_text((DATA / "megatron_core_main.log").read_text())
    (tmp_path / "t.json").write_text((DATA / "trace_kineto.json").read_text())
    (tmp_path / "run.toml").write_text(
        'log = "m.log"\ntrace = "t.json"\n[plan]\nmodel = "llama-3.1-8b"\ntp = 4\n'
        'seq_len = 4096\nglobal_batch = 128\nframework = "megatron"\n'
    )
    run = read_run(tmp_path / "run.toml")
    assert run.step_s == pytest.approx(7.709) and run.kernels_s["gemm"] == pytest.approx(5e-3)
    assert run.plan is not None and run.plan.tp == 4
    (tmp_path / "bad.toml").write_text('log = "m.log"\n[plan]\nmodel = "llama-3.1-8b"\ntp = "four"\n')
    with pytest.raises(GpuplanError, match=r"bad.toml: plan.tp: must be int"):
        read_run(tmp_path / "bad.toml")


def test_against_for_runs_that_all_carry_a_plan_is_refused_not_ignored():
    from gpuplan.runs.readers import read_runs

    with pytest.raises(GpuplanError, match="^against: every run given carries its own plan"):
        read_runs([str(DATA / "telemetry.jsonl")], against="llama-3.1-70b --gpus 64")
    # a log without a plan beside it: against is that log's plan, the telemetry keeps its own
    runs = read_runs([str(DATA / "telemetry.jsonl"), str(DATA / "megatron_core_main.log")], against="llama-3.1-70b")
    assert [r.plan.model for r in runs] == ["llama-3.1-8b", "llama-3.1-70b"]


def test_a_nan_or_infinite_time_in_a_log_or_telemetry_names_its_line(tmp_path):
    log = (DATA / "megatron_core_main.log").read_text()
    assert "(ms): 7712.4" in log
    bad = tmp_path / "megatron.log"
    bad.write_text(log.replace("(ms): 7712.4", "(ms): nan"))
    with pytest.raises(GpuplanError, match=r"megatron.log:\d+: elapsed time per iteration \(ms\) is 'nan'"):
        read_run(bad)
    lines = (DATA / "telemetry.jsonl").read_text().splitlines()
    for value in ("NaN", "Infinity"):
        rec = json.loads(lines[1])
        bad = tmp_path / "telemetry.jsonl"
        bad.write_text("\n".join([lines[0], json.dumps(rec).replace(str(rec["step_s"]), value, 1), *lines[2:]]))
        with pytest.raises(GpuplanError, match=r"telemetry.jsonl:2: step record needs a positive step_s"):
            read_run(bad)
