"""The gpufleet lab: Debian 12 systemd containers that play GPU servers.

    lab.py engine            install docker.io/debootstrap when missing, start dockerd
    lab.py image             build (or reuse) the cached debootstrap base image; prints its tag
    lab.py up [--hosts N]    start lab-head, lab-w1 ... on an MTU 9000 network, write the inventory
    lab.py status            show what the lab runs
    lab.py down [--purge]    remove what `up` created (containers, network, inventory);
                             --purge also drops the cached base image and rootfs tarball

Everything the lab creates carries the docker label gpufleet.lab=1, and `down` removes only
objects with that label, so the lab never touches other containers on the machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RECIPE_DIR = REPO / "scripts" / "lab"
PACKAGES_FILE = RECIPE_DIR / "base-image.packages"
SETUP_SCRIPT = RECIPE_DIR / "base-image-setup.sh"
INVENTORY = REPO / "inventories" / "lab" / "hosts.yml"

IMAGE_REPO = "gpufleet-lab-base"
LATEST = f"{IMAGE_REPO}:latest"
LABEL = "gpufleet.lab"
NETWORK = "gpufleet-lab"
SUBNET = "172.30.90.0/24"
MTU = 9000
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
CACHE_DIR = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))
DOCKERD_LOG = Path("/var/log/gpufleet-lab-dockerd.log")

# What a systemd container needs here, where --privileged is refused (DESIGN.md section 5).
SYSTEMD_RUN_ARGS = [
    "--cgroupns=host",
    "-v",
    "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs",
    "/run",
    "--tmpfs",
    "/run/lock",
    "--tmpfs",
    "/tmp",
    "--security-opt",
    "seccomp=unconfined",
    "--security-opt",
    "apparmor=unconfined",
    "--cap-add",
    "SYS_ADMIN",
    "--cap-add",
    "NET_ADMIN",
    "--stop-signal",
    "SIGRTMIN+3",
]


def log(msg: str) -> None:
    print(f"lab: {msg}", file=sys.stderr, flush=True)


def run(argv: list[str], check: bool = True, capture: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, text=True, capture_output=capture, check=False, **kw)
    if check and proc.returncode != 0:
        detail = (proc.stderr or proc.stdout or "").strip() if capture else ""
        raise SystemExit(f"lab: command failed (rc={proc.returncode}): {' '.join(argv)}\n{detail}")
    return proc


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return run(["docker", *args], check=check)


# --- engine -------------------------------------------------------------------------------


def engine_running() -> bool:
    if not shutil.which("docker"):
        return False
    return run(["docker", "info", "--format", "{{.ServerVersion}}"], check=False).returncode == 0


def ensure_packages() -> None:
    missing = [
        pkg
        for pkg, binary in (("docker.io", "dockerd"), ("debootstrap", "debootstrap"))
        if not shutil.which(binary) and not Path("/usr/sbin", binary).exists()
    ]
    if not missing:
        return
    if os.geteuid() != 0:
        raise SystemExit(f"lab: {', '.join(missing)} missing and not root: install them with apt-get")
    log(f"installing {' '.join(missing)}")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", *missing], env=env)


def ensure_engine() -> None:
    ensure_packages()
    if engine_running():
        return
    log(f"starting dockerd (log: {DOCKERD_LOG})")
    with open(DOCKERD_LOG, "ab") as out:
        subprocess.Popen(
            ["dockerd"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
    for _attempt in range(120):
        if engine_running():
            return
        time.sleep(0.5)
    raise SystemExit(f"lab: dockerd did not answer within 60 s; see {DOCKERD_LOG}")


# --- image --------------------------------------------------------------------------------


def recipe_packages() -> list[str]:
    lines = PACKAGES_FILE.read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def image_tag() -> str:
    digest = hashlib.sha256()
    for part in (SUITE, MIRROR, PACKAGES_FILE.read_bytes(), SETUP_SCRIPT.read_bytes()):
        digest.update(part if isinstance(part, bytes) else part.encode())
    return f"{IMAGE_REPO}:{digest.hexdigest()[:12]}"


def image_exists(tag: str) -> bool:
    return docker("image", "inspect", tag, check=False).returncode == 0


def build_rootfs_tarball(tarball: Path) -> None:
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpufleet-lab-rootfs-", dir=CACHE_DIR) as tmp:
        root = Path(tmp) / "root"
        log(f"debootstrap {SUITE} into {root} (a few minutes, once per recipe)")
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(recipe_packages())}", SUITE, str(root), MIRROR],
            capture=False,
        )
        shutil.copy(SETUP_SCRIPT, root / "tmp" / "setup.sh")
        run(["chroot", str(root), "/bin/sh", "/tmp/setup.sh"], capture=False)
        partial = tarball.with_suffix(".partial")
        run(["tar", "--numeric-owner", "-C", str(root), "-czf", str(partial), "."])
        partial.rename(tarball)


def ensure_image() -> str:
    tag = image_tag()
    if not image_exists(tag):
        tarball = CACHE_DIR / f"{tag.replace(':', '-')}.tar.gz"
        if not tarball.exists():
            build_rootfs_tarball(tarball)
        log(f"importing {tarball} as {tag}")
        changes = ["--change", 'CMD ["/sbin/init"]', "--change", "ENV container=docker"]
        run(["docker", "import", *changes, str(tarball), tag])
    # Molecule scenarios name the image by the stable tag; it follows the current recipe.
    docker("tag", tag, LATEST)
    # Stale tags of older recipes are the lab's own; drop them so the disk does not fill up.
    for line in docker("images", IMAGE_REPO, "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
        if line not in (tag, LATEST):
            docker("rmi", line, check=False)
    return tag


# --- hosts --------------------------------------------------------------------------------


def host_names(count: int) -> list[str]:
    if count < 1:
        raise SystemExit(f"lab: --hosts must be at least 1, got {count}")
    return ["lab-head"] + [f"lab-w{i}" for i in range(1, count)]


def ensure_network() -> None:
    proc = docker("network", "inspect", NETWORK, check=False)
    if proc.returncode == 0:
        labels = json.loads(proc.stdout)[0].get("Labels") or {}
        if labels.get(LABEL) != "1":
            raise SystemExit(f"lab: a docker network named {NETWORK} exists but is not the lab's; remove or rename it")
        return
    docker(
        "network",
        "create",
        "--driver",
        "bridge",
        "--subnet",
        SUBNET,
        "--opt",
        f"com.docker.network.driver.mtu={MTU}",
        "--label",
        f"{LABEL}=1",
        NETWORK,
    )


def container_state(name: str) -> dict | None:
    proc = docker("inspect", name, check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


def start_host(name: str, tag: str) -> None:
    state = container_state(name)
    if state is not None:
        if state["Config"]["Image"] == tag and state["State"]["Running"]:
            return
        docker("rm", "-f", name)
    docker(
        "run",
        "-d",
        "--name",
        name,
        "--hostname",
        name,
        "--network",
        NETWORK,
        "--label",
        f"{LABEL}=1",
        *SYSTEMD_RUN_ARGS,
        tag,
    )


def wait_for_systemd(name: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        proc = docker("exec", name, "systemctl", "is-system-running", check=False)
        state = proc.stdout.strip()
        if state in ("running", "degraded"):
            return state
        time.sleep(1)
    raise SystemExit(f"lab: systemd in {name} did not finish booting within {timeout:.0f} s (state: {state!r})")


def host_address(name: str) -> str:
    state = container_state(name)
    return state["NetworkSettings"]["Networks"][NETWORK]["IPAddress"]


def llama_assets() -> dict[str, str]:
    """The pinned llama.cpp source and the tiny lab model, from the lab cache (fetched once)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lab" / "llama_assets.py")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"lab: scripts/lab/llama_assets.py failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def render_inventory(hosts: dict[str, str], assets: dict[str, str]) -> str:
    """The lab inventory: every host on the fabric, the head coordinates, the workers serve."""
    head, *workers = hosts
    lines = [
        "---",
        "# Written by scripts/lab.py up; removed by lab.py down. Do not edit: it is regenerated.",
        "all:",
        "  vars:",
        "    ansible_connection: community.docker.docker",
        "    ansible_python_interpreter: /usr/bin/python3",
        "    gpufleet_fabric_interface: eth0",
        f"    gpufleet_fabric_subnet: {SUBNET}",
        f"    gpufleet_fabric_mtu: {MTU}",
        "    # llama.cpp from the lab cache, as an air-gapped site hands it over (docs/llama-rpc.md).",
        f"    llama_cpp_source: {assets['source']}",
        f"    llama_cpp_cache_dir: {assets['artifacts']}",
        f"    llama_server_model_src: {assets['model']}",
        f"    llama_server_model_checksum: {assets['model_checksum']}",
        "    llama_server_model_path: /var/lib/gpufleet/models/tiny-llama.gguf",
        "    llama_server_ctx_size: 512",
        "  children:",
        "    lab:",
        "      hosts:",
    ]
    for name, address in hosts.items():
        lines += [f"        {name}:", f"          gpufleet_fabric_address: {address}"]
    lines += ["    fabric_nodes:", "      children:", "        lab:"]
    lines += ["    llama_coordinator:", "      hosts:", f"        {head}:"]
    lines += ["    llama_rpc_workers:", "      hosts:"]
    lines += [f"        {name}:" for name in workers] or ["        {}"]
    return "\n".join(lines) + "\n"


