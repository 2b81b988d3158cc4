"""Disaggregated prefill/decode: the M/D/1 TTFT, the KV transfer, and pools that balance within
both targets."""

import numpy as np
import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.disagg import md1_ttft, plan_disaggregated
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.plan import ServeRequest
from gpuplan.serve.timing import Deployment, step_model

H100 = catalog.gpu("h100-sxm")


def test_md1_mean_time_matches_a_simulated_queue():
    # oracle: Lindley's recursion over Poisson arrivals and a fixed service time
    rng = np.random.default_rng(0)
    service, rate = 0.1, 7.0
    gaps = rng.exponential(1 / rate, 200_000)
    wait, total = 0.0, 0.0
    for g in gaps:
        wait = max(0.0, wait + service - g)
        total += wait
    assert md1_ttft(service, rate) == pytest.approx(service + total / len(gaps), rel=0.03)
    assert md1_ttft(service, 1 / service) == float("inf")


def _req(**kw):
    base = dict(weights="fp8", kv="fp8", input_len=2048, output_len=256, price_per_gpu_hour=3.0)
    return ServeRequest(catalog.model("llama-3.1-8b"), H100, **(base | kw))


def test_kv_transfer_is_the_prompts_cache_over_the_gpus_nic_share():
    p = plan_disaggregated(_req(), ttft_slo_s=1.0, itl_slo_s=0.05)
    # oracle: Llama-3.1-8B config: 32 layers x 8 KV heads x 128 x (K, V) x 1 byte (fp8) per token;
    # one 400 Gbit/s NIC per H100 at the catalog's 90 % InfiniBand efficiency, 8 us latency
    kv = 2048 * 32 * 8 * 128 * 2 * 1
    assert p.prefill.transfer_s == pytest.approx(kv / (400e9 / 8 * 0.90) + 8e-6, rel=1e-6)


def test_pools_meet_both_targets_and_balance():
    p = plan_disaggregated(_req(), ttft_slo_s=1.0, itl_slo_s=0.05)
    assert p.prefill.ttft_s <= 1.0 + 1e-9 and p.decode.step_s <= 0.05
    # the decode batch is the largest within the ITL target (or the KV pool)
    sm = step_model(Deployment(p.request.model, H100, weight_format("fp8", H100), kv_format("fp8")))
    assert p.decode.batch == p.decode.max_batch_kv or sm.decode_step(p.decode.batch + 1, 2048 + 128).seconds > 0.05
    # neither pool has a whole instance to spare
    p_cap, d_cap = p.n_prefill * p.prefill.rate_per_instance, p.n_decode * p.decode.rate_per_instance
    assert p.requests_per_s == pytest.approx(min(p_cap, d_cap))
    assert abs(p_cap - d_cap) < max(p.prefill.rate_per_instance, p.decode.rate_per_instance)
    assert p.cost_per_million_output_tokens == pytest.approx(3.0 * p.gpus / 3600 / (p.requests_per_s * 256) * 1e6)


def test_a_target_no_instance_can_meet_is_refused_naming_it():
    with pytest.raises(GpuplanError) as e:
        plan_disaggregated(_req(), ttft_slo_s=1.0, itl_slo_s=0.001)
    assert e.value.field == "itl_slo"
    with pytest.raises(GpuplanError) as e:
        plan_disaggregated(_req(input_len=100_000 // 2), ttft_slo_s=0.01, itl_slo_s=0.05)
    assert e.value.field == "ttft_slo"


def test_a_wider_prefill_instance_sends_from_more_nics_and_counts_its_gpus():
    req = ServeRequest(
        catalog.model("llama-3.1-70b"), H100, tp=2, weights="fp8", kv="fp8", input_len=8192, output_len=256
    )
    same = plan_disaggregated(req, ttft_slo_s=3.0, itl_slo_s=0.05)
    wide = plan_disaggregated(req, ttft_slo_s=3.0, itl_slo_s=0.05, prefill_tp=8)
    assert (wide.prefill_gpus_per_instance, wide.gpus_per_instance) == (8, 2)
    assert wide.gpus == wide.n_prefill * 8 + wide.n_decode * 2
    assert wide.prefill.prefill_s < same.prefill.prefill_s / 2  # four times the GPUs on each prompt
    # the decode side (2 GPUs) receives the larger shard either way: the transfer time is the same
    assert wide.prefill.transfer_s == pytest.approx(same.prefill.transfer_s)


def test_a_prefill_tp_the_model_cannot_take_is_refused_naming_prefill_tp():
    # Llama-3.1-70B has 64 heads: TP 3 does not divide them; the user gave prefill_tp, not tp
    req = ServeRequest(catalog.model("llama-3.1-70b"), H100, tp=2, input_len=2048, output_len=256)
    with pytest.raises(GpuplanError) as exc:
        plan_disaggregated(req, 1.0, 0.05, prefill_tp=3)
    assert exc.value.field == "prefill_tp" and "prefill_tp=3" in str(exc.value)
