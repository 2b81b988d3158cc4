"""Multi-token prediction (DeepSeek-V3 report, section 2.2) trained beside the next-token loss:
its parameters and FLOPs against a module built from transformers' own DeepSeek-V3 block (on the
meta device, and run under FlopCounterMode), and where a plan puts its memory and time."""

import dataclasses

import pytest
from small_models import CONFIGS

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.estimate.flops import training_flops
from gpuplan.estimate.memory import estimate_memory
from gpuplan.estimate.params import count_params, mtp_params
from gpuplan.estimate.stage_params import stage_params
from gpuplan.estimate.step_time import step_time
from gpuplan.specs.hf import model_from_hf_config
from gpuplan.specs.parallel import ParallelPlan
from gpuplan.specs.training import TrainingConfig

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
flop_counter = pytest.importorskip("torch.utils.flop_counter")

# a small DeepSeek-V3 whose last layer is MoE, so its MTP block is too (first_k_dense_replace 1)
CONFIG = {**CONFIGS["deepseek-mla"], "first_k_dense_replace": 1, "num_nextn_predict_layers": 1}


def _mtp_module(cfg):
    """One MTP depth as DeepSeek-V3's report (eq. 21-23) and Megatron-Core's
    MultiTokenPredictionLayer build it: RMSNorms of the embedding and of the hidden state, a
    bias-free 2h -> h projection of their concatenation, a decoder block (transformers' own, at the
    index after the last layer) and a norm before the shared LM head."""
    from transformers.models.deepseek_v3 import modeling_deepseek_v3 as ds

    h = cfg.hidden_size
    return torch.nn.ModuleDict(
        dict(
            enorm=ds.DeepseekV3RMSNorm(h),
            hnorm=ds.DeepseekV3RMSNorm(h),
            eh_proj=torch.nn.Linear(2 * h, h, bias=False),
            block=ds.DeepseekV3DecoderLayer(cfg, layer_idx=cfg.num_hidden_layers),
            norm=ds.DeepseekV3RMSNorm(h),
        )
    )


def test_mtp_params_match_a_depth_built_from_transformers_deepseek_v3_block():
    cfg = transformers.AutoConfig.for_model(**CONFIG)
    with torch.device("meta"):
        depth = _mtp_module(cfg)
    spec = model_from_hf_config(CONFIG)
    assert spec.mtp_layers == 1
    assert spec.mtp_kind.moe  # the last layer is MoE, so is the MTP block
    assert mtp_params(spec, 1) == sum(p.numel() for p in depth.parameters())
    assert mtp_params(spec, 3) == 3 * mtp_params(spec, 1)
    assert mtp_params(spec, 0) == 0


def test_deepseek_v3_main_model_and_mtp_module_add_up_to_its_published_685b():
    # DeepSeek-V3's README: 671B of main model and 14B of MTP module, 685B on Hugging Face; the
    # checkpoint's MTP layer stores its own copies of the embedding and the LM head
    m = catalog.model("deepseek-v3")
    copies = 2 * m.vocab_size * m.hidden_size
    total = count_params(m).total + mtp_params(m, m.mtp_layers) + copies
    assert total == pytest.approx(685e9, rel=0.01)
    assert mtp_params(m, 1) + copies == pytest.approx(14e9, rel=0.05)


def test_mtp_training_flops_match_flop_counter_on_a_small_model():
    torch.manual_seed(0)
    cfg = transformers.AutoConfig.for_model(**CONFIG)
    model = transformers.AutoModelForCausalLM.from_config(
        cfg, attn_implementation="eager", experts_implementation="eager"
    )
    depth = _mtp_module(cfg)
    batch, seq = 2, 64
    ids = torch.randint(0, cfg.vocab_size, (batch, seq))
    shifted = torch.roll(ids, -1, dims=1)  # the depth-1 input: each position's next token

    def losses():
        out = model(input_ids=ids, labels=ids, output_hidden_states=True)
        hidden = out.hidden_states[-1]
        emb = model.model.embed_tokens(shifted)
        x = depth["eh_proj"](torch.cat([depth["enorm"](emb), depth["hnorm"](hidden)], dim=-1))
        pos = torch.arange(seq)[None].expand(batch, -1)
        x = depth["block"](x, position_embeddings=model.model.rotary_emb(x, pos), position_ids=pos)
        logits = model.lm_head(depth["norm"](x))
        mtp_loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), torch.roll(shifted, -1, dims=1).flatten())
        return out.loss + 0.3 * mtp_loss

    with flop_counter.FlopCounterMode(display=False) as counter:
        losses().backward()
    spec = model_from_hf_config(CONFIG)
    # FlopCounterMode counts eager attention's whole s x s score matrix: causal=False
    predicted = training_flops(spec, seq, causal=False, mtp=1).model_per_token * batch * seq
    without = training_flops(spec, seq, causal=False).model_per_token * batch * seq
    assert predicted == pytest.approx(counter.get_total_flops(), rel=0.02)
    assert predicted > without * 1.2  # one block and one LM head more than a 2-layer model's


