# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_gpu.py, on real nvidia-smi outputs (fixtures/nvidia-smi*/README.md).

Multi-GPU documents are built by copying the <gpu> element of a real single-GPU capture.
"""

import copy
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._gpu import (
    GpuError,
    architecture_from_name,
    check_gpus,
    normalize_bus_id,
    parse_smi_xml,
    parse_topo,
)

FIXTURES = Path(__file__).parent / "fixtures"
SMI = FIXTURES / "nvidia-smi"
TOPO = FIXTURES / "nvidia-smi-topo"
HGX_BUS_IDS = [
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:61:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
]


def smi(name):
    return (SMI / name).read_text()


def gpu_element(name):
    """The <gpu> element of a fixture (its DOCTYPE line dropped, as ElementTree cannot skip it)."""
    text = re.sub(r"<!DOCTYPE[^>]*>", "", smi(name))
    return ElementTree.fromstring(text.strip().encode()).find("gpu")


def set_text(gpu, path, value):
    gpu.find(path).text = value


def compose(gpus, driver="535.54.03"):
    """An nvidia-smi -q -x document, with its DOCTYPE line, holding the given <gpu> elements."""
    root = ElementTree.Element("nvidia_smi_log")
    ElementTree.SubElement(root, "driver_version").text = driver
    ElementTree.SubElement(root, "cuda_version").text = "12.2"
    ElementTree.SubElement(root, "attached_gpus").text = str(len(gpus))
    root.extend(gpus)
    body = ElementTree.tostring(root, encoding="unicode")
    return '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n' + body


def hgx(count=8, source="a100-sxm4-v12.xml"):
    """``count`` copies of the fixture's GPU at HGX-like bus ids, minor numbers 0.."""
    template = gpu_element(source)
    gpus = []
    for index, bus_id in enumerate(HGX_BUS_IDS[:count]):
        gpu = copy.deepcopy(template)
        smi_bus_id = "0000" + bus_id.upper()
        gpu.set("id", smi_bus_id)
        set_text(gpu, "pci/pci_bus_id", smi_bus_id)
        set_text(gpu, "minor_number", str(index))
        set_text(gpu, "uuid", f"GPU-513536b6-7d19-9063-b049-1e69664bb2{index:02d}")
        gpus.append(gpu)
    return gpus


# Per fixture: GPU count, name, memory in MiB, driver and CUDA versions, architecture, bus id.
EXPECTED = {
    "a100-sxm4-v12.xml": (1, "NVIDIA A100-SXM4-80GB", 81920, "535.54.03", "12.2", "Ampere", "0000:01:00.0"),
    "gtx-1070-ti.xml": (1, "GeForce GTX 1070 Ti", 4096, None, None, "Pascal", "0000:01:00.0"),
    "quadro-p2000-v12.xml": (1, "Quadro P2000", 5120, "525.125.06", "12.0", "Pascal", "0000:17:00.0"),
    "rtx-3060-v12.xml": (1, "NVIDIA GeForce RTX 3060", 12288, "570.124.04", "12.8", "Ampere", "0000:2d:00.0"),
    "rtx-3080-v12.xml": (1, "NVIDIA GeForce RTX 3080", 10240, "536.40", "12.2", "Ampere", "0000:04:00.0"),
    "rtx-3080-v13.xml": (1, "NVIDIA GeForce RTX 3080", 10240, "595.58.03", "13.2", "Ampere", "0000:0c:00.0"),
    "rtx-3090-v12.xml": (1, "NVIDIA GeForce RTX 3090", 24576, "525.147.05", "12.0", "Ampere", "0000:00:10.0"),
    "tesla-t4.xml": (1, "Tesla T4", 15360, "515.105.01", "11.7", "Turing", "0000:00:1e.0"),
}


def test_every_shared_fixture_is_covered():
    assert sorted(path.name for path in SMI.glob("*.xml")) == sorted(EXPECTED)
    assert "influxdata/telegraf" in smi("README.md") and "MIT" in smi("README.md")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_parses(name):
    count, product, memory, driver, cuda, architecture, bus_id = EXPECTED[name]
    info = parse_smi_xml(smi(name))
    assert len(info["gpus"]) == count
    gpu = info["gpus"][0]
    assert gpu["name"] == product
    assert gpu["memory_total_mib"] == memory
    assert info["driver_version"] == driver
    assert info["cuda_version"] == cuda
    assert gpu["architecture"] == architecture
    assert gpu["pci_bus_id"] == bus_id
    assert gpu["uuid"].startswith("GPU-")


