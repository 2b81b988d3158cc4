"""A communication line's hidden time (what compute covers) is never below zero."""

from gpuplan import catalog
from gpuplan.estimate.layer_comm import CommLine


def test_hidden_time_is_never_negative_when_exposed_rounds_above_the_time():
    line = CommLine(0.0, 0.3, 0.3 * (1 + 1e-15), {})
    assert line.exposed > line.time and line.hidden == 0.0
    assert CommLine(0.0, 1.0, 0.25, {}).hidden == 0.75


def test_train_json_has_no_negative_hidden_communication():
    # gemma-3-12b at tp=8, pp=2 had a TP line of -3.5e-18 s hidden from floating-point rounding
    from gpuplan.estimate.train import TrainRequest, estimate_training, to_dict
    from gpuplan.specs.parallel import ParallelPlan
    from gpuplan.specs.training import TrainingConfig

    req = TrainRequest(
        model=catalog.model("gemma-3-12b"),
        gpu=catalog.gpu("h100-sxm"),
        plan=ParallelPlan(dp=4, tp=8, pp=2, zero=1),
        config=TrainingConfig(recompute="full"),
    )
    comm = to_dict(estimate_training(req))["performance"]["comm"]
    assert all(line["hidden_s"] >= 0 for line in comm.values())
