"""Serving offload against hand-computed bytes and times (FlexGen's cost model, section 4.3).

OPT-125m: 12 layers, hidden 768, 12 heads; one layer holds 12h^2 + 13h = 7,087,872 parameters
(q, k, v, out: 4h^2 + 4h; fc1, fc2: 8h^2 + 5h; two LayerNorms: 4h), 14,175,744 bytes in fp16; its
KV cache is 2 x 12 heads x 64 x 2 bytes = 3,072 bytes per token and layer.
"""

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.formats import KV_FORMATS, WEIGHT_FORMATS
from gpuplan.serve.offload import OffloadRequest, Placement, evaluate_placement, plan_offload
from gpuplan.serve.offload_cost import _HBM_EFF, _evaluate, _shape
from gpuplan.specs.hardware import GPUSpec
from gpuplan.specs.host import HostSpec

LAYER_BYTES = 2 * (12 * 768**2 + 13 * 768)
KV_LAYER = 2 * 12 * 64 * 2
FAST = 1e18  # rates so high that their terms vanish, leaving the one under test


def gpu(memory=80e9, flops=FAST, hbm=FAST):
    return GPUSpec(
        id="t",
        name="test",
        memory_bytes=memory,
        hbm_bytes_per_s=hbm,
        peak_flops={"fp16": flops},
        interconnect="pcie",
        interconnect_bytes_per_s=1e9,
        pcie_bytes_per_s=1e9,
        gpus_per_node=1,
        tdp_w=1,
    )


def host(pcie=1e9, cpu_bw=1e9, cpu_flops=FAST, memory=1e12, disk=0.0, disk_bw=0.0):
    return HostSpec(
        name="h",
        cpu_memory_bytes=memory,
        cpu_memory_bytes_per_s=cpu_bw,
        pcie_bytes_per_s=pcie,
        disk_bytes=disk,
        disk_read_bytes_per_s=disk_bw,
        disk_write_bytes_per_s=disk_bw / 2,
        cpu_flops=cpu_flops,
    )


def request(model="opt-125m", **kw):
    g, h = kw.pop("gpu", gpu()), kw.pop("host", host())
    return OffloadRequest(
        model=catalog.model(model), gpu=g, host=h, weights=WEIGHT_FORMATS["fp16"], kv=KV_FORMATS["fp16"], **kw
    )


def test_shape_matches_the_hand_count():
    s = _shape(catalog.model("opt-125m"), WEIGHT_FORMATS["fp16"], KV_FORMATS["fp16"])
    assert s.layer_bytes == LAYER_BYTES
    assert s.kv_layer == KV_LAYER


def test_weights_on_cpu_decode_at_the_pcie_rate():
    req = request(input_len=512, output_len=32)
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=0.0, weights_cpu=1.0, weights_disk=0.0, kv_gpu=1.0, kv_cpu=0.0)
    plan = _evaluate(req, s, p, batch=1)
    assert plan.step_s == pytest.approx(12 * LAYER_BYTES / 1e9, rel=1e-6)
    assert plan.pcie_s == pytest.approx(12 * LAYER_BYTES / 1e9, rel=1e-6)
    # transfer-bound: a block of 8 loads each layer once, so 8x the tokens per step
    assert _evaluate(req, s, p, batch=8).decode_throughput == pytest.approx(8 * plan.decode_throughput, rel=1e-6)


def test_disk_share_is_read_over_the_disk_link_and_overlaps_pcie():
    req = request(host=host(pcie=FAST, disk=1e12, disk_bw=2e9))
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=0.0, weights_cpu=0.5, weights_disk=0.5, kv_gpu=1.0, kv_cpu=0.0)
    assert _evaluate(req, s, p, 1).step_s == pytest.approx(12 * 0.5 * LAYER_BYTES / 2e9, rel=1e-6)


def test_cpu_layers_run_at_the_cpu_memory_bandwidth():
    # llama.cpp with --gpu-layers 0: each layer reads its weights and its KV from CPU memory
    req = request(input_len=512, output_len=32, gpu_layers=0)
    plan = plan_offload(req)
    ctx = 512 + 32 / 2
    assert plan.step_s == pytest.approx(12 * (LAYER_BYTES + ctx * KV_LAYER) / 1e9, rel=1e-6)
    assert plan.placement.weights_cpu == 1.0


