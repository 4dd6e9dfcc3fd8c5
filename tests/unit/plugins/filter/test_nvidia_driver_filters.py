# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the nvidia_driver_plan and nvidia_driver_reboot filters: validation and argument handling."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import (
    _nvidia_driver_plan as plan_filter,
)
from ansible_collections.gpufleet.inference.plugins.filter import (
    _nvidia_driver_reboot as reboot_filter,
)
from ansible_collections.gpufleet.inference.plugins.module_utils._nvidia_driver import driver_plan

nvidia_driver_plan = plan_filter.nvidia_driver_plan
nvidia_driver_reboot = reboot_filter.nvidia_driver_reboot

V570 = "570.195.03-1"
V580 = "580.105.08-1"


def apt_packages(*pairs):
    """ansible_facts.packages as package_facts(manager=apt) returns it."""
    return {
        name: [
            {
                "name": name,
                "version": version,
                "arch": "amd64",
                "category": "non-free",
                "origin": "NVIDIA",
                "source": "apt",
            }
        ]
        for name, version in pairs
    }


HOST_570_OPEN = apt_packages(
    ("nvidia-open", V570),
    ("nvidia-kernel-open-dkms", V570),
    ("nvidia-driver", V570),
    ("libcuda1", V570),
    ("libnvidia-ml1", V570),
    ("nvidia-driver-pinning-570", V570),
    ("nvidia-container-toolkit", "1.17.8-1"),
    ("libnvidia-container1", "1.17.8-1"),
    ("cuda-keyring", "1.1-1"),
)


def error_of(function, *args, **kwargs):
    with pytest.raises(AnsibleFilterError) as excinfo:
        function(*args, **kwargs)
    return str(excinfo.value)


def test_filters_are_registered():
    assert plan_filter.FilterModule().filters() == {"_nvidia_driver_plan": nvidia_driver_plan}
    assert reboot_filter.FilterModule().filters() == {"_nvidia_driver_reboot": nvidia_driver_reboot}


# ------------------------------------------------------------------ nvidia_driver_plan


@pytest.mark.parametrize("kernel_modules", ["open", "proprietary"])
def test_plan_is_driver_plan(kernel_modules):
    assert nvidia_driver_plan(HOST_570_OPEN, "580", kernel_modules) == driver_plan(HOST_570_OPEN, "580", kernel_modules)


def test_plan_switch_from_570():
    plan = nvidia_driver_plan(HOST_570_OPEN, "580", "open")
    assert plan["remove"] == [
        "libcuda1",
        "libnvidia-ml1",
        "nvidia-driver",
        "nvidia-driver-pinning-570",
        "nvidia-kernel-open-dkms",
        "nvidia-open",
    ]
    assert plan["switch"] is True


def test_plan_fresh_host():
    plan = nvidia_driver_plan({}, "580", "open")
    assert plan["remove"] == []
    assert plan["switch"] is False
    assert plan["installed_version"] is None


@pytest.mark.parametrize("kernel_modules", ["nvidia-open", "Open", "", None, "dkms"])
def test_plan_rejects_unknown_kernel_modules(kernel_modules):
    message = error_of(nvidia_driver_plan, HOST_570_OPEN, "580", kernel_modules)
    assert repr(kernel_modules) in message
    assert "open or proprietary" in message


@pytest.mark.parametrize(
    "packages, type_name",
    [(None, "NoneType"), (["nvidia-open"], "list"), ("nvidia-open", "str")],
)
def test_plan_rejects_packages_that_are_not_a_dict(packages, type_name):
    message = error_of(nvidia_driver_plan, packages, "580", "open")
    assert "ansible_facts.packages" in message
    assert type_name in message


@pytest.mark.parametrize("branch", ["580.105.08", "r580", ""])
def test_plan_rejects_a_branch_that_is_not_three_digits(branch):
    # Without validation, a full version or a typo matches no installed package's branch, so every
    # installed driver package of the right branch is planned for removal (switch: true).
    try:
        plan = nvidia_driver_plan(HOST_570_OPEN, branch, "open")
    except AnsibleFilterError as error:
        assert repr(branch) in str(error)
        return
    pytest.fail(
        f"regression: nvidia_driver_plan accepted branch={branch!r} (documented as three digits) "
        f"and planned to remove {plan['remove']}"
    )


# ------------------------------------------------------------------ nvidia_driver_reboot


def test_reboot_loaded_version_with_trailing_newline_matches():
    plan = nvidia_driver_reboot(
        "580.105.08", gpu_count=8, container="", loaded_version="580.105.08\n", nouveau_loaded=False
    )
    assert plan["required"] is False
    assert plan["reason"] == "nvidia 580.105.08 is loaded and installed"


def test_reboot_loaded_version_with_trailing_newline_mismatch():
    plan = nvidia_driver_reboot(
        "580.105.08", gpu_count=8, container="", loaded_version="570.195.03\n", nouveau_loaded=False
    )
    assert plan["required"] is True
    assert "570.195.03 but 580.105.08" in plan["reason"]
    assert "\n" not in plan["reason"]


@pytest.mark.parametrize("loaded_version", ["", "\n", None])
def test_reboot_empty_loaded_version_is_not_loaded(loaded_version):
    plan = nvidia_driver_reboot(
        "580.105.08", gpu_count=8, container="", loaded_version=loaded_version, nouveau_loaded=False
    )
    assert plan["required"] is True
    assert "not loaded" in plan["reason"]


@pytest.mark.parametrize("installed_version", ["", None])
def test_reboot_nothing_installed(installed_version):
    plan = nvidia_driver_reboot(installed_version, gpu_count=8, container="", loaded_version="", nouveau_loaded=False)
    assert plan["required"] is False
    assert plan["skipped"] == ""


def test_reboot_gpu_count_as_string():
    assert nvidia_driver_reboot("580.105.08", gpu_count="0", container="", loaded_version="", nouveau_loaded=False)[
        "skipped"
    ]
    assert nvidia_driver_reboot("580.105.08", gpu_count="8", container="", loaded_version="", nouveau_loaded=False)[
        "required"
    ]


@pytest.mark.parametrize("container", ["", None])
def test_reboot_empty_container_is_a_host(container):
    plan = nvidia_driver_reboot(
        "580.105.08", gpu_count=8, container=container, loaded_version="580.105.08\n", nouveau_loaded=False
    )
    assert plan["skipped"] == ""
    assert plan["required"] is False


def test_reboot_in_container():
    plan = nvidia_driver_reboot("580.105.08", gpu_count=8, container="docker", loaded_version="", nouveau_loaded=True)
    assert plan["required"] is False
    assert "docker" in plan["skipped"]


def test_reboot_nouveau():
    plan = nvidia_driver_reboot("580.105.08", gpu_count=8, container="", loaded_version="", nouveau_loaded=1)
    assert plan["required"] is True
    assert "nouveau" in plan["reason"]


@pytest.mark.parametrize("gpu_count", ["eight", ""])
def test_reboot_rejects_gpu_count_that_is_not_a_number(gpu_count):
    try:
        nvidia_driver_reboot("580.105.08", gpu_count=gpu_count, container="", loaded_version="", nouveau_loaded=False)
    except AnsibleFilterError as error:
        assert repr(gpu_count) in str(error)
        return
    except (TypeError, ValueError) as error:
        pytest.fail(
            f"regression: nvidia_driver_reboot gpu_count={gpu_count!r} raised {type(error).__name__} ({error}) "
            "instead of AnsibleFilterError"
        )
    pytest.fail(f"nvidia_driver_reboot accepted gpu_count={gpu_count!r}")
