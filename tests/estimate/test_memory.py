"""Training memory: Korthikanti et al. 2022 rows, torch optimizer state, published model-state figures."""

import csv
from pathlib import Path

import pytest

from gpuplan import catalog
from gpuplan.estimate.memory import estimate_memory, layers_per_stage, microbatches_in_flight
from gpuplan.estimate.params import count_params
from gpuplan.specs.model import ModelSpec
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig
from gpuplan.units import GB, TB, GiB

# a copy of ../shared/validation/training_memory.csv, shipped with the package so a bare clone tests it
VALIDATION = Path(__file__).resolve().parents[2] / "src" / "gpuplan" / "catalog" / "validation" / "training_memory.csv"


def gpt_from_row(row) -> ModelSpec:
    """The GPT architecture of Megatron-LM papers: MHA, 4h GeLU MLP, LayerNorm, biases, dropout 0.1."""
    h, heads = int(row["hidden"]), int(row["heads"])
    return ModelSpec(
        name=row["id"],
        model_type="gpt2",
        vocab_size=int(row["vocab"]),
        hidden_size=h,
        num_layers=int(row["layers"]),
        num_heads=heads,
        num_kv_heads=int(row["kv_heads"]),
        head_dim=h // heads,
        ffn_size=int(row["ffn"]),
        gated_mlp=False,
        activation="gelu",
        norm="layernorm",
        qkv_bias=True,
        o_bias=True,
        mlp_bias=True,
        tied_embeddings=True,
        position_embeddings=int(row["seq"]),
        dropout=0.1,
        attention_dropout=0.1,
    )


def korthikanti_rows():
    if not VALIDATION.exists():
        return []
    return [pytest.param(r, id=r["id"]) for r in csv.DictReader(VALIDATION.open())]


@pytest.mark.parametrize("row", korthikanti_rows())
def test_fused_profile_reproduces_korthikanti_memory(row):
    m = gpt_from_row(row)
    recompute = row["recompute"] or "none"
    plan = ParallelPlan(
        tp=int(row["tp"]), pp=int(row["pp"]), dp=int(row["dp"]), vp=int(row["vp"] or 1), sp=row["sp"] == "yes"
    )
    cfg = TrainingConfig(
        seq_len=int(row["seq"]),
        micro_batch=int(row["mbs"]),
        precision="fp16",
        profile="fused",
        attention="eager",
        recompute=recompute,
    )
    # Table 5's global batch sizes give m >= p micro-batches, so the first stage is full
    report = estimate_memory(m, cfg, plan, capacity=80 * GiB, microbatches=64)
    measured = float(row["gib"]) * GiB
    if row["component"] == "params+optimizer":
        # The figure counts transformer blocks only: compare a middle stage, which holds no
        # embedding, where there is one (the first stage also holds the embedding tables).
        got = report.stages[len(report.stages) // 2].model_states
    else:
        got = report.stages[0].activations  # the first stage holds the most micro-batches
    assert got == pytest.approx(measured, rel=0.05)


def test_70b_mixed_precision_adam_needs_about_1_1_tb(llama70b):
    # 2 + 2 + 12 bytes per parameter (ZeRO paper, section 3.1): 16 x 70.6B = 1.13 TB
    cfg = TrainingConfig(precision="bf16", optimizer="adamw", profile="eager")
    r = estimate_memory(llama70b, cfg, ParallelPlan(), capacity=80 * GiB)
    assert r.model_states_total["total"] == pytest.approx(16 * count_params(llama70b).total)
    assert 1.1 * TB < r.model_states_total["total"] < 1.15 * TB


def test_405b_bf16_with_8bit_adam_is_810_gb_each():
    m = catalog.model("llama-3.1-405b")
    cfg = TrainingConfig(precision="bf16", optimizer="adamw8bit", master_weights=False, profile="eager")
    t = estimate_memory(m, cfg, ParallelPlan(), capacity=80 * GiB).model_states_total
    assert t["weights"] == pytest.approx(810 * GB, rel=0.01)
    assert t["gradients"] == pytest.approx(810 * GB, rel=0.01)
    assert t["optimizer"] == pytest.approx(810 * GB, rel=0.02)  # + 1.6% blockwise scales
    fp32_adam = estimate_memory(
        m, TrainingConfig(optimizer="adamw", master_weights=False), ParallelPlan(), capacity=80 * GiB
    ).model_states_total["optimizer"]
    assert fp32_adam == pytest.approx(3.2 * TB, rel=0.02)


@pytest.mark.parametrize(
    "zero,sharded",
    [
        (0, ()),
        (1, ("optimizer", "master_weights")),
        (2, ("optimizer", "master_weights", "gradients")),
        (3, ("optimizer", "master_weights", "gradients", "weights")),
    ],
)
def test_zero_stage_shards_its_states_over_data_parallel_ranks(llama70b, zero, sharded):
    cfg = TrainingConfig(seq_len=2048)
    base = estimate_memory(llama70b, cfg, ParallelPlan(dp=8, tp=8), capacity=80 * GiB).per_gpu
    z = estimate_memory(llama70b, cfg, ParallelPlan(dp=8, tp=8, zero=zero), capacity=80 * GiB).per_gpu
    for part in ("weights", "gradients", "optimizer", "master_weights"):
        expected = getattr(base, part) / 8 if part in sharded else getattr(base, part)
        assert getattr(z, part) == pytest.approx(expected)


def test_first_stage_holds_p_microbatches_under_1f1b():
    assert [microbatches_in_flight(i, 4, 1, 32) for i in range(4)] == [4, 3, 2, 1]
    assert microbatches_in_flight(0, 4, 1, 2) == 2  # never more than the batch has
    # interleaved: first stage holds L(1 + (p-1)/(p v)) layers' worth (Korthikanti section 4.2.3)
    assert microbatches_in_flight(0, 8, 3, 64) == pytest.approx(8 * (1 + 7 / 24))


@pytest.mark.parametrize("schedule,sim_name", [("1f1b", "1f1b"), ("zb-v", "zb-v"), ("dualpipe", "dualpipe")])
def test_micro_batches_in_flight_are_what_the_simulated_schedule_holds(schedule, sim_name):
    # (ZB-H1 is left out: the simulation counts a micro-batch held until its W, but W keeps only
    # part of the activations, which is why the paper says its peak stays 1F1B's)
    from gpuplan.pipeline.schedules import build
    from gpuplan.pipeline.simulate import Costs, simulate

    for p, m in ((2, 4), (4, 8), (4, 16), (6, 24), (4, 2), (4, 3)):
        if schedule == "dualpipe" and m < 2 * p:
            continue
        held = simulate(build(sim_name, p, m), Costs(1.0, 1.0, 1.0)).peak_activations
        model = [microbatches_in_flight(s, p, 1, m, schedule) for s in range(p)]
        if schedule == "zb-v" and m < 2 * p - 1:  # a short ZB-V ramps up less on the first ranks
            assert all(a >= b for a, b in zip(model, held)) and max(model) == max(held)
        else:
            assert model == list(held)


def test_zb_v_puts_the_head_and_its_logits_on_the_first_rank(llama70b):
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=32)
    v = estimate_memory(llama70b, cfg, ParallelPlan(tp=8, pp=4, schedule="zb-v"), 80 * GB, 32, all_stages=True)
    h = estimate_memory(llama70b, cfg, ParallelPlan(tp=8, pp=4, schedule="zb"), 80 * GB, 32, all_stages=True)
    assert "logits" in v.stages[0].other and "logits" not in v.stages[3].other
    assert v.stages[0].params > h.stages[0].params and v.stages[3].params < h.stages[3].params
    assert v.stages[3].activations > h.stages[3].activations  # p micro-batches on every rank, not 1


