"""The built collection installs into a clean virtual environment and its playbooks run by FQCN
from there (scripts/installed_collection.py), with neither the checkout nor the test
environment's `ansible` bundle on the collection path."""

import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "installed_collection.py"
COLLECTIONS = REPO / "build" / "installed-collections"
INSTALLED = COLLECTIONS / "ansible_collections" / "gpufleet" / "inference"
VENV_BIN = REPO / "build" / "installed-venv" / "bin"
OK_LINE = re.compile(
    r"^installed_collection: syntax ok: gpufleet\.inference\.(\w+)(?: \(with [^)]+\))? -> (\S+)$", re.M
)


def load_script():
    """scripts/installed_collection.py, imported as a module from its folder."""
    if str(SCRIPT.parent) not in sys.path:
        sys.path.insert(0, str(SCRIPT.parent))
    return importlib.import_module(SCRIPT.stem)


@pytest.fixture(scope="module")
def check_output():
    """What the stage runs: build, install into the clean venv, syntax-check every playbook by FQCN."""
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def installed_env(check_output):
    """The environment `installed_collection.py env` tells a caller to use."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "env"], cwd=REPO, capture_output=True, text=True, check=True)
    env = {"HOME": str(Path.home())}
    for line in proc.stdout.splitlines():
        if line.startswith("export "):
            key, value = line.removeprefix("export ").split("=", 1)
            (env[key],) = shlex.split(value)
    assert "PYTHONPATH" not in env
    return env


def test_installed_tree_is_a_copy_with_the_galaxy_version(check_output):
    manifest = json.loads((INSTALLED / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert not INSTALLED.is_symlink() and INSTALLED.resolve() == INSTALLED, "the installed copy links into the checkout"
    assert not (INSTALLED / "tests").exists() and not (INSTALLED / "molecule").exists(), "not the built artifact"


def test_every_playbook_passes_its_syntax_check_by_fqcn_from_the_installed_copy(check_output):
    expected = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml") if re.fullmatch(r"[a-z_][a-z0-9_]*", p.stem))
    checked = dict(OK_LINE.findall(check_output))
    assert sorted(checked) == expected, check_output
    elsewhere = {name: path for name, path in checked.items() if path != str(INSTALLED / "playbooks" / f"{name}.yml")}
    assert not elsewhere, f"FQCNs resolved outside the installed copy: {elsewhere}"


def test_the_environment_sees_only_the_installed_copy(installed_env, tmp_path):
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-galaxy"), "collection", "list", "--format", "json"],
        cwd=tmp_path,
        env=installed_env,
        capture_output=True,
        text=True,
        check=True,
    )
    listed = json.loads(proc.stdout)
    # ansible-core's own internal collection (ansible._protomatter) lives in its package.
    others = {path: sorted(cols) for path, cols in listed.items() if "/ansible/_internal/" not in path}
    assert others == {str(COLLECTIONS / "ansible_collections"): ["gpufleet.inference"]}, others
    proc = subprocess.run(
        [str(VENV_BIN / "ansible"), "--version"],
        cwd=tmp_path,
        env=installed_env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"config file = {installed_env['ANSIBLE_CONFIG']}" in proc.stdout, proc.stdout
    assert f"executable location = {VENV_BIN / 'ansible'}" in proc.stdout, proc.stdout


def test_the_check_names_the_playbook_that_fails(check_output, tmp_path, monkeypatch, capsys):
    """A copy of the installed tree with one playbook that needs a module of the `ansible` bundle
    (there from the checkout, not from the installed copy): the check fails and names it."""
    module = load_script()
    copy = tmp_path / "ansible_collections" / "gpufleet" / "inference"
    shutil.copytree(INSTALLED, copy)
    for playbook in (copy / "playbooks").glob("*.yml"):
        if playbook.stem != "plan":
            playbook.unlink()
    (copy / "playbooks" / "needs_posix.yml").write_text(
        "---\n- name: Set a sysctl\n  hosts: localhost\n  tasks:\n"
        "    - name: Set it\n      ansible.posix.sysctl:\n        name: net.core.somaxconn\n        value: '1024'\n"
    )
    monkeypatch.setattr(module, "COLLECTIONS", tmp_path)
    monkeypatch.setattr(module, "INSTALLED", copy)
    monkeypatch.setattr(module, "install", lambda _bindir: None)
    monkeypatch.setattr(module, "NEEDS", {})
    assert module.check(None) == 1
    out = capsys.readouterr().out
    assert "syntax check FAILED (rc=4): gpufleet.inference.needs_posix" in out, out
    assert "syntax ok: gpufleet.inference.plan" in out, out
    assert "1 of 2 playbooks fail from the installed copy: needs_posix" in out, out


def test_the_collections_a_playbook_is_declared_to_need_are_needed(check_output):
    """NEEDS is no blanket: each playbook it names fails from the installed copy alone, on one of
    the collections it names."""
    module = load_script()
    assert module.NEEDS, "no playbook declared to need another collection: drop this test"
    for name, needed in module.NEEDS.items():
        rc, output, _resolved = module.syntax_check(VENV_BIN, [name])
        assert rc != 0, f"{name} passes without {needed}: drop it from NEEDS"
        assert any(fqcn in output for fqcn in needed), output


def test_a_playbook_runs_from_the_installed_copy(check_output, tmp_path):
    """A real run by FQCN, not only a syntax check: monitoring's first play runs on localhost."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "playbook", "--unchanged", "monitoring", "-i", "localhost,", "-c", "local"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"^localhost\s+: ok=1\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout, re.M), proc.stdout
    assert "gpufleet.inference.monitoring from the installed copy changed nothing" in proc.stdout


def test_an_unclean_recap_is_named():
    module = load_script()
    clean = "PLAY RECAP ***\nnode1 : ok=3    changed=0    unreachable=0    failed=0    skipped=1\n"
    assert module.recap_problems(clean) == []
    assert module.recap_problems("PLAY RECAP ***\n") == ["no PLAY RECAP with a host: the run played against no host"]
    changed = clean + "node2 : ok=3    changed=1    unreachable=0    failed=0    skipped=1\n"
    assert module.recap_problems(changed) == ["node2: changed=1 unreachable=0 failed=0"]
    down = clean + "node3 : ok=0    changed=0    unreachable=1    failed=0    skipped=0\n"
    assert module.recap_problems(down) == ["node3: changed=0 unreachable=1 failed=0"]


def test_the_topology_inventory_plugin_runs_from_the_installed_copy(installed_env, tmp_path):
    """The inventory plugin and netaddr come from the installed copy and its venv: the shipped
    manifest gives the same hosts and groups there as in the checkout."""
    manifest = Path("inventories") / "cluster-80x5090"
    installed = subprocess.run(
        [str(VENV_BIN / "ansible-inventory"), "-i", str(INSTALLED / manifest), "--list"],
        cwd=tmp_path,
        env=installed_env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    checkout = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(REPO / manifest), "--list"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    got, expected = json.loads(installed.stdout), json.loads(checkout.stdout)
    assert got["_meta"]["hostvars"], "the installed copy's topology plugin made no host"
    assert sorted(got["_meta"]["hostvars"]) == sorted(expected["_meta"]["hostvars"])
    assert sorted(got) == sorted(expected)
