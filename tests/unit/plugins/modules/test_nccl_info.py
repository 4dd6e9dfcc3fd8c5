# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the nccl_info module, run against fake sysfs trees and config files in tmp_path."""

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import nccl_info

HOST_IFACES = ("bond0", "bond0.100", "docker0", "eth0", "lo")
HCA = "=mlx5_0:1,mlx5_1:1"


def fake_sysfs(tmp_path, interfaces=HOST_IFACES):
    root = tmp_path / "sys"
    for iface in interfaces:
        (root / "class" / "net" / iface).mkdir(parents=True)
    return root


def write_env(path, env):
    path.write_text("# written by the test\n" + "".join(f"{key}={value}\n" for key, value in env.items()))
    return path


@pytest.fixture
def host(tmp_path):
    """Module args for a host with HOST_IFACES and no config files yet."""
    return {
        "conf_path": str(tmp_path / "nccl.conf"),
        "sysfs_root": str(fake_sysfs(tmp_path)),
    }


def test_missing_conf_is_reported_not_failed(run_module, host):
    result = run_module(nccl_info, host)
    assert result["changed"] is False
    assert result.get("failed") is not True
    assert result["conf_exists"] is False
    assert result["conf"] == {}
    assert result["env_file_exists"] is False
    assert result["env_file_vars"] == {}
    assert result["in_sync"] is True
    assert result["problems"] == []
    assert result["transport"] == "socket"
    assert result["interfaces"] == sorted(HOST_IFACES)


def test_missing_env_file_is_not_in_sync(run_module, tmp_path, host):
    write_env(tmp_path / "nccl.conf", {"NCCL_SOCKET_IFNAME": "=bond0"})
    host["env_file"] = str(tmp_path / "absent.env")
    result = run_module(nccl_info, host)
    assert result["env_file_exists"] is False
    assert result["in_sync"] is False


@pytest.mark.parametrize(
    "spec, selected",
    [
        ("=bond0", ["bond0"]),
        ("bond", ["bond0", "bond0.100"]),
        ("bond0", ["bond0", "bond0.100"]),
        ("=bond0.100", ["bond0.100"]),
        ("^=bond0", ["bond0.100", "docker0", "eth0", "lo"]),
        # '=' counts only at the start of the list, as in NCCL: "=bond0" here is a prefix matching nothing.
        ("eth0,=bond0", ["eth0"]),
    ],
)
def test_socket_ifname_selects_like_nccl(run_module, tmp_path, host, spec, selected):
    write_env(tmp_path / "nccl.conf", {"NCCL_SOCKET_IFNAME": spec})
    result = run_module(nccl_info, host)
    assert result["conf_exists"] is True
    assert result["conf"] == {"NCCL_SOCKET_IFNAME": spec}
    assert result["socket_ifname_selects"] == selected
    assert result["problems"] == []


def test_unset_ifname_selects_all_but_lo_and_docker(run_module, tmp_path, host):
    write_env(tmp_path / "nccl.conf", {"NCCL_IB_DISABLE": "1"})
    result = run_module(nccl_info, host)
    assert result["socket_ifname_selects"] == ["bond0", "bond0.100", "eth0"]


def test_unset_ifname_skips_every_docker_interface(run_module, tmp_path):
    args = {
        "conf_path": str(tmp_path / "nccl.conf"),
        "sysfs_root": str(fake_sysfs(tmp_path, ["docker0", "docker_gwbridge", "eth0", "lo"])),
    }
    result = run_module(nccl_info, args)
    assert result["socket_ifname_selects"] == ["eth0"]


def test_env_file_in_sync(run_module, tmp_path, host):
    env = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=bond0"}
    write_env(tmp_path / "nccl.conf", env)
    # Order and comments do not matter, only the variables.
    (tmp_path / "nccl.env").write_text("NCCL_SOCKET_IFNAME==bond0\n\n# comment\nNCCL_IB_DISABLE=1\n")
    host["env_file"] = str(tmp_path / "nccl.env")
    result = run_module(nccl_info, host)
    assert result["env_file_exists"] is True
    assert result["env_file_vars"] == env
    assert result["in_sync"] is True


