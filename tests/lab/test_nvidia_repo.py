# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build the lab's fake NVIDIA apt repositories once and check them with the real tools.

gpgv checks the signatures, apt-get (in a private configuration, simulating only) resolves the
dependency structure, and the stand-in programs run out of `dpkg-deb -x` trees. Nothing touches the
host's apt or dpkg state, so the tests also run as non-root.
"""

import base64
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "lab" / "nvidia_repo.py"
CUDA = Path("cuda/repos/debian12/x86_64")
CTK = Path("libnvidia-container/stable/deb/amd64")
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
NVCC_12_8 = (
    "nvcc: NVIDIA (R) Cuda compiler driver\n"
    "Copyright (c) 2005-2025 NVIDIA Corporation\n"
    "Built on Fri_Feb_21_20:23:50_PST_2025\n"
    "Cuda compilation tools, release 12.8, V12.8.93\n"
    "Build cuda_12.8.r12.8/compiler.35583870_0\n"
)

pytestmark = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in ("dpkg-deb", "gpg", "gpgv", "apt-get", "update-alternatives")),
    reason="needs a Debian host with dpkg-deb, gpg, gpgv, apt-get and update-alternatives",
)


def run(argv, **kwargs):
    return subprocess.run([str(arg) for arg in argv], capture_output=True, text=True, check=False, **kwargs)


def build(out):
    result = run([sys.executable, SCRIPT, out])
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("nvidia-repo") / "out"
    return out, build(out).stdout


@pytest.fixture(scope="session")
def repo(built):
    return built[0]


@pytest.fixture(scope="session")
def debs(repo, tmp_path_factory):
    """Return a function that extracts a package with dpkg-deb -x (once) and gives its root."""
    base = tmp_path_factory.mktemp("debs")

    def extract(repo_dir, filename):
        dest = base / filename
        if not dest.exists():
            result = run(["dpkg-deb", "-x", repo / repo_dir / filename, dest])
            assert result.returncode == 0, result.stderr
        return dest

    return extract


def stanzas(text):
    """Parse a deb822 file (Packages) into dicts; continuation lines are dropped."""
    parsed = []
    for block in text.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(" "))
        parsed.append(fields)
    return parsed


def packages(repo, repo_dir):
    return stanzas((repo / repo_dir / "Packages").read_text())


def dearmor(armored):
    lines = armored.strip().splitlines()
    body = lines[lines.index("") + 1 : -1]
    return base64.b64decode("".join(line for line in body if not line.startswith("=")))


@pytest.fixture(scope="session")
def keys(repo, debs, tmp_path_factory):
    """The CUDA keyring as shipped by cuda-keyring, and the container toolkit key (binary and armored)."""
    keydir = tmp_path_factory.mktemp("keys")
    cuda = debs(CUDA, "cuda-keyring_1.1-1_all.deb") / "usr/share/keyrings/cuda-archive-keyring.gpg"
    armored = (repo / "libnvidia-container/gpgkey").read_text()
    ctk = keydir / "nvidia-container-toolkit-keyring.gpg"
    ctk.write_bytes(dearmor(armored))
    asc = keydir / "nvidia-container-toolkit-keyring.asc"
    asc.write_text(armored)
    return {"cuda": cuda, "ctk": ctk, "ctk_asc": asc}


def gpgv(keyring, *files, home):
    return run(["gpgv", "--keyring", keyring, *files], env=dict(os.environ, GNUPGHOME=str(home)))


# --- build and signatures ---------------------------------------------------------------------------------


def test_cli_prints_one_line_per_repository_with_count_and_fingerprint(built):
    lines = built[1].splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"cuda/repos/debian12/x86_64: 32 packages, key [0-9A-F]{40}", lines[0])
    assert re.fullmatch(r"libnvidia-container/stable/deb/amd64: 6 packages, key [0-9A-F]{40}", lines[1])
    assert lines[0][-40:] != lines[1][-40:]


@pytest.mark.parametrize("signed", [("InRelease",), ("Release.gpg", "Release")], ids=["InRelease", "Release.gpg"])
def test_cuda_release_verifies_with_keyring_from_cuda_keyring_deb(repo, keys, signed, tmp_path):
    good = gpgv(keys["cuda"], *(repo / CUDA / name for name in signed), home=tmp_path)
    assert good.returncode == 0, good.stderr
    wrong = gpgv(keys["ctk"], *(repo / CUDA / name for name in signed), home=tmp_path)
    assert wrong.returncode != 0


def test_container_toolkit_release_verifies_with_published_gpgkey_only(repo, keys, tmp_path):
    assert gpgv(keys["ctk"], repo / CTK / "InRelease", home=tmp_path).returncode == 0
    assert gpgv(keys["ctk"], repo / CTK / "Release.gpg", repo / CTK / "Release", home=tmp_path).returncode == 0
    assert gpgv(keys["cuda"], repo / CTK / "InRelease", home=tmp_path).returncode != 0


@pytest.mark.parametrize("repo_dir", [CUDA, CTK], ids=["cuda", "libnvidia-container"])
def test_indexes_match_the_files(repo, repo_dir):
    base = repo / repo_dir
    entries = packages(repo, repo_dir)
    assert sorted(entry["Filename"] for entry in entries) == sorted(f"./{p.name}" for p in base.glob("*.deb"))
    for entry in entries:
        data = (base / entry["Filename"]).read_bytes()
        assert int(entry["Size"]) == len(data)
        assert entry["MD5sum"] == hashlib.md5(data).hexdigest()
        assert entry["SHA256"] == hashlib.sha256(data).hexdigest()
        assert entry["Description"].endswith("(gpufleet lab test package)")
    assert gzip.decompress((base / "Packages.gz").read_bytes()) == (base / "Packages").read_bytes()
    release = (base / "Release").read_text()
    for name in ("Packages", "Packages.gz"):
        data = (base / name).read_bytes()
        assert f" {hashlib.sha256(data).hexdigest()} {len(data):>8} {name}\n" in release


def test_no_fake_package_depends_on_dkms_or_other_debian_packages(repo):
    names = {entry["Package"] for repo_dir in (CUDA, CTK) for entry in packages(repo, repo_dir)}
    provided = {"nvidia-kernel-dkms-any"}
    for repo_dir in (CUDA, CTK):
        for entry in packages(repo, repo_dir):
            for dep in filter(None, re.split(r"\s*[,|]\s*", entry.get("Depends", ""))):
                assert dep.split()[0] in names | provided, f"{entry['Package']} depends on {dep}"


def test_package_contents_are_deterministic(repo, tmp_path):
    build(tmp_path / "again")
    for repo_dir in (CUDA, CTK):
        for deb in (repo / repo_dir).glob("*.deb"):
            if deb.name != "cuda-keyring_1.1-1_all.deb":  # carries the per-build key
                assert (tmp_path / "again" / repo_dir / deb.name).read_bytes() == deb.read_bytes(), deb.name


def test_builder_refuses_to_empty_a_foreign_directory(tmp_path):
    (tmp_path / "precious").write_text("keep me")
    result = run([sys.executable, SCRIPT, tmp_path])
    assert result.returncode != 0
    assert "not removing it" in result.stderr
    assert (tmp_path / "precious").exists()


def test_cuda_keyring_ships_the_real_source_list(debs):
    root = debs(CUDA, "cuda-keyring_1.1-1_all.deb")
    assert (root / "etc/apt/sources.list.d/cuda-debian12-x86_64.list").read_text() == (
        "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n"
    )


# --- apt resolves the dependency structure ----------------------------------------------------------------


class Apt:
    """apt-get with private sources, preferences, state and cache; the host's apt setup is not read."""

    def __init__(self, root, sources):
        self.root = root
        for sub in ("sources.list.d", "preferences.d", "apt.conf.d", "trusted.gpg.d", "state", "cache", "log"):
            (root / sub).mkdir(parents=True)
        (root / "sources.list").write_text("".join(f"{line}\n" for line in sources))
        (root / "status").write_text("")
        # APT_CONFIG is read before apt.conf.d, so this keeps the host's apt.conf.d out.
        (root / "apt.conf").write_text(f'Dir::Etc::main "/dev/null";\nDir::Etc::parts "{root / "apt.conf.d"}";\n')
        self.options = {
            "Dir::Etc::sourcelist": root / "sources.list",
            "Dir::Etc::sourceparts": root / "sources.list.d",
            "Dir::Etc::preferences": root / "preferences",
            "Dir::Etc::preferencesparts": root / "preferences.d",
            "Dir::Etc::trusted": root / "trusted.gpg",
            "Dir::Etc::trustedparts": root / "trusted.gpg.d",
            "Dir::State": root / "state",
            "Dir::State::status": root / "status",
            "Dir::Cache": root / "cache",
            "Dir::Log": root / "log",
            "APT::Architecture": "amd64",
            "APT::Architectures": "amd64",
            "Acquire::Languages": "none",
            "Debug::NoLocking": "true",
        }
        if os.geteuid() == 0:
            # The _apt sandbox user cannot read pytest's 0700 temporary directories.
            self.options["APT::Sandbox::User"] = "root"

    def __call__(self, *args):
        argv = ["apt-get", "-q"]
        for key, value in self.options.items():
            argv += ["-o", f"{key}={value}"]
        env = dict(os.environ, APT_CONFIG=str(self.root / "apt.conf"), LC_ALL="C")
        return run([*argv, *args], env=env)

    def prefer(self, name=None, text=None):
        for old in (self.root / "preferences.d").iterdir():
            old.unlink()
        if name:
            (self.root / "preferences.d" / name).write_text(text)

    def simulate(self, *packages):
        """Return {package: version} that `apt-get -s install` would install."""
        result = self("-s", "install", *packages)
        assert result.returncode == 0, result.stdout + result.stderr
        return dict(re.findall(r"^Inst (\S+) \((\S+) ", result.stdout, re.MULTILINE))


