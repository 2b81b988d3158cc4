"""The performance model against the published training runs it is calibrated on."""

import csv
import filecmp
from pathlib import Path

import pytest

from gpuplan import catalog
from gpuplan.estimate.calibrate import fit_sustained
from gpuplan.estimate.validate import (
    CSVS,
    HELD_OUT,
    Result,
    by_category,
    error_band,
    llama3_flops,
    load_rows,
    megatron_flops,
    megatron_model_flops,
    summary,
    validate_training,
)
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.split import stage_layers
from gpuplan.specs.training import TrainingConfig

SHARED = Path(__file__).resolve().parents[3] / "shared" / "validation"


@pytest.fixture(scope="module")
def results():
    return validate_training()


def test_every_row_of_every_vendored_training_file_is_predicted(results):
    expected = sum(1 for p in CSVS for _ in csv.DictReader(open(p)))
    assert len(results) == expected >= 33


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared validation directory is not beside this checkout")
def test_vendored_validation_files_equal_the_shared_ones():
    for p in CSVS:
        assert filecmp.cmp(p, SHARED / p.name, shallow=False), p.name


def test_published_runs_are_predicted_within_the_targets(results):
    s = summary(results)
    assert s["mean_abs_error"] <= 0.08, s
    errors = {r.row.id: round(r.error, 3) for r in results}
    a100 = [abs(r.error) for r in results if r.row.gpu.startswith("a100")]
    assert max(a100) <= 0.15, errors
    # every shared row within issue 14's 20%. History: llama3-405b-16k-cp16 read +27.5% while the
    # Llama 3 rows ran the V = 2 of the paper's Fig. 6 (a bubble of 47% of the compute over 16
    # micro-batches on pp 16); the paper's text gives one layer a chunk, V = 8 (12%), and the H100
    # fit moved 0.81 -> 0.77 with it: +3.6%, its 8K rows -15% (2026-11-28)
    assert all(abs(r.error) <= 0.20 for r in results), errors


def test_an_unstated_micro_batch_is_the_one_the_search_picks_for_the_same_plan():
    # Megatron-Core's table states no micro-batch: validation takes the fastest fitting one, which
    # must be what `gpuplan search` ranks first when the row's own layout is fixed
    from gpuplan.search.plans import Constraints, search

    rows = {r.id: r for r in load_rows(CSVS)}
    for rid in ("mcore-32b", "mcore-70b"):
        r = rows[rid]
        assert not r.micro_batch_stated
        p = r.plan
        found = search(
            r.model,
            catalog.gpu(r.gpu),
            p.world_size,
            r.config,
            top=1,
            zero_stages=(p.zero,),
            recompute=(r.config.recompute,),
            max_vp=p.vp,
            constraints=Constraints(tp=p.tp, pp=p.pp, cp=p.cp, ep=p.ep, dp=p.dp, schedules=(p.schedule,)),
        )
        assert found.ranked[0].config.micro_batch == r.config.micro_batch, rid
    # a pp = 1 run hides its gradient reduce-scatter behind one whole backward at micro-batch 4;
    # a 2-stage pipeline pays its bubble per micro-batch, so 1 is fastest there
    assert (rows["mcore-32b"].config.micro_batch, rows["mcore-70b"].config.micro_batch) == (4, 1)
    assert rows["mcore-32b"].microbatches == 192 // 48 // 4


def test_a_stated_micro_batch_is_kept():
    rows = [r for r in load_rows(HELD_OUT) if r.micro_batch_stated]
    assert rows and all(r.microbatches * r.config.micro_batch * r.plan.dp == r.config.global_batch for r in rows)


def test_each_family_runs_at_the_sustained_rate_fitted_over_all_its_rows():
    # the catalog holds exactly what scripts/fit_sustained.py fits: no hand-tuned value
    for family in ("a100-sxm", "h100-sxm"):
        fitted, _ = fit_sustained(family)
        assert catalog.efficiency(family).sustained == pytest.approx(fitted, abs=0.005), family


