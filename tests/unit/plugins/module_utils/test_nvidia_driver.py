# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_nvidia_driver.py: driver branch/flavour switch planning, the reboot decision
and the role's input rules (settings_problems, the preflight's one check).

Package sets have the shape of ansible_facts.packages from ansible.builtin.package_facts with the
apt manager (ansible-core's APT.get_package_details plus the ``source`` the base class adds):
``{name: [{"name", "version", "arch", "category", "origin", "source": "apt"}]}``. Names and versions
follow NVIDIA's debian12 CUDA repository and Ubuntu's branch-named driver packages.
"""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._nvidia_driver import (
    branch_of,
    driver_plan,
    reboot_plan,
    settings_problems,
    upstream_version,
)

V570 = "570.195.03-1"
V580 = "580.105.08-1"
U580 = "580.105.08-0ubuntu1"
U570 = "570.195.03-0ubuntu1"


def apt_packages(*pairs):
    """ansible_facts.packages as package_facts(manager=apt) returns it, from (name, version) pairs."""
    packages = {}
    for name, version in pairs:
        packages.setdefault(name, []).append(
            {
                "name": name,
                "version": version,
                "arch": "amd64",
                "category": "non-free/libs" if name.startswith("lib") else "non-free/kernel",
                "origin": "NVIDIA" if not name.startswith("bash") else "Debian",
                "source": "apt",
            }
        )
    return packages


# Never driver packages, whatever the plan: same prefixes, 1.x/12.x versions, or unrelated altogether.
UNRELATED = [
    ("nvidia-container-toolkit", "1.17.8-1"),
    ("nvidia-container-toolkit-base", "1.17.8-1"),
    ("libnvidia-container1", "1.17.8-1"),
    ("libnvidia-container-tools", "1.17.8-1"),
    ("cuda-toolkit-12-8", "12.8.1-1"),
    ("cuda-keyring", "1.1-1"),
    ("libcudart12", "12.8.90-1"),
    # Forward-compatibility user-mode driver: a driver version, but not a driver package name.
    ("cuda-compat-12-8", "570.172.08-1"),
    ("bash", "5.2.15-2+b7"),
]
UNRELATED_NAMES = [name for name, _version in UNRELATED]


def debian_open(version, pinning_branch):
    """NVIDIA debian12 repository, open kernel modules (apt install nvidia-open)."""
    return [
        ("nvidia-open", version),
        ("nvidia-kernel-open-dkms", version),
        ("nvidia-kernel-support", version),
        ("nvidia-driver", version),
        ("nvidia-driver-cuda", version),
        ("nvidia-persistenced", version),
        ("nvidia-modprobe", version),
        ("libcuda1", version),
        ("libnvidia-ml1", version),
        ("libnvidia-ptxjitcompiler1", version),
        ("firmware-nvidia-gsp", version),
        (f"nvidia-driver-pinning-{pinning_branch}", version),
    ]


def debian_proprietary(version, branch):
    """NVIDIA debian12 repository, proprietary kernel modules (apt install cuda-drivers)."""
    return [
        ("cuda-drivers", version),
        (f"cuda-drivers-{branch}", version),
        ("nvidia-kernel-dkms", version),
        ("nvidia-kernel-support", version),
        ("nvidia-driver", version),
        ("nvidia-driver-cuda", version),
        ("nvidia-persistenced", version),
        ("libcuda1", version),
        ("libnvidia-ml1", version),
        ("firmware-nvidia-gsp", version),
        (f"nvidia-driver-pinning-{branch}", version),
    ]


def ubuntu_open(version, branch):
    """Ubuntu's branch-named packages (apt install nvidia-driver-580-open)."""
    return [
        (f"nvidia-driver-{branch}-open", version),
        (f"nvidia-dkms-{branch}-open", version),
        (f"nvidia-kernel-common-{branch}", version),
        (f"nvidia-kernel-source-{branch}-open", version),
        (f"nvidia-utils-{branch}", version),
        (f"nvidia-compute-utils-{branch}", version),
        (f"libnvidia-compute-{branch}", version),
        (f"libnvidia-decode-{branch}", version),
        (f"xserver-xorg-video-nvidia-{branch}", version),
    ]


def ubuntu_proprietary(version, branch):
    return [
        (f"nvidia-driver-{branch}", version),
        (f"nvidia-dkms-{branch}", version),
        (f"nvidia-kernel-common-{branch}", version),
        (f"nvidia-kernel-source-{branch}", version),
        (f"nvidia-utils-{branch}", version),
        (f"libnvidia-compute-{branch}", version),
    ]


def names(pairs):
    return sorted(name for name, _version in pairs)


# ------------------------------------------------------------------ upstream_version / branch_of


@pytest.mark.parametrize(
    "version, expected",
    [
        ("580.105.08-1", "580.105.08"),
        ("1:580.105.08-1", "580.105.08"),
        ("580.105.08-0ubuntu1", "580.105.08"),
        ("580.105.08-0ubuntu0.24.04.1", "580.105.08"),
        ("1:580.105.08-0ubuntu1", "580.105.08"),
        ("580.105.08", "580.105.08"),
        ("1:580.105.08", "580.105.08"),
        ("1.17.8-1", "1.17.8"),
        ("5.2.15-2+b7", "5.2.15"),
        ("12.0.140~12.0.1-4build4", "12.0.140~12.0.1"),
        ("2.0-rc1-3", "2.0-rc1"),
    ],
)
def test_upstream_version_drops_epoch_and_revision(version, expected):
    assert upstream_version(version) == expected


@pytest.mark.parametrize(
    "version, expected",
    [
        ("580.105.08-1", "580"),
        ("1:580.105.08-1", "580"),
        ("570.195.03-1", "570"),
        ("580.105.08-0ubuntu1", "580"),
        ("580.105.08", "580"),
        ("1.17.8-1", None),
        ("12.8.1-1", None),
        ("1.1-1", None),
        ("5.2.15-2+b7", None),
        ("58.1-1", None),
        ("1580.1-1", None),
        ("", None),
    ],
)
def test_branch_of(version, expected):
    assert branch_of(version) == expected


# ------------------------------------------------------------------ driver_plan


EMPTY_PLAN = {
    "installed_branches": [],
    "installed_modules": None,
    "installed_version": None,
    "pinning": [],
    "remove": [],
    "purge": [],
    "switch": False,
}


@pytest.mark.parametrize("packages", [{}, None], ids=["empty", "none"])
@pytest.mark.parametrize("kernel_modules", ["open", "proprietary"])
def test_fresh_host_has_nothing_to_remove(packages, kernel_modules):
    assert driver_plan(packages, "580", kernel_modules) == EMPTY_PLAN


@pytest.mark.parametrize("kernel_modules", ["open", "proprietary"])
def test_only_unrelated_packages_is_a_fresh_host(kernel_modules):
    assert driver_plan(apt_packages(*UNRELATED), "580", kernel_modules) == EMPTY_PLAN


def test_same_branch_and_flavour_removes_nothing():
    plan = driver_plan(apt_packages(*debian_open(V580, "580"), *UNRELATED), "580", "open")
    assert plan == {
        "installed_branches": ["580"],
        "installed_modules": "open",
        "installed_version": "580.105.08",
        "pinning": ["580"],
        "remove": [],
        "purge": [],
        "switch": False,
    }


def test_same_branch_proprietary_removes_nothing():
    plan = driver_plan(apt_packages(*debian_proprietary(V580, "580"), *UNRELATED), "580", "proprietary")
    assert plan["remove"] == []
    assert plan["switch"] is False
    assert plan["installed_modules"] == "proprietary"
    assert plan["installed_version"] == "580.105.08"


def test_branch_may_be_an_integer():
    plan = driver_plan(apt_packages(*debian_open(V580, "580")), 580, "open")
    assert plan["remove"] == []
    assert plan["switch"] is False


def test_upgrade_570_to_580_removes_every_570_driver_package():
    installed = debian_open(V570, "570")
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "open")
    assert plan["remove"] == names(installed)
    assert "nvidia-driver-pinning-570" in plan["remove"]
    # Purged, not only removed: its preferences file is a conffile that would keep pinning 570.
    assert plan["purge"] == ["nvidia-driver-pinning-570"]
    assert "nvidia-kernel-open-dkms" in plan["remove"]
    assert plan["switch"] is True
    assert plan["installed_branches"] == ["570"]
    assert plan["installed_modules"] == "open"
    assert plan["installed_version"] == "570.195.03"
    assert plan["pinning"] == ["570"]
    for name in UNRELATED_NAMES:
        assert name not in plan["remove"], f"{name} is not a driver package and must never be removed"


