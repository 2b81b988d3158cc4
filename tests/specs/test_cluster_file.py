"""--cluster FILE: a GPU, nodes and the two networks, validated field by field, used by train and search."""

import json

import pytest
from cli_runner import run

from gpuplan import catalog
from gpuplan.catalog.cluster_file import read_cluster_file
from gpuplan.errors import GpuplanError
from gpuplan.estimate.comm import _group, collective_time

FOUR_NODES = """\
name = "4 x DGX H100, half the NICs"
gpu = "h100-sxm"
nodes = 4
gpus_per_node = 8

[intra]
interconnect = "nvlink4"
gbps = 900
latency_us = 3.0

[inter]
nics_per_node = 4
nic_gbit = 200
latency_us = 12.0
"""


def _write(tmp_path, text, name="cluster.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_file_sets_nodes_and_both_networks(tmp_path):
    c = read_cluster_file(_write(tmp_path, FOUR_NODES))
    assert (c.nodes, c.gpus, c.gpu.gpus_per_node) == (4, 32, 8)
    # 4 NICs x 200 Gbit/s shared by 8 GPUs, one direction: 4 * 25e9 / 8 bytes/s each
    assert c.gpu.inter_bytes_per_s == 4 * 200e9 / 8 / 8
    assert c.gpu.intra_bytes_per_s == 900e9 / 2
    assert c.gpu.efficiency.inter_latency_s == pytest.approx(12e-6)
    assert c.gpu.efficiency.intra_latency_s == pytest.approx(3e-6)
    assert c.gpu.memory_bytes == catalog.gpu("h100-sxm").memory_bytes  # the GPU itself unchanged


def test_a_slower_scale_out_network_slows_only_collectives_that_cross_nodes(tmp_path):
    slow, base = read_cluster_file(_write(tmp_path, FOUR_NODES)).gpu, catalog.gpu("h100-sxm")
    for size in (8, 16):  # a DP group inside one node, then across two
        g = _group("dp", size, 1, 8)
        t_slow, t_base = collective_time("all-reduce", 1e9, g, slow), collective_time("all-reduce", 1e9, g, base)
        assert (t_slow > t_base) if g.crosses_nodes else (t_slow == t_base)


def test_an_nvl72_domain_spans_nodes(tmp_path):
    text = 'gpu = "gb200"\nnodes = 18\ngpus_per_node = 4\n[intra]\ndomain = 72\n'
    c = read_cluster_file(_write(tmp_path, text))
    assert c.gpu.fast_domain == 72 and c.gpus == 72


def test_a_gpu_file_next_to_the_cluster_file_is_found(tmp_path):
    gpu = catalog.ROOT / "gpus" / "rtx-a6000.toml"
    (tmp_path / "card.toml").write_text(gpu.read_text())
    c = read_cluster_file(_write(tmp_path, 'gpu = "card.toml"\nnodes = 1\n'))
    assert c.gpu.name == catalog.gpu("rtx-a6000").name


@pytest.mark.parametrize(
    "text, where, says",
    [
        (FOUR_NODES.replace("nic_gbit = 200", 'nic_gbit = "200G"'), ":13: inter.nic_gbit", "positive number"),
        (FOUR_NODES.replace("nodes = 4", "nodes = 0"), ":3: nodes", "positive whole number"),
        (FOUR_NODES.replace("gbps = 900", "gbps = inf"), ":8: intra.gbps", "positive number, got inf"),
        (FOUR_NODES.replace("latency_us = 12.0", "latency_us = nan"), ":14: inter.latency_us", "positive number"),
        (FOUR_NODES.replace("gbps = 900", "gbs = 900"), ":8: intra.gbs", "did you mean gbps"),
        (FOUR_NODES.replace('gpu = "h100-sxm"\n', ""), ": gpu", "is missing"),
        (
            'gpu = "gb200"\nnodes = 2\ngpus_per_node = 4\n[intra]\ndomain = 6\n',
            ":5: intra.domain",
            "whole number of nodes",
        ),
        ("gpu = 'h100-sxm'\nnodes = [", "", "not valid TOML"),
        (FOUR_NODES.replace("h100-sxm", "h100-sxn"), "", "did you mean"),
    ],
)
def test_bad_fields_are_named_with_their_line_in_one_line(tmp_path, text, where, says):
    path = _write(tmp_path, text)
    with pytest.raises(GpuplanError) as err:
        read_cluster_file(path)
    msg = str(err.value)
    assert says in msg and "\n" not in msg
    if where:
        assert msg.startswith(f"{path}{where}:")


def test_nodes_without_a_scale_out_network_are_refused_at_the_inter_table(tmp_path):
    card = "".join(
        line
        for line in (catalog.ROOT / "gpus" / "rtx-a6000.toml").read_text().splitlines(keepends=True)
        if not line.startswith(("nics_per_node", "nic_gbit"))
    )
    (tmp_path / "card.toml").write_text(card)
    path = _write(tmp_path, 'gpu = "card.toml"\nnodes = 2\n\n[inter]\nlatency_us = 5.0\n')
    with pytest.raises(GpuplanError, match="need a scale-out network") as err:
        read_cluster_file(path)
    assert str(err.value).startswith(f"{path}:4: inter.nics_per_node:")


def test_train_plans_on_the_whole_cluster_and_reports_its_network(tmp_path, capsys):
    path = _write(tmp_path, FOUR_NODES)
    code, out, _ = run(["train", "llama-3.1-8b", "--cluster", str(path), "--zero", "1", "--json"], capsys)
    assert code == 0
    doc = json.loads(out)
    assert doc["gpu"]["count"] == 32
    assert doc["gpu"]["network"]["inter_bytes_per_s"] == 4 * 200e9 / 8 / 8
    assert doc["gpu"]["network"]["inter_latency_s"] == pytest.approx(12e-6)


def test_a_plan_larger_than_the_cluster_is_refused(tmp_path, capsys):
    path = _write(tmp_path, FOUR_NODES)
    code, _, err = run(["train", "llama-3.1-8b", "--cluster", str(path), "--gpus", "64"], capsys)
    assert code == 2
    assert err.strip().startswith("error: gpus: 64 GPUs but the cluster has 4 nodes x 8 = 32")


def test_search_uses_the_cluster(tmp_path, capsys):
    path = _write(tmp_path, FOUR_NODES)
    code, out, _ = run(["search", "llama-3.1-8b", "--cluster", str(path), "--top", "1", "--json"], capsys)
    assert code == 0
    best = json.loads(out)["plans"][0]
    assert best["gpu"]["count"] == 32 and best["gpu"]["network"]["nics_per_node"] == 4


def test_cluster_errors_exit_2_from_the_cli(tmp_path, capsys):
    path = _write(tmp_path, FOUR_NODES.replace("latency_us = 12.0", "latency_us = -1"))
    code, _, err = run(["search", "llama-3.1-8b", "--cluster", str(path)], capsys)
    assert code == 2 and "inter.latency_us" in err and "Traceback" not in err


def test_a_gpu_that_contradicts_the_cluster_file_is_refused(tmp_path, capsys):
    path = _write(tmp_path, FOUR_NODES)
    code, _, err = run(["train", "llama-3.1-8b", "--cluster", str(path), "--gpu", "h200"], capsys)
    assert code == 2
    assert err.strip().startswith("error: gpu: the cluster file's GPU is h100-sxm, not h200; drop --gpu")
    # the same GPU named twice agrees with the file
    code, _, _ = run(["train", "llama-3.1-8b", "--cluster", str(path), "--gpu", "h100-sxm", "--zero", "1"], capsys)
    assert code == 0