def test_a_model_that_fits_stays_on_the_gpu():
    plan = plan_offload(request(host=host(pcie=25e9, cpu_bw=60e9, cpu_flops=1e12), gpu=gpu(80e9, 1e14, 2e12)))
    assert plan.placement.weights_gpu == 1.0
    assert plan.pcie_s == 0.0


def test_a_70b_placement_on_one_24_gb_gpu_spills_weights_within_every_tier():
    # its speed is benchmarks/bench_serve.py's concern, not a wall-clock test's
    g = catalog.gpu("rtx-4090")
    h = host(pcie=25e9, cpu_bw=65e9, cpu_flops=1e12, memory=256e9, disk=2e12, disk_bw=7e9)
    plan = plan_offload(
        OffloadRequest(
            model=catalog.model("llama-3.1-70b"), gpu=g, host=h, weights=WEIGHT_FORMATS["bf16"], kv=KV_FORMATS["bf16"]
        )
    )
    assert plan.placement.weights_gpu < 1
    assert plan.gpu_bytes <= g.memory_bytes * 0.9 and plan.cpu_bytes <= 256e9 and plan.disk_bytes <= 2e12


def test_too_little_cpu_memory_and_disk_is_one_line_naming_cpu_memory():
    g = catalog.gpu("rtx-4090")
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-405b"),
                gpu=g,
                host=host(memory=64e9),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
            )
        )
    assert e.value.field == "cpu_memory" and "\n" not in str(e.value)


def test_a_disk_too_small_for_what_the_cpu_cannot_hold_names_disk():
    g = catalog.gpu("rtx-4090")
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-405b"),
                gpu=g,
                host=host(memory=64e9, disk=100e9, disk_bw=7e9),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
            )
        )
    assert e.value.field == "disk" and "`disk" in str(e.value)


def test_offload_none_for_a_model_larger_than_the_gpu_names_offload():
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-70b"),
                gpu=catalog.gpu("rtx-4090"),
                host=host(),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
                offload="none",
            )
        )
    assert e.value.field == "offload"


def test_too_many_gpu_layers_names_the_flag_and_a_count_that_fits():
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-70b"),
                gpu=catalog.gpu("rtx-4090"),
                host=host(),
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
                gpu_layers=60,
            )
        )
    assert e.value.field == "gpu_layers" and "`gpu_layers" in str(e.value)
    with pytest.raises(GpuplanError) as e:
        request(gpu_layers=13)
    assert e.value.field == "gpu_layers"


def test_kv_on_disk_is_read_back_every_decode_step_at_the_disk_read_rate():
    # weights on the GPU, the whole cache on disk, every other rate infinite: a layer's step is the
    # read of its cache (batch x mean context x KV bytes per token) over 2 GB/s; the new token's
    # K and V written at 1 GB/s are smaller, so the read binds (FlexGen cost_model.py dtocg, ctodg)
    h = host(pcie=FAST, cpu_bw=FAST, disk=1e12, disk_bw=2e9)
    req = request(host=h, input_len=512, output_len=32)
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=1.0, weights_cpu=0.0, weights_disk=0.0, kv_gpu=0.0, kv_cpu=0.0, kv_disk=1.0)
    plan = _evaluate(req, s, p, batch=4)
    ctx = 512 + 32 / 2
    read = 4 * ctx * KV_LAYER / 2e9
    assert plan.step_s == pytest.approx(12 * read, rel=1e-6)
    assert plan.disk_s == pytest.approx(12 * (read + 4 * KV_LAYER / 1e9), rel=1e-6)
    assert plan.disk_bytes == 4 * (512 + 32) * 12 * KV_LAYER  # the whole cache, prompt and output
    assert plan.cpu_bytes == 0.0


