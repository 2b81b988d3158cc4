"""CLI of issue 14: uneven pipeline splits and framework profiles (one-line errors, exit 2)."""

import json

import pytest
from cli_runner import run

LLAMA3 = [
    "train",
    "llama-3.1-405b",
    "--gpus",
    "128",
    "--tp",
    "8",
    "--pp",
    "16",
    "--seq-len",
    "8192",
    "--global-batch",
    "64",
    "--recompute",
    "full",  # so that it fits: a plan that does not exits 3
]


def test_train_takes_first_and_last_stage_layers_and_reports_the_split(capsys):
    code, out, _ = run(LLAMA3 + ["--first-stage-layers", "7", "--last-stage-layers", "7", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["plan"]["stage_layers"] == [7] + [8] * 14 + [7]
    assert doc["plan"]["first_stage_layers"] == 7 and doc["memory"]["per_gpu"]["layers"] == 8


@pytest.mark.parametrize(
    "extra,field,hint",
    [
        (
            ["--first-stage-layers", "60", "--last-stage-layers", "60"],
            "first_stage_layers",
            "--first-stage-layers 7 --last-stage-layers 7",
        ),
        (["--vp", "4"], "vp", "--vp 1, 2, 3, 6 or 7"),
        (["--first-stage-layers", "0"], "first_stage_layers", "even split"),
    ],
)
def test_impossible_splits_are_one_line_with_exit_2(extra, field, hint, capsys):
    code, _, err = run(LLAMA3 + extra, capsys)
    assert code == 2 and err.startswith(f"error: {field}") and err.count("\n") == 1 and hint in err


def test_train_and_search_json_name_the_framework(capsys):
    code, out, _ = run(
        ["train", "llama-3.2-1b", "--gpus", "8", "--zero", "3", "--framework", "torchtitan", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 0 and doc["framework"] == "torchtitan" and doc["training"]["profile"] == "eager"
    assert "torchtitan" in doc["framework_profile"]["source"]
    code, out, _ = run(["train", "llama-3.2-1b", "--gpus", "8", "--json"], capsys)
    assert json.loads(out)["framework"] == "generic"
    code, out, _ = run(
        ["search", "llama-3.2-1b", "--gpus", "8", "--global-batch", "32", "--framework", "megatron", "--json"], capsys
    )
    doc = json.loads(out)
    assert code == 0 and doc["framework"] == "megatron"
    assert all(p["framework"] == "megatron" and p["plan"]["schedule"] == "1f1b" for p in doc["plans"])


@pytest.mark.parametrize(
    "args,field,hint",
    [
        (
            ["--gpus", "8", "--pp", "2", "--schedule", "dualpipe", "--framework", "deepspeed"],
            "schedule",
            "the deepspeed profile has no dualpipe schedule; use --schedule 1f1b",
        ),
        (["--gpus", "8", "--pp", "2", "--framework", "hf"], "pp", "the hf profile has no pipeline parallelism"),
        (["--gpus", "8", "--recompute", "selective", "--framework", "hf"], "recompute", "--recompute none or full"),
        (["--gpus", "8", "--framework", "jax"], "framework", "use one of generic, megatron"),
    ],
)
def test_options_a_framework_lacks_are_one_line_with_exit_2(args, field, hint, capsys):
    code, _, err = run(["train", "llama-3.2-1b"] + args, capsys)
    assert code == 2 and err.startswith(f"error: {field}") and err.count("\n") == 1 and hint in err


QWEN3_MOE = ["train", "qwen3-30b-a3b", "--gpus", "8", "--tp", "2", "--ep", "8", "--seq-len", "2048"]
QWEN3_MOE += ["--global-batch", "64", "--zero", "1", "--recompute", "full"]


def test_train_takes_etp_and_states_it_in_the_plan_line_and_the_json(capsys):
    code, out, _ = run(QWEN3_MOE + ["--etp", "1"], capsys)
    assert code == 0 and "ep=8 etp=1 zero=1" in out.splitlines()[0]
    code, out, _ = run(QWEN3_MOE + ["--etp", "1", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["plan"]["etp"] == 1 and doc["plan"]["ep"] == 8
    code, out, _ = run(
        ["train", "qwen3-30b-a3b", "--gpus", "8", "--ep", "8", "--recompute", "full", "--zero", "3", "--json"], capsys
    )
    assert code == 0 and json.loads(out)["plan"]["etp"] is None  # unset: the experts split like the dense layers


@pytest.mark.parametrize(
    "extra,field,hint",
    [
        ([], "ep", "--etp 1"),  # EP 8 over dp 4 needs folding
        (["--etp", "2"], "ep", "ep 8 x etp 2 must divide tp x cp x dp = 8"),
        (["--etp", "0"], "etp", "positive"),
        (["--etp", "1", "--no-sp"], "sp", "needs sequence parallelism"),
    ],
)
def test_bad_expert_layouts_are_one_line_with_exit_2(extra, field, hint, capsys):
    code, _, err = run(QWEN3_MOE + extra, capsys)
    assert code == 2 and err.startswith(f"error: {field}") and err.count("\n") == 1 and hint in err


def test_search_takes_etp(capsys):
    args = ["search", "qwen3-30b-a3b", "--gpus", "8", "--seq-len", "2048", "--global-batch", "64", "--tp", "2"]
    code, out, _ = run(args + ["--etp", "1", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["plans"] and all(p["plan"]["etp"] == 1 for p in doc["plans"])
    assert doc["rejected"]["etp is not 1 (`etp`)"] > 0
    code, out, _ = run(args + ["--etp", "1"], capsys)
    assert code == 0 and " etp1 " in out


def test_search_ranks_every_cp_exchange_the_framework_has_under_all(capsys):
    args = ["search", "llama-3.2-1b", "--gpus", "8", "--seq-len", "65536", "--global-batch", "8", "--top", "40"]
    code, out, _ = run(args + ["--cp-comm", "all", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    exchanges = {p["training"]["cp_comm"] for p in doc["plans"] if p["plan"]["cp"] > 1}
    assert exchanges <= {"p2p", "all_gather", "a2a"} and len(exchanges) >= 2
    code, _, err = run(args + ["--cp-comm", "p2p,ring"], capsys)
    assert code == 2 and err.startswith("error: cp_comm") and err.count("\n") == 1
    code, _, err = run(args + ["--framework", "deepspeed", "--cp-comm", "all", "--json"], capsys)
    assert code == 0  # DeepSpeed's one exchange, Ulysses
    code, out, _ = run(args + ["--framework", "deepspeed", "--json"], capsys)
    assert {p["training"]["cp_comm"] for p in json.loads(out)["plans"] if p["plan"]["cp"] > 1} <= {"a2a"}


GLM_AIR = ["glm-4.5-air", "--gpus", "64", "--seq-len", "4096", "--global-batch", "256", "--framework", "megatron"]


def test_train_and_search_take_mtp_layers_and_count_them(capsys):
    plan = ["--ep", "8", "--pp", "4", "--zero", "1", "--recompute", "full", "--json"]
    code, out, _ = run(["train", *GLM_AIR, *plan], capsys)
    without = json.loads(out)
    code, out, _ = run(["train", *GLM_AIR, *plan, "--mtp-layers", "1"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["training"]["mtp_layers"] == 1 and doc["model"]["mtp_layers"] == 1
    assert doc["model"]["params_mtp"] > 1e9  # an MoE block of 128 experts and its projection
    assert doc["model"]["params_total"] == without["model"]["params_total"]  # the model as transformers builds it
    assert doc["flops"]["per_token"] > without["flops"]["per_token"]
    assert doc["memory"]["stages"][-1]["weights"] > without["memory"]["stages"][-1]["weights"]
    code, out, _ = run(["train", *GLM_AIR, *plan[:-1], "--mtp-layers", "1"], capsys)
    assert code == 0 and "MTP" in out.splitlines()[0] and "1 MTP depth(s) beside the head" in out
    code, out, _ = run(["search", *GLM_AIR, "--mtp-layers", "1", "--top", "2", "--json"], capsys)
    assert code == 0 and json.loads(out)["plans"]


@pytest.mark.parametrize(
    "framework,extra,hint",
    [
        ("hf", [], "the hf profile has no multi-token-prediction training"),
        ("torchtitan", ["--pp", "2"], "use --pp 1 and --cp 1"),
    ],
)
def test_mtp_under_a_framework_without_it_is_one_line_with_exit_2(framework, extra, hint, capsys):
    args = ["train", "glm-4.5-air", "--gpus", "16", "--ep", "8", "--framework", framework, "--mtp-layers", "1"]
    code, _, err = run(args + extra, capsys)
    assert code == 2 and err.startswith("error: mtp_layers") and err.count("\n") == 1 and hint in err


DSV3_GB200 = ["train", "deepseek-v3", "--gpus", "256", "--gpu", "gb200", "--pp", "4", "--ep", "64"]
DSV3_GB200 += ["--global-batch", "4096", "--framework", "megatron", "--precision", "mxfp8", "--recompute", "full"]


def test_train_takes_a_megatron_pipeline_layout_and_sets_vp_from_it(capsys):
    # Megatron-Bridge's DeepSeek-V3 layout for pp 4 x vp 4: 61 layers as 16, 16, 16, 13 per rank
    args = DSV3_GB200 + ["--mtp-layers", "1", "--pipeline-layout", "Et*4|(t*4|)*14tmL"]
    code, out, _ = run(args + ["--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["plan"]["vp"] == 4 and doc["plan"]["stage_layers"] == [16, 16, 16, 13]
    assert doc["plan"]["layout"] == "Et*4|(t*4|)*14tmL"
    code, out, _ = run(args, capsys)
    assert code == 0 and "layers per pipeline stage: 16 16 16 13" in out and "vp=4" in out.splitlines()[0]


@pytest.mark.parametrize(
    "extra,field,hint",
    [
        (["--pipeline-layout", "Et*4|(t*4|)*14tL", "--mtp-layers", "1"], "mtp_layers", "use --mtp-layers 0"),
        (["--pipeline-layout", "Et*4|(t*4|)*14L"], "pipeline_layout", "60 transformer layers; the model has 61"),
        (["--pipeline-layout", "Et*61|L|t|L"], "pipeline_layout", "must end with the loss L, once"),
    ],
)
def test_bad_pipeline_layouts_are_one_line_with_exit_2(extra, field, hint, capsys):
    code, _, err = run(DSV3_GB200 + extra, capsys)
    assert code == 2 and err.startswith(f"error: {field}") and err.count("\n") == 1 and hint in err


def test_train_names_a_faster_accounted_split_and_its_flags(capsys):
    code, out, _ = run(LLAMA3, capsys)
    assert code == 0 and "faster split: --first-stage-layers 7 --last-stage-layers 7" in out
    code, out, _ = run(LLAMA3 + ["--json"], capsys)
    assert json.loads(out)["faster_split"]["stage_layers"] == [7] + [8] * 14 + [7]


def test_bf16_moments_halve_the_optimizer_state_and_master_dtype_drops_the_master(capsys):
    base = ["train", "llama-3.1-8b", "--gpus", "8", "--zero", "1", "--json"]
    docs = []
    for extra in ([], ["--optimizer-dtype", "bf16"], ["--optimizer-dtype", "bf16", "--master-dtype", "bf16"]):
        code, out, err = run([*base, *extra], capsys)
        assert code in (0, 3), err
        docs.append(json.loads(out))
    (opt, master) = [[d["memory"]["per_gpu"][k] for d in docs] for k in ("optimizer", "master_weights")]
    assert opt[1] == pytest.approx(opt[0] / 2) and master[1] == master[0] > 0 and master[2] == 0
    assert [d["training"]["master_dtype"] for d in docs] == ["fp32", "fp32", "bf16"]