def test_a100_details():
    info = parse_smi_xml(smi("a100-sxm4-v12.xml"))
    assert info["attached_gpus"] == 4
    assert info["gpus"] == [
        {
            "index": 1,
            "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298",
            "name": "NVIDIA A100-SXM4-80GB",
            "architecture": "Ampere",
            "pci_bus_id": "0000:01:00.0",
            "pci_device_id": "10de:20b2",
            "memory_total_mib": 81920,
            "persistence_mode": False,
            "ecc_mode_current": True,
            "ecc_uncorrectable_volatile_total": 0,
            "ecc_uncorrectable_aggregate_total": 0,
            "pcie_gen_current": 4,
            "pcie_gen_max": 4,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
        }
    ]


def test_not_applicable_values_are_null():
    gpu = parse_smi_xml(smi("rtx-3080-v12.xml"))["gpus"][0]
    # minor_number and persistence_mode are N/A on this (Windows) capture.
    assert gpu["index"] == 0
    assert gpu["persistence_mode"] is None
    assert gpu["ecc_mode_current"] is None
    assert gpu["ecc_uncorrectable_volatile_total"] is None
    assert gpu["ecc_uncorrectable_aggregate_total"] is None


def test_v13_split_sram_counters_are_summed():
    gpu = gpu_element("rtx-3080-v13.xml")
    set_text(gpu, "ecc_errors/volatile/sram_uncorrectable_parity", "2")
    set_text(gpu, "ecc_errors/volatile/sram_uncorrectable_secded", "1")
    set_text(gpu, "ecc_errors/volatile/dram_uncorrectable", "4")
    set_text(gpu, "ecc_errors/volatile/dram_correctable", "100")
    info = parse_smi_xml(compose([gpu]))
    assert info["gpus"][0]["ecc_uncorrectable_volatile_total"] == 7
    assert info["gpus"][0]["ecc_uncorrectable_aggregate_total"] is None


def test_old_double_bit_layout():
    gpu = gpu_element("tesla-t4.xml")
    volatile = gpu.find("ecc_errors/volatile")
    for child in list(volatile):
        volatile.remove(child)
    double_bit = ElementTree.SubElement(volatile, "double_bit")
    ElementTree.SubElement(double_bit, "device_memory").text = "3"
    ElementTree.SubElement(double_bit, "total").text = "3"
    assert parse_smi_xml(compose([gpu]))["gpus"][0]["ecc_uncorrectable_volatile_total"] == 3


def test_mig_children_do_not_override_gpu_memory():
    # The A100 capture has MIG devices with their own 19968 MiB fb_memory_usage.
    assert "<total>19968 MiB</total>" in smi("a100-sxm4-v12.xml")
    assert parse_smi_xml(smi("a100-sxm4-v12.xml"))["gpus"][0]["memory_total_mib"] == 81920


@pytest.mark.parametrize(
    "text",
    [
        '<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "aaaa">]>\n<nvidia_smi_log>&a;</nvidia_smi_log>',
        '<?xml version="1.0"?>\n<!DOCTYPE x SYSTEM "a.dtd">\n<!DOCTYPE y [<!ENTITY b "b">]><nvidia_smi_log/>',
    ],
)
def test_inline_dtd_and_entities_are_refused(text):
    with pytest.raises(GpuError, match="inline DTD or entities"):
        parse_smi_xml(text)


@pytest.mark.parametrize("text", ["", "NVIDIA-SMI has failed", "<other/>"])
def test_not_nvidia_smi_xml(text):
    with pytest.raises(GpuError):
        parse_smi_xml(text)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("00000000:61:00.0", "0000:61:00.0"),
        ("00000000:2D:00.0", "0000:2d:00.0"),
        ("61:00.0", "0000:61:00.0"),
        (None, None),
    ],
)
def test_normalize_bus_id(value, expected):
    assert normalize_bus_id(value) == expected


@pytest.mark.parametrize(
    "name, architecture",
    [
        ("NVIDIA GeForce RTX 5090", "Blackwell"),
        ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "Blackwell"),
        ("NVIDIA GeForce RTX 4090", "Ada Lovelace"),
        ("NVIDIA H100 80GB HBM3", "Hopper"),
        ("Tesla V100-SXM2-16GB", "Volta"),
        ("Some Future GPU", None),
    ],
)
def test_architecture_from_name(name, architecture):
    assert architecture_from_name(name) == architecture


# Composed multi-GPU documents and check_gpus.

ALL_CHECKS = dict(
    expected_count=8,
    model="A100",
    min_memory_mib=81920,
    min_driver_version="535.54.3",
    require_persistence=False,
    max_uncorrectable_ecc=0,
    min_pcie_width=16,
    min_pcie_gen=4,
    same_model=True,
    expected_bus_ids=HGX_BUS_IDS,
)


