"""Engine profiles: each engine's KV-pool rule against its own logs, its scheduler defaults, and
the host time it adds to an iteration."""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.engines import ENGINES, engine, engine_config
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.memory import kv_pool_bytes
from gpuplan.serve.plan import ServeRequest, estimate_serving
from gpuplan.serve.timing import Deployment, step_model
from gpuplan.units import GiB

H100, A100 = catalog.gpu("h100-sxm"), catalog.gpu("a100-sxm-80gb")


@pytest.mark.parametrize(
    "total, weights, activations, non_torch, logged_kv",
    [
        # vLLM startup logs on one H100 (79.18 GiB), gpu_memory_utilization 0.9, collected in
        # github.com/llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md
        (79.18, 14.99, 4.76, 0.13, 51.38),  # Llama-3.1-8B
        (79.18, 33.88, 4.84, 0.55, 32.0),  # Llama-3.3-70B-FP8, TP 2 (per GPU)
    ],
)
def test_vllm_pool_is_its_fraction_of_the_total_less_the_profiled_peak(
    total, weights, activations, non_torch, logged_kv
):
    pool = kv_pool_bytes("total", total * GiB, 0.9, weights * GiB, activations * GiB, non_torch * GiB, 0.0)
    assert pool / GiB == pytest.approx(logged_kv, abs=0.02)


def test_trtllm_takes_its_fraction_of_the_free_memory_and_sglang_of_the_total():
    total, w, act, other, ctx = 80 * GiB, 70 * GiB, 2 * GiB, 1 * GiB, 0.5 * GiB
    free_after_load = total - w - act - other
    assert kv_pool_bytes("free", total, 0.9, w, act, other, ctx) == pytest.approx(0.9 * free_after_load)
    # SGLang: the pool is what is free after loading the weights less the (1 - fraction) reserve
    assert kv_pool_bytes("static", total, 0.88, w, act, other, ctx) == pytest.approx(
        (total - w - ctx) - total * (1 - 0.88)
    )


def test_a_70b_fp8_on_one_h100_gets_a_far_larger_pool_under_trtllm_than_under_vllm_accounting():
    m = catalog.model("llama-3.1-70b")
    req = dict(weights="fp8", kv="fp8", input_len=2048, output_len=2048, max_throughput=True)
    trt = estimate_serving(ServeRequest(m, H100, config=engine_config("trtllm", H100), **req))
    generic = estimate_serving(ServeRequest(m, H100, config=engine_config(None, H100), **req))
    assert trt.memory.kv_pool > 4 * generic.memory.kv_pool
    assert trt.point.output_tokens_per_s > 4 * generic.point.output_tokens_per_s
    # vLLM V1's defaults (1024 sequences profiled in the sampler) leave no room: its log for
    # Llama-3.3-70B-FP8 on one H100 shows -1.44 GiB for the KV cache (the same llm-d collection)
    with pytest.raises(GpuplanError):
        estimate_serving(ServeRequest(m, H100, config=engine_config("vllm", H100), **req))


def test_scheduler_defaults_follow_each_engine_and_gpu():
    assert (engine("vllm").max_batched_tokens(H100), engine("vllm").max_num_seqs(H100)) == (8192, 1024)
    assert (engine("vllm").max_batched_tokens(A100), engine("vllm").max_num_seqs(A100)) == (2048, 256)
    assert engine("sglang").fraction(1, H100) == 0.88 and engine("sglang").fraction(8, H100) == 0.81
    # SGLang 0.4.5 above 80 GiB: 13 GiB reserved whatever the TP; the DeepSeek-R1 8 x H200 log
    # (Michaelvll/llm-ie-benchmarks sgl/logs/sgl-0.4.5.post3-deepseek-r1.log) prints this value
    h200 = catalog.gpu("h200")
    assert engine("sglang").fraction(8, h200) == pytest.approx(0.9074083090470262, abs=1e-12)
    assert engine("sglang").fraction(1, h200) == engine("sglang").fraction(8, h200)
    cfg = engine_config("vllm", H100, max_batched_tokens=4096)  # what the user sets wins
    assert (cfg.max_batched_tokens, cfg.max_num_seqs, cfg.engine) == (4096, 1024, "vllm")