def test_downgrade_580_to_570_removes_every_580_driver_package():
    installed = debian_proprietary(V580, "580")
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "570", "proprietary")
    assert plan["remove"] == names(installed)
    assert "nvidia-driver-pinning-580" in plan["remove"]
    assert "cuda-drivers-580" in plan["remove"]
    assert plan["switch"] is True
    assert plan["installed_branches"] == ["580"]
    assert plan["installed_version"] == "580.105.08"
    for name in UNRELATED_NAMES:
        assert name not in plan["remove"], f"{name} is not a driver package and must never be removed"


def test_branch_and_flavour_switch_at_once():
    installed = debian_open(V570, "570")
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "proprietary")
    assert plan["remove"] == names(installed)
    assert plan["switch"] is True


def test_half_finished_upgrade_removes_only_the_other_branch():
    leftovers = [("libnvidia-ml1", V570), ("nvidia-driver-pinning-570", V570)]
    current = [pair for pair in debian_open(V580, "580") if pair[0] != "libnvidia-ml1"]
    plan = driver_plan(apt_packages(*current, *leftovers, *UNRELATED), "580", "open")
    assert plan["installed_branches"] == ["570", "580"]
    assert plan["remove"] == ["libnvidia-ml1", "nvidia-driver-pinning-570"]
    assert plan["purge"] == ["nvidia-driver-pinning-570"]
    assert plan["pinning"] == ["570", "580"]
    assert plan["installed_version"] == "580.105.08"


