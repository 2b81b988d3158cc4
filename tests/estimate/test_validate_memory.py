"""Published peak memory beside step time in validation: a row's ``peak_memory_gib`` against
gpuplan's peak (less the CUDA context where the source measured the allocator's reserve)."""

import csv

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.validate import HELD_OUT, memory_summary, summary, to_dict, validate_training
from gpuplan.units import GiB

TITAN = HELD_OUT[1]
HEADER = open(TITAN).readline().strip().split(",")


def _fixture(tmp_path, **changes):
    """The first torchtitan row (Llama 3.1 8B FSDP on 8 GPUs), with ``changes``."""
    with open(TITAN, newline="") as fh:
        row = next(csv.DictReader(fh))
    row.update(id="fixture", **changes)
    path = tmp_path / "rows.csv"
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, HEADER)
        w.writeheader()
        w.writerow(row)
    return path


def test_a_published_reserved_peak_is_compared_with_the_peak_less_the_cuda_context(tmp_path):
    (r,) = validate_training((_fixture(tmp_path, peak_memory_gib="40.0"),))
    mem = estimate_memory(r.row.model, r.row.config, r.row.plan, catalog.gpu("h100-sxm-96gb"), r.row.microbatches)
    reserved = mem.per_gpu.total - 0.5 * GiB  # TrainingConfig.cuda_context_bytes: outside the allocator
    assert r.row.measured_peak_bytes == 40 * 2**30 and r.row.memory_measure == "reserved"
    assert r.predicted_memory_bytes == pytest.approx(reserved)
    assert r.memory_error == pytest.approx(reserved / (40 * 2**30) - 1)
    s = memory_summary([r])
    assert s["rows"] == 1 and s["mean_abs_error"] == s["max_abs_error"] == pytest.approx(abs(r.memory_error))
    doc = to_dict([r])
    assert doc["peak_memory"] == s and doc["rows"][0]["memory_error"] == pytest.approx(r.memory_error)


def test_a_row_without_published_memory_has_no_memory_error(tmp_path):
    (r,) = validate_training((_fixture(tmp_path, peak_memory_gib=""),))
    assert r.row.measured_peak_bytes is None and r.memory_error is None
    assert memory_summary([r]) is None and to_dict([r])["peak_memory"] is None


def test_a_memory_figure_from_a_source_that_states_no_measure_is_refused(tmp_path):
    path = _fixture(tmp_path, source="NeMo 24.07 performance summary", arch="llama", model="", peak_memory_gib="40")
    with pytest.raises(GpuplanError, match="peak_memory_gib") as err:
        validate_training((path,))
    assert "\n" not in str(err.value)


@pytest.fixture(scope="module")
def titan():
    return validate_training((TITAN,))


def test_torchtitan_held_out_memory_error_as_measured(titan):
    # NOT the issue-14 target (<= 10%): 18 rows at 51.3% mean |error|, max 118.8% while per-op SAC
    # was modelled as Megatron's attention-core recompute (8B SAC rows +82..+119%, refused); with
    # per-op SAC's own term (activations.per_op_sac_saved) 19.0%, max 47.5%: the 8B SAC rows
    # -0.7..+8.6%. With FSDP2's unsharded fp32 gradients under PP (memory_terms.pp_grad_accumulator)
    # 8.6%, max 18.8%: the 405B rows -36..-48% -> -3..-19%; full-AC rows without PP within 13% (8B
    # CP +8..+9%, 70B -7%, -13%). See the rows' notes. Trainy's two H200 8B runs (2025-06, torch.compile
    # over blocks and loss) joined at +44%, +43%, predicted before any change: the loss's fp32
    # log-softmax and buffers, which torchtitan's compiled loss does not keep (TrainingConfig.compile_loss),
    # then +1%, -1%: 20 rows at 7.7%, max 19.9%.
    s = memory_summary(titan)
    assert s["rows"] == 20
    assert s["mean_abs_error"] <= 0.08 and s["max_abs_error"] <= 0.20
    sac = [abs(r.memory_error) for r in titan if r.memory_error is not None and r.row.config.recompute == "selective"]
    assert len(sac) == 8 and max(sac) <= 0.09
    full_no_pp = [
        abs(r.memory_error)
        for r in titan
        if r.memory_error is not None and r.row.config.recompute == "full" and r.row.plan.pp == 1
    ]
    assert len(full_no_pp) == 6 and max(full_no_pp) <= 0.16  # 70B 2D -15.6% with compile stated (-12.9% before)


def test_torchtitan_held_out_throughput_error_as_measured(titan):
    # 26 rows at 13.0% mean |error| (mean signed -10.7%: predicted too fast, as a 500 W part run at
    # the 700 W sustained fraction would be); on the 80 GB / 700 W h100-sxm entry the same rows
    # read 15.6% (its 3.35 TB/s HBM, the faster part's). With per-op SAC's recompute (the matmuls
    # it does not keep and every elementwise pass, not the attention core): 11.9%, signed -8.2%. With
    # torch.compile stated (24 of 26 rows; TrainingConfig.compile): 17.8%, every row too fast: the
    # compiled rows had absorbed a bias the two eager rows show (-12%, -14%), and the 8B A/B reads
    # a 21.6% compile speedup where torchtitan measured 15.7%. TP collectives paired with their GEMMs
    # and per-op SAC re-running the all-gathers: 15.3%. Trainy's two H200 rows, predicted blind at
    # +1.0%, -0.6% (700 W parts): 28 rows at 13.8%, signed -13.8%
    s = summary(titan)
    assert s["rows"] == 28 and s["mean_abs_error"] <= 0.142 and s["mean_signed_error"] < 0


def test_the_96gb_h100_is_the_sxm_die_at_its_own_memory_bandwidth_and_power():
    big, sxm = catalog.gpu("h100-sxm-96gb"), catalog.gpu("h100-sxm")
    assert big.peak_flops == sxm.peak_flops and big.efficiency == sxm.efficiency
    assert big.memory_bytes == 95 * GiB and big.tdp_w == 500 and big.hbm_bytes_per_s == 2400e9
