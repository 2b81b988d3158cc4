"""gpuplan against one H100 measured by scripts/gpu_campaign.sh (measurements/h100-sxm-2026-11-23).

These are the project's own measurements (data and scripts committed, nothing typed in): GEMM and
attention kernels timed alone, and eager Hugging Face training steps (examples/train_hf.py) with
their telemetry and profiler traces. The bounds below are what the model achieves today, kept as
regression guards; the session note of 2026-11-23 says what is still off and why.
"""

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from gpuplan import catalog
from gpuplan.estimate.kernels import gemm_time
from gpuplan.runs.compare import compare_run
from gpuplan.runs.readers import read_telemetry
from gpuplan.specs.hardware import for_job

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "measurements" / "h100-sxm-2026-11-23"
# torch.compile is not a gpuplan option: those two runs are kept as data, not predicted
EAGER_RUNS = sorted(p for p in (MEASURED / "runs").glob("*.jsonl") if "compile" not in p.name)


def test_the_catalog_holds_the_sdpa_cudnn_rates_fitted_from_the_measured_kernels():
    spec = importlib.util.spec_from_file_location("fit_attention", ROOT / "scripts" / "fit_attention.py")
    fit_attention = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fit_attention)
    assert catalog.gpu("h100-sxm").efficiency.sdpa_cudnn == fit_attention.fit()


def test_one_gpu_runs_at_the_rate_the_measured_h100_settled_at():
    # an 8192^3 bf16 GEMM back to back for 20 s: the median rate after the first sample over the
    # MAMF (peak x gemm.bf16) is what the catalog states as solo_sustained, to two decimals
    gpu = catalog.gpu("h100-sxm")
    rates = [r["tflops"] * 1e12 for r in json.loads((MEASURED / "kernels" / "sustained.json").read_text())["rates"]]
    mamf = gpu.peak("bf16") * gpu.efficiency.gemm_fraction("bf16")
    assert gpu.efficiency.solo_sustained == round(statistics.median(rates[1:]) / mamf, 2)
    # and a job on one GPU is timed at it, where a multi-GPU one keeps the fitted rate; the JSON says which
    assert for_job(gpu, 1).efficiency.sustained == gpu.efficiency.solo_sustained > gpu.efficiency.sustained
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig

    for dp, rate in ((1, gpu.efficiency.solo_sustained), (8, gpu.efficiency.sustained)):
        req = TrainRequest(
            model=catalog.model("llama-3.2-1b"),
            gpu=gpu,
            plan=ParallelPlan(dp=dp, zero=1),
            config=TrainingConfig(seq_len=2048, micro_batch=1, global_batch=dp),
        )
        assert to_dict(estimate_training(req))["performance"]["efficiency"]["sustained"] == rate


def test_large_gemms_are_predicted_within_ten_percent_of_the_measured_kernels():
    gpu = for_job(catalog.gpu("h100-sxm"), 1)  # timed alone on one GPU
    rows = json.loads((MEASURED / "kernels" / "gemm.json").read_text())["rows"]
    for dtype in ("bf16", "fp8"):
        big = [r for r in rows if r["dtype"] == dtype and 2 * r["m"] * r["n"] * r["k"] >= 1e12]
        errors = [gemm_time(gpu, dtype, r["m"], r["n"], r["k"]) / r["s"] - 1 for r in big]
        assert len(errors) >= 50
        # bf16 +7%, fp8 +17% today (sustained power-capped back to back, as these ran)
        assert -0.10 <= statistics.median(errors) <= (0.10 if dtype == "bf16" else 0.20), dtype


@pytest.fixture(scope="module")
def eager_runs():
    out = {}
    for path in EAGER_RUNS:
        run = read_telemetry(path)
        rows = {(r["group"], r["component"]): r for r in compare_run(run, run.plan.resolve())["rows"]}
        out[path.stem] = rows
    return out


def test_eager_hugging_face_steps_on_one_h100_are_predicted_within_sixteen_percent(eager_runs):
    errors = {
        name: rows["step", "step time"]["predicted"] / rows["step", "step time"]["measured"] - 1
        for name, rows in eager_runs.items()
    }
    assert len(errors) == 13
    # before the eager kernel inventory, autocast casts and SDPA's cuDNN rates: mean 23%, max 40%.
    # Timed at one GPU's measured clock (for_job, 0.87 of the MAMF) since the multi-GPU fit moved
    # to 0.81: every run ~2 points faster, the four Qwen 0.5-0.6B runs -13..-15% (too fast: their
    # 896-1024-wide kernels are short enough for host time the model does not count to show)
    assert statistics.mean(abs(e) for e in errors.values()) <= 0.07, errors
    assert max(abs(e) for e in errors.values()) <= 0.16, errors


def test_peak_memory_of_eager_steps_without_recompute_is_predicted_within_ten_percent(eager_runs):
    for name, rows in eager_runs.items():
        peak = rows["memory", "peak allocated"]
        error = peak["predicted"] / peak["measured"] - 1
        if "-none" in name:
            assert abs(error) <= 0.10, (name, error)
        else:  # full recompute: over-predicted by about 21% today (see the session note)
            assert 0 < error <= 0.30, (name, error)


def test_the_allocator_reserve_is_no_more_than_the_measured_runs_reserved_over_their_peak():
    # every run's last step: the caching allocator's reserved peak over its allocated peak, with no
    # memory pressure (an upper bound of the reserve near capacity, where cached segments are freed
    # before an allocation fails); gpuplan's default sits below their median (4.1-19.7%, median 7.4%)
    from gpuplan.specs.training import TrainingConfig

    over = []
    for path in sorted((MEASURED / "runs").glob("*.jsonl")):
        steps = [json.loads(line) for line in path.read_text().splitlines() if '"type": "step"' in line]
        last = steps[-1]
        over.append(last["peak_reserved_bytes"] / last["peak_allocated_bytes"] - 1)
    assert len(over) >= 10
    assert 0.035 < min(over) and statistics.median(over) < 0.10 and max(over) < 0.25
    assert TrainingConfig(seq_len=2048, micro_batch=1, global_batch=1).allocator_fraction <= statistics.median(over)
