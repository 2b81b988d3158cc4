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

# Korthikanti et al. 2022 measured on Selene (A100 80GB); the rest plans on an H100
A100, H100 = catalog.gpu("a100-sxm-80gb"), catalog.gpu("h100-sxm")

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
    report = estimate_memory(m, cfg, plan, A100, microbatches=64)
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
    r = estimate_memory(llama70b, cfg, ParallelPlan(), H100)
    assert r.model_states_total["total"] == pytest.approx(16 * count_params(llama70b).total)
    assert 1.1 * TB < r.model_states_total["total"] < 1.15 * TB


def test_405b_bf16_with_8bit_adam_is_810_gb_each():
    m = catalog.model("llama-3.1-405b")
    cfg = TrainingConfig(precision="bf16", optimizer="adamw8bit", master_weights=False, profile="eager")
    t = estimate_memory(m, cfg, ParallelPlan(), H100).model_states_total
    assert t["weights"] == pytest.approx(810 * GB, rel=0.01)
    assert t["gradients"] == pytest.approx(810 * GB, rel=0.01)
    assert t["optimizer"] == pytest.approx(810 * GB, rel=0.02)  # + 1.6% blockwise scales
    fp32_adam = estimate_memory(
        m, TrainingConfig(optimizer="adamw", master_weights=False), ParallelPlan(), H100
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
    base = estimate_memory(llama70b, cfg, ParallelPlan(dp=8, tp=8), H100).per_gpu
    z = estimate_memory(llama70b, cfg, ParallelPlan(dp=8, tp=8, zero=zero), H100).per_gpu
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
    v = estimate_memory(llama70b, cfg, ParallelPlan(tp=8, pp=4, schedule="zb-v"), H100, 32, all_stages=True)
    h = estimate_memory(llama70b, cfg, ParallelPlan(tp=8, pp=4, schedule="zb"), H100, 32, all_stages=True)
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
    full = estimate_memory(m, TrainingConfig(), plan, H100, 1).per_gpu
    rem = estimate_memory(m, TrainingConfig(master_remainders=True), plan, H100, 1).per_gpu
    assert full.master_weights == pytest.approx(4 * full.params / 8)
    assert rem.master_weights == pytest.approx(2 * full.params / 8)
    with pytest.raises(GpuplanError, match="master_remainders"):
        TrainingConfig(precision="fp16", master_weights=True, master_remainders=True)


# -- MoE parallel folding (expert tensor parallelism) --------------------------------------------

QWEN3_MOE_SMALL = dict(
    model_type="qwen3_moe",
    vocab_size=1000,
    hidden_size=128,
    intermediate_size=256,
    moe_intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    num_experts=8,
    num_experts_per_tok=2,
)


def _hand_sharded_expert_numel(hf, ep: int, etp: int) -> list[int]:
    """Expert parameters each rank of one etp x ep expert grid holds, cut from transformers' own
    tensors as Megatron's TEGroupedMLP shards them (megatron/core/transformer/moe/experts.py):
    experts / ep per EP rank; fc1 (gate and up) split along its output rows and fc2 (down) along
    its input columns over the expert TP ranks."""
    out = []
    for e in range(ep):
        for t in range(etp):
            n = 0
            for layer in hf.model.layers:
                ex = layer.mlp.experts
                mine = slice(e * ex.gate_up_proj.shape[0] // ep, (e + 1) * ex.gate_up_proj.shape[0] // ep)
                gate, up = ex.gate_up_proj[mine].chunk(2, dim=1)  # (experts, 2 x ffn, hidden): gate | up
                n += gate.chunk(etp, dim=1)[t].numel() + up.chunk(etp, dim=1)[t].numel()
                n += ex.down_proj[mine].chunk(etp, dim=2)[t].numel()  # (experts, hidden, ffn)
            out.append(n)
    return out


@pytest.mark.parametrize("tp,ep,etp", [(2, 4, None), (2, 8, 1), (4, 2, 2), (1, 4, 2), (2, 2, 1)])
def test_expert_params_per_gpu_equal_a_hand_sharded_transformers_moe(tp, ep, etp):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from gpuplan.estimate.memory import stage_params
    from gpuplan.specs.hf import model_from_hf_config

    m = model_from_hf_config(QWEN3_MOE_SMALL)
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**QWEN3_MOE_SMALL))
    ranks = _hand_sharded_expert_numel(hf, ep, tp if etp is None else etp)
    assert len(set(ranks)) == 1  # every rank of the expert grid holds the same share
    # one expert grid (ep x etp ranks) holds every expert weight once
    experts = sum(p.numel() for n, p in hf.named_parameters() if ".mlp.experts." in n)
    assert sum(ranks) == experts
    held = stage_params(m, 1, 0, 0, m.num_layers, tp, ep, etp=etp)
    assert held.expert == ranks[0]


