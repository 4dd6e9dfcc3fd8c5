# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the pure functions of scripts/lab.py; nothing here starts docker or runs a command."""

import pytest
from script_loader import load_script

# scripts/ is not a package: load lab.py from its path under a private name.
lab = load_script("scripts/lab.py")

LLAMA_ASSETS = {
    "source": "/cache/src/llama_cpp_python-0.3.36.tar.gz",
    "checksum": "sha256:" + "a" * 64,
    "model": "/cache/models/tiny.gguf",
    "model_checksum": "sha256:" + "b" * 64,
    "artifacts": "/cache/llama.cpp",
}
VLLM_ASSETS = {
    "wheelhouse": "/cache/vllm-wheelhouse/cpu-0.32.0-abc.tar",
    "ref_python": "/cache/vllm/ref/bin/python",
    "model": "/cache/vllm/models/tiny-llama-abc",
    "model_checksum": "c" * 64,
}


@pytest.fixture
def recipe(tmp_path, monkeypatch):
    """Point the image recipe at copies in tmp_path; return (packages file, setup script)."""
    packages = tmp_path / "base-image.packages"
    setup = tmp_path / "base-image-setup.sh"
    packages.write_text("# comment\nsystemd\npython3\n")
    setup.write_text("#!/bin/sh\nset -eu\n")
    monkeypatch.setattr(lab, "PACKAGES_FILE", packages)
    monkeypatch.setattr(lab, "SETUP_SCRIPT", setup)
    return packages, setup


def test_host_names():
    assert lab.host_names(3) == ["lab-head", "lab-w1", "lab-w2"]
    assert lab.host_names(1) == ["lab-head"]


@pytest.mark.parametrize("count", [0, -1])
def test_host_names_rejects_fewer_than_one(count):
    with pytest.raises(SystemExit) as exc:
        lab.host_names(count)
    assert "at least 1" in str(exc.value)


def servers(manifest):
    return [server for rack in manifest["racks"] for server in rack["servers"]]


def test_manifest_places_hosts_in_racks_of_five_by_slot():
    manifest = lab.render_manifest(10, "none", {})
    assert manifest["plugin"] == "gpufleet.inference.topology"
    assert [(rack["name"], rack["id"]) for rack in manifest["racks"]] == [("r1", 1), ("r2", 2)]
    assert [s["name"] for s in servers(manifest)] == lab.host_names(10)
    assert [s["slot"] for s in servers(manifest)] == [1, 2, 3, 4, 5] * 2
    assert "serving" not in manifest


