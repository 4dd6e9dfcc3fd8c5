# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia_smi_xml filter: the container smoke test reads the GPUs through gpu_info's parser."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter.nvidia_smi_xml import nvidia_smi_xml

SMI = Path(__file__).resolve().parents[1] / "module_utils" / "fixtures" / "nvidia-smi"


def test_a_real_capture_gives_the_gpu_and_its_bus_id():
    result = nvidia_smi_xml((SMI / "rtx-3090-v12.xml").read_text())
    assert [gpu["pci_bus_id"] for gpu in result["gpus"]] == ["0000:00:10.0"]
    assert result["attached_gpus"] == 1


@pytest.mark.parametrize("text", ["GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-x)", "", "<other/>"])
def test_output_that_is_not_nvidia_smi_xml_fails_the_filter(text):
    with pytest.raises(AnsibleFilterError):
        nvidia_smi_xml(text)