@pytest.fixture(scope="session")
def apt(repo, keys, tmp_path_factory):
    root = tmp_path_factory.mktemp("apt")
    apt = Apt(
        root,
        [
            f"deb [signed-by={keys['cuda']}] file:{repo / CUDA}/ /",
            f"deb [signed-by={keys['ctk_asc']}] file:{repo / CTK}/ /",
        ],
    )
    result = apt("update")
    assert result.returncode == 0, result.stdout + result.stderr
    assert not re.search(r"^(W|E):", result.stdout + result.stderr, re.MULTILINE), result.stdout + result.stderr
    return apt


@pytest.fixture
def unpinned(apt):
    apt.prefer()
    yield apt
    apt.prefer()


def test_apt_refuses_the_cuda_repository_signed_by_another_key(repo, keys, tmp_path):
    apt = Apt(tmp_path / "apt", [f"deb [signed-by={keys['ctk']}] file:{repo / CUDA}/ /"])
    result = apt("update")
    assert result.returncode != 0
    assert "NO_PUBKEY" in result.stdout + result.stderr


DRIVER_PARTS = ("nvidia-open", "nvidia-driver", "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced")


def test_nvidia_open_without_pin_takes_the_newest_branch(unpinned):
    assert unpinned.simulate("nvidia-open") == dict.fromkeys(DRIVER_PARTS, "580.105.08-1")