def test_manifest_fabric_and_ssh():
    manifest = lab.render_manifest(3, "none", {})
    assert manifest["fabric"]["subnet"] == lab.SUBNET
    assert manifest["fabric"]["interface"] == lab.FABRIC_INTERFACE
    assert manifest["fabric"]["mtu"] == lab.MTU
    assert manifest["management"]["subnet"] == lab.MGMT_SUBNET
    assert manifest["vars"]["ansible_ssh_private_key_file"] == str(lab.SSH_KEY)
    assert f"UserKnownHostsFile={lab.KNOWN_HOSTS}" in manifest["vars"]["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=yes" in manifest["vars"]["ansible_ssh_common_args"]
    assert "ansible_connection" not in manifest["vars"]


def test_manifest_vllm_replicas_and_the_front_door():
    manifest = lab.render_manifest(4, "vllm", VLLM_ASSETS)
    replica, solo = manifest["serving"]["vllm"]
    assert replica["nodes"] == ["lab-head", "lab-w1"]
    assert replica["vars"]["vllm_pipeline_parallel_size"] == 2
    assert replica["vars"]["vllm_model_src"] == VLLM_ASSETS["model"]
    assert replica["vars"]["vllm_wheelhouse_cache"] == "/cache/vllm-wheelhouse"
    assert (solo["replica"], solo["nodes"], solo["vars"]["vllm_pipeline_parallel_size"]) == ("solo", ["lab-w2"], 1)
    assert manifest["operations"] == {"frontends": ["lab-w3"], "prometheus": ["lab-w3"]}


def test_manifest_small_labs_have_one_replica_and_no_front_door():
    (replica,) = lab.render_manifest(2, "vllm", VLLM_ASSETS)["serving"]["vllm"]
    assert replica["nodes"] == ["lab-head", "lab-w1"]
    assert "operations" not in lab.render_manifest(2, "vllm", VLLM_ASSETS)
    assert "operations" not in lab.render_manifest(10, "none", {})


def test_manifest_llama_cluster():
    manifest = lab.render_manifest(3, "llama", LLAMA_ASSETS)
    assert manifest["serving"]["llama_cpp"] == [{"coordinator": "lab-head", "workers": ["lab-w1", "lab-w2"]}]
    assert manifest["vars"]["llama_cpp_source"] == LLAMA_ASSETS["source"]
    assert manifest["vars"]["llama_server_model_checksum"] == LLAMA_ASSETS["model_checksum"]


@pytest.mark.parametrize("serving", ["vllm", "llama"])
def test_manifest_serving_needs_two_hosts(serving):
    with pytest.raises(SystemExit, match="needs --hosts 2"):
        lab.render_manifest(1, serving, VLLM_ASSETS if serving == "vllm" else LLAMA_ASSETS)


def test_image_tag_is_stable(recipe):
    tag = lab.image_tag()
    assert tag.startswith(lab.IMAGE_REPO + ":")
    assert len(tag.split(":", 1)[1]) == 12
    assert lab.image_tag() == tag


def test_image_tag_follows_packages_file(recipe):
    packages, _setup = recipe
    before = lab.image_tag()
    packages.write_text(packages.read_text() + "iproute2\n")
    changed = lab.image_tag()
    assert changed != before
    packages.write_text("# comment\nsystemd\npython3\n")
    assert lab.image_tag() == before


def test_image_tag_follows_setup_script(recipe):
    _packages, setup = recipe
    before = lab.image_tag()
    setup.write_text(setup.read_text() + "systemctl mask getty.target\n")
    assert lab.image_tag() != before


def test_image_tag_of_the_real_recipe_is_stable():
    assert lab.image_tag() == lab.image_tag()


def test_recipe_packages_skips_comments_and_blank_lines(recipe):
    packages, _setup = recipe
    packages.write_text("# header\n\nsystemd\n   \n  # indented comment\n  python3  \ndbus\n")
    assert lab.recipe_packages() == ["systemd", "python3", "dbus"]


def test_recipe_packages_of_the_real_recipe():
    packages = lab.recipe_packages()
    assert "python3" in packages
    assert all(package and not package.startswith("#") for package in packages)


LLAMA_ASSETS = {
    "source": "/cache/src/llama_cpp_python-0.3.36.tar.gz",
    "checksum": "sha256:" + "a" * 64,
    "model": "/cache/models/tiny-llama-abc.gguf",
    "model_checksum": "sha256:" + "b" * 64,
    "artifacts": "/cache/llama.cpp",
}


def test_the_site_layout_is_a_pp2_replica_a_one_node_tp2_replica_and_a_llama_cluster():
    manifest = lab.render_manifest(10, "site", {**VLLM_ASSETS, "llama": LLAMA_ASSETS})
    pp, tp = manifest["serving"]["vllm"]
    assert (pp["replica"], pp["nodes"], tp["replica"], tp["nodes"]) == ("pp", ["lab-head", "lab-w1"], "tp", ["lab-w2"])
    assert (pp["vars"]["vllm_pipeline_parallel_size"], pp["vars"]["vllm_tensor_parallel_size"]) == (2, 1)
    assert (tp["vars"]["vllm_pipeline_parallel_size"], tp["vars"]["vllm_tensor_parallel_size"]) == (1, 2)
    # TP runs eagerly with torch.compile off; PP compiles with the eager backend.
    assert tp["vars"]["vllm_args"]["enforce-eager"] is True
    assert "compilation-config" not in tp["vars"]["vllm_args"]
    assert pp["vars"]["vllm_args"]["compilation-config"] == {"mode": 2, "backend": "eager"}
    assert manifest["serving"]["llama_cpp"] == [{"coordinator": "lab-w3", "workers": ["lab-w4", "lab-w5"]}]
    assert manifest["vars"]["llama_server_model_src"] == LLAMA_ASSETS["model"]
    envs = [s.get("vars", {}).get("vllm_env") for s in servers(manifest)[:4]]
    unpinned = {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}
    assert envs == [unpinned, unpinned, {**unpinned, "TORCH_COMPILE_DISABLE": "1"}, None]
    assert manifest["operations"] == {"frontends": ["lab-w9"], "prometheus": ["lab-w9"]}
    with pytest.raises(SystemExit, match="the site layout is 10 hosts"):
        lab.render_manifest(4, "site", {**VLLM_ASSETS, "llama": LLAMA_ASSETS})


def fake_process(proc_root, pid, cgroup_lines, ticks):
    """A /proc/PID with its cgroup file and a stat line whose utime, stime, cutime, cstime are ticks."""
    where = proc_root / str(pid)
    where.mkdir(parents=True)
    (where / "cgroup").write_text("\n".join(cgroup_lines) + "\n")
    # The command name may hold spaces and parentheses; the fields count from the last ')'.
    head = f"{pid} (python3 (x) y) S 1 {pid} {pid} 0 -1 4194560 100 0 0 0 "
    (where / "stat").write_text(head + " ".join(str(t) for t in ticks) + " 20 0 1 0 100 0 0\n")


def test_container_cpu_splits_a_host_by_systemd_unit(tmp_path, monkeypatch):
    monkeypatch.setattr(lab.os, "sysconf", lambda name: 100)
    cid = "c0ffee"
    usage = tmp_path / "cg" / "cpuacct" / "docker" / cid / "cpuacct.usage"
    usage.parent.mkdir(parents=True)
    usage.write_text(f"{int(30e9)}\n")  # 30 s
    proc = tmp_path / "proc"
    unit = f"9:name=systemd:/docker/{cid}/system.slice/gpufleet-vllm-pp.service"
    fake_process(proc, 10, ["12:cpuacct:/docker/" + cid, unit], (500, 300, 100, 100))  # 10 s
    fake_process(proc, 11, ["12:cpuacct:/docker/" + cid, unit], (200, 0, 0, 0))  # 2 s more, same unit
    fake_process(proc, 12, [f"0::/docker/{cid}/system.slice/ssh.service"], (600, 200, 0, 0))  # 8 s
    fake_process(proc, 13, ["9:name=systemd:/docker/other/init.scope"], (9999, 0, 0, 0))  # another host
    (proc / "self").mkdir()
    result = lab.container_cpu(cid, proc_root=proc, cgroup_root=tmp_path / "cg")
    assert result == {
        "total_s": 30.0,
        "units_s": {"gpufleet-vllm-pp.service": 12.0, "ssh.service": 8.0, "other": 10.0},
    }