def test_layers_split_evenly_with_the_remainder_on_later_stages():
    assert layers_per_stage(126, 4) == [31, 31, 32, 32]
    assert sum(layers_per_stage(61, 8)) == 61


@pytest.mark.parametrize("optimizer,per_param", [("adamw", 8), ("sgd", 4)])
def test_optimizer_state_bytes_match_torch_after_a_step(optimizer, per_param):
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.Linear(96, 32))
    opt = {"adamw": lambda p: torch.optim.AdamW(p), "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)}
    o = opt[optimizer](model.parameters())
    model(torch.randn(4, 64)).sum().backward()
    o.step()
    state = sum(
        v.numel() * v.element_size() for s in o.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0
    )
    n = sum(p.numel() for p in model.parameters())
    from gpuplan.estimate.memory import optimizer_bytes_per_param

    assert (
        state == optimizer_bytes_per_param(TrainingConfig(optimizer=optimizer, precision="fp32")) * n == per_param * n
    )


def test_adafactor_state_matches_torch_factored_moments():
    torch = pytest.importorskip("torch")
    from gpuplan.estimate.memory import _adafactor_bytes
    from gpuplan.estimate.params import Tensor

    w = torch.nn.Parameter(torch.randn(96, 64))
    b = torch.nn.Parameter(torch.randn(96))
    o = torch.optim.Adafactor([w, b])
    (w.sum() + b.sum()).backward()
    o.step()
    state = sum(v.numel() * 4 for s in o.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    assert state == _adafactor_bytes(Tensor("w", (96, 64)), 1) + _adafactor_bytes(Tensor("b", (96,)), 1)


def test_param_remainders_keep_two_bytes_of_master_per_parameter():
    # Apex DistributedFusedAdam store_param_remainders (NeMo's default for BF16 + fp32 Adam): the
    # fp32 master is the BF16 weight and a 16-bit remainder, so 2 bytes per parameter, sharded
    from gpuplan.errors import GpuplanError
    from gpuplan.specs.training import TrainingConfig

    m = catalog.model("llama-3.1-8b")
    plan = ParallelPlan(dp=8, zero=1)
    full = estimate_memory(m, TrainingConfig(), plan, 80e9, 1).per_gpu
    rem = estimate_memory(m, TrainingConfig(master_remainders=True), plan, 80e9, 1).per_gpu
    assert full.master_weights == pytest.approx(4 * full.params / 8)
    assert rem.master_weights == pytest.approx(2 * full.params / 8)
    with pytest.raises(GpuplanError, match="master_remainders"):
        TrainingConfig(precision="fp16", master_weights=True, master_remainders=True)
