"""Build a signed local apt repository that stands in for NVIDIA's, for lab containers without GPU or internet.

    python3 scripts/lab/nvidia_repo.py OUT_DIR [--distro debian12]

OUT_DIR is emptied and filled with two flat repositories (`deb URL /`, like NVIDIA's), meant to be served
with `python3 -m http.server` from one lab container to the others:

    OUT/cuda/repos/debian12/x86_64/              CUDA network repository mirror, signed with key K1
        cuda-keyring_1.1-1_all.deb               ships K1 and the cuda-debian12-x86_64.list source
    OUT/libnvidia-container/gpgkey               K2, armored (real: nvidia.github.io/libnvidia-container/gpgkey)
    OUT/libnvidia-container/stable/deb/amd64/    NVIDIA Container Toolkit repository mirror, signed with K2

The packages keep NVIDIA's names, versions and dependency structure (unbounded driver metapackages,
exact-version driver sub-packages, branch pinning packages, side-by-side CUDA toolkits), so the driver,
CUDA and container toolkit roles can be tested for real. What they install are small TEST STAND-INs from
scripts/lab/nvidia_repo/. Package contents are deterministic; the two signing keys are made per build.
Needs only python3 (stdlib), dpkg-deb and gpg; runs as root or not.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from email.utils import formatdate
from pathlib import Path

STANDINS = Path(__file__).resolve().parent / "nvidia_repo"
MARKER = ".gpufleet-nvidia-repo"
# Fixed timestamp for files inside the packages, so that a rebuild gives the same .deb files.
EPOCH = 1735689600  # 2025-01-01T00:00:00Z
LAB_NOTE = "(gpufleet lab test package)"
LONG_DESCRIPTION = "Stand-in built by gpufleet scripts/lab/nvidia_repo.py; not NVIDIA software."
CUDA_MAINTAINER = "cudatools <cudatools@nvidia.com>"
CTK_MAINTAINER = "NVIDIA CORPORATION <cudatools@nvidia.com>"
HOMEPAGE = "https://developer.nvidia.com/cuda-zone"
CTK_HOMEPAGE = "https://github.com/NVIDIA/nvidia-container-toolkit"

# Driver branches and their newest release in the CUDA repository. All three are real driver releases:
# 555.42.06 is the driver of CUDA 12.5.1, 570.195.03 and 580.105.08 are production branch updates.
DRIVERS = {"555": "555.42.06-1", "570": "570.195.03-1", "580": "580.105.08-1"}
# NVIDIA publishes nvidia-driver-pinning-<branch> packages from 570/580 on; older branches have none.
PINNED_BRANCHES = ("570", "580")


@dataclass(frozen=True)
class CudaRelease:
    """One CUDA toolkit release and the real `nvcc --version` text of its compiler."""

    version: str  # cuda-toolkit-X-Y package version
    nvcc_version: str  # cuda-nvcc-X-Y component version
    year: str
    built: str
    build: str


# `nvcc --version` of the CUDA 12.5.1 and 12.8.1 installers, as captured in public READMEs and logs
# (GitHub code search, e.g. "Cuda compilation tools, release 12.8, V12.8.93"). 12.5.1 ships nvcc 12.5.82;
# V12.5.40 (Built on Wed_Apr_17_19:19:55_PDT_2024, compiler.34177558_0) is the nvcc of 12.5.0.
CUDA_RELEASES = {
    "12.5": CudaRelease(
        "12.5.1-1", "12.5.82", "2024", "Thu_Jun__6_02:18:23_PDT_2024", "cuda_12.5.r12.5/compiler.34385749_0"
    ),
    "12.8": CudaRelease(
        "12.8.1-1", "12.8.93", "2025", "Fri_Feb_21_20:23:50_PST_2025", "cuda_12.8.r12.8/compiler.35583870_0"
    ),
}
CUDA_META = ("12.8.1-1", "12.8", "570.124.06")  # cuda: version, toolkit it pulls, minimum driver
# `nvidia-ctk --version` of 1.17.8 prints this commit.
CTK_VERSION = "1.17.8"
CTK_COMMIT = "f202b80a9b9d0db00d9b1d73c0128c8962c55f4d"


@dataclass
class Package:
    name: str
    version: str
    summary: str
    section: str
    arch: str = "amd64"
    maintainer: str = CUDA_MAINTAINER
    homepage: str = HOMEPAGE
    depends: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    # absolute path -> (content, mode)
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    conffiles: tuple[str, ...] = ()
    scripts: dict[str, str] = field(default_factory=dict)

    @property
    def filename(self) -> str:
        return f"{self.name}_{self.version}_{self.arch}.deb"

    def control(self) -> list[tuple[str, str]]:
        installed_kib = sum(-(-len(data) // 1024) for data, _mode in self.files.values()) or 1
        fields = [
            ("Package", self.name),
            ("Version", self.version),
            ("Architecture", self.arch),
            ("Maintainer", self.maintainer),
            ("Installed-Size", str(installed_kib)),
            ("Depends", ", ".join(self.depends)),
            ("Conflicts", ", ".join(self.conflicts)),
            ("Provides", ", ".join(self.provides)),
            ("Section", self.section),
            ("Priority", "optional"),
            ("Homepage", self.homepage),
            ("Description", f"{self.summary} {LAB_NOTE}\n {LONG_DESCRIPTION}"),
        ]
        return [(key, value) for key, value in fields if value]


def standin(name: str, **fields: str) -> tuple[bytes, int]:
    """Read a stand-in program and fill in its @FIELD@ placeholders."""
    text = (STANDINS / name).read_text()
    # The sources say "env python" (what ansible-test's shebang rule allows); the hosts have python3 only.
    if text.startswith("#!/usr/bin/env python\n"):
        text = "#!/usr/bin/python3\n" + text.split("\n", 1)[1]
    for key, value in fields.items():
        text = text.replace(f"@{key}@", value)
    left = re.search(r"@[A-Z_]+@", text)
    if left:
        raise SystemExit(f"nvidia_repo.py: stand-in {name} still has the placeholder {left.group()}")
    return text.encode(), 0o755


def text_file(text: str) -> tuple[bytes, int]:
    return text.encode(), 0o644


def sh_script(body: str) -> str:
    header = "#!/bin/sh\n# Maintainer script of a gpufleet lab test package (scripts/lab/nvidia_repo.py).\n"
    return f"{header}set -e\n\n{body}"


def upstream(version: str) -> str:
    return version.rsplit("-", 1)[0]


# --- CUDA repository ------------------------------------------------------------------------------------


def driver_packages(branch: str, version: str) -> list[Package]:
    """One driver release: exact-version (=) links between sub-packages, unbounded (>=) metapackages."""
    up = upstream(version)
    dkms_conf = text_file(
        "# gpufleet lab test package: marker only, there is no kernel module source here.\n"
        f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{up}"\nAUTOINSTALL="no"\n'
    )
    service = text_file(
        "# gpufleet lab test package: the stand-in daemon fails like the real one without a driver.\n"
        "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
        "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced\n"
        "ExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    # The real nvidia-kernel-*-dkms also Depend on dkms (and the kernel headers); the fakes must not,
    # because lab containers have no Debian archive to take dkms from, and nothing here is built.
    return [
        Package(
            "nvidia-kernel-open-dkms",
            version,
            "NVIDIA binary kernel module DKMS source (open GPU kernel modules)",
            "non-free/kernel",
            conflicts=("nvidia-kernel-dkms",),
            provides=(f"nvidia-kernel-dkms-any (= {version})",),
            files={f"/usr/src/nvidia-{up}/dkms.conf": dkms_conf},
        ),
        Package(
            "nvidia-kernel-dkms",
            version,
            "NVIDIA binary kernel module DKMS source (proprietary)",
            "non-free/kernel",
            conflicts=("nvidia-kernel-open-dkms",),
            provides=(f"nvidia-kernel-dkms-any (= {version})",),
            files={f"/usr/src/nvidia-{up}/dkms.conf": dkms_conf},
        ),
        Package(
            "nvidia-driver-cuda",
            version,
            "NVIDIA driver CUDA integration components",
            "non-free/libs",
            files={"/usr/bin/nvidia-smi": standin("nvidia-smi")},
        ),
        Package(
            "nvidia-persistenced",
            version,
            "daemon to maintain persistent software state in the NVIDIA driver",
            "non-free/utils",
            files={
                "/usr/bin/nvidia-persistenced": standin("nvidia-persistenced"),
                "/lib/systemd/system/nvidia-persistenced.service": service,
            },
        ),
        Package(
            "nvidia-driver",
            version,
            "NVIDIA metapackage",
            "non-free/x11",
            depends=(f"nvidia-driver-cuda (= {version})",),
        ),
        Package(
            "nvidia-open",
            version,
            "NVIDIA driver metapackage with open GPU kernel modules",
            "non-free/kernel",
            depends=(
                f"nvidia-driver (>= {up})",
                f"nvidia-kernel-open-dkms (>= {up})",
                f"nvidia-persistenced (>= {up})",
            ),
        ),
        Package(
            "cuda-drivers",
            version,
            "CUDA Driver meta-package, branch-agnostic",
            "multiverse/devel",
            depends=(f"nvidia-driver (>= {up})", f"nvidia-kernel-dkms (>= {up})", f"nvidia-persistenced (>= {up})"),
        ),
        Package(
            f"cuda-drivers-{branch}",
            version,
            f"CUDA Driver meta-package, branch-specific ({branch})",
            "multiverse/devel",
            depends=(f"cuda-drivers (>= {up})",),
        ),
    ]


def pinning_preferences(branch: str) -> str:
    return (
        f"# nvidia-driver-pinning-{branch}: keep the NVIDIA driver packages on the {branch} branch.\n"
        "# gpufleet lab test package, after NVIDIA's nvidia-driver-pinning-<branch> packages.\n"
        "Package: nvidia-* libnvidia-* cuda-drivers cuda-drivers-*\n"
        f"Pin: version {branch}.*\n"
        "Pin-Priority: 1000\n"
    )


def pinning_package(branch: str) -> Package:
    path = f"/etc/apt/preferences.d/nvidia-driver-pinning-{branch}"
    return Package(
        f"nvidia-driver-pinning-{branch}",
        f"{branch}-1",
        f"APT preferences that lock the NVIDIA driver packages to the {branch} branch",
        "multiverse/devel",
        arch="all",
        files={path: text_file(pinning_preferences(branch))},
        conffiles=(path,),
    )


def cuda_packages(series: str, release: CudaRelease) -> list[Package]:
    """cuda-toolkit-X-Y and its compiler; the compiler owns the cuda / cuda-12 alternatives."""
    dashed = series.replace(".", "-")
    prefix = f"/usr/local/cuda-{series}"
    priority = series.replace(".", "")
    nvcc = standin(
        "nvcc",
        YEAR=release.year,
        BUILT=release.built,
        RELEASE=series,
        NVCC_VERSION=release.nvcc_version,
        BUILD=release.build,
    )
    postinst = sh_script(
        'if [ "$1" = configure ]; then\n'
        f"    update-alternatives --install /usr/local/cuda cuda {prefix} {priority}\n"
        f"    update-alternatives --install /usr/local/cuda-12 cuda-12 {prefix} {priority}\n"
        "fi\n"
    )
    prerm = sh_script(
        'if [ "$1" = remove ] || [ "$1" = deconfigure ]; then\n'
        f"    update-alternatives --remove cuda {prefix}\n"
        f"    update-alternatives --remove cuda-12 {prefix}\n"
        "fi\n"
    )
    nvcc_version = f"{release.nvcc_version}-1"
    return [
        Package(
            f"cuda-nvcc-{dashed}",
            nvcc_version,
            f"CUDA nvcc {series}",
            "multiverse/devel",
            files={f"{prefix}/bin/nvcc": nvcc, f"{prefix}/lib64/.keep": text_file("")},
            scripts={"postinst": postinst, "prerm": prerm},
        ),
        Package(
            f"cuda-toolkit-{dashed}",
            release.version,
            f"CUDA Toolkit {series} meta-package",
            "multiverse/devel",
            depends=(f"cuda-nvcc-{dashed} (= {nvcc_version})",),
        ),
    ]


def cuda_repo_packages(distro: str, keyring: bytes) -> list[Package]:
    sources = f"/etc/apt/sources.list.d/cuda-{distro}-x86_64.list"
    packages = [
        Package(
            "cuda-keyring",
            "1.1-1",
            "GPG keyring for the CUDA repository",
            "multiverse/devel",
            arch="all",
            files={
                "/usr/share/keyrings/cuda-archive-keyring.gpg": (keyring, 0o644),
                sources: text_file(
                    "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] "
                    f"https://developer.download.nvidia.com/compute/cuda/repos/{distro}/x86_64/ /\n"
                ),
            },
            conffiles=(sources,),
        )
    ]
    for branch, version in DRIVERS.items():
        packages += driver_packages(branch, version)
    packages += [pinning_package(branch) for branch in PINNED_BRANCHES]
    for series, release in CUDA_RELEASES.items():
        packages += cuda_packages(series, release)
    version, series, driver = CUDA_META
    packages.append(
        Package(
            "cuda",
            version,
            "CUDA meta-package: toolkit and drivers",
            "multiverse/devel",
            depends=(
                f"cuda-toolkit-{series.replace('.', '-')} (>= {upstream(version)})",
                f"cuda-drivers (>= {driver})",
            ),
        )
    )
    return packages


# --- libnvidia-container repository -----------------------------------------------------------------------


def toolkit_packages() -> list[Package]:
    version = f"{CTK_VERSION}-1"
    fill = {"CTK_VERSION": CTK_VERSION, "CTK_COMMIT": CTK_COMMIT}
    # Like the real nvidia-docker2: a conffile that registers the runtime with docker.
    daemon_json = json.dumps(
        {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}, indent=4
    )

    def ctk(name: str, pkg_version: str, summary: str, **kwargs) -> Package:
        return Package(
            name,
            pkg_version,
            summary,
            "utils",
            maintainer=CTK_MAINTAINER,
            homepage=CTK_HOMEPAGE,
            **kwargs,
        )

    return [
        ctk(
            "nvidia-container-toolkit-base",
            version,
            "NVIDIA Container Toolkit Base",
            files={
                "/usr/bin/nvidia-ctk": standin("nvidia-ctk", **fill),
                "/usr/bin/nvidia-container-runtime": standin("nvidia-container-runtime", **fill),
            },
        ),
        ctk(
            "libnvidia-container1",
            version,
            "NVIDIA container runtime library",
            files={"/usr/share/doc/libnvidia-container1/README.lab": text_file(f"{LAB_NOTE} no library here.\n")},
        ),
        ctk(
            "libnvidia-container-tools",
            version,
            "NVIDIA container runtime library (command-line tools)",
            depends=(f"libnvidia-container1 (>= {version})",),
        ),
        ctk(
            "nvidia-container-toolkit",
            version,
            "NVIDIA Container toolkit",
            depends=(f"nvidia-container-toolkit-base (= {version})", f"libnvidia-container-tools (>= {version})"),
        ),
        ctk(
            "nvidia-docker2",
            "2.14.0-1",
            "NVIDIA Container Toolkit meta-package (legacy)",
            arch="all",
            depends=("nvidia-container-toolkit (>= 1.13.0-1)",),
            files={
                "/usr/bin/nvidia-docker": standin("nvidia-docker"),
                "/etc/docker/daemon.json": text_file(daemon_json + "\n"),
            },
            conffiles=("/etc/docker/daemon.json",),
        ),
        ctk(
            "nvidia-container-runtime",
            "3.14.0-1",
            "NVIDIA Container Toolkit meta-package (legacy)",
            arch="all",
            depends=("nvidia-container-toolkit (>= 1.14.0)",),
        ),
    ]


# --- building ---------------------------------------------------------------------------------------------


def run(argv: list[str], **kwargs) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, check=True, capture_output=True, **kwargs)
    except subprocess.CalledProcessError as error:
        raise SystemExit(
            f"nvidia_repo.py: {' '.join(argv)} failed with rc={error.returncode}:\n"
            f"{error.stderr.decode(errors='replace')}"
        ) from error


def build_deb(pkg: Package, work: Path, dest: Path) -> Path:
    root = work / pkg.name / pkg.version
    for path, (data, mode) in pkg.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)
    debian = root / "DEBIAN"
    debian.mkdir(parents=True)
    control = "".join(f"{key}: {value}\n" for key, value in pkg.control())
    (debian / "control").write_text(control)
    if pkg.conffiles:
        (debian / "conffiles").write_text("".join(f"{path}\n" for path in pkg.conffiles))
    for name, body in pkg.scripts.items():
        (debian / name).write_text(body)
        (debian / name).chmod(0o755)
    for directory, _dirs, files in os.walk(root):
        os.chmod(directory, 0o755)
        for name in (*files, "."):
            os.utime(os.path.join(directory, name), (EPOCH, EPOCH))
    for name in ("control", "conffiles"):
        if (debian / name).exists():
            (debian / name).chmod(0o644)
    out = dest / pkg.filename
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(EPOCH))
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(out)], env=env)
    return out


def digests(data: bytes) -> tuple[str, str]:
    return hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()


def write_index(repo: Path, packages: list[Package]) -> None:
    stanzas = []
    for pkg in sorted(packages, key=lambda p: (p.name, p.version)):
        data = (repo / pkg.filename).read_bytes()
        md5, sha256 = digests(data)
        fields = [item for item in pkg.control() if item[0] != "Description"]
        fields += [("Filename", f"./{pkg.filename}"), ("Size", str(len(data))), ("MD5sum", md5), ("SHA256", sha256)]
        fields += [item for item in pkg.control() if item[0] == "Description"]
        stanzas.append("".join(f"{key}: {value}\n" for key, value in fields))
    index = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(index)
    (repo / "Packages.gz").write_bytes(gzip.compress(index, mtime=EPOCH))


def write_release(repo: Path, origin: str, label: str) -> Path:
    now = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))
    lines = [
        f"Origin: {origin}",
        f"Label: {label}",
        "Architectures: amd64 all",
        f"Date: {formatdate(now, usegmt=True)}",
    ]
    entries = [(name, (repo / name).read_bytes()) for name in ("Packages", "Packages.gz")]
    for title, index in (("MD5Sum", 0), ("SHA256", 1)):
        lines.append(f"{title}:")
        lines += [f" {digests(data)[index]} {len(data):>8} {name}" for name, data in entries]
    release = repo / "Release"
    release.write_text("\n".join(lines) + "\n")
    return release


class Signer:
    """Ephemeral signing keys in a private GNUPGHOME; gone with the build."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.chmod(0o700)

    def gpg(self, *args: str) -> bytes:
        base = ["gpg", "--homedir", str(self.home), "--batch", "--no-tty", "--pinentry-mode", "loopback"]
        return run([*base, "--passphrase", "", *args]).stdout

    def new_key(self, uid: str) -> str:
        self.gpg("--quick-generate-key", uid, "ed25519", "sign", "never")
        listing = self.gpg("--with-colons", "--list-secret-keys", f"={uid}").decode()
        return next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))

    def sign(self, fpr: str, release: Path) -> None:
        common = ("--yes", "--local-user", f"{fpr}!", "--digest-algo", "SHA512")
        self.gpg(*common, "--clearsign", "--output", str(release.with_name("InRelease")), str(release))
        self.gpg(*common, "--armor", "--detach-sign", "--output", str(release.with_name("Release.gpg")), str(release))

    def close(self) -> None:
        # gpg started an agent for key generation; stop it before its socket directory goes away.
        subprocess.run(["gpgconf", "--homedir", str(self.home), "--kill", "all"], check=False, capture_output=True)


