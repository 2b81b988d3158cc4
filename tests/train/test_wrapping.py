"""Wrapping a loop in Resilient changes nothing about how it trains, and what it keeps is the run's
own: a fresh start steps the optimizer as the bare loop does, every rank resumes its own RNG and
counters, the same config hashes the same in every process, another model's checkpoint is refused
(not quarantined as damaged), and a telemetry file on a full disk stops the telemetry, not the run."""

import errno
import os
import subprocess
import sys

import pytest

from gpuplan.errors import GpuplanError

torch = pytest.importorskip("torch")


def _loop(model, opt, steps, run=None):
    torch.manual_seed(1)
    for _ in range(steps):
        loss = model(torch.randn(4, 8)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if run is not None:
            run.end_step(tokens=4)


@pytest.mark.parametrize("make", [lambda p: torch.optim.AdamW(p, lr=0.01), lambda p: torch.optim.Rprop(p, lr=0.01)])
def test_a_fresh_start_trains_exactly_as_the_bare_loop(tmp_path, make):
    # building the state dict on a start with nothing to load ran one optimizer step at lr 0 (DCP's
    # _init_optim_state): AdamW's step count one ahead, Rprop's step sizes clamped to 1e-6
    from gpuplan.train import Resilient

    torch.manual_seed(0)
    bare = torch.nn.Linear(8, 8)
    wrapped = torch.nn.Linear(8, 8)
    wrapped.load_state_dict(bare.state_dict())
    opt_bare, opt_wrapped = make(bare.parameters()), make(wrapped.parameters())
    _loop(bare, opt_bare, 3)
    with Resilient(wrapped, opt_wrapped, checkpoint_dir=tmp_path / "c", every_steps=100) as run:
        _loop(wrapped, opt_wrapped, 3, run)
    assert torch.equal(bare.weight, wrapped.weight) and torch.equal(bare.bias, wrapped.bias)


def test_another_models_checkpoint_is_refused_naming_the_difference_and_kept(tmp_path):
    from gpuplan.train import Resilient

    small = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(small.parameters(), lr=0.1)
    with Resilient(small, opt, checkpoint_dir=tmp_path / "c", every_steps=2, async_save=False) as run:
        _loop(small, opt, 2, run)
    big = torch.nn.Linear(8, 16)
    with pytest.raises(GpuplanError, match=r"different model: its 'weight' is \(8, 8\), this model's \(16, 8\)"):
        with Resilient(big, torch.optim.SGD(big.parameters(), lr=0.1), checkpoint_dir=tmp_path / "c", every_steps=2):
            pass
    assert sorted(p.name for p in (tmp_path / "c").glob("step-*")) == ["step-00000002"]  # not quarantined


def test_a_telemetry_file_on_a_full_disk_stops_the_telemetry_not_the_training(tmp_path, caplog):
    from gpuplan.train import Resilient

    class Full:
        def write(self, *text):
            raise OSError(errno.ENOSPC, "No space left on device")

        flush = close = write

    model = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with caplog.at_level("WARNING", logger="gpuplan.train"):
        with Resilient(model, opt, checkpoint_dir=tmp_path / "c", every_steps=2, telemetry=tmp_path / "t") as run:
            run._telemetry = Full()
            _loop(model, opt, 4, run)
    assert run.step == 4 and "telemetry stopped" in caplog.text


def test_the_same_config_hashes_the_same_in_every_process():
    # a set's order follows PYTHONHASHSEED: the second run refused its own checkpoint as another config
    code = "from gpuplan.train.state import config_hash; print(config_hash({'tags': {'a', 'b', 'c', 'd'}, 1: 2}))"
    hashes = {
        subprocess.run(
            [sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed}, capture_output=True, text=True
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(hashes) == 1 and len(hashes.pop().strip()) == 16


def _rank(rank: int, world: int, init: str, ckpt: str, phase: str, out: str, backend: str) -> None:
    import torch.distributed as dist

    from gpuplan.train import Resilient

    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world)
    try:
        torch.manual_seed(1 + rank)  # each rank its own stream, as data-parallel dropout has
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with Resilient(model, opt, checkpoint_dir=ckpt, every_steps=3, async_save=False) as run:
            if phase == "first":
                for _ in range(3):
                    torch.rand(1)
                    run.end_step(tokens=rank + 1)
            # after the checkpoint of step 3 (first run) or the resume from it (second): the same
            with open(f"{out}.{phase}.{rank}", "w") as f:
                f.write(f"{run.step} {run.tokens} {torch.rand(1).item():.10f}")
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["gloo", "cuda:gloo"])
def test_every_rank_resumes_its_own_rng_and_tokens(tmp_path, backend):
    # only rank 0's were kept, and every rank resumed them; "cuda:gloo" leaves the default group
    # without a CPU backend, as NCCL does (the stop flag's all-reduce failed on it)
    import torch.multiprocessing as mp

    init = f"file://{tmp_path / 'store'}"
    for phase in ("first", "second"):
        (tmp_path / "store").unlink(missing_ok=True)
        args = (2, init, str(tmp_path / "c"), phase, str(tmp_path / "o"), backend)
        mp.start_processes(_rank, args=args, nprocs=2, start_method="spawn")
    for rank in (0, 1):
        first = (tmp_path / f"o.first.{rank}").read_text()
        assert (tmp_path / f"o.second.{rank}").read_text() == first
        assert first.startswith(f"3 {3 * (rank + 1)} ")
    assert (tmp_path / "o.first.0").read_text() != (tmp_path / "o.first.1").read_text()