def test_nvidia_open_metapackage_is_unbounded_like_the_real_one(unpinned):
    # Asking for the 555 metapackage still drags in 580 sub-packages: why the role must pin.
    chosen = unpinned.simulate("nvidia-open=555.42.06-1")
    assert chosen["nvidia-open"] == "555.42.06-1"
    assert chosen["nvidia-driver"] == "580.105.08-1"


def test_nvidia_open_follows_the_pinning_package_preferences(apt, debs):
    pin = debs(CUDA, "nvidia-driver-pinning-570_570-1_all.deb") / "etc/apt/preferences.d/nvidia-driver-pinning-570"
    apt.prefer(pin.name, pin.read_text())
    try:
        assert apt.simulate("nvidia-open") == dict.fromkeys(DRIVER_PARTS, "570.195.03-1")
        assert set(apt.simulate("cuda-drivers-570").values()) == {"570.195.03-1"}
    finally:
        apt.prefer()


def test_cuda_toolkit_pulls_no_driver(unpinned):
    assert unpinned.simulate("cuda-toolkit-12-8") == {"cuda-toolkit-12-8": "12.8.1-1", "cuda-nvcc-12-8": "12.8.93-1"}
    both = unpinned.simulate("cuda-toolkit-12-5", "cuda-toolkit-12-8")
    assert not [name for name in both if name.startswith("nvidia-")]


