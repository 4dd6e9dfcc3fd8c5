# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for module_utils/_host_tuning_rules.py: the host_tuning preflight's one check."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._host_tuning_rules import settings_problems

# What sysctl_apply returns in check mode: every key present, nothing to refuse.
LIVE_OK = {"changed": False, "written": [], "refused": {}, "hidden": [], "absent": [], "live": {}}
# Its refusal of a key the kernel lacks (plugins/modules/sysctl_apply.py).
LIVE_ABSENT = {
    "failed": True,
    "absent": ["net.ipv4.tcp_rmemm"],
    "msg": "the kernel has no net.ipv4.tcp_rmemm (no /proc/sys/net/ipv4/tcp_rmemm); check the name, or load the "
    "kernel module that provides it",
}

BAD_VALUE = (
    "net.core.rmem_max='lots' is not a sysctl value; use a number or space-separated numbers such as "
    '"4096 87380 16777216"'
)


def settings(**overrides):
    base = {
        "host_tuning_interfaces": ["ens1f0np0"],
        "host_tuning_rings": {"rx": "max", "tx": "max"},
        "host_tuning_channels": {},
        "inventory_hostname": "gpu01",
        "interfaces": ["lo", "eth0", "ens1f0np0"],
        "sysctl_check": LIVE_OK,
    }
    base.update(overrides)
    return base


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"host_tuning_interfaces": [], "host_tuning_rings": {"rx": 4096, "tx": "max"}},
        {"host_tuning_channels": {"combined": 8, "rx": "0"}, "host_tuning_rings": None},
        # The sysctl module was skipped or not run: no verdict to report.
        {"sysctl_check": {"skipped": True}},
    ],
)
def test_good_settings_have_no_problems(overrides):
    assert settings_problems(settings(**overrides)) == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"host_tuning_interfaces": ["nosuch0", "ens1f0np0", "nosuch0"]},
            "host_tuning_interfaces=['nosuch0', 'ens1f0np0', 'nosuch0'] names nosuch0, which gpu01 does not have "
            "(it has ens1f0np0, eth0, lo).",
        ),
        ({"host_tuning_interfaces": "eth0"}, "host_tuning_interfaces=eth0 must be a list of the NICs of gpu01"),
        (
            {"sysctl_check": LIVE_ABSENT},
            "host_tuning_sysctls / host_tuning_sysctl_overrides on gpu01: the kernel has no net.ipv4.tcp_rmemm (no "
            "/proc/sys/net/ipv4/tcp_rmemm); check the name, or load the kernel module that provides it; or remove "
            "it with null in host_tuning_sysctl_overrides.",
        ),
        (
            {"sysctl_check": {"failed": True, "msg": BAD_VALUE, "problems": [BAD_VALUE]}},
            "host_tuning_sysctls / host_tuning_sysctl_overrides on gpu01: " + BAD_VALUE + ".",
        ),
        (
            {"host_tuning_rings": {"rx": "lots"}},
            "host_tuning_rings.rx='lots' must be an integer of at least 1 or 'max'",
        ),
        (
            {"host_tuning_channels": {"queues": 8}},
            "host_tuning_channels.queues is not a channels parameter; use rx, tx, other, combined",
        ),
        (
            {"host_tuning_channels": ["combined"]},
            "host_tuning_channels must be a dict of rx, tx, other, combined, got ['combined']",
        ),
    ],
)
def test_a_bad_setting_is_named_with_its_value_and_the_fix(overrides, message):
    assert settings_problems(settings(**overrides)) == [message]


def test_every_problem_comes_back_at_once():
    problems = settings_problems(
        settings(host_tuning_interfaces=["nosuch0"], sysctl_check=LIVE_ABSENT, host_tuning_rings={"tx": 0})
    )
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "host_tuning_interfaces",
        "host_tuning_sysctls",
        "host_tuning_rings.tx",
    ]