def test_mtp_block_projection_and_head_sit_on_the_stage_holding_the_head():
    m = catalog.model("deepseek-v3")
    # pp 4 over 61 layers: 16, 15, 15, 15; the last stage holds the head
    base = [stage_params(m, 4, s, f, n, 1, 8) for s, f, n in ((0, 0, 16), (3, 46, 15))]
    mtp = [stage_params(m, 4, s, f, n, 1, 8, mtp=1) for s, f, n in ((0, 0, 16), (3, 46, 15))]
    assert mtp[0] == base[0]  # the first stage is untouched
    assert mtp[1].n_moe == base[1].n_moe + 1 and mtp[1].n_dense == base[1].n_dense
    # its weights: the block and projection, and a copy of the (untied) input embedding to embed
    # the shifted tokens (Megatron's GPTModel builds ``embedding`` on the MTP stage)
    embedding = m.vocab_size * m.hidden_size
    added = (mtp[1].dense + mtp[1].expert * 8) - (base[1].dense + base[1].expert * 8)
    assert added == pytest.approx(mtp_params(m, 1) + embedding)
    # pp 1: one stage holds the embedding already, no copy
    whole = stage_params(m, 1, 0, 0, 61, 1, 1, mtp=1).dense + stage_params(m, 1, 0, 0, 61, 1, 1, mtp=1).expert
    assert whole == count_params(m).total + mtp_params(m, 1)


def test_mtp_training_costs_time_and_memory_on_the_last_stage_only():
    m, gpu = catalog.model("deepseek-v3"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=64, pp=8, ep=64)
    cfg = TrainingConfig(seq_len=4096, global_batch=1024, recompute="full")
    with_mtp = dataclasses.replace(cfg, mtp_layers=1)
    before, after = step_time(m, cfg, plan, gpu, 16), step_time(m, with_mtp, plan, gpu, 16)
    assert [s.total for s in after.stages[:-1]] == [s.total for s in before.stages[:-1]]
    added = after.stages[-1].compute - before.stages[-1].compute
    # at least the MoE block's compute; less than the last stage's 7 MoE layers and head again
    assert 0 < added < before.stages[-1].compute
    assert after.model_flops_per_step > before.model_flops_per_step
    mem0 = estimate_memory(m, cfg, plan, gpu, 16, all_stages=True)
    mem1 = estimate_memory(m, with_mtp, plan, gpu, 16, all_stages=True)
    assert [s.total for s in mem1.stages[:-1]] == [s.total for s in mem0.stages[:-1]]
    assert mem1.stages[-1].weights > mem0.stages[-1].weights
    assert mem1.stages[-1].other["logits"] > mem0.stages[-1].other["logits"]  # a second loss saved


@pytest.mark.parametrize(
    "framework,plan,fix",
    [
        ("hf", ParallelPlan(dp=8), "mtp_layers"),
        ("deepspeed", ParallelPlan(dp=8), "mtp_layers"),
        ("torchtitan", ParallelPlan(dp=4, pp=2), "pp=1"),
    ],
)
def test_frameworks_without_mtp_refuse_it_naming_the_profile(framework, plan, fix):
    from gpuplan.estimate.train import TrainRequest, validate

    m, gpu = catalog.model("deepseek-v3"), catalog.gpu("h100-sxm")
    with pytest.raises(GpuplanError) as err:
        cfg = TrainingConfig.for_framework(framework, seq_len=4096, global_batch=64, mtp_layers=1)
        validate(TrainRequest(m, gpu, plan, cfg))
    assert err.value.field == "mtp_layers" and framework in str(err.value) and fix in str(err.value)


def test_negative_mtp_depth_is_refused():
    with pytest.raises(GpuplanError, match="mtp_layers"):
        TrainingConfig(mtp_layers=-1)


def test_a_depth_reaching_past_the_sequence_is_refused_and_a_deep_one_costs_in_proportion():
    with pytest.raises(GpuplanError, match="mtp_layers"):
        TrainingConfig(seq_len=4096, mtp_layers=4096)
    # depth d adds d times one depth's block, projection and head (no per-depth list to build)
    m, gpu = catalog.model("deepseek-v3"), catalog.gpu("h100-sxm")
    plan = ParallelPlan(dp=64, pp=8, ep=64)
    cfg = TrainingConfig(seq_len=4096, global_batch=1024, recompute="full")
    last = [step_time(m, dataclasses.replace(cfg, mtp_layers=d), plan, gpu, 16).stages[-1].compute for d in (0, 1, 3)]
    assert last[2] - last[0] == pytest.approx(3 * (last[1] - last[0]), rel=1e-9)
