"""Resilient's telemetry is what ``gpuplan calibrate`` and ``compare`` read: the plan once, tensor
bytes by component, then one record per step with its wall time, tokens, loss and stall."""

import json

import pytest

from gpuplan.errors import GpuplanError

torch = pytest.importorskip("torch")


def _train(tmp_path, steps=4, **kw):
    from gpuplan.train import Resilient

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Linear(64, 32, bias=False))
    opt = torch.optim.AdamW(model.parameters())
    with Resilient(model, opt, checkpoint_dir=tmp_path / "c", telemetry=tmp_path / "t.jsonl", **kw) as run:
        while run.step < steps:
            loss = model(torch.randn(8, 32)).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            run.end_step(tokens=8, loss=loss)
    return tmp_path / "t.jsonl"


def test_telemetry_reads_back_with_the_plan_and_the_runs_own_tensor_bytes(tmp_path):
    from gpuplan.runs.readers import read_telemetry

    plan = {"model": "llama-3.2-1b", "gpu": "h100-sxm", "gpus": 1, "seq_len": 2048, "micro_batch": 2}
    path = _train(tmp_path, steps=5, plan=plan)
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in records] == ["plan", "memory"] + ["step"] * 5
    fp32_params = (32 * 64 + 64) + 64 * 32  # counted by hand from the layer shapes
    assert records[1] == {
        "type": "memory",
        "weights": 4 * fp32_params,
        "gradients": 4 * fp32_params,  # zero_grad() freed them: counted as their parameters
        "optimizer": 2 * 4 * fp32_params,  # AdamW's exp_avg and exp_avg_sq (its step is a scalar)
    }
    steps = records[2:]
    assert all(r["loss"] > 0 and r["tokens"] == 8 and r["step_s"] > 0 for r in steps)
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]

    run = read_telemetry(path)
    assert run.plan.model == "llama-3.2-1b" and run.plan.micro_batch == 2 and run.plan.seq_len == 2048
    assert run.memory_bytes["optimizer"] == 8 * fp32_params
    assert run.step_s > 0


def test_a_plan_with_an_unknown_field_is_refused_when_the_run_is_made(tmp_path):
    from gpuplan.train import Resilient

    model = torch.nn.Linear(4, 4)
    with pytest.raises(GpuplanError, match="plan.tensor_parallel"):
        Resilient(
            model,
            torch.optim.SGD(model.parameters()),
            checkpoint_dir=tmp_path,
            plan={"model": "gpt2", "tensor_parallel": 2},
        )
