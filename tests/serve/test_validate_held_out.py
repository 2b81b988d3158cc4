"""The held-out serving set (catalog/validation/held_out/serving_runs.csv): published engine benchmarks
with their full configurations, never fitted to. Every row names its source, none repeats a shared
row, none is refused, and the errors stay no worse than when the rows were added (a regression
guard, NOT the issue's target of median 8% / p90 20%, which this set misses: see the CSV notes)."""

import csv

import pytest

from gpuplan.serve.validate import CSV as SHARED
from gpuplan.serve.validate_held_out import CSV, METRICS, load_rows, summary


def _raw():
    with open(CSV, newline="") as f:
        return list(csv.DictReader(f))


def test_every_row_names_its_source_and_tag():
    rows = _raw()
    assert len(rows) >= 40
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source"] and r["url"].startswith("https://"), r["id"]
        assert r["tag"] in ("S", "S2", "D"), r["id"]
        # a derived value says how it was derived; a repository file is cited at a commit
        assert r["tag"] != "D" or "derived" in r["note"], r["id"]
        assert (
            "github.com" not in r["url"]
            or "/blob/" not in r["url"]
            or len(r["url"].split("/blob/")[1].split("/")[0]) == 40
        )
        assert r["metric"] in METRICS and float(r["value"]) > 0, r["id"]


def test_every_row_loads_as_a_serving_request():
    rows = load_rows()
    assert len(rows) == len(_raw())
    assert {r.engine for r in rows} >= {"trtllm", "vllm", "vllm-v0"}
    assert len({r.gpu for r in rows}) >= 5 and {r.tp for r in rows} >= {1, 2, 4, 8}


def test_no_row_repeats_the_shared_validation_set():
    with open(SHARED, newline="") as f:
        shared = {
            (r["model"], r["gpu"], r["tp"], r["input_len"], r["output_len"], float(r["value"]))
            for r in csv.DictReader(f)
        }
    for r in _raw():
        assert (r["model"], r["gpu"], r["tp"], r["input_len"], r["output_len"], float(r["value"])) not in shared, r[
            "id"
        ]


def test_no_configuration_an_engine_ran_is_refused(held_out_checks):
    refused = [c.row.id for c in held_out_checks if c.predicted is None]
    assert refused == []


