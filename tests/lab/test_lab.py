# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the pure functions of scripts/lab.py; nothing here starts docker or runs a command."""

import importlib.util
from pathlib import Path

import pytest
import yaml

LAB_PY = Path(__file__).resolve().parents[2] / "scripts" / "lab.py"


def load_lab():
    # scripts/ is not a package, so load lab.py from its path under a private name.
    spec = importlib.util.spec_from_file_location("gpufleet_lab_script", LAB_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


lab = load_lab()

HOSTS = {"lab-head": "172.30.90.2", "lab-w1": "172.30.90.3", "lab-w2": "172.30.90.4"}
ASSETS = {
    "source": "/cache/src/llama_cpp_python-0.3.36.tar.gz",
    "checksum": "sha256:" + "a" * 64,
    "model": "/cache/models/tiny.gguf",
    "model_checksum": "sha256:" + "b" * 64,
    "artifacts": "/cache/llama.cpp",
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


def test_render_inventory_groups():
    inventory = yaml.safe_load(lab.render_inventory(HOSTS, ASSETS))
    root = inventory["all"]
    assert root["vars"]["ansible_connection"] == "community.docker.docker"
    groups = root["children"]
    assert sorted(groups) == ["fabric_nodes", "lab", "llama_coordinator", "llama_rpc_workers"]
    assert groups["lab"]["hosts"] == {name: {"gpufleet_fabric_address": address} for name, address in HOSTS.items()}
    assert groups["fabric_nodes"] == {"children": {"lab": None}}
    assert list(groups["llama_coordinator"]["hosts"]) == ["lab-head"]
    assert sorted(groups["llama_rpc_workers"]["hosts"]) == ["lab-w1", "lab-w2"]


def test_render_inventory_fabric_vars():
    root = yaml.safe_load(lab.render_inventory(HOSTS, ASSETS))["all"]
    assert root["vars"]["gpufleet_fabric_subnet"] == lab.SUBNET
    assert root["vars"]["gpufleet_fabric_mtu"] == lab.MTU


def test_render_inventory_llama_vars():
    root = yaml.safe_load(lab.render_inventory(HOSTS, ASSETS))["all"]
    assert root["vars"]["llama_cpp_source"] == ASSETS["source"]
    assert root["vars"]["llama_cpp_cache_dir"] == ASSETS["artifacts"]
    assert root["vars"]["llama_server_model_src"] == ASSETS["model"]
    assert root["vars"]["llama_server_model_checksum"] == ASSETS["model_checksum"]


def test_render_inventory_single_host():
    text = lab.render_inventory({"lab-head": "172.30.90.2"}, ASSETS)
    groups = yaml.safe_load(text)["all"]["children"]
    assert list(groups["lab"]["hosts"]) == ["lab-head"]
    assert list(groups["llama_coordinator"]["hosts"]) == ["lab-head"]
    assert not groups["llama_rpc_workers"]["hosts"]
    assert isinstance(groups["llama_rpc_workers"]["hosts"], (dict, type(None)))


def test_render_inventory_is_stable():
    assert lab.render_inventory(HOSTS, ASSETS) == lab.render_inventory(dict(HOSTS), ASSETS)
    assert lab.render_inventory(HOSTS, ASSETS).endswith("\n")


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