def test_tflops_rows_become_step_times_with_the_sources_formula():
    row = next(r for r in load_rows() if r.id == "nar21-1008b")
    # 1T: 128 layers, h=25600, 3072 sequences of 2048, 3072 GPUs at 163 TFLOP/s
    flops = megatron_flops(3072, 2048, 128, 25600, 51200)
    assert row.measured_step_s == pytest.approx(flops / (3072 * 163e12))
    assert 100 < row.measured_step_s < 105


def test_mfu_rows_use_megatron_core_model_flops_over_the_h100_peak():
    row = next(r for r in load_rows() if r.id == "mcore-462b")
    # 72 B s L h^2 (1 + s/6h + V/12Lh): 3072 x 4096 tokens on 6144 GPUs at 47% of 989.4 TFLOP/s
    flops = 72 * 3072 * 4096 * 112 * 18432**2 * (1 + 4096 / (6 * 18432) + 131072 / (12 * 112 * 18432))
    assert megatron_model_flops(3072, 4096, 112, 18432, 131072) == pytest.approx(flops)
    assert row.measured_step_s == pytest.approx(flops / (6144 * 0.47 * 989.4e12))


def test_llama3_rows_count_6n_plus_causal_attention_per_token():
    row = next(r for r in load_rows() if r.id == "llama3-405b-8k")
    per_token = 6 * 405_853_388_800 + 6 * 126 * 16384 * 8192
    assert llama3_flops(2048, 8192, 126, 16384) == pytest.approx(2048 * 8192 * per_token)
    assert row.measured_step_s == pytest.approx(2048 * 8192 * per_token / (8192 * 430e12))


def test_tokens_per_second_rows_need_no_flop_convention():
    row = next(r for r in load_rows() if r.id == "mpt-7b-h100")
    assert row.measured_step_s == pytest.approx(48 * 2048 / (8 * 10643))
    assert row.plan.zero == 3 and row.config.profile == "eager"


def test_unstated_micro_batch_and_interleaving_take_the_defaults():
    row = next(r for r in load_rows() if r.id == "nar21-145.6b")
    assert row.config.micro_batch == 1 and row.plan.vp == 1
    assert row.microbatches == 2304 // 24


def test_a_sources_stated_practice_applies_to_all_its_rows():
    rows = [r for r in load_rows() if r.source.startswith("Llama 3")]
    # interleaved, one layer a chunk, the first chunk the embedding alone and the last the loss
    # alone (paper, section 3.3.2): V = 8, ranks of 7, 8 x 14 and 7 layers
    assert {(r.plan.vp, r.plan.layout) for r in rows} == {(8, "E|(t|)*126L")}
    assert all(stage_layers(r.model, r.plan) == [7] + [8] * 14 + [7] for r in rows)
    assert all(r.plan.sp and r.config.attention == "flash" for r in rows)
    # Megatron's runs go through the megatron --framework profile, so validation checks the profile
    mcore = [r for r in load_rows() if r.source.startswith(("Megatron-Core", "Narayanan", "Korthikanti"))]
    assert {r.config.framework for r in mcore} == {"megatron"} and all(r.config.grad_fp32 for r in mcore)


def test_errors_are_reported_per_gpu_family_precision_context_and_parallel_style(results):
    cats = by_category(results)
    assert sum(int(c["rows"]) for c in cats.values()) == len(results)
    h100_fsdp = cats[("H100/H200/H800 SXM", "16-bit", "short (< 32K)", "fsdp")]
    assert h100_fsdp["rows"] == 3 and h100_fsdp["min_error"] <= h100_fsdp["max_error"]


def test_a_prediction_carries_the_step_time_range_its_kind_was_off_by(results):
    plan = ParallelPlan(dp=8, tp=8, pp=1, sp=True)
    band = error_band("h100-sxm", TrainingConfig(seq_len=4096), plan, 10.0)
    # the shared runs of that kind and the held-out ones (dgxc-benchmarking's BF16 H100 runs)
    cat = by_category([*results, *validate_training(HELD_OUT)])[("H100/H200/H800 SXM", "16-bit", "short (< 32K)", "3d")]
    assert band["calibrated"] and band["runs"] == cat["rows"]
    lo, hi = band["step_s_range"]
    # a run the model predicted e too slow took step / (1 + e)
    assert lo == pytest.approx(10.0 / (1 + cat["max_error"])) and hi == pytest.approx(10.0 / (1 + cat["min_error"]))


