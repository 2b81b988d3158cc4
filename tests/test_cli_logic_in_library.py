"""What the commands used to compute themselves now lives in the library, next to its concept:
each piece is importable and right without the CLI. Oracles are the published rules (ring
all-reduce volume, Young's interval, the 1F1B bubble, Llama 3's batch), not the code."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from gpuplan import catalog, inputs
from gpuplan.errors import GpuplanError


def test_a_token_batch_in_binary_millions_is_read_as_sequences_as_llama3_quotes_it():
    # Llama 3 (Dubey et al. 2024, Table 4): a 16M-token batch is 2,048 sequences of 8,192 tokens
    assert inputs.global_batch("16M", 8192) == 2048
    assert inputs.global_batch("512", 4096) == 512
    assert inputs.global_batch("2M", 1000) == 2000  # decimal when it divides
    with pytest.raises(GpuplanError) as err:
        inputs.global_batch("1000K", 3000)
    assert err.value.field == "global_batch"


def test_a_plan_fills_its_gpus_with_data_parallel_ranks_or_is_refused():
    from gpuplan.specs.parallel import ParallelPlan

    plan = ParallelPlan.for_gpus(64, tp=8, pp=2)
    assert (plan.dp, plan.world_size) == (4, 64)
    with pytest.raises(GpuplanError) as err:
        ParallelPlan.for_gpus(12, tp=8)
    assert err.value.field == "gpus"
    with pytest.raises(GpuplanError) as err:
        ParallelPlan.for_gpus(16, 4, tp=2)
    assert err.value.field == "dp"


def test_the_hardware_of_a_request_is_the_catalog_gpu_with_eight_by_default():
    hw, gpus = catalog.hardware("h100-sxm", None, None)
    assert (hw.id, gpus) == ("h100-sxm", 8)
    assert catalog.price_or_catalog("h100-sxm", 1.25) == 1.25
    assert catalog.price_with_source("h100-sxm", 1.25) == (1.25, "`price`")


def test_the_1f1b_bubble_over_the_work_is_stages_minus_one_over_microbatches():
    # Narayanan et al. 2021: with equal stage times the 1F1B bubble is (p - 1) / m of the work
    from gpuplan.pipeline.request import costs_from_text
    from gpuplan.pipeline.schedules import build
    from gpuplan.pipeline.simulate import simulate

    p, m = 4, 8
    t = simulate(build("1f1b", p, m), costs_from_text(p, "1", None, None, "1", None, 0.0))
    assert t.bubble_ratio == pytest.approx((p - 1) / m)


def test_stage_times_are_one_or_one_per_stage():
    from gpuplan.pipeline.request import stage_times

    assert stage_times("1,1,1,1.4", "f", 4) == [1, 1, 1, 1.4]
    with pytest.raises(GpuplanError) as err:
        stage_times("1,2", "f", 4)
    assert err.value.field == "f"


def test_a_ring_all_reduce_sends_twice_the_buffer_times_n_minus_one_over_n():
    from gpuplan.estimate.comm import collective_report

    doc = collective_report("all-reduce", 1e9, 8, 1, catalog.gpu("h100-sxm"))
    assert doc["bytes_sent_per_rank"] == pytest.approx(2 * 7 / 8 * 1e9)
    assert (doc["nodes"], doc["ranks_per_node"]) == (1, 8)


def test_checkpoint_intervals_follow_young_and_refuse_a_checkpoint_longer_than_the_mtbf():
    from gpuplan.estimate.checkpoint_interval import intervals

    doc = intervals(60.0, 3 * 3600.0)
    assert doc["young_s"] == pytest.approx(math.sqrt(2 * 60 * 3 * 3600))  # Young 1974
    with pytest.raises(GpuplanError) as err:
        intervals(120.0, 60.0)
    assert err.value.field == "checkpoint_cost"


def test_node_failure_presets_and_a_rate_no_job_survives():
    from gpuplan.cluster.setup import check_progress, node_mtbf

    assert node_mtbf("none") is None
    assert node_mtbf("2d") == 2 * 86400
    with pytest.raises(GpuplanError) as err:
        node_mtbf("often")
    assert err.value.field == "node_mtbf"
    with pytest.raises(GpuplanError) as err:  # a failure a minute, 5-minute restarts: no progress
        check_progress(60.0, 0.0, 60.0, 300.0)
    assert err.value.field == "node_mtbf"
    check_progress(264 * 86400.0, 0.0, 60.0, 300.0)  # Llama 3's rate leaves time to work


def test_trace_jobs_no_node_can_hold_are_counted_and_the_rest_numbered_afresh():
    from gpuplan.cluster.setup import runnable_jobs
    from gpuplan.cluster.sim import ClusterConfig, Job

    cfg = ClusterConfig(nodes=2, gpus_per_node=8)
    jobs = [Job(7, 0.0, 4, 60.0), Job(8, 1.0, 64, 60.0), Job(9, 2.0, 16, 60.0)]
    skipped: Counter[str] = Counter()
    run = runnable_jobs(cfg, jobs, skipped, "t.csv", checkpoint="daly", cost_s=30.0, restart_s=10.0)
    assert [(j.id, j.gpus, j.checkpoint) for j in run] == [(0, 4, "daly"), (1, 16, "daly")]
    assert sum(skipped.values()) == 1
    assert jobs[0].id == 7  # the trace's own jobs are left as read
    with pytest.raises(GpuplanError) as err:
        runnable_jobs(cfg, [Job(0, 0.0, 64, 60.0)], Counter(), "t.csv", checkpoint="none", cost_s=1.0, restart_s=1.0)
    assert err.value.field == "trace"


def test_slurm_jobs_are_whole_nodes():
    from gpuplan.slurm import job_nodes

    assert job_nodes(16, None, 8) == 2
    assert job_nodes(None, None, 8) == 1
    with pytest.raises(GpuplanError) as err:
        job_nodes(12, None, 8)
    assert err.value.field == "gpus" and "`gpus=8` or 16" in err.value.fix
    with pytest.raises(GpuplanError) as err:  # less than a node: one count to offer, not "8 or 8"
        job_nodes(1, None, 8)
    assert "`gpus=8`," in err.value.fix and "`gpus_per_node=1`" in err.value.fix
    with pytest.raises(GpuplanError) as err:
        job_nodes(16, 3, 8)
    assert err.value.field == "nodes"


def test_a_serving_simulation_has_exactly_one_arrival_process():
    from gpuplan.serve.engines import engine_config
    from gpuplan.serve.formats import kv_format, weight_format
    from gpuplan.serve.sim import Lengths
    from gpuplan.serve.sim_study import parse_rates, study
    from gpuplan.serve.timing import Deployment

    assert parse_rates("1, 2,4") == [1, 2, 4]
    hw = catalog.gpu("h100-sxm")
    d = Deployment(catalog.model("llama-3.1-8b"), hw, weight_format("bf16", hw), kv_format("bf16", hw), 1, 1, False)
    cfg = engine_config(None, hw, 1, None, None, None, 256)
    lengths = Lengths.parse("128", "input_len"), Lengths.parse("16", "output_len")
    common = dict(trace=None, ttft_slo_s=None, itl_slo_s=None)
    with pytest.raises(GpuplanError) as err:
        study(d, cfg, 20, *lengths, 0, rates=[], clients=None, **common)
    assert err.value.field == "rate"
    with pytest.raises(GpuplanError) as err:
        study(d, cfg, 20, *lengths, 0, rates=[2.0], clients=4, **common)
    assert err.value.field == "concurrency"
    runs, best = study(d, cfg, 20, *lengths, 0, rates=[1.0, 2.0], clients=None, **common).run()
    assert len(runs) == 2 and best == (0.0, None)


def test_expert_loads_come_from_a_file_or_a_skew_not_both():
    from gpuplan.experts.loads import load_table
    from gpuplan.experts.report import placement_report

    with pytest.raises(GpuplanError) as err:
        load_table("loads.csv", 1.0, 4, 16)
    assert err.value.field == "loads"
    table = load_table(None, 1.0, 4, 16)
    doc = placement_report(
        table, replicas=16, gpus=4, nodes=2, groups=1, policy="global", top_k=2, hidden=1024, dispatch_bytes=1.0
    )
    # every expert placed once: 4 per GPU; the loads per GPU add up to the table's
    assert doc["replica_counts"] == [[1] * 16] * 4
    assert sum(map(sum, doc["gpu_load"])) == pytest.approx(table.sum())
