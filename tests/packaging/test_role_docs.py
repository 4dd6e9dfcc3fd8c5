# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/role_docs.py --check (docs/role-docs.md): the repository passes, and a copy of one role
fails for each kind of drift between its README, defaults/main.yml and argument specs."""

import importlib
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "role_docs.py"
ROLE = "nvidia_driver"
# scripts/ is not a package: its folder goes on sys.path and the script is imported as a module.
sys.path.insert(0, str(SCRIPT.parent))
ROLE_DOCS = importlib.import_module(SCRIPT.stem)


@pytest.fixture
def role_docs(capsys):
    """Run the script's main() in this process (no interpreter start per case)."""

    def run(*args):
        returncode = ROLE_DOCS.main(list(args))
        out = capsys.readouterr()
        return SimpleNamespace(returncode=returncode, stdout=out.out, stderr=out.err)

    return run


@pytest.fixture
def roles(tmp_path):
    """A copy of one role with just the files the check reads."""
    source, copy = REPO / "roles" / ROLE, tmp_path / "roles" / ROLE
    for name in ("README.md", "defaults/main.yml", "meta/argument_specs.yml"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source / name, copy / name)
    return tmp_path / "roles"


def edit(path, old, new):
    text = path.read_text()
    assert old in text, f"{path} no longer holds {old!r}; pick another edit"
    path.write_text(text.replace(old, new, 1))


def test_the_repository_passes():
    """The lint stage's own command line."""
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "agree" in proc.stdout


def test_the_untouched_copy_passes(roles, role_docs):
    proc = role_docs("--check", "--roles", str(roles))
    assert proc.returncode == 0, proc.stderr


# Each drift: the file edited, the edit, and what the failure must say besides the role's name.
DRIFTS = {
    "readme_row_edited": (
        "README.md",
        "Seconds to wait for the host to come back after the reboot.",
        "Seconds to wait.",
        ["main: nvidia_driver_reboot_timeout: README.md row differs from the spec"],
    ),
    "readme_row_removed": (
        "README.md",
        "| `nvidia_driver_sysfs_root` |",
        "| `nvidia_driver_sysfs_path` |",
        ["nvidia_driver_sysfs_root: README.md lacks its row", "nvidia_driver_sysfs_path: README.md has a row the spec"],
    ),
    "defaults_var_missing_from_spec": (
        "defaults/main.yml",
        "nvidia_driver_reboot_timeout: 1800\n",
        "nvidia_driver_reboot_timeout: 1800\nnvidia_driver_reboot_delay: 5\n",
        ["nvidia_driver_reboot_delay: in defaults/main.yml but an option of no entry point"],
    ),
    "spec_option_missing_from_defaults": (
        "defaults/main.yml",
        "nvidia_driver_reboot_timeout: 1800\n",
        "",
        ["main.nvidia_driver_reboot_timeout: not in defaults/main.yml"],
    ),
    "default_mismatch": (
        "defaults/main.yml",
        "nvidia_driver_reboot_timeout: 1800",
        "nvidia_driver_reboot_timeout: 900",
        ["main.nvidia_driver_reboot_timeout: the spec's default, 1800, is not defaults/main.yml's 900"],
    ),
    "default_type_mismatch": (
        "defaults/main.yml",
        "nvidia_driver_reboot_timeout: 1800",
        "nvidia_driver_reboot_timeout: 1800.0",
        ["main.nvidia_driver_reboot_timeout: the spec's default, 1800, is not defaults/main.yml's 1800.0"],
    ),
    "templated_default_claimed_as_literal": (
        "defaults/main.yml",
        "nvidia_driver_reboot_timeout: 1800",
        'nvidia_driver_reboot_timeout: "{{ gpufleet_reboot_timeout | default(1800) }}"',
        ["main.nvidia_driver_reboot_timeout: defaults/main.yml computes it", "give the spec that expression verbatim"],
    ),
    "table_outside_markers": (
        "README.md",
        "Design notes:",
        "| variable | default |\n|---|---|\n| `nvidia_driver_branch` | `580` |\n\nDesign notes:",
        ["README.md has a hand-written variable table outside the role_docs markers"],
    ),
    "markers_removed": (
        "README.md",
        "<!-- END role_docs: main -->",
        "",
        ["README.md has no generated table for entry point 'main'"],
    ),
}


@pytest.mark.parametrize("drift", DRIFTS)
def test_each_drift_fails_naming_role_and_variable(roles, role_docs, drift):
    name, old, new, messages = DRIFTS[drift]
    edit(roles / ROLE / name, old, new)
    proc = role_docs("--check", "--roles", str(roles))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for message in messages:
        assert f"{ROLE}: " in proc.stderr and message in proc.stderr, proc.stderr


def test_write_regenerates_an_edited_table(roles, role_docs):
    readme = roles / ROLE / "README.md"
    original = readme.read_text()
    edit(readme, "Seconds to wait for the host to come back after the reboot.", "Seconds to wait.")
    proc = role_docs("--write", "--roles", str(roles))
    assert proc.returncode == 0, proc.stderr
    assert readme.read_text() == original
    assert role_docs("--check", "--roles", str(roles)).returncode == 0


def test_write_replaces_a_hand_written_table(roles, role_docs):
    """The migration path: a README with a hand-written table and no markers gets the generated block
    in the table's place, and the prose around it stays."""
    readme = roles / ROLE / "README.md"
    generated = readme.read_text()
    start, end = generated.index("<!-- BEGIN role_docs: main"), generated.index("<!-- END role_docs: main -->")
    end += len("<!-- END role_docs: main -->\n")
    hand = "| variable | default | meaning |\n|---|---|---|\n| `nvidia_driver_branch` | `580` | branch |\n"
    readme.write_text(generated[:start] + hand + generated[end:])
    assert role_docs("--check", "--roles", str(roles)).returncode == 1
    assert role_docs("--write", "--roles", str(roles)).returncode == 0
    assert readme.read_text() == generated


def test_a_computed_default_of_a_typed_option_needs_no_spec_default():
    # antsibull-docs refuses an expression as an int option's default; a str option keeps it.
    computed = "{{ x | default(9000) }}"
    assert ROLE_DOCS.computed_typed({"type": "int"}, computed)
    assert not ROLE_DOCS.computed_typed({"type": "str"}, computed)
    assert not ROLE_DOCS.computed_typed({"type": "int", "default": 1}, computed)
    assert not ROLE_DOCS.computed_typed({"type": "int"}, 9000)
    shown = ROLE_DOCS.with_computed({"main": {"options": {"mtu": {"type": "int"}}}}, {"mtu": computed})
    assert shown["main"]["options"]["mtu"]["default"] == computed
