"""Block-scaled formats (NVFP4, MXFP4, MXFP8): bytes against storage torch allocates for each
checkpoint tensor of the model transformers builds, and refusal on hardware without them."""

import math

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.serve.formats import kv_format, weight_format
from gpuplan.serve.weights import weight_bytes_per_gpu
from gpuplan.specs.hf import model_from_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# in-dimensions that are not multiples of the blocks, so partial blocks are exercised
LLAMA = dict(
    model_type="llama",
    vocab_size=300,
    hidden_size=72,
    intermediate_size=200,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
GPT_OSS = dict(
    model_type="gpt_oss",
    vocab_size=300,
    hidden_size=64,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_local_experts=4,
    num_experts_per_tok=2,
)
# (values dtype, elements per stored value, block, scale dtype, per-tensor scale dtype)
LAYOUT = {
    "nvfp4": (torch.float4_e2m1fn_x2, 2, 16, torch.float8_e4m3fn, torch.float32),
    "mxfp4": (torch.float4_e2m1fn_x2, 2, 32, torch.float8_e8m0fnu, None),
    "mxfp8": (torch.float8_e4m3fn, 1, 32, torch.float8_e8m0fnu, None),
}


def _quantised_bytes(out, n_in, fmt):
    values, per, block, scale, tensor = LAYOUT[fmt]
    t = [
        torch.empty((out, math.ceil(n_in / per)), dtype=values, device="meta"),
        torch.empty((out, math.ceil(n_in / block)), dtype=scale, device="meta"),
    ]
    if tensor is not None:
        t.append(torch.empty((), dtype=tensor, device="meta"))
    return sum(x.numel() * x.element_size() for x in t)


def _checkpoint_bytes(config, fmt, experts_only=False):
    """Every parameter transformers builds: linear weights of the blocks (or only the experts) in
    the format, everything else (embeddings, head, norms, biases, routers) in bf16."""
    with torch.device("meta"):
        hf = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
    total = 0
    for name, p in hf.named_parameters():
        expert = ".experts." in name and not name.endswith("_bias")
        linear = (
            name.startswith("model.layers.") and name.endswith(".weight") and p.dim() == 2 and ".router" not in name
        )
        if expert:  # transformers keeps gpt-oss experts as (experts, in, out)
            total += p.shape[0] * _quantised_bytes(p.shape[2], p.shape[1], fmt)
        elif linear and not experts_only:
            total += _quantised_bytes(p.shape[0], p.shape[1], fmt)
        else:
            total += p.numel() * 2
    return total


@pytest.mark.parametrize("fmt", ["nvfp4", "mxfp4", "mxfp8"])
def test_block_scaled_bytes_equal_the_checkpoint_storage(fmt):
    m = model_from_hf_config(LLAMA)
    w = weight_format(fmt, catalog.gpu("b200"))
    assert weight_bytes_per_gpu(m, w) == pytest.approx(_checkpoint_bytes(LLAMA, fmt), rel=1e-12)


def test_gpt_oss_as_shipped_has_only_its_experts_in_mxfp4():
    m = model_from_hf_config(GPT_OSS)
    w = weight_format("mxfp4-experts", catalog.gpu("h100-sxm"))
    assert weight_bytes_per_gpu(m, w) == pytest.approx(_checkpoint_bytes(GPT_OSS, "mxfp4", True), rel=1e-12)


def test_bits_per_weight_of_whole_blocks():
    b200 = catalog.gpu("b200")
    assert weight_format("nvfp4", b200).bytes == 4.5 / 8
    assert weight_format("mxfp4", b200).bytes == 4.25 / 8
    assert weight_format("mxfp8", b200).bytes == 8.25 / 8
    assert kv_format("nvfp4", b200).bytes == 0.5625


def test_gpt_oss_120b_fits_one_80gb_gpu_as_shipped():
    # OpenAI: gpt-oss-120b "runs on a single 80 GB GPU" thanks to MXFP4 experts
    m, h100 = catalog.model("gpt-oss-120b"), catalog.gpu("h100-sxm")
    assert 60e9 < weight_bytes_per_gpu(m, weight_format("mxfp4-experts", h100)) < 66e9


@pytest.mark.parametrize(
    "fmt, gpu, says",
    [
        ("nvfp4", "h100-sxm", "block-scaled"),
        ("mxfp4", "a100-sxm-80gb", "Blackwell"),
        ("mxfp8", "h100-sxm", "mxfp4-wo"),
        ("nvfp4", "mi355x", "NVIDIA format"),
    ],
)
def test_fp4_is_refused_where_the_hardware_lacks_it(fmt, gpu, says):
    with pytest.raises(GpuplanError, match=says) as err:
        weight_format(fmt, catalog.gpu(gpu))
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "fmt, gpu",
    [("nvfp4", "b200"), ("nvfp4", "b300"), ("mxfp4", "mi355x"), ("mxfp8", "gb200"), ("mxfp4-wo", "a100-sxm-80gb")],
)
def test_fp4_is_accepted_where_it_runs(fmt, gpu):
    assert weight_format(fmt, catalog.gpu(gpu)).name == fmt


def test_nvfp4_kv_needs_blackwell():
    with pytest.raises(GpuplanError, match="kv"):
        kv_format("nvfp4", catalog.gpu("h100-sxm"))
    with pytest.raises(GpuplanError, match="kv"):
        kv_format("nvfp4", catalog.gpu("mi355x"))


def test_cli_serves_gpt_oss_on_b200_in_nvfp4(capsys):
    import json

    from gpuplan.cli.app import main

    try:
        main(["serve", "gpt-oss-120b", "--gpu", "b200", "--weights", "nvfp4", "--kv", "nvfp4", "--json"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["weights"] == "nvfp4" and doc["kv"] == "nvfp4"