def test_the_cpu_to_gpu_weight_load_adds_to_cpu_attention_rather_than_overlapping_it():
    # FlexGen's fitted cost model: Tgen = ctog + max(dtoc, ctod, comp). Weights on the CPU at 1 GB/s,
    # the cache on the CPU with attention there at 1 GFLOP/s (4 x heads x head_dim FLOPs per
    # context token), PCIe hop of q/k/v/out for batch 1 (4 x hidden x 2 bytes)
    h = host(pcie=1e9, cpu_bw=FAST, cpu_flops=1e9)
    req = request(host=h, input_len=512, output_len=32)
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=0.0, weights_cpu=1.0, weights_disk=0.0, kv_gpu=0.0, kv_cpu=1.0)
    ctx = 512 + 32 / 2
    ctog = LAYER_BYTES / 1e9
    hop = 4 * 768 * 2 / 1e9
    attention = ctx * 4 * 12 * 64 / 1e9
    assert _evaluate(req, s, p, 1).step_s == pytest.approx(12 * (ctog + hop + attention), rel=1e-6)


def test_prefill_attention_runs_on_the_gpu_wherever_the_cache_will_live():
    # the prompt's q, k, v are on the GPU when its layer computes them: a slower CPU does not slow
    # the prefill, only the decode steps (FlexGen cost_model.py compp: GPU matmul and bmm only)
    p = Placement(weights_gpu=1.0, weights_cpu=0.0, weights_disk=0.0, kv_gpu=0.0, kv_cpu=1.0)
    plans = []
    for cpu_flops in (1e9, 1e12):
        req = request(host=host(pcie=FAST, cpu_bw=FAST, cpu_flops=cpu_flops), gpu=gpu(flops=1e14, hbm=1e12))
        plans.append(_evaluate(req, _shape(req.model, req.weights, req.kv), p, 8))
    assert plans[0].prefill_s == plans[1].prefill_s
    assert plans[0].step_s > plans[1].step_s


def test_a_cache_larger_than_gpu_and_cpu_memory_spills_to_disk():
    # Llama-3.1-8B with its weights kept on the GPU (--offload kv): 64 sequences of 2,080 tokens
    # hold 64 x 2,080 x 32 layers x (2 x 8 x 128 x 2 bytes) = 17.4 GB of cache; the 4090 has
    # about 5 GB left beside 16 GB of weights and the CPU 9 GB usable of 10: the rest must be on disk
    h = host(pcie=25e9, cpu_bw=65e9, cpu_flops=1e12, memory=10e9, disk=2e12, disk_bw=7e9)
    plan = plan_offload(
        OffloadRequest(
            model=catalog.model("llama-3.1-8b"),
            gpu=catalog.gpu("rtx-4090"),
            host=h,
            weights=WEIGHT_FORMATS["bf16"],
            kv=KV_FORMATS["bf16"],
            input_len=2048,
            output_len=32,
            batch=64,
            offload="kv",
        )
    )
    p = plan.placement
    assert p.weights_gpu == 1.0 and p.kv_disk > 0
    assert p.kv_gpu + p.kv_cpu + p.kv_disk == pytest.approx(1)
    kv = 64 * 2080 * 32 * 2 * 8 * 128 * 2
    assert plan.disk_bytes == pytest.approx(p.kv_disk * kv)
    assert plan.cpu_bytes <= 10e9 * 0.9


def test_a_cache_that_even_the_disk_cannot_hold_is_one_line_naming_disk():
    h = host(memory=64e9, disk=200e9, disk_bw=7e9)
    with pytest.raises(GpuplanError) as e:
        plan_offload(
            OffloadRequest(
                model=catalog.model("llama-3.1-70b"),
                gpu=catalog.gpu("rtx-4090"),
                host=h,
                weights=WEIGHT_FORMATS["bf16"],
                kv=KV_FORMATS["bf16"],
                input_len=8192,
                output_len=32,
                batch=512,
            )
        )
    assert e.value.field == "disk" and "`disk" in str(e.value) and "\n" not in str(e.value)