def publish(repo: Path, packages: list[Package], work: Path, signer: Signer, fpr: str, label: str) -> None:
    repo.mkdir(parents=True)
    for pkg in packages:
        build_deb(pkg, work, repo)
    write_index(repo, packages)
    signer.sign(fpr, write_release(repo, "NVIDIA", label))


def prepare_out(out: Path) -> None:
    """Empty OUT_DIR, but only if it is empty already or was made by this script."""
    if out.exists():
        if any(out.iterdir()) and not (out / MARKER).exists():
            raise SystemExit(f"nvidia_repo.py: {out} is not empty and was not built by this script; not removing it")
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / MARKER).write_text("Built by gpufleet scripts/lab/nvidia_repo.py; rebuilt from scratch on every run.\n")


def build(out: Path, distro: str = "debian12") -> list[tuple[str, int, str]]:
    """Build both repositories into out; return (path, package count, key fingerprint) per repository."""
    prepare_out(out)
    cuda_repo = out / "cuda" / "repos" / distro / "x86_64"
    ctk_repo = out / "libnvidia-container" / "stable" / "deb" / "amd64"
    with tempfile.TemporaryDirectory(prefix="nvrepo-") as tmp:
        work = Path(tmp) / "work"
        gnupghome = Path(tmp) / "g"
        gnupghome.mkdir()
        signer = Signer(gnupghome)
        try:
            k1 = signer.new_key("gpufleet lab CUDA repository (TEST KEY) <cuda@lab.gpufleet.invalid>")
            k2 = signer.new_key("gpufleet lab libnvidia-container repository (TEST KEY) <ctk@lab.gpufleet.invalid>")
            keyring = signer.gpg("--export", k1)
            cuda = cuda_repo_packages(distro, keyring)
            publish(cuda_repo, cuda, work, signer, k1, "NVIDIA CUDA")
            # NVIDIA publishes the key next to the packages too, named after its short key id.
            (cuda_repo / f"{k1[-8:].lower()}.pub").write_bytes(signer.gpg("--armor", "--export", k1))
            toolkit = toolkit_packages()
            publish(ctk_repo, toolkit, work, signer, k2, "NVIDIA Container Toolkit")
            (out / "libnvidia-container" / "gpgkey").write_bytes(signer.gpg("--armor", "--export", k2))
            (ctk_repo.parent / "nvidia-container-toolkit.list").write_text(
                "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
                "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
            )
        finally:
            signer.close()
    return [
        (str(cuda_repo.relative_to(out)), len(cuda), k1),
        (str(ctk_repo.relative_to(out)), len(toolkit), k2),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="output directory; emptied first")
    parser.add_argument("--distro", default="debian12", choices=["debian12"], help="CUDA repository distro path")
    args = parser.parse_args(argv)
    for tool in ("dpkg-deb", "gpg"):
        if shutil.which(tool) is None:
            parser.error(f"{tool} is required (Debian packages dpkg and gpg)")
    for path, count, fpr in build(args.out.resolve(), args.distro):
        print(f"{path}: {count} packages, key {fpr}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