@pytest.mark.parametrize(
    "env_file_vars",
    [
        {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=eth0"},
        {"NCCL_IB_DISABLE": "1"},
        {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=bond0", "NCCL_DEBUG": "INFO"},
    ],
)
def test_env_file_out_of_sync(run_module, tmp_path, host, env_file_vars):
    write_env(tmp_path / "nccl.conf", {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=bond0"})
    host["env_file"] = str(write_env(tmp_path / "nccl.env", env_file_vars))
    result = run_module(nccl_info, host)
    assert result["env_file_exists"] is True
    assert result["env_file_vars"] == env_file_vars
    assert result["in_sync"] is False
    assert result["changed"] is False


@pytest.mark.parametrize(
    "conf, transport",
    [
        ({"NCCL_IB_HCA": HCA}, "roce"),
        ({"NCCL_IB_HCA": HCA, "NCCL_IB_DISABLE": "0"}, "roce"),
        ({"NCCL_IB_HCA": HCA, "NCCL_IB_DISABLE": "1"}, "socket"),
        ({"NCCL_IB_DISABLE": "1"}, "socket"),
        ({"NCCL_SOCKET_IFNAME": "=bond0"}, "socket"),
    ],
)
def test_transport_is_inferred(run_module, tmp_path, host, conf, transport):
    write_env(tmp_path / "nccl.conf", conf)
    result = run_module(nccl_info, host)
    assert result["transport"] == transport


def test_explicit_transport_wins_and_drives_validation(run_module, tmp_path, host):
    write_env(tmp_path / "nccl.conf", {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=bond0"})
    host["transport"] = "ib"
    result = run_module(nccl_info, host)
    assert result["transport"] == "ib"
    keys = sorted(problem["key"] for problem in result["problems"])
    assert keys == ["NCCL_IB_DISABLE", "NCCL_IB_HCA"]


def test_invalid_transport_choice_fails(run_module, host):
    host["transport"] = "tcp"
    result = run_module(nccl_info, host, failed=True)
    assert result["failed"] is True
    assert "transport" in result["msg"]


def test_problems_are_reported_without_failing(run_module, tmp_path, host):
    conf_path = write_env(
        tmp_path / "nccl.conf",
        {
            "NCCL_SOCKET_NTHREADS": "32",
            "NCCL_SOCKET_IFNAME": "=ib0",
            "NCCL_IB_DISABLE": "1",
        },
    )
    result = run_module(nccl_info, host)
    assert result.get("failed") is not True
    assert result["changed"] is False
    by_key = {problem["key"]: problem for problem in result["problems"]}
    assert sorted(by_key) == ["NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS"]
    assert by_key["NCCL_SOCKET_NTHREADS"]["value"] == "32"
    assert "1..16" in by_key["NCCL_SOCKET_NTHREADS"]["msg"]
    assert by_key["NCCL_SOCKET_IFNAME"]["value"] == "=ib0"
    assert "selects no interface" in by_key["NCCL_SOCKET_IFNAME"]["msg"]
    # Each problem names the file and key that supplied the value.
    assert by_key["NCCL_SOCKET_IFNAME"]["variable"] == f"{conf_path}:NCCL_SOCKET_IFNAME"
    assert result["socket_ifname_selects"] == []


def test_unknown_variable_is_a_problem(run_module, tmp_path, host):
    write_env(tmp_path / "nccl.conf", {"NCCL_SOCKET_NTHREAD": "4"})
    result = run_module(nccl_info, host)
    assert [problem["key"] for problem in result["problems"]] == ["NCCL_SOCKET_NTHREAD"]
    assert "NCCL_SOCKET_NTHREADS" in result["problems"][0]["msg"]


def test_check_mode_gives_the_same_answer(run_module, tmp_path, host):
    conf_path = write_env(tmp_path / "nccl.conf", {"NCCL_SOCKET_IFNAME": "=bond0", "NCCL_IB_DISABLE": "1"})
    before = conf_path.read_text()
    normal = run_module(nccl_info, host)
    checked = run_module(nccl_info, dict(host, _ansible_check_mode=True))
    assert checked["changed"] is False
    assert checked.get("skipped") is not True
    for key in ("conf_exists", "conf", "in_sync", "interfaces", "socket_ifname_selects", "transport", "problems"):
        assert checked[key] == normal[key]
    assert conf_path.read_text() == before


def test_nothing_is_written(tmp_path, run_module, host):
    write_env(tmp_path / "nccl.conf", {"NCCL_SOCKET_IFNAME": "=bond0"})
    host["env_file"] = str(tmp_path / "nccl.env")
    before = sorted(str(path) for path in tmp_path.rglob("*"))
    run_module(nccl_info, host)
    assert sorted(str(path) for path in tmp_path.rglob("*")) == before


def test_unreadable_sysfs_root_fails_naming_the_path(run_module, tmp_path):
    missing = tmp_path / "no-such-sys"
    result = run_module(nccl_info, {"conf_path": str(tmp_path / "nccl.conf"), "sysfs_root": str(missing)}, failed=True)
    assert result["failed"] is True
    assert str(missing / "class" / "net") in result["msg"]
    assert "sysfs_root" in result["msg"]


def test_unreadable_conf_fails_naming_the_path(run_module, tmp_path, host):
    # A directory exists but cannot be read as a file, whoever runs the test (root included).
    (tmp_path / "nccl.conf").mkdir()
    result = run_module(nccl_info, host, failed=True)
    assert result["failed"] is True
    assert str(tmp_path / "nccl.conf") in result["msg"]