def test_eight_identical_gpus_pass():
    info = parse_smi_xml(compose(hgx()))
    assert [gpu["index"] for gpu in info["gpus"]] == list(range(8))
    assert [gpu["pci_bus_id"] for gpu in info["gpus"]] == HGX_BUS_IDS
    assert check_gpus(info, **ALL_CHECKS) == []


def test_one_gpu_missing_names_its_bus_id():
    gpus = hgx()
    del gpus[3]
    mismatches = check_gpus(parse_smi_xml(compose(gpus)), **ALL_CHECKS)
    assert mismatches == [
        {
            "gpu": None,
            "check": "count",
            "expected": 8,
            "actual": 7,
            "message": "expected 8 GPUs, found 7: 0000:61:00.0 missing",
        }
    ]


def test_missing_gpu_without_bus_ids():
    mismatches = check_gpus(parse_smi_xml(compose(hgx(7))), expected_count=8)
    assert [m["message"] for m in mismatches] == ["expected 8 GPUs, found 7"]


def test_bus_ids_differ_with_right_count():
    expected = [*HGX_BUS_IDS[:7], "00000000:CA:00.0"]
    mismatches = check_gpus(parse_smi_xml(compose(hgx())), expected_count=8, expected_bus_ids=expected)
    assert len(mismatches) == 1
    assert mismatches[0]["check"] == "bus_ids"
    assert mismatches[0]["message"].endswith(": 0000:ca:00.0 missing, 0000:db:00.0 unexpected")


def test_mixed_models():
    gpus = [*hgx(7), gpu_element("rtx-3090-v12.xml")]
    mismatches = check_gpus(parse_smi_xml(compose(gpus)), model="a100")
    assert [m["message"] for m in mismatches] == [
        "mixed models: 7 x NVIDIA A100-SXM4-80GB, 1 x NVIDIA GeForce RTX 3090",
        "GPU 0 (0000:00:10.0): model NVIDIA GeForce RTX 3090 does not match 'a100'",
    ]
    assert mismatches[1]["gpu"] == "0000:00:10.0"


def test_same_model_false_allows_mixed_models():
    gpus = [*hgx(7), gpu_element("rtx-3090-v12.xml")]
    assert check_gpus(parse_smi_xml(compose(gpus)), same_model=False) == []


def test_model_is_a_regex():
    info = parse_smi_xml(compose(hgx(2)))
    assert check_gpus(info, model=r"A100-SXM4-(40|80)GB$") == []
    assert len(check_gpus(info, model=r"^RTX (5090|PRO 6000)")) == 2
    with pytest.raises(ValueError, match="not a valid regular expression"):
        check_gpus(info, model="RTX [")


def test_ecc_errors_above_the_limit():
    gpus = hgx()
    set_text(gpus[2], "ecc_errors/volatile/dram_uncorrectable", "2")
    set_text(gpus[2], "ecc_errors/volatile/sram_uncorrectable", "1")
    set_text(gpus[2], "ecc_errors/aggregate/dram_uncorrectable", "5")
    info = parse_smi_xml(compose(gpus))
    assert check_gpus(info, max_uncorrectable_ecc=5) == []
    mismatches = check_gpus(info, **ALL_CHECKS)
    assert [m["message"] for m in mismatches] == [
        "GPU 2 (0000:3a:00.0): 3 uncorrectable ECC errors (volatile), expected at most 0",
        "GPU 2 (0000:3a:00.0): 5 uncorrectable ECC errors (aggregate), expected at most 0",
    ]
    assert mismatches[0]["gpu"] == "0000:3a:00.0"
    assert mismatches[0]["actual"] == 3


def test_pcie_link_degraded_to_x8():
    gpus = hgx()
    set_text(gpus[3], "pci/pci_gpu_link_info/link_widths/current_link_width", "8x")
    mismatches = check_gpus(parse_smi_xml(compose(gpus)), **ALL_CHECKS)
    assert mismatches == [
        {
            "gpu": "0000:61:00.0",
            "check": "pcie_width",
            "expected": 16,
            "actual": 8,
            "message": "GPU 3 (0000:61:00.0): PCIe link x8, expected at least x16",
        }
    ]


def test_pcie_gen_uses_the_max_link_gen_not_the_idle_one():
    # The RTX 3060 capture idles at gen 1 on a gen 4 link.
    info = parse_smi_xml(smi("rtx-3060-v12.xml"))
    assert info["gpus"][0]["pcie_gen_current"] == 1
    assert check_gpus(info, min_pcie_gen=4) == []
    assert [m["message"] for m in check_gpus(info, min_pcie_gen=5)] == [
        "GPU 0 (0000:2d:00.0): PCIe link trains to gen 4 at most, expected at least gen 5"
    ]


