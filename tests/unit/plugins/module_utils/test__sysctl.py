# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sysctl reconciliation over a /proc/sys tree built in tmp_path."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _sysctl


def tree(tmp_path, values):
    for key, value in values.items():
        path = tmp_path.joinpath(*key.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
    return str(tmp_path)


def test_values_compare_with_their_whitespace_normalised(tmp_path):
    # The kernel prints tcp_rmem with tabs and a newline.
    root = tree(tmp_path, {"net.ipv4.tcp_rmem": "4096\t87380\t16777216\n", "net.core.rmem_max": "212992\n"})
    live = _sysctl.read(root, ["net.ipv4.tcp_rmem", "net.core.rmem_max", "net.ipv4.tcp_rmemm"])
    assert live == {
        "net.ipv4.tcp_rmem": "4096 87380 16777216",
        "net.core.rmem_max": "212992",
        "net.ipv4.tcp_rmemm": None,
    }
    wanted = {"net.ipv4.tcp_rmem": "4096  87380 16777216", "net.core.rmem_max": 16777216}
    assert _sysctl.plan(wanted, live) == {"differ": ["net.core.rmem_max"], "absent": [], "hidden": []}


def test_an_absent_key_is_a_failure_on_a_host_and_in_a_container_outside_net_core():
    live = {"net.core.netdev_max_backlog": None, "net.ipv4.tcp_rmemm": None}
    wanted = {"net.core.netdev_max_backlog": 250000, "net.ipv4.tcp_rmemm": 1}
    assert _sysctl.plan(wanted, live)["absent"] == ["net.core.netdev_max_backlog", "net.ipv4.tcp_rmemm"]
    planned = _sysctl.plan(wanted, live, container="docker")
    assert planned["absent"] == ["net.ipv4.tcp_rmemm"]
    assert planned["hidden"] == ["net.core.netdev_max_backlog"]


def test_a_write_is_read_back(tmp_path):
    root = tree(tmp_path, {"net.ipv4.tcp_mtu_probing": "0\n"})
    assert _sysctl.write(root, "net.ipv4.tcp_mtu_probing", 1) is None
    assert (tmp_path / "net" / "ipv4" / "tcp_mtu_probing").read_text() == "1\n"


def test_a_refused_write_says_why(tmp_path):
    # The kernel's ENOENT/EPERM/EROFS all arrive as an OSError from the write.
    reason = _sysctl.write(str(tmp_path), "net.core.rmem_max", 1)
    assert reason.startswith("the kernel refused the write: No such file or directory")


def test_a_write_the_kernel_does_not_keep_is_caught_by_the_read_back(tmp_path, monkeypatch):
    root = tree(tmp_path, {"net.core.rmem_max": "212992\n"})
    monkeypatch.setattr(_sysctl, "read", lambda root, keys: {"net.core.rmem_max": "212992"})
    assert (
        _sysctl.write(root, "net.core.rmem_max", 16777216) == "the write did not take: the kernel reads back '212992'"
    )


@pytest.mark.parametrize(
    ("sysctls", "text"),
    [
        ({"net core rmem_max": 1}, "'net core rmem_max' is not a sysctl key"),
        ({"net/core/rmem_max": 1}, "is not a sysctl key"),
        ({"net.core.rmem_max": "lots"}, "net.core.rmem_max='lots' is not a sysctl value"),
        ({"net.core.rmem_max": "1\nkernel.panic = 1"}, "is not a sysctl value"),
        ({"net.core.rmem_max": True}, "is not a sysctl value"),
    ],
)
def test_bad_keys_and_values_are_named(sysctls, text):
    [problem] = _sysctl.input_problems(sysctls)
    assert text in problem


def test_good_keys_and_values_pass():
    assert _sysctl.input_problems({"net.ipv4.tcp_rmem": "4096 87380 16777216", "vm.swappiness": 10, "a.b": "-1"}) == []