def test_a_kind_with_no_published_run_is_marked_uncalibrated():
    # no published MI300X training run in either set
    band = error_band("mi300x", TrainingConfig(seq_len=4096, precision="fp8"), ParallelPlan(dp=8), 1.0)
    assert band["calibrated"] is False and band["step_s_range"] is None


def test_a_kind_only_the_held_out_runs_cover_takes_its_band_from_them():
    # B200 FP8 has no shared row: its band is what the held-out NeMo/Megatron-Bridge runs measured
    band = error_band("b200", TrainingConfig(seq_len=4096, precision="fp8"), ParallelPlan(dp=8), 1.0)
    held = [r for r in validate_training(HELD_OUT) if r.row.category == band_key(band)]
    assert band["calibrated"] and band["runs"] == len(held) >= 1
    assert band["min_error"] == pytest.approx(min(r.error for r in held))


def band_key(band):
    c = band["category"]
    return (c["gpu_family"], c["precision"], c["context"], c["parallel"])


@pytest.fixture(scope="module")
def held_out():
    return validate_training(HELD_OUT)


def test_held_out_runs_are_never_read_by_the_fit():
    # the sustained fit reads the shared rows only; the held-out rows test what it carries to
    assert not set(HELD_OUT) & set(CSVS)
    fitted_ids = {r.id for r in load_rows(CSVS)}
    assert not fitted_ids & {r.id for r in load_rows(HELD_OUT)}


def test_every_held_out_row_names_its_source_and_is_predicted(held_out):
    rows = [r for path in HELD_OUT for r in csv.DictReader(open(path))]
    assert len(held_out) == len(rows) >= 20
    assert all(r["source"] and r["tag"] == "S" for r in rows)