def test_errors_stay_within_what_was_last_measured(held_out_checks):
    # regression guard, not the target: 10.8% median, 51.3% p90, 110% max when added (54 rows);
    # 8.1%, 42.9%, 159% once the all-reduce and NVFP4 fixes landed (issue 18); 7.4%, 34.6%, 65%
    # once the TensorRT-LLM v0.5/v0.6.1 rows ran under the trtllm-0.6 profile (their Llama-2-70B
    # GQA KV read once per query head by the masked MHA kernel before XQA: +107%/+159% -> -13%/-6%);
    # 8.1%, 34.6%, 65% with NCCL's NVLink SHARP on 8 Hopper GPUs (estimate/nccl.py): TP8 rows faster;
    # 7.9% with the H200's own measured FP8 matmul rate (catalog/gpus/h200.toml [mamf])
    # (the kvcached burst row through serve-sim, issue 18: +41.3% -> +40.8%, median and p90 unchanged).
    # Issue 18 item 5 added the kvcached latency-vs-rate curve (TTFT and TPOT at rate 16 and inf,
    # serve-sim): 9.2%, 50.1%, 354% over all 58 rows; the 53 steady-state rows alone 7.6%, 28.8%, 66%.
    # The rest of NIM 1.8.0's Llama-3.3-70B latency-vs-concurrency curve (15 rows, 2 x H100 TP2, closed
    # loop): 11.3%, 65.2%, 432% over 73 rows; the 68 steady-state rows 10.1%, 42.9%, 432% (the c50-c150
    # TTFT misses are the bf16 KV pool's 44 seats against the ~85 the engine held, see the CSV notes).
    # The curve's KV dtype read from its own saturated points (85 in flight: only a 1-byte cache seats
    # them, CSV notes): 9.0%, 50.1%, 354% over 73 rows; the steady-state rows 7.8%, 34.6%, 66%.
    # TTFT with the wait behind other prompts' prefills (steady_state.prefill_wait, M/D/1):
    # 8.0%, 42.9%, 354%; steady-state 6.8%, 27.6%, 66% (NIM c5/c25/c50 TTFT -26/-41/-51% -> -17/-8/-1%)
    # One-GPU replicas at one GPU's measured clock (specs/hardware.py for_job, 0.87 of the MAMF where
    # the multi-GPU fit reads 0.81): medians and p90 unchanged; the one-GPU rows 2-6 points faster,
    # TensorRT-LLM v0.5's Llama-2-7B TTFT -11% -> -16% (its trtllm-0.6 engine's max); the multi-GPU
    # fit at 0.81 with Blackwell's assumed rate following it: 7.7%, 42.0% (TRT-LLM v0.19's B200
    # TP sweep 1-2 points slower).
    # 2026-11-27: 48 rows of vLLM V1 (0.8.2, 0.8.4) and SGLang (0.4.4, 0.4.5) at request rate 10 added
    # (DeepSeek-R1 TP8 on H200, Llama-3.1-8B FP8 on H200, QwQ-32B TP2 on H100; serve-sim, Poisson):
    # 15.6%, 67.9%, 352% over 121 rows (the 73 before: 7.7%, 42.0%); the new rows' decode steps run
    # 2-5 ms (dense) and 15-24 ms (DeepSeek's block-FP8 MoE) slower than modelled (CSV notes).
    # SGLang's prefills run apart from its decodes (engines.py mixed_prefill) and its 0.4.5 memory
    # fraction above 80 GiB: 15.7%, 68.6% (SGLang's rows 40.4% -> 42.9% median: its decodes now wait
    # out each prefill, and R1's 10000/500 row no longer thrashes a pool too small by 0.81 vs 0.907;
    # the engine's own log puts R1's decode step at 50 sequences at 33.7 ms against 21.4 modelled)
    # the profiling peak as the larger of its forward and sampler phases (memory.activation_peak,
    # vLLM's profile_run order) enlarges the pools a little: 15.8% (one row across the median); the
    # steady rows 6.9% -> 7.2%: larger pools shift TensorRT-LLM 70B TP2 2048/128 (-6.7% -> -8.5%) and
    # NIM's TTFT at concurrency 100 (-10% -> -24%), Scout TP4 improves (+65% -> +55%)
    # a memory-bound GEMM's measured fixed time (3.5 us, not the 2 us launch overhead; scripts/
    # fit_decode.py): 15.7%, 68.6%; every decode step a little slower, so the too-fast rows gain
    # (R1's, the 8B FP8's, NIM's 70B) and the two vLLM CI latency rows of the 8B, predicted too slow
    # already (+28%, H100 and H200), lose 2.5 points: the steady rows' p90 27.6% -> 30.1%
    # the routed experts' grouped GEMMs at their measured rate (2.83 TB/s on H100 and H200 alike)
    # and fixed time (12.2 us): 15.5%, 56.5%; DeepSeek-R1's H200 rows gain most (SGLang's ITL at
    # 1000/2000 -37% -> -12%, vLLM's -49% -> -30%), the two vLLM CI Mixtral rows lose (H200 +7% ->
    # +43%, H100 +13% -> +19%: under the vllm-v0 profile's 4 ms fixed host gap, which the 8B rows
    # already read as too long); the steady rows' p90 30.1% -> 31.8%
    # One B200 alone at its published sustained rate (0.84 of the MAMF, measurements/published/
    # mamf-msmf; it followed the multi-GPU 0.81 before): the three one-GPU Blackwell FP4 rows, too
    # fast already, 2.5 points faster (B200 1000/1000 +7.5% -> +10.0%), and one crosses the steady
    # rows' median, 7.23% -> 7.34%; all-row median and p90 unchanged. Blackwell's multi-GPU fraction
    # as its published slowest-GPU clock less what Hopper runs lose beyond theirs (0.81 -> 0.75):
    # TRT-LLM v0.19's B200 TP2/TP4 rows +33%/+42% -> +28%/+38%; the steady rows' p90 31.8% -> 30.1%
    # Prompts prefilled in lumps of one prompt, not smeared over every decode step (a lone client's
    # throughput now agrees with its own TTFT and TPOT, test_steady_state): all rows' median
    # 15.5% -> 14.5%, the steady rows' p90 30.1% -> 27.8%, the shared rows' median 5.0% -> 4.5%;
    # the steady rows' median 7.3% -> 8.0%: NIM's 70B ITL at 50-250 clients 2-7% slow -> 4-9% (a
    # decode step alone cannot use the compute a smeared prompt lent it) and TRT-LLM's 70B TP2
    # 128/2048 -9% -> +10% (half the steps now stay under the 256-row GEMM tile edge). Then the
    # clients waiting for their first token no longer counted as decoding (Little's law over the
    # loop): NIM's ITL at 50-250 clients 1 point closer, medians 14.5% -> 14.4%, 8.0% -> 7.9%.
    # Then a closed-loop client's next request waits out the iteration already running
    # (steady_state.in_flight): NIM's TTFT at 5-50 clients -17/-8/-3% -> -14/-3/+5%, 500/2000 at
    # c5 -65% -> -53%; medians 14.4% -> 14.1%, 7.9% -> 7.5%, p90 56.5% -> 55.2%. (The static-batch
    # rows, which are not a closed loop, read a step slower: under 1 point each.)
    # Then 85 rows gathered blind (2026-11-28: TensorRT-LLM v0.17's 70B/405B/Mixtral TP sweep, its
    # v0.14 Triton online table, the post-1.0 developer-guide table, gpustack's vLLM 0.11 bursts,
    # datacrunch's SGLang H200 runs, SGLang's attention-backend table, an InferenceX SGLang 0.5.7
    # concurrency sweep): on them alone median 20.4%, p90 60%; all 215 rows 15.8% / 57.7%, the
    # 105 steady rows 6.9% / 40.1% (gpt-oss MXFP4 on Hopper +58..+133%, Mixtral +12..+25%).
    # Then routed experts' ragged tiles (15.7% / 57.3%), and Hopper's persistent GEMMs without a
    # one-wave floor (measured decode GEMMs of 64-512 rows: bias +12%/+18% -> -1%/0%): the rows at
    # batches over 128 read faster, all rows 15.7% / 58.6% (Poisson 26.4% -> 28.0%)
    # Then SGLang's overlap loop (a new request waits one more iteration): its TTFT rows 4-14 points
    # closer (R1 n200 -70% -> -57%), p90 58.6% -> 57.3%. Then vLLM >= 0.14's async scheduling
    # (vllm-async: the 0.19 rows and the one --async-scheduling row) and its API server as a
    # pipelined stage (engines.py frontend_s_per_token, from vLLM's own 1B benchmarks): the 0.6B
    # burst's throughput +43% -> +16%, but its ITL +349% -> +479% (the max): the model slows all
    # 500 admitted streams to the API server's pace, where vLLM's server admits them slowly instead
    # (mean TTFT 2.9 s measured, 0.4 s predicted); all rows 15.7% / 58.6%
    # Then serve-sim's SGLang admits as its PrefillAdder does (whole output beside new_token_ratio
    # of the running requests' remaining output): kvcached's tight-pool 3B at rate 32 TTFT +60% ->
    # +24%, but datacrunch's 70B burst and rate-16 rows -4% / +9% -> +22% / +26% in throughput (their
    # agreement came from 1,815 and 1,322 recomputed preemptions that SGLang's admission rules out);
    # all rows 15.7% -> 16.3%, p90 unchanged
    # Then 30 SGLang rows gathered blind (2026-11-28: gpustack's SGLang 0.5.3 bursts of DeepSeek-R1
    # and GLM-4.6 on H200, SGLang's own DeepSeek-V3 v0.4.1 table at Poisson rates 1-8, the SGLang
    # cookbook's Qwen3-235B and DeepSeek-R1 on 8 B200 at concurrency 64-100), predicted before any
    # change: median 37.9%, p90 93%, nearly all too fast (B200 MoE decode ITL -30..-44%, TTFT
    # -74..-88% in the closed loops; the v0.4.1 DP-attention rows +11..+142% as the rate passes
    # saturation). All 245 rows 20.4% / 62.7%; the 117 steady rows 8.5% / 60.7%
    # Then MLA's prefill timed as the engines run it, unabsorbed (192 + 128 per head, not 1,088):
    # gpustack's 32K-token DeepSeek-R1 bursts TTFT +60% -> -21%, but the other DeepSeek-R1 rows on
    # H200 read further too fast (their MoE decode runs at about half gpuplan's rate, row notes):
    # p90 62.7% -> 65.7%. Then B200's grouped-decode terms fitted on published fused-MoE times
    # (b200.toml): the cookbook's B200 MoE ITL -31..-44% -> -11..-27%. All rows 19.9% / 64.6%,
    # the steady rows 8.4% / 51.3%. Then the H100 multi-GPU fraction refitted on the training rows
    # (0.81 -> 0.77, the Llama 3 rows at the paper's V = 8; Blackwell's 0.75 -> 0.71 with it): 84 rows
    # closer, 22 further (TensorRT-LLM's and NIM's 70B-405B TP 2-8 steady rows 3 points slower, all
    # read slow already): all rows 18.5% / 63.4%, the steady rows 9.0% / 51.3%. Then vLLM's profiled
    # sampler peak with torch.sort's temporaries (38 B a logit under V1's sorting sampler, 14 under
    # FlashInfer's: engines.py): gpustack's vLLM 0.11 bursts on memory-tight single H100s (Qwen3-32B,
    # gpt-oss-120b) hold fewer sequences, throughput +50..+65% -> +15..+35%, TTFT -33..-35% ->
    # -12..-15%, their ITL 5 points further (-51% -> -56%): all rows 16.7% / 61.9%
    s = summary(held_out_checks)
    assert s["median_abs_error"] <= 0.17
    assert s["p90_abs_error"] <= 0.62
    assert s["max_abs_error"] <= 4.8
    steady = s["by_load"]["steady"]  # the analytic model's rows (the 8% median target is missed since)
    assert steady["median_abs_error"] <= 0.091 and steady["p90_abs_error"] <= 0.52 and steady["max_abs_error"] <= 1.33
    assert s["by_engine"]["trtllm-0.6"]["max_abs_error"] <= 0.16