def test_host_time_adds_to_the_step_unless_the_engine_overlaps_it():
    d = Deployment(catalog.model("llama-3.1-8b"), H100, weight_format("bf16", H100), kv_format("bf16"))
    gpu = step_model(d).decode_step(1, 2048).seconds
    # vLLM V0: about 4 ms of GPU bubble per decode step (RFC #6854)
    assert step_model(d, engine("vllm-v0")).decode_step(1, 2048).seconds == pytest.approx(gpu + 4e-3)
    # vLLM V1 at batch 256: the 5-6 ms gap of issue #10634
    big = step_model(d).decode_step(256, 2048).seconds
    assert step_model(d, engine("vllm")).decode_step(256, 2048).seconds - big == pytest.approx(5.5e-3)
    for name in ("sglang", "trtllm"):  # overlapped: the host work hides behind a longer GPU step
        assert step_model(d, engine(name)).decode_step(256, 2048).seconds == pytest.approx(big)


def test_an_unknown_engine_names_the_choices():
    with pytest.raises(GpuplanError) as e:
        engine_config("tgi", H100)
    assert e.value.field == "engine" and all(n in str(e.value) for n in ENGINES if n != "generic")


def test_validation_rows_run_under_their_engines_profile_or_all_generic():
    from gpuplan.serve.validate import load_rows

    profiled, generic = load_rows(), load_rows(engines=False)
    trt = [r for r in profiled if r.source.startswith("TensorRT-LLM")]
    assert trt and all(r.request.config.engine == "trtllm" for r in trt)
    assert all(r.request.config.gpu_memory_utilization == 0.95 for r in trt)  # the tables' stated fraction
    assert all(r.request.config.engine == "generic" for r in profiled if r not in trt)  # FasterTransformer
    assert all(r.request.config.engine == "generic" for r in generic)


def test_trtllm_runs_the_context_attention_in_fp8_over_an_fp8_cache_only():
    trt = engine("trtllm")
    assert trt.prefill_attention_dtype("fp8", "bf16", H100) == "fp8"
    assert trt.prefill_attention_dtype("bf16", "bf16", H100) == "bf16"  # a 16-bit cache: 16-bit FMHA
    assert trt.prefill_attention_dtype("fp8", "fp16", A100) == "fp16"  # no FP8 tensor cores on Ampere
    assert engine("trtllm-0.6").prefill_attention_dtype("fp8", "bf16", H100) == "bf16"  # before FP8 FMHA
    assert engine("vllm").prefill_attention_dtype("fp8", "bf16", H100) == "bf16"


def test_fp8_context_attention_takes_the_16_bit_kernels_time_over_the_peak_ratio():
    """Oracle: the same FLOPs at the same kernel fraction, over the FP8 peak instead of the BF16
    one (1978.9 against 989.4 TFLOP/s on H100): the attention part of a prefill iteration halves
    less one launch gap per layer, which does not scale."""
    m = catalog.model("llama-3.1-8b")
    d = Deployment(m, H100, weight_format("fp8", H100), kv_format("fp8", H100))
    fp8 = step_model(d, engine("trtllm")).iteration(decode=0, prefill=4096, prefill_context=2048, prefill_seqs=1)
    b16 = step_model(d, engine("trtllm-0.6")).iteration(decode=0, prefill=4096, prefill_context=2048, prefill_seqs=1)
    gap = m.num_layers * H100.efficiency.kernel_overhead_s
    ratio = (b16.parts["attention"] - gap) / (fp8.parts["attention"] - gap)
    assert ratio == pytest.approx(1978.9 / 989.4, rel=1e-6)
