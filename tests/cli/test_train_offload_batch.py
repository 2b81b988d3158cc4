"""``train --offload`` with a global batch: the batch counts (it crashed with a traceback when
--global-batch was given, the text compared as a number)."""

from __future__ import annotations

import json

import pytest
from cli_runner import run


def test_offload_training_with_a_global_batch_times_every_micro_batch(capsys):
    base = ["train", "llama-3.1-8b", "--gpus", "1", "--zero", "3", "--offload", "optimizer", "--json"]
    code, one, _ = run(base, capsys)
    assert code == 0
    code, many, err = run([*base, "--global-batch", "64"], capsys)
    assert code == 0, err
    one_step, many_step = json.loads(one)["offload"]["step_s"], json.loads(many)["offload"]["step_s"]
    # 64 micro-batches of one sequence on one GPU: 64 forwards and backwards per step, one update
    assert many_step["forward"] == pytest.approx(64 * one_step["forward"])
    assert many_step["backward"] == pytest.approx(64 * one_step["backward"])
    assert many_step["cpu_optimizer"] == pytest.approx(one_step["cpu_optimizer"])