def test_cuda_metapackage_pulls_the_proprietary_driver(unpinned):
    chosen = unpinned.simulate("cuda")
    assert chosen["cuda"] == "12.8.1-1"
    assert chosen["cuda-drivers"] == chosen["nvidia-kernel-dkms"] == chosen["nvidia-driver"] == "580.105.08-1"
    assert "nvidia-kernel-open-dkms" not in chosen


def test_container_toolkit_resolves_from_its_own_repository(unpinned):
    assert unpinned.simulate("nvidia-container-toolkit") == dict.fromkeys(
        (
            "nvidia-container-toolkit",
            "nvidia-container-toolkit-base",
            "libnvidia-container-tools",
            "libnvidia-container1",
        ),
        "1.17.8-1",
    )
    assert unpinned.simulate("nvidia-docker2")["nvidia-docker2"] == "2.14.0-1"


# --- what the packages ship -------------------------------------------------------------------------------


def test_etc_files_are_conffiles(repo, debs, tmp_path):
    for repo_dir, filename, path in (
        (CUDA, "cuda-keyring_1.1-1_all.deb", "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"),
        (CUDA, "nvidia-driver-pinning-580_580-1_all.deb", "/etc/apt/preferences.d/nvidia-driver-pinning-580"),
        (CTK, "nvidia-docker2_2.14.0-1_all.deb", "/etc/docker/daemon.json"),
    ):
        control = tmp_path / filename
        assert run(["dpkg-deb", "-e", repo / repo_dir / filename, control]).returncode == 0
        assert (control / "conffiles").read_text().split() == [path]
    daemon = json.loads((debs(CTK, "nvidia-docker2_2.14.0-1_all.deb") / "etc/docker/daemon.json").read_text())
    assert daemon == {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}


def test_nvidia_smi_and_persistenced_fail_like_without_a_driver(debs):
    smi = run([debs(CUDA, "nvidia-driver-cuda_580.105.08-1_amd64.deb") / "usr/bin/nvidia-smi"])
    assert (smi.returncode, smi.stdout) == (9, NO_DRIVER + "\n")
    root = debs(CUDA, "nvidia-persistenced_580.105.08-1_amd64.deb")
    daemon = run([root / "usr/bin/nvidia-persistenced", "--user", "nvidia-persistenced"])
    assert daemon.returncode == 1
    assert daemon.stderr == "nvidia-persistenced failed to initialize. Check syslog for more details.\n"
    unit = (root / "lib/systemd/system/nvidia-persistenced.service").read_text()
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced\n" in unit


def test_nvcc_prints_the_real_version_text(debs):
    nvcc = run([debs(CUDA, "cuda-nvcc-12-8_12.8.93-1_amd64.deb") / "usr/local/cuda-12.8/bin/nvcc", "--version"])
    assert (nvcc.returncode, nvcc.stdout) == (0, NVCC_12_8)
    older = run([debs(CUDA, "cuda-nvcc-12-5_12.5.82-1_amd64.deb") / "usr/local/cuda-12.5/bin/nvcc", "-V"])
    assert "Cuda compilation tools, release 12.5, V12.5.82\n" in older.stdout


def test_cuda_toolkits_install_side_by_side_and_share_the_alternatives(repo, tmp_path):
    """Unpack both compilers into one root and run their maintainer scripts against it."""
    root = tmp_path / "root"
    (root / "var/lib/dpkg/alternatives").mkdir(parents=True)
    (root / "etc/alternatives").mkdir(parents=True)
    shim = tmp_path / "bin" / "update-alternatives"
    shim.parent.mkdir()
    real = shutil.which("update-alternatives")
    shim.write_text(f'#!/bin/sh\nexec {real} --root "{root}" --log "{tmp_path}/alternatives.log" "$@"\n')
    shim.chmod(0o755)
    env = dict(os.environ, PATH=f"{shim.parent}:{os.environ['PATH']}")
    scripts = {}
    for series, version in (("12.5", "12.5.82-1"), ("12.8", "12.8.93-1")):
        deb = repo / CUDA / f"cuda-nvcc-{series.replace('.', '-')}_{version}_amd64.deb"
        assert run(["dpkg-deb", "-x", deb, root]).returncode == 0
        assert run(["dpkg-deb", "-e", deb, tmp_path / series]).returncode == 0
        scripts[series] = tmp_path / series
        postinst = run([scripts[series] / "postinst", "configure"], env=env)
        assert postinst.returncode == 0, postinst.stderr

    def current(name):
        return os.readlink(root / "etc/alternatives" / name)

    assert current("cuda") == current("cuda-12") == "/usr/local/cuda-12.8"
    assert os.readlink(root / "usr/local/cuda") == "/etc/alternatives/cuda"
    prerm = run([scripts["12.8"] / "prerm", "remove"], env=env)
    assert prerm.returncode == 0, prerm.stderr
    assert current("cuda") == current("cuda-12") == "/usr/local/cuda-12.5"


