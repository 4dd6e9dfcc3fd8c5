# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one container detection (module_utils/_host.py) and its filter."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter._container_kind import container_kind


@pytest.mark.parametrize("kind", ["docker", "podman", "lxc", "systemd-nspawn", "containerd", "openvz", "container"])
def test_a_container_guest_is_named(kind):
    assert container_kind({"virtualization_role": "guest", "virtualization_type": kind}) == kind


@pytest.mark.parametrize(
    "facts",
    [
        {"virtualization_role": "host", "virtualization_type": "kvm"},
        {"virtualization_role": "guest", "virtualization_type": "kvm"},
        {"virtualization_role": "guest", "virtualization_type": "VMware"},
        # a host that runs containers reports itself as their host, not as one
        {"virtualization_role": "host", "virtualization_type": "docker"},
        {"virtualization_role": "NA", "virtualization_type": "NA"},
        {},
    ],
)
def test_hosts_and_vms_are_not_containers(facts):
    assert container_kind(facts) == ""


def test_facts_that_are_not_a_dict_are_refused():
    with pytest.raises(AnsibleFilterError, match="ansible_facts"):
        container_kind("docker")