def test_a_burst_row_is_predicted_by_serve_sims_burst_not_the_steady_state():
    import math

    from gpuplan.serve.formats import kv_format, weight_format
    from gpuplan.serve.plan import estimate_serving
    from gpuplan.serve.sim import Lengths, Workload, simulate
    from gpuplan.serve.timing import Deployment
    from gpuplan.serve.validate_held_out import predict

    row = next(r for r in load_rows() if r.id == "kvcached-vllm019-qwen3-0.6b-h100-512-128")
    q = row.request
    # vllm bench serve sets no --max-num-seqs: the engine's default holds (1024 on an H100)
    assert row.num_prompts == 500 and q.config.max_num_seqs == 1024
    d = Deployment(q.model, q.gpu, weight_format(q.weights, q.gpu), kv_format(q.kv, q.gpu), q.tp)
    w = Workload.burst(500, Lengths.parse("512", "i"), Lengths.parse("128", "o"))
    burst = simulate(d, q.config, w, math.inf)
    assert predict(row) == burst.output_tokens / burst.makespan_s
    assert predict(row) != estimate_serving(q).point.output_tokens_per_s
    # only rows with a burst or a request rate run serve-sim (the kvcached curve, the rate-10 runs of
    # vLLM V1 and SGLang); every closed-loop or offline row is the analytic model's
    for r in load_rows():
        assert (r.load == "steady") == (r.num_prompts is None), r.id
    sims = {r.id.split("-")[0] for r in load_rows() if r.load != "steady"}
    assert sims == {"kvcached", "skyp", "simonmo", "trton014", "dc", "sglattn", "gpustack", "blind"}