def test_published_runs_the_memory_model_refuses_are_counted_and_do_not_grow(held_out, results):
    # every row ran on its GPUs; a refusal is the memory model's error. Left (see the CSV notes):
    # GB200 Llama 3 70B FSDP at GBS 256 and 128: 185.6 GiB predicted on 185.0 (40 of 80 layers
    # offloaded, 145 GiB of activations kept), 0.6 GiB over, inside the 5% allocator reserve
    # (8.8 GiB) that gpuplan assumes without a source and the run's r0.2.0 / v0.1.0rc4 env does not
    # lift (expandable segments only for 405B there); Llama 3 405B's three shared rows (in-flight
    # micro-batches under Meta's modified interleaved schedule). Brought under their GPUs (8 -> 2):
    # TransformerEngine's in-place cross-entropy that every Megatron-Bridge recipe sets (the bf16
    # logits only: Qwen3-30B-A3B on H100 and GB200, gpt-oss-120b on B200), GB200 at the 189471 MiB
    # nvidia-smi reports (not the marketed 186 GB), one per-tensor FP8 weight copy on Blackwell
    # and expandable segments (405B GB200 FP8), Apex's BF16 optimizer state (Nemotron-340B's
    # optim.dtype bf16). Earlier, FP8 parameters brought 11 -> 8.
    # Megatron-Bridge 25.11's Qwen3-30B-A3B on 16 H100 (PP 2 x VP 24, MBS 2, no recompute) since the
    # q/k norms keep their inputs (TransformerEngine's RMSNorm op saves x and rstdevs,
    # ops/basic/rmsnorm.py): 82.8 GiB on 79.6, 4% over, where the model was 0.3 GiB under before.
    # Since a plan over only by the allocator's reserve is `tight` (a warning, MemoryReport.tight)
    # rather than refused, those runs and four BF16 H100 runs of dgxc-benchmarking (405B twice 3.9 GiB,
    # Nemotron-4 15B 3.2 GiB, Llama 3.1 8B with CP 2 on 8 GPUs 1.1 GiB into it; added blind) read
    # tight, and none is refused. dgxc-benchmarking's DeepSeek-V3 on 512 H100 (added blind with MTP
    # training) reads 1.5 GiB into it, on its second stage.
    # Refused since added blind (with MTP training and pipeline layouts): Megatron-Bridge 26.04.01's
    # DeepSeek-V3 MXFP8 runs, 197 GiB on the 185 GiB GB200 (6.5% over) and 302 GiB on the 278 GiB
    # GB300 (8.7%), nearly all activations of the interleaved schedule's 19 chunks in flight on
    # rank 0 (their step times read -0.2% and -2.3%). Their recipe keeps the Adam moments in BF16
    # (precision-aware optimizer, column exp_avg_dtype), which halves the unsharded expert moments
    # (EP 64 leaves one expert-data-parallel rank): GB200 188 GiB, tight; GB300 292 GiB, still
    # 0.3 GiB past its 13.9 GiB reserve, the remaining miss not explained.
    refused = {r.row.id for r in held_out if r.refused and not r.row.source.startswith("torchtitan")}
    assert refused <= {"mb260401-gb300-deepseek-v3-mxfp8"}, sorted(refused)
    tight = [r for r in held_out if r.tight]
    assert len(tight) <= 9, sorted(r.row.id for r in tight)
    assert all(0 < r.peak_bytes - r.capacity_bytes <= r.reserve_bytes for r in tight)
    # torchtitan: none since per-op SAC has its own term (the 10 Llama 3.1 8B SAC runs were refused
    # while it counted Megatron's attention-core recompute, ~2 GiB a layer more)
    titan = {r.row.id for r in held_out if r.refused and r.row.source.startswith("torchtitan")}
    assert not titan, sorted(titan)
    # The shared rows: none refused. Llama 3 405B's 8K run on 8,192 GPUs read 102 GiB (refused)
    # under V = 2, the interleaved warm-up holding 23.5 micro-batches' activations of 4-layer
    # chunks on the first rank; at the paper's one layer a chunk (V = 8) it is tight (81.3 GiB,
    # in the allocator's reserve only), as the paper trained 8K sequences "without activation
    # checkpointing" (3.3.2). Its 16K-GPU rows fit (74 GiB) since its FSDP is read as the paper
    # states it, gradients sharded (ZeRO-2).
    assert summary(results)["refused"] == 0
    assert all(r.capacity_bytes > 0 and r.peak_bytes > 0 for r in held_out)


def test_fine_grained_moe_is_far_too_fast_and_its_band_says_so(held_out):
    # NOT the target: Megatron-Bridge's Qwen3-30B-A3B (128 experts of FFN 768, top-8) on 16 H100
    # ran at 5,275 tokens/s per GPU; gpuplan predicts ~2.9x that. Megatron-Core's MoE README puts
    # it on host overhead ("gaps between GPU kernels where CPU cannot launch kernels fast
    # enough") and the all-to-all. The dispatcher's host sync and the expert loop's host launches
    # behind it are modelled (estimate/moe_host.py, at the 10 us per launch measured here): they
    # move this row by under one point (-67.3% -> -66.6%). Closing it would take 75 us per launch
    # with every launch exposed, and the missing time grows with the tokens (21.5 ms per layer and
    # micro-batch at MBS 2 here, 10.6 ms at MBS 1 in the 26.02 row), which host launches do not.
    # The alltoall dispatcher's sort-by-expert and FP8 padding copies of the received rows
    # (moe_dispatch.dispatcher_copy_passes, read from Megatron-Core and TE source) move it -66.6% ->
    # -62.0%; the grouped GEMMs are within 15% of DeepGEMM's H800 table and the all-to-all of
    # NCCL's and DeepEP's published NVLink rates, so no GPU term found here closes the rest.
    # gpt-oss-120b (top-4 of 128, FFN 2880) at its recipe's MBS 1 is ~34% too fast (it read ~24%
    # while its full-attention layers were priced at its 128-token window's kernel rate, a bug
    # that hid part of the gap), ~25% with the fp32 pass Megatron adds its experts' fc2 bias in
    # (estimate/expert_bias.py), ~20% with its unfused YaRN rotary and activation clamps
    # (estimate/unfused_ops.py). This guard keeps both misses visible: MoE predictions are optimistic.
    errors = {r.row.id: r.error for r in held_out if r.row.plan.ep > 1}
    assert errors["mb2511-qwen3-30b-a3b"] < -0.5 and -0.35 < errors["mb2511-gpt-oss-120b"] < 0
    band = error_band(
        "h100-sxm",
        TrainingConfig(seq_len=4096, precision="fp8"),
        ParallelPlan(dp=8, pp=2, vp=24, ep=8),
        1.0,
    )
    assert band["calibrated"] and band["step_s_range"][1] > 2.5  # the true step may be ~2.9x longer