def test_the_prefill_yields_the_first_token_and_decode_steps_the_other_n_minus_1():
    # FlexGen's cost_model.py: T = Tpre * l + Tgen * (n - 1) * l; its runtime's decode loop runs
    # i = 1 .. n - 1 after the prefill (i = 0) has produced the first token
    p = Placement(weights_gpu=0.0, weights_cpu=1.0, weights_disk=0.0, kv_gpu=1.0, kv_cpu=0.0)
    for n in (1, 32):
        req = request(input_len=512, output_len=n, gpu=gpu(flops=1e14, hbm=1e12))
        plan = _evaluate(req, _shape(req.model, req.weights, req.kv), p, 8)
        assert plan.throughput == pytest.approx(8 * n / (plan.prefill_s + (n - 1) * plan.step_s), rel=1e-12)
    # here the prefill and each decode step are both the 12 layers' transfer at 1 GB/s (the
    # rest is < 1% of it), so 32 tokens cost 32 transfers, not 33
    assert plan.prefill_s == pytest.approx(plan.step_s, rel=0.01)
    assert plan.throughput == pytest.approx(8 / plan.step_s, rel=0.01)


EDGE = 2 * (50272 * 768 + 2050 * 768 + 2 * 768)  # OPT-125m's tied embedding, positions, final norm
ACT = 2 * (4 * 768 + 2 * 3072)  # transient prefill activations per prompt token and layer


def test_the_gpu_holds_the_most_weights_that_fit_beside_the_cache_not_a_grid_step_below():
    # a GPU of the embeddings + a prompt's activations + 7.3 layers: 53% of the 12 layers resident
    # (6.36) and the streaming buffers of two offloaded layers (2 x 0.47) fill it exactly, so the
    # search keeps 53% of the weights there, not the 50% of a 5% grid; the cache costs nothing
    # anywhere (infinite rates), so it leaves the GPU to the weights
    memory = EDGE + 512 * ACT + 7.3 * LAYER_BYTES
    h = host(pcie=1e9, cpu_bw=FAST, cpu_flops=FAST)
    plan = plan_offload(request(gpu=gpu(memory=memory), host=h, batch=1, gpu_memory_utilization=1.0))
    assert plan.placement.weights_gpu == pytest.approx(0.53, abs=2e-6)  # rounded down to 1e-6
    assert plan.placement.weights_cpu == pytest.approx(0.47, abs=2e-6)
    assert plan.placement.kv_gpu == 0.0
    assert plan.gpu_bytes == pytest.approx(memory, rel=1e-6)


def _transfer_bound_until_the_cpu_is_full(sequences: float) -> OffloadRequest:
    # OPT-125m, one-token prompts, 32 generated, no disk, and a GPU of the embeddings, 4 prompts'
    # activations (the smallest GPU batch searched) and the two streaming buffers: no room for
    # weights (at a block under 4, under 0.1% of them), so every block streams all 12 layers over
    # PCIe at 1 GB/s and throughput grows
    # with the block until the weights plus the cache ((1 + 32) tokens x 12 layers x 3,072 bytes
    # a sequence) fill the 90% of CPU memory the planner uses
    memory = EDGE + 4 * ACT + 2 * LAYER_BYTES
    kv_seq = (1 + 32) * 12 * KV_LAYER
    cpu = (12 * LAYER_BYTES + sequences * kv_seq) / 0.9
    h = host(pcie=1e9, cpu_bw=FAST, cpu_flops=FAST, memory=cpu)
    return request(gpu=gpu(memory=memory), host=h, input_len=1, output_len=32, gpu_memory_utilization=1.0)


def test_the_block_search_finds_the_largest_block_that_fits_between_the_coarse_blocks():
    # room for 100.5 sequences: 100 is the best block, between the coarse 96 and 128
    plan = plan_offload(_transfer_bound_until_the_cpu_is_full(100.5))
    assert plan.batch == 100
    assert plan.placement.weights_cpu == pytest.approx(1.0) and plan.placement.kv_cpu == 1.0


def test_the_block_search_grows_past_1024_while_the_largest_block_is_the_best():
    plan = plan_offload(_transfer_bound_until_the_cpu_is_full(1500.5))
    assert plan.batch == 1500