def test_the_num_prompts_column_is_optional_and_required_only_by_burst_rows(tmp_path):
    import pytest

    rows = _raw()
    cols = [c for c in rows[0] if c not in ("num_prompts", "rate")]
    old = tmp_path / "old.csv"
    with open(old, "w", newline="") as f:  # a file from before both columns
        w = csv.DictWriter(f, cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(r for r in rows if r["concurrency"] not in ("burst", "poisson"))
    sim = sum(r["concurrency"] in ("burst", "poisson") for r in rows)
    assert sim == 128 and len(load_rows(old)) == len(rows) - sim
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerow(next(r for r in rows if r["concurrency"] == "burst") | {"num_prompts": ""})
    with pytest.raises(ValueError, match="num_prompts"):
        load_rows(bad)


def _write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return path


def test_the_rate_column_is_optional_and_a_poisson_row_without_its_rate_is_refused(tmp_path):
    import pytest

    rows = _raw()
    burst = next(r for r in rows if r["concurrency"] == "burst")
    poisson = next(r for r in rows if r["concurrency"] == "poisson")
    # a file from between the two columns (num_prompts, no rate) still loads its burst row
    no_rate = tmp_path / "no_rate.csv"
    with open(no_rate, "w", newline="") as f:
        w = csv.DictWriter(f, [c for c in rows[0] if c != "rate"], extrasaction="ignore")
        w.writeheader()
        w.writerow(burst)
    (row,) = load_rows(no_rate)
    assert row.load == "burst" and row.num_prompts == 500
    cases = [
        (poisson | {"rate": ""}, "needs rate"),
        (poisson | {"num_prompts": ""}, "needs num_prompts"),
        (poisson | {"rate": "0"}, "rate must be a positive"),
        (poisson | {"rate": "inf"}, "rate must be a positive finite"),
        (burst | {"rate": "16"}, "only a `poisson` row has rate"),
        (rows[0] | {"rate": "4"}, "only a `poisson` row has rate"),
    ]
    for i, (bad, message) in enumerate(cases):
        with pytest.raises(ValueError, match=message) as e:
            load_rows(_write(tmp_path / f"bad{i}.csv", [bad]))
        assert "\n" not in str(e.value) and str(e.value).startswith(bad["id"] + ":")


def test_a_poisson_row_is_predicted_by_serve_sim_at_its_rate_not_the_steady_state():
    from gpuplan.serve.formats import kv_format, weight_format
    from gpuplan.serve.plan import estimate_serving, to_dict
    from gpuplan.serve.sim import Lengths, Workload, simulate
    from gpuplan.serve.timing import Deployment
    from gpuplan.serve.validate_held_out import SEED, predict

    rows = {r.id: r for r in load_rows()}
    ttft = rows["kvcached-vllm019-qwen3-0.6b-h100-512-128-r16-ttft"]
    itl = rows["kvcached-vllm019-qwen3-0.6b-h100-512-128-r16-itl"]
    assert ttft.load == itl.load == "poisson" and ttft.rate == 16.0 and ttft.num_prompts == 500
    q = ttft.request
    d = Deployment(q.model, q.gpu, weight_format(q.weights, q.gpu), kv_format(q.kv, q.gpu), q.tp)
    w = Workload.poisson(16.0, 500, Lengths.parse("512", "i"), Lengths.parse("128", "o"), seed=SEED)
    doc = simulate(d, q.config, w, 16.0).to_dict()
    assert predict(ttft) == doc["ttft_s"]["mean"] * 1e3
    assert predict(itl) == doc["tpot_s"]["mean"] * 1e3
    steady = to_dict(estimate_serving(q))
    assert predict(ttft) != steady["ttft_s"] * 1e3 and predict(itl) != steady["tpot_s"] * 1e3
    # the open-loop point sits below the burst on the same configuration: TTFT rises with the rate
    burst = rows["kvcached-vllm019-qwen3-0.6b-h100-512-128-inf-ttft"]
    assert burst.load == "burst" and predict(ttft) < predict(burst)


def test_poisson_predictions_are_deterministic_for_a_fixed_seed(monkeypatch):
    from gpuplan.serve import validate_held_out as vh

    row = next(r for r in load_rows() if r.id == "kvcached-vllm019-qwen3-0.6b-h100-512-128-r16-ttft")
    first = vh.predict(row)
    assert vh.predict(row) == first  # the same seed draws the same arrivals
    monkeypatch.setattr(vh, "SEED", vh.SEED + 1)
    assert vh.predict(row) != first  # another seed is another draw of the Poisson process


def test_a_sim_row_may_draw_its_lengths_and_mean_itl_weighs_every_gap():
    # SGLang's bench_serving without --random-range-ratio draws each length uniformly from 1 to the
    # given one: such a row runs serve-sim on that distribution, its request carrying the longest
    from gpuplan.serve.sim import Lengths, Workload, simulate
    from gpuplan.serve.validate_held_out import SEED, predict_sim

    rows = {r.id: r for r in load_rows()}
    itl = rows["kvcached-sgl046-llama3.2-3b-a100-r16-itl"]
    assert itl.input_lengths == Lengths("uniform", 1, 1913) and itl.output_lengths == Lengths("uniform", 1, 162)
    assert (itl.request.input_len, itl.request.output_len) == (1913, 162)
    q = itl.request
    w = Workload.poisson(16, 960, itl.input_lengths, itl.output_lengths, seed=SEED)
    res = simulate(q.deployment(), q.config, w, 16)
    gaps = res.itl_s.repeat(res.itl_weight.astype(int))  # every token's gap, pooled over requests
    assert predict_sim(itl) == pytest.approx(gaps.mean() * 1e3)
    # token-weighted: requests with more tokens count more than in TPOT's per-request mean
    assert predict_sim(itl) != pytest.approx(res.to_dict()["tpot_s"]["mean"] * 1e3, rel=1e-3)