# --- the nvidia-ctk stand-in ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def ctk(debs):
    return debs(CTK, "nvidia-container-toolkit-base_1.17.8-1_amd64.deb") / "usr/bin/nvidia-ctk"


@pytest.fixture
def daemon_json(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_text('{"log-driver": "journald"}\n')
    return path


NVIDIA_RUNTIME = {"args": [], "path": "nvidia-container-runtime"}


def test_ctk_is_packaged_for_the_hosts_python3(ctk):
    # The source says "env python" for ansible-test's shebang rule; lab hosts only have python3.
    assert ctk.read_text().splitlines()[0] == "#!/usr/bin/python3"


def test_ctk_configure_merges_the_runtime_and_keeps_other_keys(ctk, daemon_json):
    result = run([ctk, "runtime", "configure", "--runtime=docker", f"--config={daemon_json}"])
    assert result.returncode == 0, result.stderr
    assert json.loads(daemon_json.read_text()) == {"log-driver": "journald", "runtimes": {"nvidia": NVIDIA_RUNTIME}}
    assert daemon_json.read_text().startswith('{\n    "log-driver": "journald",\n    "runtimes": {\n')
    assert result.stderr.splitlines() == [
        f"INFO[0000] Loading config from {daemon_json}",
        f"INFO[0000] Wrote updated config to {daemon_json}",
        "INFO[0000] It is recommended that docker daemon be restarted.",
    ]


def test_ctk_configure_set_as_default(ctk, daemon_json):
    result = run([ctk, "runtime", "configure", "--runtime", "docker", "--config", daemon_json, "--set-as-default"])
    assert result.returncode == 0, result.stderr
    config = json.loads(daemon_json.read_text())
    assert config["default-runtime"] == "nvidia"
    assert config["runtimes"] == {"nvidia": NVIDIA_RUNTIME}


def test_ctk_configure_dry_run_prints_and_writes_nothing(ctk, daemon_json):
    before = daemon_json.read_text()
    result = run([ctk, "runtime", "configure", "--runtime=docker", f"--config={daemon_json}", "--dry-run"])
    assert result.returncode == 0, result.stderr
    assert daemon_json.read_text() == before
    assert json.loads(result.stdout) == {"log-driver": "journald", "runtimes": {"nvidia": NVIDIA_RUNTIME}}


@pytest.mark.parametrize("content", [None, ""], ids=["missing", "empty"])
def test_ctk_configure_starts_from_nothing(ctk, tmp_path, content):
    path = tmp_path / "docker" / "daemon.json"
    if content is not None:
        path.parent.mkdir()
        path.write_text(content)
    result = run([ctk, "runtime", "configure", "--runtime=docker", f"--config={path}"])
    assert result.returncode == 0, result.stderr
    assert json.loads(path.read_text()) == {"runtimes": {"nvidia": NVIDIA_RUNTIME}}


def test_ctk_version_and_unknown_commands(ctk):
    version = run([ctk, "--version"])
    assert version.returncode == 0
    assert version.stdout.splitlines() == [
        "NVIDIA Container Toolkit CLI version 1.17.8",
        "commit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
    ]
    assert run([ctk, "cdi", "generate"]).returncode == 1
    assert run([ctk, "runtime", "configure", "--runtime=containerd"]).returncode == 1
    assert run([ctk, "runtime", "configure", "--bogus"]).returncode == 1
