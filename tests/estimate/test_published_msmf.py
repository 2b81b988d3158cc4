"""Sustained GEMM rates against ml-engineering's published MSMF / MAMF measurements
(measurements/published/mamf-msmf): the catalog's Blackwell ``solo_sustained`` is the published
one-GPU ratio and its ``sustained`` the slowest GPU of a busy node less what Hopper's fitted
fraction loses beyond Hopper's own published clock; Hopper's measured one-GPU rate agrees with the
H200 (the same GH100 die at the same 700 W) published there."""

import csv
import statistics
from pathlib import Path

from gpuplan import catalog
from gpuplan.specs.hardware import for_job

PUBLISHED = Path(__file__).resolve().parents[2] / "measurements" / "published" / "mamf-msmf" / "msmf_alone_vs_node.csv"


def _rows(gpu: str, setup: str) -> list[dict[str, str]]:
    with open(PUBLISHED, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r["gpu"] == gpu and r["setup"] == setup]


def _alone(gpu: str) -> float:
    """One GPU, siblings idle: MSMF over MAMF, averaged over the published revisions."""
    return statistics.mean(float(r["msmf_tflops"]) / float(r["mamf_tflops"]) for r in _rows(gpu, "gpu0_alone"))


def test_one_blackwell_gpu_is_timed_at_its_published_sustained_over_burst_rate():
    e = catalog.gpu("b200").efficiency
    assert e.solo_sustained == round(_alone("b200"), 2)
    assert for_job(catalog.gpu("b200"), 1).efficiency.sustained == e.solo_sustained


def _slowest(gpu: str) -> float:
    """A busy node's slowest GPU: its MSMF (the node summaries) over the same revision's mean MAMF
    with all eight computing, averaged over the revisions that publish one."""
    ratios = []
    for slow in _rows(gpu, "node_slowest_gpu"):
        (node,) = [r for r in _rows(gpu, "all8_x5_rounds") if r["revision"] == slow["revision"]]
        ratios.append(float(slow["msmf_tflops"]) / float(node["mamf_tflops"]))
    return statistics.mean(ratios)


def test_a_blackwell_job_of_many_gpus_runs_at_its_slowest_gpus_clock_less_what_hopper_runs_lose_beyond_it():
    """b200's multi-GPU fraction: the slowest B200 of a busy node (published) times what h100-sxm's
    fitted fraction holds beyond the Hopper clock (its fit over the published H200 nodes' slowest GPU)."""
    hopper = catalog.gpu("h100-sxm").efficiency
    clock = _slowest("h200")
    beyond_clock = hopper.sustained / clock
    assert beyond_clock < 1.0  # a loss beyond the clock (0.88 since the 2026-11-28 refit: about the clock's own)
    e = catalog.gpu("b200").efficiency
    assert e.sustained == round(_slowest("b200") * beyond_clock, 2)
    assert e.sustained < e.solo_sustained


def test_hoppers_measured_one_gpu_rate_agrees_with_the_published_h200():
    """h100-sxm's solo_sustained was measured here on one H100 (700 W): the published H200 runs
    (same die and power limit) read within 0.02 of it."""
    solo = catalog.gpu("h100-sxm").efficiency.solo_sustained
    assert abs(_alone("h200") - solo) <= 0.02
