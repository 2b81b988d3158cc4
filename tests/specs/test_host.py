"""Host hardware: parsing, validation, PCIe sharing and the catalog's defaults (oracles: the
datasheet numbers the catalog files cite, and arithmetic by hand)."""

import pytest

from gpuplan import catalog
from gpuplan.catalog.hosts import host, host_for_gpu, host_ids
from gpuplan.errors import GpuplanError
from gpuplan.specs.host import HostSpec, parse_bytes


def test_sizes_parse_in_si_and_binary_units():
    assert parse_bytes("256GB", "cpu_memory") == 256e9
    assert parse_bytes("2TB", "disk") == 2e12
    assert parse_bytes("512GiB", "cpu_memory") == 512 * 2**30
    assert parse_bytes("1.5T", "disk") == 1.5e12


@pytest.mark.parametrize("text", ["lots", "-4GB", "0GB"])
def test_bad_sizes_name_the_flag(text):
    with pytest.raises(GpuplanError) as e:
        parse_bytes(text, "cpu_memory")
    assert e.value.field == "cpu_memory"


def test_host_rejects_nonpositive_memory_and_a_disk_without_bandwidth():
    with pytest.raises(GpuplanError) as e:
        HostSpec(name="x", cpu_memory_bytes=0, cpu_memory_bytes_per_s=1e9, pcie_bytes_per_s=1e9)
    assert e.value.field == "cpu_memory"
    with pytest.raises(GpuplanError) as e:
        HostSpec(name="x", cpu_memory_bytes=1e9, cpu_memory_bytes_per_s=1e9, pcie_bytes_per_s=1e9, disk_bytes=1e12)
    assert e.value.field == "disk_gbps"


def test_gpus_behind_one_switch_split_its_uplink():
    h = HostSpec(name="x", cpu_memory_bytes=1e12, cpu_memory_bytes_per_s=3e11, pcie_bytes_per_s=25e9, pcie_shared_by=2)
    assert h.pcie_per_gpu(1) == 25e9
    assert h.pcie_per_gpu(8) == 12.5e9


def test_disk_override_sets_read_and_half_the_write_rate():
    h = host_for_gpu("rtx-4090").with_overrides(cpu_memory_bytes=256e9, disk_bytes=2e12, disk_bytes_per_s=4e9)
    assert (h.cpu_memory_bytes, h.disk_bytes, h.disk_read_bytes_per_s, h.disk_write_bytes_per_s) == (
        256e9,
        2e12,
        4e9,
        2e9,
    )


def test_catalog_hosts_match_their_pcie_generation():
    # Gen4 x16: 31.5 GB/s per direction, ~25 achievable; Gen5 x16: 63, ~50 (sources in the files)
    assert host_for_gpu("a100-sxm-80gb").pcie_bytes_per_s == 25e9
    assert host_for_gpu("h100-sxm").pcie_bytes_per_s == 50e9
    assert host_for_gpu("rtx-4090").pcie_bytes_per_s == 25e9
    for hid in host_ids():
        assert host(hid).source
    for gid in catalog.gpu_ids():  # every GPU has a host (a file or the default)
        assert host_for_gpu(gid).cpu_memory_bytes > 0