def test_real_degraded_width_tesla_t4():
    info = parse_smi_xml(smi("tesla-t4.xml"))
    assert [m["message"] for m in check_gpus(info, min_pcie_width=16)] == [
        "GPU 0 (0000:00:1e.0): PCIe link x8, expected at least x16"
    ]


@pytest.mark.parametrize(
    "driver, minimum, ok",
    [
        ("570.86.15", "570.86.15", True),
        ("570.124.04", "570.86.15", True),
        ("555.42.02", "570", False),
        ("580.65.06", "580.105.08", False),
    ],
)
def test_min_driver_version_is_numeric(driver, minimum, ok):
    info = parse_smi_xml(compose(hgx(1), driver=driver))
    mismatches = check_gpus(info, min_driver_version=minimum)
    assert (mismatches == []) is ok
    if not ok:
        assert mismatches[0]["message"] == f"driver {driver} is older than the required {minimum}"


def test_unknown_driver_version_is_a_mismatch():
    info = parse_smi_xml(smi("gtx-1070-ti.xml"))
    assert [m["message"] for m in check_gpus(info, min_driver_version="570")] == [
        "driver version unknown, expected at least 570"
    ]


def test_memory_and_persistence():
    info = parse_smi_xml(smi("rtx-3080-v13.xml"))
    assert [m["message"] for m in check_gpus(info, min_memory_mib=32607, require_persistence=True)] == [
        "GPU 0 (0000:0c:00.0): 10240 MiB of memory, expected at least 32607 MiB",
        "GPU 0 (0000:0c:00.0): persistence mode is disabled, expected enabled",
    ]
    assert check_gpus(parse_smi_xml(smi("rtx-3060-v12.xml")), require_persistence=True) == []


# nvidia-smi topo -m


def topo(name):
    return parse_topo((TOPO / name).read_text())


def test_every_topo_fixture_is_documented():
    readme = (TOPO / "README.md").read_text()
    names = sorted(path.name for path in TOPO.glob("*.txt"))
    assert len(names) >= 2
    for name in names:
        assert f"`{name}`" in readme


def test_topo_v100_with_hca_named_row():
    result = topo("v100-sxm2-8gpu-mlx5.txt")
    assert [device["name"] for device in result["devices"]] == [f"GPU{i}" for i in range(8)] + ["mlx5_0"]
    assert result["devices"][0] == {
        "name": "GPU0",
        "kind": "gpu",
        "device": "GPU0",
        "cpu_affinity": "0-11,24-35",
        "numa_affinity": None,
        "gpu_numa_id": None,
    }
    assert result["devices"][8]["kind"] == "nic"
    assert result["matrix"]["GPU0"] == {
        "GPU0": "X",
        "GPU1": "NV1",
        "GPU2": "NV1",
        "GPU3": "NV2",
        "GPU4": "NV2",
        "GPU5": "SYS",
        "GPU6": "SYS",
        "GPU7": "SYS",
        "mlx5_0": "NODE",
    }
    assert result["matrix"]["mlx5_0"]["GPU2"] == "PIX"
    assert result["devices"][7]["cpu_affinity"] == "12-23,36-47"


def test_topo_tab_separated_with_gpu_numa_id():
    result = topo("2gpu-phb-gpu-numa-id.txt")
    assert result["matrix"] == {"GPU0": {"GPU0": "X", "GPU1": "PHB"}, "GPU1": {"GPU0": "PHB", "GPU1": "X"}}
    assert result["devices"][1] == {
        "name": "GPU1",
        "kind": "gpu",
        "device": "GPU1",
        "cpu_affinity": "0-63",
        "numa_affinity": "0",
        "gpu_numa_id": None,
    }


def test_topo_without_matrix_fails():
    with pytest.raises(GpuError, match=r"no 'GPU0 \.\.\.' header"):
        parse_topo("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")


def test_topo_with_unknown_link_value_fails():
    with pytest.raises(GpuError, match="row GPU0"):
        parse_topo("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tFOO\t0-3\nGPU1\tPHB\t X \t0-3\n")


def test_topo_header_underlined_by_nvidia_smi():
    underlined = topo("derived-2gpu-phb-underlined-header.txt")
    assert underlined == topo("2gpu-phb-gpu-numa-id.txt")
    assert underlined["devices"][0]["name"] == "GPU0"