def up(count: int) -> None:
    ensure_engine()
    tag = ensure_image()
    ensure_network()
    names = host_names(count)
    for name in names:
        start_host(name, tag)
    for name in names:
        log(f"{name}: systemd {wait_for_systemd(name)}")
    hosts = {name: host_address(name) for name in names}
    INVENTORY.parent.mkdir(parents=True, exist_ok=True)
    INVENTORY.write_text(render_inventory(hosts, llama_assets()))
    log(f"inventory written to {INVENTORY.relative_to(REPO)}")


def lab_containers() -> list[str]:
    if not engine_running():
        return []
    proc = docker("ps", "-a", "--filter", f"label={LABEL}=1", "--format", "{{.Names}}")
    return sorted(proc.stdout.split())


def down(purge: bool) -> None:
    for name in lab_containers():
        docker("rm", "-f", name)
    if engine_running():
        proc = docker("network", "ls", "--filter", f"label={LABEL}=1", "--format", "{{.Name}}")
        for net in proc.stdout.split():
            docker("network", "rm", net)
        if purge:
            for line in docker("images", IMAGE_REPO, "--format", "{{.Repository}}:{{.Tag}}").stdout.split():
                docker("rmi", line, check=False)
    if purge:
        for tarball in CACHE_DIR.glob(f"{IMAGE_REPO}-*.tar.gz"):
            tarball.unlink()
    INVENTORY.unlink(missing_ok=True)
    log("lab removed")


def status() -> int:
    if not engine_running():
        print("docker engine: not running")
        return 1
    tag = image_tag()
    print(f"base image: {tag} ({'present' if image_exists(tag) else 'not built'})")
    names = lab_containers()
    if not names:
        print("hosts: none")
        return 1
    for name in names:
        state = container_state(name)
        running = state["State"]["Status"]
        address = state["NetworkSettings"]["Networks"].get(NETWORK, {}).get("IPAddress", "-")
        print(f"{name}: {running} {address}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("engine")
    sub.add_parser("image")
    p_up = sub.add_parser("up")
    p_up.add_argument("--hosts", type=int, default=int(os.environ.get("LAB_HOSTS", "3")))
    sub.add_parser("status")
    p_down = sub.add_parser("down")
    p_down.add_argument("--purge", action="store_true")
    args = parser.parse_args(argv)

    if args.cmd == "engine":
        ensure_engine()
    elif args.cmd == "image":
        ensure_engine()
        print(ensure_image())
    elif args.cmd == "up":
        up(args.hosts)
    elif args.cmd == "status":
        return status()
    elif args.cmd == "down":
        down(args.purge)
    return 0


if __name__ == "__main__":
    sys.exit(main())