def test_open_to_proprietary_at_same_branch_removes_open_modules_and_metapackage():
    installed = debian_open(V580, "580")
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "proprietary")
    assert plan["remove"] == ["nvidia-kernel-open-dkms", "nvidia-open"]
    assert plan["switch"] is True
    assert plan["installed_modules"] == "open"
    assert plan["installed_version"] == "580.105.08"
    for name in ["libcuda1", "libnvidia-ml1", "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"]:
        assert name not in plan["remove"], f"user-space {name} is shared by both flavours and must stay"
    assert "nvidia-driver-pinning-580" not in plan["remove"]


def test_open_to_proprietary_removes_branch_named_open_metapackage():
    installed = [*debian_open(V580, "580"), ("nvidia-open-580", V580)]
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "proprietary")
    assert plan["remove"] == ["nvidia-kernel-open-dkms", "nvidia-open", "nvidia-open-580"]


def test_proprietary_to_open_at_same_branch_removes_proprietary_modules_and_metapackages():
    installed = debian_proprietary(V580, "580")
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "open")
    assert plan["remove"] == ["cuda-drivers", "cuda-drivers-580", "nvidia-kernel-dkms"]
    assert plan["switch"] is True
    assert plan["installed_modules"] == "proprietary"
    for name in ["libcuda1", "libnvidia-ml1", "nvidia-driver", "firmware-nvidia-gsp", "nvidia-driver-pinning-580"]:
        assert name not in plan["remove"], f"{name} is shared by both flavours and must stay"


def test_epochs_are_stripped():
    installed = [(name, "1:" + V580) for name, _version in debian_open(V580, "580")]
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "open")
    assert plan["installed_version"] == "580.105.08"
    assert plan["installed_branches"] == ["580"]
    assert plan["remove"] == []


def test_epoch_packages_of_another_branch_are_removed():
    installed = [(name, "1:" + V580) for name, _version in debian_open(V580, "580")]
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "570", "open")
    assert plan["remove"] == names(installed)
    assert plan["installed_version"] == "580.105.08"


def test_pinning_list_is_reported_and_only_the_other_branch_removed():
    packages = apt_packages(
        ("nvidia-driver-pinning-570", V570), ("nvidia-driver-pinning-580", V580), ("nvidia-open", V580)
    )
    plan = driver_plan(packages, "580", "open")
    assert plan["pinning"] == ["570", "580"]
    assert plan["remove"] == ["nvidia-driver-pinning-570"]
    # A pinning package is not a driver package: it does not make its branch "installed".
    assert plan["installed_branches"] == ["580"]