def test_each_gpu_batch_of_a_block_reads_the_layer_weights_from_hbm_again():
    # FlexGen's Algorithm 1: a block of 8 run as 4 GPU batches of 2 runs each layer's matmuls 4
    # times, each reading the layer's 14.2 MB from HBM; with compute free (FAST FLOP/s) and the
    # weights and cache on the GPU, a decode step costs 3 more layer reads per layer than one GPU
    # batch of 8 (the cache reads and the LM head are the same in both)
    hbm = 1e11
    req = request(gpu=gpu(hbm=hbm))
    s = _shape(req.model, req.weights, req.kv)
    p = Placement(weights_gpu=1.0, weights_cpu=0.0, weights_disk=0.0, kv_gpu=1.0, kv_cpu=0.0)
    one, four = _evaluate(req, s, p, 8, gpu_batch=8), _evaluate(req, s, p, 8, gpu_batch=2)
    assert four.gpu_batch == 2 and one.gpu_batch == 8
    # the achievable HBM rate is the datasheet's times the default efficiency for a GPU without one
    assert four.step_s - one.step_s == pytest.approx(12 * 3 * LAYER_BYTES / (hbm * _HBM_EFF), rel=1e-9)


def test_the_prompt_activations_on_the_gpu_are_one_gpu_batch_s():
    # the prefill holds one GPU batch's activations (the authors' cost model sizes its GPU working
    # memory by the GPU batch), so a block of 32 run as 8 batches of 4 needs 28 prompts' fewer
    req = request(input_len=512)
    p = Placement(weights_gpu=1.0, weights_cpu=0.0, weights_disk=0.0, kv_gpu=1.0, kv_cpu=0.0)
    whole = evaluate_placement(req, p, 32, gpu_batch=32).gpu_bytes
    assert whole - evaluate_placement(req, p, 32, gpu_batch=4).gpu_bytes == pytest.approx(28 * 512 * ACT)


def test_the_search_runs_a_block_as_smaller_gpu_batches_when_its_prompts_crowd_out_the_weights():
    # a GPU that holds all 12 layers, the embeddings, the block's cache and 8 prompts' activations
    # but not 64 prompts': with the block fixed at 64, the search keeps every weight on the GPU by
    # running the block as GPU batches of at most 8 rather than streaming weights over PCIe
    b, s_in, n = 64, 512, 32
    kv = b * (s_in + n) * 12 * KV_LAYER
    memory = EDGE + 12 * LAYER_BYTES + kv + 8 * s_in * ACT
    h = host(pcie=1e9, cpu_bw=1e9, cpu_flops=1e9)
    plan = plan_offload(
        request(gpu=gpu(memory=memory, hbm=1e12), host=h, batch=b, input_len=s_in, gpu_memory_utilization=1.0)
    )
    assert plan.batch == b and plan.gpu_batch <= 8
    assert plan.placement.weights_gpu == 1.0 and plan.placement.kv_gpu == 1.0
    assert plan.gpu_bytes <= memory


def _req_70b(**kw):
    g = catalog.gpu("rtx-4090")
    h = host(pcie=25e9, cpu_bw=65e9, cpu_flops=1e12, memory=256e9, disk=2e12, disk_bw=7e9)
    return OffloadRequest(
        model=catalog.model("llama-3.1-70b"),
        gpu=g,
        host=h,
        weights=WEIGHT_FORMATS["bf16"],
        kv=KV_FORMATS["bf16"],
        **kw,
    )


def test_an_inter_token_target_picks_the_fastest_placement_whose_decode_step_keeps_it():
    free = plan_offload(_req_70b())
    one = plan_offload(_req_70b(batch=1))
    target = (one.step_s + free.step_s) / 2  # binding: the throughput-best block misses it
    assert one.step_s < target < free.step_s
    kept = plan_offload(_req_70b(max_itl_s=target))
    assert kept.step_s <= target
    assert one.throughput <= kept.throughput <= free.throughput
    # no block between it and the throughput-best one that keeps the target is faster
    for b in range(kept.batch + 1, free.batch + 1, max(1, (free.batch - kept.batch) // 8)):
        p = plan_offload(_req_70b(batch=b))
        assert p.step_s > target or p.throughput <= kept.throughput * (1 + 1e-9)


def test_an_unreachable_inter_token_target_names_the_fastest_step_in_one_line():
    one = plan_offload(_req_70b(batch=1))
    with pytest.raises(GpuplanError) as e:
        plan_offload(_req_70b(max_itl_s=one.step_s / 2))
    assert e.value.field == "itl_slo" and "\n" not in str(e.value)
    assert f"takes {one.step_s * 1e3:.0f} ms" in str(e.value)