def test_expert_states_shard_over_the_expert_data_parallel_ranks_under_folding():
    # Qwen3-30B-A3B as Megatron-Bridge runs it on 8 GPUs with TP 2 (EP 8 folded over TP x DP,
    # ETP 1): EDP = tp x dp / (ep x etp) = 1, so ZeRO-1 leaves the experts' fp32 states whole
    # while the dense ones shard over dp = 4
    m = catalog.model("qwen3-30b-a3b")
    cfg = TrainingConfig(seq_len=4096, global_batch=256)
    plan = ParallelPlan(dp=4, tp=2, ep=8, etp=1, zero=1)
    assert plan.expert_zero_group == 1
    experts_per_gpu = m.num_moe_layers * m.num_experts // 8 * 3 * m.hidden_size * m.moe_ffn_size  # whole experts
    dense_per_gpu = count_params(m).total - m.num_moe_layers * m.num_experts * 3 * m.hidden_size * m.moe_ffn_size
    s = estimate_memory(m, cfg, plan, H100).per_gpu
    assert s.params - experts_per_gpu < dense_per_gpu  # the dense rest is split by tp: less than all of it
    dense_held = s.params - experts_per_gpu
    assert s.optimizer == pytest.approx(8 * (dense_held / 4 + experts_per_gpu))
    assert s.master_weights == pytest.approx(4 * (dense_held / 4 + experts_per_gpu))
    # unfolded (etp = tp = 2, ep 4 inside dp 4) the experts are half as wide and shard over dp / ep = 1
    legacy = estimate_memory(m, cfg, ParallelPlan(dp=4, tp=2, ep=4, zero=1), H100).per_gpu
    assert legacy.params - dense_held == pytest.approx(experts_per_gpu * 8 / 4 / 2)


@pytest.mark.parametrize(
    "model,gpus,degrees,split,recompute",
    [
        # Megatron-Bridge 25.09 DeepSeek-V3 on 1024 H100s: TP 2 PP 8 EP 64 ETP 1 (scripts/performance/
        # configs/deepseek, DEEPSEEK_V3_H100_BASE_CONFIG; it recomputes the MLPs and MLA up-projections:
        # of gpuplan's modes only full recompute keeps that little)
        ("deepseek-v3", 1024, dict(tp=2, pp=8, ep=64, etp=1), (7, 6), "full"),
        # Megatron-Bridge 25.11 Qwen3-235B-A22B on 256 H100s: TP 2 PP 8 EP 32 ETP 1, EP 32 > dp 16
        # (configs/qwen3, QWEN3_235B_A22B_H100_FP8_CS_BASE_CONFIG; no recompute)
        ("qwen3-235b-a22b", 256, dict(tp=2, pp=8, ep=32, etp=1), (11, 11), "none"),
    ],
)
def test_published_folded_recipes_can_be_stated_and_fit_an_h100(model, gpus, degrees, split, recompute):
    m = catalog.model(model)
    cfg = TrainingConfig(seq_len=4096, global_batch=2048, precision="fp8", recompute=recompute)
    plan = ParallelPlan.for_gpus(gpus, zero=1, first_stage_layers=split[0], last_stage_layers=split[1], **degrees)
    assert plan.dp * plan.tp == plan.ep * plan.expert_tp * plan.expert_zero_group
    rep = estimate_memory(m, cfg, plan, H100, 2048 // plan.dp)
    mid = next(s for s in rep.stages if s.stage == 1)
    # a middle stage by hand: its MoE layers x experts / ep x 3 whole (ETP 1) matrices, and the rest
    # of its layers (transformers' counts, test_params.py) split by tp except what TP replicates
    ids = range(split[0], split[0] + mid.layers)
    expert = 3 * m.hidden_size * m.moe_ffn_size
    experts = sum(m.is_moe_layer(i) for i in ids) * m.num_experts // degrees["ep"] * expert
    rest = sum(count_params(m).per_layer[i] - m.is_moe_layer(i) * m.num_experts * expert for i in ids)
    assert experts + rest / degrees["tp"] <= mid.params <= experts + rest
    assert 2 * mid.params == pytest.approx(mid.weights)
    assert rep.per_gpu.model_states < 40 * GiB and rep.fits


def test_the_gpu_sets_the_capacity_unless_capacity_overrides_it(llama70b):
    cfg = TrainingConfig(seq_len=4096)
    plan = ParallelPlan(dp=8, tp=8, zero=1)
    own = estimate_memory(llama70b, cfg, plan, H100)
    assert own.capacity == 81559 * 2**20  # the H100's own: the total nvidia-smi reports
    usable = estimate_memory(llama70b, cfg, plan, H100, capacity=40 * GiB)
    assert usable.capacity == 40 * GiB and usable.per_gpu.total == own.per_gpu.total  # only the check moves
    assert usable.headroom == 40 * GiB - own.per_gpu.total


@pytest.mark.parametrize("gpu", [80 * GiB, 85899345920, "h100-sxm", None])
def test_a_gpu_that_is_not_a_gpuspec_is_refused_naming_the_field(llama70b, gpu):
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError, match="catalog.gpu") as e:
        estimate_memory(llama70b, TrainingConfig(), ParallelPlan(), gpu)
    assert e.value.field == "gpu"


