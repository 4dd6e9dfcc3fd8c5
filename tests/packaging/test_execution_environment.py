"""The execution environment: execution-environment.yml is ansible-builder v3, and the build
context that `ansible-builder create` writes (scripts/ee_build_context.py) installs ansible-core
and ansible-runner at the pins, this collection from its current artifact and nothing from Galaxy,
and the collection's Python and system requirements. No image is built: no registry is reachable,
so the galaxy stage and the builder stage's introspection run here on the context itself."""

import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ee_build_context.py"
CONTEXT = REPO / "build" / "ee-context"
BUILD_FILES = CONTEXT / "_build"
EE_VENV_PYTHON = REPO / "build" / "ee-venv" / "bin" / "python"
GALAXY = REPO / "build" / "installed-venv" / "bin" / "ansible-galaxy"
# https://docs.ansible.com/projects/builder/en/stable/definition/ (version 3 format)
TOP_LEVEL_KEYS = {
    "version",
    "images",
    "dependencies",
    "additional_build_files",
    "additional_build_steps",
    "build_arg_defaults",
    "options",
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(path):
    """{normalised name: version} of the name==version lines of a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        match = PIN.match(line.strip())
        if match:
            found[re.sub(r"[-_.]+", "-", match[1]).lower()] = match[2]
    return found


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def definition():
    return yaml.safe_load((REPO / "execution-environment.yml").read_text())


@pytest.fixture(scope="module")
def context():
    """What the stage runs: build the artifact and `ansible-builder create` into build/ee-context."""
    proc = subprocess.run([sys.executable, str(SCRIPT)], cwd=REPO, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return CONTEXT


def test_definition_is_schema_v3_with_the_seven_keys_only():
    ee = definition()
    assert ee["version"] == 3, "without version: 3 ansible-builder reads the file as version 1"
    unknown = sorted(set(ee) - TOP_LEVEL_KEYS)
    assert not unknown, f"execution-environment.yml: top-level keys ansible-builder 3 does not know: {unknown}"
    name = ee["images"]["base_image"]["name"]
    assert isinstance(name, str), name
    assert ":" in name.rsplit("/", 1)[-1], f"base image {name} carries no tag"
    assert not name.endswith(":latest"), f"base image {name}: pin a tag, not latest"


def test_definition_pins_ansible_core_and_runner_as_the_controller_does():
    deps = definition()["dependencies"]
    core = pins(REPO / "requirements.txt")["ansible-core"]
    runner = pins(REPO / "constraints.txt")["ansible-runner"]
    assert deps["ansible_core"]["package_pip"] == f"ansible-core=={core}"
    assert deps["ansible_runner"]["package_pip"] == f"ansible-runner=={runner}"


def test_python_requirements_are_the_controller_pins_of_what_plugins_import():
    ee_pins = pins(REPO / "meta" / "ee-requirements.txt")
    controller = pins(REPO / "requirements.txt")
    differ = {name: (v, controller.get(name)) for name, v in ee_pins.items() if controller.get(name) != v}
    assert not differ, f"meta/ee-requirements.txt pins (ee, requirements.txt) differ: {differ}"
    imported = {
        match[1]
        for path in (REPO / "plugins").rglob("*.py")
        for match in re.finditer(r"^\s*(?:import|from)\s+(netaddr|jinja2)\b", path.read_text(), re.M)
    }
    missing = sorted(imported - set(ee_pins))
    assert not missing, f"plugins import {missing}, which meta/ee-requirements.txt does not install"


def test_containerfile_installs_ansible_core_and_runner_at_the_pins(context):
    containerfile = (context / "Containerfile").read_text()
    deps = definition()["dependencies"]
    refs = f'ARG ANSIBLE_INSTALL_REFS="{deps["ansible_core"]["package_pip"]} {deps["ansible_runner"]["package_pip"]}"'
    assert refs in containerfile.splitlines(), f"{refs} not in the Containerfile"
    assert "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS" in containerfile


def test_containerfile_installs_the_collection_from_the_copied_tarball(context):
    containerfile = (context / "Containerfile").read_text()
    assert "COPY _build /build\nWORKDIR /build\n" in containerfile
    install = [line for line in containerfile.splitlines() if "ansible-galaxy collection install" in line]
    assert len(install) == 1 and "-r requirements.yml" in install[0], install
    requirements = yaml.safe_load((BUILD_FILES / "requirements.yml").read_text())
    assert set(requirements) == {"collections"}, f"the EE asks Galaxy for more than this collection: {requirements}"
    (entry,) = requirements["collections"]
    assert entry["type"] == "file", entry
    assert (BUILD_FILES / entry["name"]).is_file(), f"{entry['name']} is not in the context's _build/"


def test_context_python_and_bindep_requirements_are_the_repository_files(context):
    assert (BUILD_FILES / "requirements.txt").read_text() == (REPO / "meta" / "ee-requirements.txt").read_text()
    assert (BUILD_FILES / "bindep.txt").read_text() == (REPO / "bindep.txt").read_text()
    containerfile = (context / "Containerfile").read_text()
    assert "COPY _build/requirements.txt requirements.txt" in containerfile
    assert "COPY _build/bindep.txt bindep.txt" in containerfile


def test_context_tarball_is_the_current_build_of_the_checkout(context):
    (entry,) = yaml.safe_load((BUILD_FILES / "requirements.yml").read_text())["collections"]
    with tarfile.open(BUILD_FILES / entry["name"]) as tar:
        manifest = json.load(tar.extractfile("MANIFEST.json"))
        files = json.load(tar.extractfile("FILES.json"))["files"]
    galaxy = yaml.safe_load((REPO / "galaxy.yml").read_text())
    info = manifest["collection_info"]
    identity = ("namespace", "name", "version")
    assert [info[key] for key in identity] == [galaxy[key] for key in identity]
    shipped = [f for f in files if f["ftype"] == "file"]
    assert shipped, "FILES.json lists no file"
    stale = [f["name"] for f in shipped if sha256(REPO / f["name"]) != f["chksum_sha256"]]
    assert not stale, f"the context's artifact is not the checkout's current build: {stale[:10]}"


def galaxy_stage_commands(containerfile):
    """The galaxy stage's ansible-galaxy commands, with the Containerfile's ARG defaults filled in."""
    args = dict(re.findall(r'^ARG (\w+)="([^"]*)"$', containerfile, re.M))
    stage = containerfile.split("FROM base AS galaxy", 1)[1].split("\nFROM ", 1)[0]
    commands = []
    for line in stage.splitlines():
        if "ansible-galaxy " in line:
            command = re.sub(r"\$(\w+)", lambda m: args.get(m[1], m[0]), line.removeprefix("RUN "))
            commands.append(shlex.split(command))
    return commands


def test_galaxy_stage_installs_this_collection_offline_and_nothing_else(context, tmp_path):
    """The galaxy stage's commands, from the Containerfile, on a copy of _build/ (its /build)."""
    commands = galaxy_stage_commands((context / "Containerfile").read_text())
    assert [c[c.index("ansible-galaxy") + 1] for c in commands] == ["role", "collection"], commands
    assert "--offline" in commands[1], f"the galaxy stage may contact Galaxy: {commands[1]}"
    build = tmp_path / "build"
    shutil.copytree(BUILD_FILES, build)
    share = tmp_path / "share"
    env = {"PATH": f"{GALAXY.parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(share / "collections")
    for command in commands:
        # KEY=VALUE words before the command become its environment; /usr/share/ansible is the share here.
        at = command.index("ansible-galaxy")
        argv = [str(GALAXY), *(a.replace("/usr/share/ansible", str(share)) for a in command[at + 1 :])]
        step_env = dict(env, **dict(word.split("=", 1) for word in command[:at]))
        proc = subprocess.run(argv, cwd=build, env=step_env, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    installed = sorted(str(p.relative_to(share)) for p in share.glob("collections/ansible_collections/*/*"))
    assert installed == ["collections/ansible_collections/gpufleet/inference"], installed
    assert not (share / "roles").exists() or not any((share / "roles").iterdir())
    manifest = json.loads((share / installed[0] / "MANIFEST.json").read_text())
    assert manifest["collection_info"]["version"] == yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]


def test_builder_stage_requirements_agree_and_cover_the_controller_side(context, tmp_path):
    """The builder stage's introspection (the context's own introspect.py) over the installed
    collection plus the user files: one version per Python package, or pip fails in the image."""
    share = tmp_path / "share"
    proc = subprocess.run(
        [str(GALAXY), "collection", "install", "-r", "requirements.yml", "--collections-path", str(share)],
        cwd=BUILD_FILES,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": str(share)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    pip_out, bindep_out = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    proc = subprocess.run(
        [
            str(EE_VENV_PYTHON),
            str(BUILD_FILES / "scripts" / "introspect.py"),
            "introspect",
            str(share),
            f"--user-pip={BUILD_FILES / 'requirements.txt'}",
            f"--user-bindep={BUILD_FILES / 'bindep.txt'}",
            f"--write-pip={pip_out}",
            f"--write-bindep={bindep_out}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    versions = {}
    for line in pip_out.read_text().splitlines():
        match = PIN.match(line)
        assert match, f"unpinned Python requirement in the EE: {line}"
        versions.setdefault(match[1].lower(), set()).add(match[2])
    conflicts = {name: sorted(v) for name, v in versions.items() if len(v) > 1}
    assert not conflicts, f"the EE's Python requirements pin one package twice: {conflicts}"
    assert {"netaddr", "jinja2"} <= set(versions), versions
    system = bindep_out.read_text()
    for package in ("openssh-clients [platform:rpm]", "openssl [platform:rpm]"):
        assert package in system, f"{package} is not among the EE's system packages:\n{system}"