def test_ubuntu_open_same_branch_removes_nothing():
    plan = driver_plan(apt_packages(*ubuntu_open(U580, "580"), *UNRELATED), "580", "open")
    assert plan["installed_modules"] == "open"
    assert plan["installed_version"] == "580.105.08"
    assert plan["installed_branches"] == ["580"]
    assert plan["remove"] == []
    assert plan["switch"] is False


def test_ubuntu_proprietary_is_recognised():
    plan = driver_plan(apt_packages(*ubuntu_proprietary(U580, "580"), *UNRELATED), "580", "proprietary")
    assert plan["installed_modules"] == "proprietary"
    assert plan["installed_version"] == "580.105.08"
    assert plan["remove"] == []


def test_ubuntu_570_to_580_removes_every_570_package():
    installed = ubuntu_open(U570, "570")
    plan = driver_plan(apt_packages(*installed, *UNRELATED), "580", "open")
    assert plan["remove"] == names(installed)
    assert plan["installed_version"] == "570.195.03"
    for name in UNRELATED_NAMES:
        assert name not in plan["remove"], f"{name} is not a driver package and must never be removed"


def test_ubuntu_open_to_proprietary_removes_open_modules_keeps_libraries():
    plan = driver_plan(apt_packages(*ubuntu_open(U580, "580"), *UNRELATED), "580", "proprietary")
    assert "nvidia-dkms-580-open" in plan["remove"]
    assert "libnvidia-compute-580" not in plan["remove"]
    assert "nvidia-utils-580" not in plan["remove"]
    assert plan["switch"] is True


def test_ubuntu_proprietary_to_open_removes_proprietary_modules():
    plan = driver_plan(apt_packages(*ubuntu_proprietary(U580, "580"), *UNRELATED), "580", "open")
    assert "nvidia-dkms-580" in plan["remove"]
    assert "libnvidia-compute-580" not in plan["remove"]
    assert plan["switch"] is True


def test_foreign_architecture_driver_libraries_follow_the_branch():
    # apt lists foreign-architecture packages as name:arch.
    packages = apt_packages(
        *debian_open(V570, "570"), ("libcuda1:i386", V570), ("libnvidia-container1:i386", "1.17.8-1")
    )
    plan = driver_plan(packages, "580", "open")
    assert "libcuda1:i386" in plan["remove"]
    assert "libnvidia-container1:i386" not in plan["remove"]


def test_empty_entry_lists_are_ignored():
    packages = apt_packages(("nvidia-open", V580))
    packages["nvidia-kernel-open-dkms"] = []
    plan = driver_plan(packages, "570", "open")
    assert plan["remove"] == ["nvidia-open"]
    assert plan["installed_modules"] is None


SCENARIOS = [
    (debian_open(V570, "570"), "580", "open"),
    (debian_open(V580, "580"), "570", "proprietary"),
    (debian_open(V580, "580"), "580", "proprietary"),
    (debian_proprietary(V580, "580"), "580", "open"),
    (ubuntu_open(U570, "570"), "580", "proprietary"),
    (ubuntu_proprietary(U580, "580"), "580", "open"),
]


@pytest.mark.parametrize("installed, branch, kernel_modules", SCENARIOS)
def test_unrelated_packages_are_never_removed(installed, branch, kernel_modules):
    plan = driver_plan(apt_packages(*installed, *UNRELATED), branch, kernel_modules)
    assert plan["switch"] is True
    assert not set(plan["remove"]) & set(UNRELATED_NAMES), "unrelated packages planned for removal"


# ------------------------------------------------------------------ reboot_plan


def test_container_is_skipped_and_named():
    plan = reboot_plan(8, "docker", "570.195.03", "580.105.08", True)
    assert plan["required"] is False
    assert plan["reason"] == ""
    assert "docker" in plan["skipped"]
    assert "container" in plan["skipped"]


def test_container_wins_over_missing_gpus():
    plan = reboot_plan(0, "lxc", None, None, False)
    assert plan["required"] is False
    assert "lxc" in plan["skipped"]