def test_held_out_runs_are_within_the_issues_targets_for_unseen_runs(held_out):
    # issue 14: on published runs outside the shared set, throughput mean |error| <= 15% and no
    # GPU type above 25%. Dense runs: mean 10.9% (H100 7.2%, B200 13.9%, GB200 15.3% by GPU type),
    # but one GB200 row is past 25% alone: 405B MXFP8 on 128 GPUs in the 25.09 release (-33%; the
    # same layout reads 20-40% faster in later releases). 405B NVFP4 (+25.2% with TP
    # communication exposed) fell to +9% once interleaved p2p hid behind the next chunk. MoE misses
    # the target (the test above), so the whole set does too: mean 19.0%. It read 17.0% until
    # gpt-oss's full-attention layers stopped being priced at its sliding window's kernel rate
    # (gpt-oss rows -15..-49% -> -21..-53%; head dim 64 at its measured rate: 19.1%; MXFP8 quantization, swizzle and BF16 gather from TransformerEngine v2.9: 19.0%), and Blackwell attention took cuDNN 9.19 / 9.27's
    # published curve instead of Hopper's (dense B200 12.9% -> 13.9%, GB200 14.4% -> 15.3%).
    # DeepEP / HybridEP dispatch sending a token once per destination at the kernels' published
    # rates (estimate/ep_dispatch.py) left the 54 rows at 19.0% (Qwen3-30B-A3B EP16 on H100,
    # FP8: +10% -> -27%, its exchange 18.7 s -> 7.6 s, where a profiled BF16 run of that layout
    # shows 8.25 s), and the three Megatron-Bridge card rows of that layout in BF16 (-8%, -16%,
    # -19%) bring the 57 to 18.7%. Eleven more Megatron-Bridge card rows (Qwen3-30B-A3B and
    # Qwen3-235B-A22B MXFP8 on GB200/GB300, GB300 weak scaling 8-256 GPUs: -4..-11%; Qwen3-8B BF16
    # on H100: -4%; gpt-oss-120b on GB200 BF16 -47% and GB300 MXFP8 -27%) bring the 68 to 17.6%. Blackwell's
    # `sustained` was written after the 25.11 rows were seen (catalog/efficiency/b200.toml); the
    # Hopper rows were not fitted to.
    # torchtitan's 26 published H100 runs (96 GB, 500 W) joined at 13.0%: dense 11.9%, all 83 rows
    # 16.9%; two of them past 25%, both context parallel 8 at 262K tokens (ring attention's
    # per-chunk kernels and merges, not modelled: the rows' notes).
    dense = [r for r in held_out if r.row.plan.ep == 1]
    assert summary(dense)["mean_abs_error"] <= 0.15
    by_gpu: dict[str, list[float]] = {}
    for r in dense:
        by_gpu.setdefault(r.row.gpu, []).append(abs(r.error))
    assert max(sum(e) / len(e) for e in by_gpu.values()) <= 0.25, by_gpu
    # With torch.compile stated on 24 torchtitan rows (TrainingConfig.compile) every one of them reads
    # too fast, 26-33% for CP 4-8 and 8B TP 8: the 500 W part's clock is not modelled (its notes)
    over = {r.row.id for r in dense if abs(r.error) > 0.25}
    assert over <= {
        "mb2509-gb200-llama31-405b-mxfp8",
        # NeMo 25.02 Nemotron-4 15B on 64 B200 (-27.0%), added with the 25.02 / 25.04 rows, predicted blind
        "nemo2502-b200-nemotron4-15b",
        "tt2412-8b-fsdp1-cp8",
        "tt2412-8b-fsdp2-cp4",
        "tt2412-405b-4d-fsdp1-cp8",
        "tt2412-405b-4d-fsdp4-cp2",
        "tt2506-8b-tp-bf16",
        "tt2506-8b-asynctp-bf16",
        "tt2506-8b-asynctp-fp8",
    }, over
    # 16.0% (94 runs) before torchtitan's rows stated torch.compile, 17.6% since (they read uniformly
    # too fast, -17.8%: see test_validate_memory): the 15% target is missed, by MoE and those rows.
    # 16.3% once a TP collective hid only behind the GEMM it feeds or drains, Megatron's backward
    # gathered its input again and TE's userbuffers held their own SMs (estimate/layer_comm.py),
    # the H100 fit moving 0.83 -> 0.81 with it and Blackwell's assumed rate following (dense
    # 12.2%: H100 6.4%, B200 12.5%, GB200 14.3%, the 500 W H100 15.3%; torchtitan 15.3%; MoE 23.4%);
    # 16.1% once torchtitan's per-op SAC re-ran the all-gathers it does not save (8B TP 8: -24% -> -20%);
    # 15.6% with the fp32 pass Megatron adds biased experts' fc2 bias in (gpt-oss BF16 rows 4-8 points);
    # 15.3% over 96 with Trainy's two H200 torchtitan runs (predicted blind within 1%)
    # 15.3% over 112 with NeMo 25.04 (GB200, 6 rows), 25.02 (B200 6, H100 1) and 25.07 (GB200, 3) added, predicted blind;
    # 14.8% once routed experts paid their part-filled row tiles (kernels.row_tiles, measured on an
    # H100) and gpt-oss its unfused YaRN rotary and activation clamps, its fc2 bias in the probs'
    # bf16 under the alltoall dispatcher (estimate/unfused_ops.py; gpt-oss rows 2-8 points closer);
    # 14.7% with those eager chains at the rate measured for them on an H100 (Efficiency.eager_hbm;
    # gpt-oss H100 rows -20% -> -13%, Blackwell unmeasured, unchanged); 11.8% over 160 with
    # dgxc-benchmarking's 48 runs (NeMo 24.12, 25.02.01 and 25.04.01) added blind: the 42 on H100
    # -10..+8% (mean 3.7%), the 6 on GB200 -12..-24%
    # 12.5% over 167 (2026-11-27); 12.3% with Blackwell's eager chains at H100's measured rate
    # (0.52 of HBM, not the streaming 0.88); 10.7% with Blackwell's multi-GPU fraction as its
    # published slowest-GPU clock less what Hopper runs lose beyond theirs (0.81 -> 0.75; the
    # Blackwell rows were seen first: B200 24.2% -> 20.1%, GB200 16.5% -> 12.3%); 9.8% with the
    # shared Llama 3 rows at the V = 8 the paper's text gives, the H100 fit 0.81 -> 0.77 and
    # Blackwell's rate following it 0.75 -> 0.71 (2026-11-28: H100 7.5% -> 7.6%, the 500 W H100
    # 13.9% -> 11.4%, B200 20.1% -> 17.7%, GB200 12.3% -> 10.2%, GB300 3.0% -> 5.8%)
    assert summary(held_out)["mean_abs_error"] <= 0.15
    # issue 14's "no GPU type above 25%", MoE included
    by_type: dict[str, list[Result]] = {}
    for r in held_out:
        by_type.setdefault(r.row.gpu, []).append(r)
    per_type = {gpu: round(summary(rs)["mean_abs_error"], 3) for gpu, rs in by_type.items()}
    assert max(per_type.values()) <= 0.25, per_type
    # regression guard, not the target: what was last measured (9.8%; Blackwell, MoE included:
    # B200 17.7%, GB200 10.2%)
    assert summary(held_out)["mean_abs_error"] <= 0.099
    assert per_type["b200"] <= 0.178 and per_type["gb200"] <= 0.103, per_type