@pytest.mark.parametrize("capacity", [0, -1.0, float("nan"), "80GB", True])
def test_a_capacity_that_is_not_a_positive_number_of_bytes_is_refused(llama70b, capacity):
    from gpuplan.errors import GpuplanError

    with pytest.raises(GpuplanError) as e:
        estimate_memory(llama70b, TrainingConfig(), ParallelPlan(), H100, capacity=capacity)
    assert e.value.field == "capacity"


def test_a_plan_over_only_by_the_allocator_reserve_is_tight_not_over():
    m, plan = catalog.model("llama-3.1-8b"), ParallelPlan(dp=8, zero=1)
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=8)
    mem = estimate_memory(m, cfg, plan, H100)
    total, reserve = mem.per_gpu.total, mem.reserve
    assert reserve == pytest.approx(cfg.allocator_fraction * (total - reserve - cfg.cuda_context_bytes))

    def at(capacity):
        mem = estimate_memory(m, cfg, plan, H100, capacity=capacity)
        return mem.fits, mem.tight

    assert at(total) == (True, False)
    assert at(total - reserve / 2) == (False, True)  # the allocated peak and the context fit
    assert at(total - reserve) == (False, True)
    assert at(total - reserve - 1 * GiB) == (False, False)
    # expandable segments leave no reserve: the allocated peak is the whole requirement
    assert (
        estimate_memory(
            m, TrainingConfig(seq_len=4096, micro_batch=1, global_batch=8, expandable_segments=True), plan, H100
        ).reserve
        == 0
    )


def test_zero3_gathers_only_what_a_group_of_more_than_one_rank_shards():
    # with dp = 1 no ZeRO stage shards anything, so all four hold the same bytes (ZeRO-3 charged a
    # block's gather buffer for it); with experts over one expert-data-parallel rank only the dense
    # part is gathered, and ZeRO-3 never holds more than ZeRO-2
    from gpuplan.estimate.stage_params import stage_params

    m, g = catalog.model("llama-3.1-8b"), catalog.gpu("h100-sxm")
    cfg = TrainingConfig(seq_len=8192, micro_batch=1, global_batch=8)
    totals = {estimate_memory(m, cfg, ParallelPlan(tp=8, zero=z), g, 8).per_gpu.total for z in (0, 1, 2, 3)}
    assert len(totals) == 1
    moe, a100 = catalog.model("mixtral-8x7b"), catalog.gpu("a100-sxm-80gb")
    cfg = TrainingConfig(seq_len=4096, micro_batch=1, global_batch=128)
    two, three = (ParallelPlan(tp=2, pp=2, dp=4, ep=4, zero=z) for z in (2, 3))
    assert three.zero_group == 4 and three.expert_zero_group == 1
    r2, r3 = (estimate_memory(moe, cfg, p, a100, 32).per_gpu for p in (two, three))
    assert r3.total < r2.total
    sp = stage_params(moe, 2, 0, 0, 16, 2, 4, 1, None, 0)
    assert sp.biggest_expert > 0 and sp.biggest_dense + sp.biggest_expert == pytest.approx(sp.biggest_layer)