def test_no_gpus_is_skipped():
    plan = reboot_plan(0, "", None, "580.105.08", True)
    assert plan["required"] is False
    assert plan["reason"] == ""
    assert "no NVIDIA GPU" in plan["skipped"]


def test_nouveau_loaded_requires_reboot():
    plan = reboot_plan(8, "", None, "580.105.08", True)
    assert plan["required"] is True
    assert "nouveau" in plan["reason"]
    assert plan["skipped"] == ""


def test_module_not_loaded_requires_reboot():
    plan = reboot_plan(8, "", None, "580.105.08", False)
    assert plan["required"] is True
    assert "not loaded" in plan["reason"]
    assert "580.105.08" in plan["reason"]
    assert plan["skipped"] == ""


def test_version_mismatch_requires_reboot():
    plan = reboot_plan(8, "", "570.195.03", "580.105.08", False)
    assert plan["required"] is True
    assert "570.195.03" in plan["reason"]
    assert "580.105.08" in plan["reason"]
    assert "mismatch" in plan["reason"]
    assert plan["skipped"] == ""


def test_matching_versions_need_no_reboot():
    plan = reboot_plan(8, "", "580.105.08", "580.105.08", False)
    assert plan == {"required": False, "reason": "nvidia 580.105.08 is loaded and installed", "skipped": ""}


def test_installed_version_with_epoch_and_revision_matches_loaded():
    plan = reboot_plan(8, "", "580.105.08", "1:580.105.08-1", False)
    assert plan["required"] is False


@pytest.mark.parametrize("loaded", [None, "570.195.03"])
def test_nothing_installed_needs_no_reboot(loaded):
    plan = reboot_plan(8, "", loaded, None, False)
    assert plan["required"] is False
    assert plan["skipped"] == ""
    assert "no NVIDIA kernel-module package" in plan["reason"]


# The role's input rules


def driver_settings(**overrides):
    base = {
        "nvidia_driver_branch": "580",
        "nvidia_driver_kernel_modules": "open",
        "nvidia_driver_reboot_ok": None,
        "nvidia_driver_cuda_versions": [],
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"nvidia_driver_branch": 570, "nvidia_driver_kernel_modules": "proprietary", "nvidia_driver_reboot_ok": True},
        {"nvidia_driver_reboot_ok": False, "nvidia_driver_cuda_versions": ["12.8", 13.0, "12.10"]},
    ],
)
def test_good_driver_settings_have_no_problems(overrides):
    assert settings_problems(driver_settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"nvidia_driver_branch": "57"}, 'nvidia_driver_branch=57 must be a three-digit branch such as "580"'),
        ({"nvidia_driver_branch": "575\n"}, 'nvidia_driver_branch=575\n must be a three-digit branch such as "580"'),
        ({"nvidia_driver_branch": "580.105"}, "nvidia_driver_branch=580.105 must be"),
        ({"nvidia_driver_kernel_modules": "closed"}, "nvidia_driver_kernel_modules=closed must be open or proprietary"),
        ({"nvidia_driver_reboot_ok": "yes"}, "nvidia_driver_reboot_ok=yes must be null, true or false"),
        (
            {"nvidia_driver_cuda_versions": ["12.8.1"]},
            "nvidia_driver_cuda_versions=['12.8.1'] must list CUDA toolkit versions as \"X.Y\" strings",
        ),
        ({"nvidia_driver_cuda_versions": "12.8"}, "nvidia_driver_cuda_versions=12.8 must list CUDA toolkit versions"),
    ],
)
def test_each_bad_driver_variable_is_named_with_its_value_and_the_fix(overrides, message):
    problems = settings_problems(driver_settings(**overrides))
    assert len(problems) == 1
    assert problems[0].startswith(message)


def test_every_driver_problem_comes_back_at_once():
    problems = settings_problems(
        driver_settings(nvidia_driver_branch="5800", nvidia_driver_kernel_modules="", nvidia_driver_reboot_ok=1)
    )
    assert [problem.split("=")[0] for problem in problems] == [
        "nvidia_driver_branch",
        "nvidia_driver_kernel_modules",
        "nvidia_driver_reboot_ok",
    ]
