"""Custom hardware: a GPU TOML in the catalog's schema, validated field by field."""

import json
import tomllib

import pytest

from gpuplan import catalog
from gpuplan.errors import GpuplanError
from gpuplan.specs.gpu_file import FIELDS, validate_gpu

H100 = (catalog.ROOT / "gpus" / "h100-sxm.toml").read_text()


@pytest.mark.parametrize("gpu_id", catalog.gpu_ids())
def test_catalog_entries_pass_the_same_validation_and_cite_a_source(gpu_id):
    data = tomllib.loads((catalog.ROOT / "gpus" / f"{gpu_id}.toml").read_text())
    validate_gpu(data, gpu_id)
    assert data["source"] and data["date"]


@pytest.mark.parametrize("gpu_id", ["rtx-a6000", "rtx-3090", "a10", "h20", "h100-nvl", "b300", "gb300", "mi355x"])
def test_new_catalog_gpus_are_listed_with_a_dated_source(gpu_id):
    g = catalog.gpu(gpu_id)
    assert g.source and g.date and g.peak("bf16") > 0


def test_a_toml_file_plans_like_the_catalog_entry(tmp_path):
    path = tmp_path / "my-h100.toml"
    path.write_text(H100)
    mine, ref = catalog.gpu(str(path)), catalog.gpu("h100-sxm")
    assert mine.id == "my-h100" and mine.peak_flops == ref.peak_flops and mine.memory_bytes == ref.memory_bytes
    assert mine.efficiency == ref.efficiency


def test_a_gpu_with_its_own_measured_matmul_rate_keeps_its_familys_other_fractions():
    # GB200's MAMF (ML Engineering's table: 1822.0 of 2500 TFLOP/s bf16, 3615.6 of 5000 fp8) is its
    # own; attention, memory and network fractions stay B200's
    gb200, b200 = catalog.gpu("gb200"), catalog.gpu("b200")
    assert gb200.efficiency.gemm_fraction("bf16") * 2500 == pytest.approx(1822, abs=1)
    assert gb200.efficiency.gemm_fraction("mxfp8") * 5000 == pytest.approx(3615.6, abs=1)
    assert b200.efficiency.gemm_fraction("bf16") * 2250 == pytest.approx(1745, abs=2)
    assert gb200.efficiency.name == b200.efficiency.name
    assert gb200.efficiency.flash_fwd == b200.efficiency.flash_fwd and gb200.efficiency.hbm == b200.efficiency.hbm


def test_minimal_file_defaults_the_optional_fields(tmp_path):
    path = tmp_path / "card.toml"
    path.write_text(
        'name = "My card"\nmemory_bytes = 25769803776\nhbm_gbps = 936\ninterconnect = "pcie4"\n'
        "interconnect_gbps = 64\npcie_gbps = 64\ngpus_per_node = 4\ntdp_w = 350\n[tflops]\nbf16 = 71.0\n"
    )
    g = catalog.gpu(str(path))
    assert g.gpus_per_node == 4 and g.source.startswith("user file") and g.vendor == "nvidia"


def _bad(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(GpuplanError) as err:
        catalog.gpu(str(path))
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize(
    "old, new, says",
    [
        ("hbm_gbps = 3352", 'hbm_gbps = "3.35 TB/s"', "hbm_gbps: must be a positive number"),
        ("hbm_gbps = 3352", "", "hbm_gbps: is missing"),
        ("hbm_gbps = 3352", "hbm_gpbs = 3352", "hbm_gpbs: is not a GPU field; did you mean hbm_gbps?"),
        ("gpus_per_node = 8", "gpus_per_node = 0", "gpus_per_node: must be a positive number"),
        ("bf16 = 989.4", "bfloat16 = 989.4", "tflops.bfloat16: is not a dtype"),
        ("bf16 = 989.4", "bf16 = -1", "tflops.bf16: must be a positive number"),
        ("hbm_gbps = 3352", "hbm_gbps = inf", "hbm_gbps: must be a positive number, got inf"),
        ("hbm_gbps = 3352", "hbm_gbps = nan", "hbm_gbps: must be a positive number, got nan"),
        ("bf16 = 989.4", "bf16 = inf", "tflops.bf16: must be a positive number, got inf"),
        ('vendor = "nvidia"', 'vendor = "intel"', "vendor: unknown vendor"),
        ("nic_gbit = 400", "", "nic_gbit: is missing while nics_per_node is set"),
        ("[tflops]", "[tflopz]", "tflopz: is not a GPU field; did you mean tflops?"),
        ('name = "NVIDIA H100 SXM5 80GB"', "name = 1", "name: must be a string"),
        ("[tflops]", "[mamf]\nbf16 = 1.2\n[tflops]", "mamf.bf16: must be a dtype's fraction in (0, 1]"),
    ],
)
def test_field_level_errors(tmp_path, old, new, says):
    assert old in H100
    assert says in _bad(tmp_path, H100.replace(old, new, 1))


def test_unreadable_files(tmp_path):
    assert "not valid TOML" in _bad(tmp_path, "name = ")
    with pytest.raises(GpuplanError, match="no such file"):
        catalog.gpu(str(tmp_path / "none.toml"))
    with pytest.raises(GpuplanError, match="or pass a GPU TOML file"):
        catalog.gpu("h100-sxn")


def test_every_field_is_documented():
    assert all(what for _, _, what in FIELDS.values())


def test_cli_train_on_a_toml_gpu(tmp_path, capsys):
    import json

    from gpuplan.cli.app import main

    path = tmp_path / "my-h100.toml"
    path.write_text(H100)
    try:
        main(["train", "llama-3.1-8b", "--gpu", str(path), "--gpus", "8", "--zero", "2", "--mfu", "0.4", "--json"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpu"]["id"] == "my-h100"


def test_cli_train_on_a_toml_gpu_predicts_its_step_time(tmp_path, capsys):
    # no --mfu: the performance model and the calibration band read the file's efficiency, not a
    # catalog entry of the file's name
    from gpuplan.cli.app import main

    path = tmp_path / "my-a6000.toml"
    path.write_text((catalog.ROOT / "gpus" / "rtx-a6000.toml").read_text())
    try:
        main(["train", "llama-3.2-1b", "--gpu", str(path), "--gpus", "2", "--zero", "1", "--json"])
    except SystemExit as exc:
        assert exc.code in (0, None, 3)
    doc = json.loads(capsys.readouterr().out)
    assert doc["time"]["step_s"] > 0 and doc["calibration"]["category"]["gpu_family"]


def test_gb300_holds_what_nvidia_smi_reports_and_plans_in_the_blackwell_family():
    # 284208 MiB on a GB300 tray (nvidia-smi 580.82.07), not the marketed 288 GB; no GB300 MAMF is
    # published, so its matmul fractions are B200's, and it shares the B200 / GB200 error bands
    gb300, b200 = catalog.gpu("gb300"), catalog.gpu("b200")
    assert gb300.memory_bytes == 284208 * 2**20
    assert gb300.peak("mxfp8") == 5000e12 and gb300.peak("nvfp4") == 15000e12
    assert gb300.efficiency == b200.efficiency and gb300.fast_domain == 72
