"""The gpufleet lab: Debian 12 systemd containers that play GPU servers.

    lab.py engine            install docker.io/debootstrap when missing, start dockerd
    lab.py image             build (or reuse) the cached debootstrap base image; prints its tag
    lab.py up [--hosts N] [--serving vllm|site|llama|none]
                             start lab-head, lab-w1 ... on a management network and an MTU 9000
                             fabric, reachable over SSH, and write inventories/lab/topology.yml
    lab.py status            show what the lab runs
    lab.py cpu [--output F]  the CPU seconds each host has used since it started, by systemd unit
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
# The lab inventory is a topology manifest, as a real cluster's is (docs/topology.md). The SSH
# key pair and known_hosts live under .cache/ (outside the inventory directory, which Ansible
# reads whole). Git ignores both.
LAB_DIR = REPO / "inventories" / "lab"
MANIFEST = LAB_DIR / "topology.yml"
SSH_DIR = REPO / ".cache" / "lab-ssh"
SSH_KEY = SSH_DIR / "id_ed25519"
KNOWN_HOSTS = SSH_DIR / "known_hosts"
REPORT_DIR = REPO / "fabric-report"
# The serving acceptance on the tiny model (docs/serving-acceptance.md): the chat preset scaled to
# 64-token prompts and 32 generated tokens (the replicas admit 512), a few requests per point, and
# targets that a healthy replica meets on a busy 2-core machine while a replica held to a sliver of
# a core (the lab stage's slowed-replica trial) misses by far.
SERVING_ACCEPTANCE = {
    "serving_acceptance_prompt_tokens": 64,
    "serving_acceptance_output_tokens": 32,
    "serving_acceptance_requests_per_concurrency": 2,
    "serving_acceptance_min_requests": 4,
    "serving_acceptance_ttft_ms": 5000,
    "serving_acceptance_tpot_ms": 1000,
    "serving_acceptance_report_dir": str(REPO / "serving-acceptance"),
}
GROUP_VARS = LAB_DIR / "group_vars"
TLS_DIR = REPO / ".cache" / "lab-tls"
FRONTDOOR_PORT = 8443

IMAGE_REPO = "gpufleet-lab-base"
LATEST = f"{IMAGE_REPO}:latest"
LABEL = "gpufleet.lab"
# Two networks, as on a real node: management (SSH, MTU 1500, eth0) and the fabric (a switch
# that carries jumbo frames, eth1 inside the hosts).
MGMT_NETWORK = "gpufleet-lab-mgmt"
MGMT_SUBNET = "172.30.89.0/24"
NETWORK = "gpufleet-lab"
SUBNET = "172.30.90.0/24"
MTU = 9000
FABRIC_INTERFACE = "eth1"
RACK_HOSTS = 5
# Not a secret: the lab's replica serves only inside the lab.
LAB_API_KEY = "lab-not-a-secret-key-0123456789"
# The lab stage's one deployment of the whole site (`up --hosts 10 --serving site`), which carries
# every proof that needs a real multi-host cluster (docs/testing.md): a PP=2 vLLM replica over two
# hosts, a TP=2 replica on one host (the flagship's shape: tensor parallel inside a node, pipeline
# parallel across nodes), a llama.cpp RPC cluster, a client host the replicas' APIs admit and one
# they do not (the port scans), and the front door with Prometheus on the last host.
SITE_HOSTS = ["lab-head"] + [f"lab-w{i}" for i in range(1, 10)]
SITE_LAYOUT = {
    "pp": ["lab-head", "lab-w1"],
    "tp": ["lab-w2"],
    "llama_coordinator": "lab-w3",
    "llama_workers": ["lab-w4", "lab-w5"],
    "api_client": ["lab-w6"],
    "outsider": ["lab-w7"],
    "nccl_operator": ["lab-w8"],
    "frontdoor": "lab-w9",
}
# The hosts that play a part in the lab's proofs (tests/site/), as groups beside the manifest.
SITE_GROUPS = LAB_DIR / "site_parts.yml"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
CACHE_DIR = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))
DOCKERD_LOG = Path("/var/log/gpufleet-lab-dockerd.log")

# What a systemd container needs here, where --privileged is refused (docs/lab.md).
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
    # vLLM's engine and workers talk through shared-memory ring buffers (160 MiB for the lab's
    # PP=2 replica); Docker's default /dev/shm is 64 MiB. A server's is half its RAM.
    "--shm-size",
    "1g",
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


def ensure_network(name: str, subnet: str, mtu: int) -> None:
    proc = docker("network", "inspect", name, check=False)
    if proc.returncode == 0:
        info = json.loads(proc.stdout)[0]
        if (info.get("Labels") or {}).get(LABEL) != "1":
            raise SystemExit(f"lab: a docker network named {name} exists but is not the lab's; remove or rename it")
        subnets = [c.get("Subnet") for c in (info.get("IPAM") or {}).get("Config") or []]
        if subnet not in subnets:
            raise SystemExit(f"lab: network {name} has {subnets}, not {subnet}; run lab.py down first")
        return
    docker(
        "network",
        "create",
        "--driver",
        "bridge",
        "--subnet",
        subnet,
        "--opt",
        f"com.docker.network.driver.mtu={mtu}",
        "--label",
        f"{LABEL}=1",
        name,
    )


def container_state(name: str) -> dict | None:
    proc = docker("inspect", name, check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


def start_host(name: str, tag: str, mgmt_address: str, fabric_address: str) -> bool:
    """Start one host on both networks with its manifest addresses; False when it already ran."""
    state = container_state(name)
    if state is not None:
        nets = state["NetworkSettings"]["Networks"]
        current = (nets.get(MGMT_NETWORK, {}).get("IPAddress"), nets.get(NETWORK, {}).get("IPAddress"))
        if state["Config"]["Image"] == tag and state["State"]["Running"] and current == (mgmt_address, fabric_address):
            return False
        docker("rm", "-f", name)
    docker(
        "run",
        "-d",
        "--name",
        name,
        "--hostname",
        name,
        "--network",
        MGMT_NETWORK,
        "--ip",
        mgmt_address,
        "--label",
        f"{LABEL}=1",
        *SYSTEMD_RUN_ARGS,
        tag,
    )
    docker("network", "connect", "--ip", fabric_address, NETWORK, name)
    return True


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


def fabric_interface_of(name: str, address: str) -> str:
    """The interface inside the host that carries its fabric address."""
    out = docker("exec", name, "ip", "-o", "-4", "address", "show").stdout
    for line in out.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3].split("/")[0] == address:
            return fields[1]
    raise SystemExit(f"lab: {name} has no interface with its fabric address {address}:\n{out}")


def prepare_host(name: str, fabric_address: str, public_key: str) -> str:
    """Make a fresh container look like a server before its fabric configuration; return its host key.

    Its fabric link starts at MTU 1500 on a switch (the bridge) that carries 9000, so the fabric
    layer changes it for real; the default route is the management network's; /proc/sys is
    writable for the namespace's own sysctls (host_tuning); root accepts the lab's key.
    """
    iface = fabric_interface_of(name, fabric_address)
    if iface != FABRIC_INTERFACE:
        raise SystemExit(f"lab: {name} carries its fabric address on {iface}, the manifest says {FABRIC_INTERFACE}")
    docker("exec", name, "ip", "link", "set", "dev", iface, "mtu", "1500")
    # Docker may route the default through whichever network it likes (here the fabric); on a
    # server it is the management network's, and the fabric link carries only its subnet.
    gateway = MGMT_SUBNET.rsplit(".", 1)[0] + ".1"
    docker("exec", name, "ip", "route", "replace", "default", "via", gateway, "dev", "eth0")
    docker("exec", name, "mount", "-o", "remount,rw", "/proc/sys")
    script = (
        "set -eu; install -d -m 0700 /root/.ssh; "
        f"printf '%s\\n' '{public_key}' > /root/.ssh/authorized_keys; chmod 0600 /root/.ssh/authorized_keys"
    )
    docker("exec", name, "sh", "-c", script)
    for _attempt in range(30):
        proc = docker("exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub", check=False)
        if proc.returncode == 0 and docker("exec", name, "systemctl", "is-active", "ssh", check=False).returncode == 0:
            return proc.stdout.strip()
        time.sleep(1)
    raise SystemExit(
        f"lab: sshd did not start in {name}: {docker('exec', name, 'systemctl', 'status', 'ssh', check=False).stdout}"
    )


def ensure_ssh_key() -> str:
    """The lab's client key pair (0600, under the ignored inventory directory); returns the public key."""
    SSH_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not SSH_KEY.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpufleet-lab", "-f", str(SSH_KEY)])
    return SSH_KEY.with_suffix(".pub").read_text().strip()


def helper_json(script: str) -> dict[str, str]:
    """Run a lab asset script (cached builds) and return the JSON it prints."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "lab" / script)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit(f"lab: scripts/lab/{script} failed:\n{proc.stderr}")
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        # Its standard output is the JSON alone; progress belongs on standard error.
        sys.exit(f"lab: scripts/lab/{script} printed more than its JSON on standard output:\n{proc.stdout[-2000:]}")


def render_manifest(count: int, serving: str, assets: dict[str, str]) -> dict:
    """The lab's topology manifest (plugin gpufleet.inference.topology).

    Two racks (leafs) under one spine; hosts fill rack 1 first, five per rack, so the addresses
    come from the manifest's allocation rule (rack id and slot), as on a real cluster. serving is
    vllm (a PP=2 replica on the first two hosts and, from four hosts on, a one-node replica on the
    third), site (the lab stage's one deployment of everything: SITE_LAYOUT), llama (a coordinator
    and its RPC workers) or none. From three hosts on, the last host is the front door and the
    Prometheus server (playbooks/operations.yml, monitoring.yml).
    """
    names = host_names(count)
    racks: list[dict] = []
    for index, name in enumerate(names):
        rack_id = index // RACK_HOSTS + 1
        if len(racks) < rack_id:
            racks.append({"name": f"r{rack_id}", "id": rack_id, "leaf": f"leaf{rack_id}", "servers": []})
        racks[-1]["servers"].append({"name": name, "slot": index % RACK_HOSTS + 1})
    manifest: dict = {
        "plugin": "gpufleet.inference.topology",
        "name": f"lab-{count}",
        "fabric": {
            "subnet": SUBNET,
            "interface": FABRIC_INTERFACE,
            "mtu": MTU,
            "host_offset": 10,
            "rack_size": 16,
            "max_racks": 8,
        },
        "management": {"subnet": MGMT_SUBNET, "host_offset": 10, "rack_size": 16},
        "spines": [{"name": "spine1", "id": 1}],
        "racks": racks,
        "vars": {
            "ansible_user": "root",
            "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_ssh_private_key_file": str(SSH_KEY),
            "ansible_ssh_common_args": f"-o UserKnownHostsFile={KNOWN_HOSTS} -o StrictHostKeyChecking=yes",
            # Fabric acceptance on a 2-core machine: short one-way tests and a best-pair bar loose
            # enough for CPU noise between veth pairs, far above a broken link (docs/lab.md).
            "fabric_validate_duration": 3,
            "fabric_validate_streams": 2,
            "fabric_validate_direction": "forward",
            "fabric_validate_min_line_fraction": 0,
            # 0.05: two vLLM replicas spin on the lab's two cores while the acceptance runs, and
            # one pair of a clean-clone run measured under 0.2 of the best; a dead link measures 0.
            "fabric_validate_min_best_fraction": 0.05,
            "fabric_validate_report_dir": str(REPORT_DIR),
            # 30 s plus 20 s per jumbo-checked peer (fabric_network): nine peers in the last batch.
            "fabric_network_revert_seconds": 240,
            # vLLM's CPU workers busy-poll for a second after each request they read, so the
            # default probes (the agent's completion and HAProxy's every 2 s) kept both lab cores
            # spinning with no client at all; with a completion every 20 s (agent) and 10 s
            # (HAProxy) the four workers of the site layout still took a quarter of a core between
            # them while no client ran (top over 20 s during the acceptance run). The lab
            # probes the API every 2 s (a dead engine is drained within seconds) and completes
            # every 60 s (agent) and 30 s (HAProxy; fastinter and downinter keep transitions quick).
            "health_agent_engine_deep_every": 30,
            "frontdoor_check_inter": "30s",
            # The ping mesh is every host to every other: at 100 ms, 900 probes a second over ten
            # hosts, for the whole stage. At 500 ms a lost link is still seen in 2.5 s (five lost
            # probes), far inside the link trial's 20 s outage.
            "health_agent_ping_interval_ms": 500,
            "health_agent_ping_timeout_ms": 500,
        },
    }
    if serving == "site":
        if count != len(SITE_HOSTS):
            raise SystemExit(f"lab: the site layout is {len(SITE_HOSTS)} hosts (SITE_LAYOUT), not --hosts {count}")
        site_serving(manifest, assets)
    elif serving == "vllm":
        if count < 2:
            raise SystemExit("lab: a vLLM PP=2 replica needs --hosts 2 or more")
        replicas = [{"replica": "lab", "nodes": names[:2], "vars": vllm_vars(assets)}]
        if count >= 4:
            replicas.append({"replica": "solo", "nodes": names[2:3], "vars": vllm_vars(assets, pipeline=1)})
        manifest["serving"] = {"vllm": replicas}
        # vLLM's CPU workers spin their OpenMP threads on every core they may use; on two cores
        # shared by three of them a restarting replica starves (minutes to start). One core each,
        # solo shares core 1 with the headless rank.
        servers = {server["name"]: server for rack in racks for server in rack["servers"]}
        for name, core in zip(names[:3], ("0", "1", "1")):
            servers[name]["vars"] = {"vllm_env": {"VLLM_CPU_OMP_THREADS_BIND": core}}
    elif serving == "llama":
        if count < 2:
            raise SystemExit("lab: a llama.cpp RPC cluster needs --hosts 2 or more")
        manifest["serving"] = {"llama_cpp": [{"coordinator": names[0], "workers": names[1:3]}]}
        manifest["vars"].update(llama_vars(assets))
    if count >= 3 and serving != "none":
        manifest["operations"] = {"frontends": names[-1:], "prometheus": names[-1:]}
    return manifest


def site_serving(manifest: dict, assets: dict) -> None:
    """The site layout's serving (SITE_LAYOUT): the two vLLM replicas and the llama.cpp cluster."""
    layout = SITE_LAYOUT
    manifest["serving"] = {
        "vllm": [
            {"replica": "pp", "nodes": layout["pp"], "vars": vllm_vars(assets)},
            {"replica": "tp", "nodes": layout["tp"], "vars": vllm_vars(assets, pipeline=1, tensor=2)},
        ],
        "llama_cpp": [{"coordinator": layout["llama_coordinator"], "workers": layout["llama_workers"]}],
    }
    # The coordinator is a replica behind the front door too: the same model name and key as the
    # vLLM replicas, on its fabric address (group_vars/llama_coordinator.yml).
    manifest["vars"].update(
        llama_vars(assets["llama"]), llama_server_api_key=LAB_API_KEY, llama_server_extra_args=["--alias", "tiny-llama"]
    )
    servers = {server["name"]: server for rack in manifest["racks"] for server in rack["servers"]}
    # One OpenMP thread per vLLM process and no binding: pinned to a core each, a restarting
    # replica's new EngineCore came up on the core of the other replica's busy-polling worker
    # and got 0.2 s of CPU in 4 minutes (docs/operations.md); unpinned, the kernel balances them.
    for name in layout["pp"] + layout["tp"]:
        servers[name]["vars"] = {"vllm_env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}}
    for name in layout["tp"]:
        # With TP > 1 even --enforce-eager compiles one function, which needs a C++ toolchain
        # and then kills the engine on its first request: torch.compile stays off.
        servers[name]["vars"]["vllm_env"]["TORCH_COMPILE_DISABLE"] = "1"


def vllm_vars(assets: dict[str, str], pipeline: int = 2, tensor: int = 1) -> dict:
    """A lab vLLM replica: the vllm-cpu build, the generated tiny model, PP=2 over the fabric (or
    one node, with tensor parallel ranks on that node)."""
    args = {
        "dtype": "float32",
        "max-model-len": 512,
        "max-num-seqs": 8,
        "kv-cache-memory-bytes": 134217728,
    }
    if tensor > 1:
        # torch.compile is off for TP (vllm_env above), so the replica runs eagerly.
        args["enforce-eager"] = True
    else:
        # PP > 1 with --enforce-eager dies on the first request on CPU; compilation mode 2
        # with the eager backend works (docs/lab.md).
        args["compilation-config"] = {"mode": 2, "backend": "eager"}
    return {
        "vllm_platform": "cpu",
        "vllm_version": "0.32.0",
        "vllm_wheelhouse_cache": str(Path(assets["wheelhouse"]).parent),
        "vllm_model_src": assets["model"],
        "vllm_model_checksum": assets["model_checksum"],
        "vllm_model_path": "/var/lib/gpufleet/models/tiny-llama",
        # The model lands once, on the play's first vLLM host, and the nodes fetch it from each
        # other; each PP=2 node holds only its stage's shards (docs/model-staging.md).
        "vllm_model_staging": "fanout",
        # The lab's model moves in seconds: a progress line every 2 s shows the polling at work.
        "vllm_model_stage_progress_interval": 2,
        "vllm_served_model_name": "tiny-llama",
        "vllm_pipeline_parallel_size": pipeline,
        "vllm_tensor_parallel_size": tensor,
        "vllm_api_key": LAB_API_KEY,
        "vllm_ready_timeout": 600,
        "vllm_shutdown_timeout": 5,
        "vllm_restart_ok": True,
        # The KV budget is given outright (kv-cache-memory-bytes), so the engine's KV blocks must
        # be exactly the capacity plan's (the smoke test compares them).
        "vllm_capacity_tolerance": 0,
        "vllm_args": args,
    }


def llama_vars(assets: dict[str, str]) -> dict:
    """llama.cpp from the lab cache, as an air-gapped site hands it over (docs/llama-rpc.md)."""
    return {
        "llama_cpp_source": assets["source"],
        "llama_cpp_cache_dir": assets["artifacts"],
        "llama_server_model_src": assets["model"],
        "llama_server_model_checksum": assets["model_checksum"],
        "llama_server_model_path": "/var/lib/gpufleet/models/tiny-llama.gguf",
        "llama_server_ctx_size": 512,
    }


def manifest_hosts() -> dict[str, dict]:
    """The hosts the written manifest gives, with their variables, read through the plugin itself."""
    proc = run([str(REPO / ".venv" / "bin" / "ansible-inventory"), "-i", str(MANIFEST), "--list"], cwd=REPO)
    # ansible-inventory writes values the plugin marks unsafe as {"__ansible_unsafe": value}.
    hostvars = json.loads(
        proc.stdout, object_hook=lambda obj: obj["__ansible_unsafe"] if set(obj) == {"__ansible_unsafe"} else obj
    )["_meta"]["hostvars"]
    return {name: hostvars[name] for name in sorted(hostvars, key=lambda n: (n != "lab-head", len(n), n))}


def yaml_dump(data: dict) -> str:
    import yaml  # noqa: PLC0415 - only `up` needs it, and it runs from the venv (make lab)

    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


def up(count: int, serving: str) -> None:
    ensure_engine()
    tag = ensure_image()
    ensure_network(MGMT_NETWORK, MGMT_SUBNET, 1500)
    ensure_network(NETWORK, SUBNET, MTU)
    assets: dict[str, str] = {}
    if serving in ("vllm", "site"):
        assets = helper_json("vllm_assets.py")
    if serving == "site":
        assets["llama"] = helper_json("llama_assets.py")
    elif serving == "llama":
        assets = helper_json("llama_assets.py")
    public_key = ensure_ssh_key()
    MANIFEST.parent.mkdir(parents=True, exist_ok=True)
    manifest = render_manifest(count, serving, assets)
    MANIFEST.write_text(
        "---\n# Written by scripts/lab.py up; removed by lab.py down. Do not edit: it is regenerated.\n"
        + yaml_dump(manifest)
    )
    hosts = manifest_hosts()
    write_group_vars(manifest, hosts, serving)
    if serving == "site":
        parts = {
            f"site_{part}": {"hosts": {name: {} for name in SITE_LAYOUT[part]}}
            for part in ("api_client", "outsider", "nccl_operator")
        }
        SITE_GROUPS.write_text(
            "---\n# Written by scripts/lab.py up --serving site: the hosts of the lab's proofs (tests/site/).\n"
            + yaml_dump({"all": {"children": parts}})
        )
    else:
        SITE_GROUPS.unlink(missing_ok=True)
    fresh = [
        name for name, hv in hosts.items() if start_host(name, tag, hv["ansible_host"], hv["gpufleet_fabric_address"])
    ]
    known = []
    for name, hv in hosts.items():
        log(f"{name}: systemd {wait_for_systemd(name)}")
        if name in fresh:
            prepare_host(name, hv["gpufleet_fabric_address"], public_key)
        host_key = docker("exec", name, "cat", "/etc/ssh/ssh_host_ed25519_key.pub").stdout.split()
        known.append(f"{hv['ansible_host']} {host_key[0]} {host_key[1]}")
    KNOWN_HOSTS.write_text("\n".join(known) + "\n")
    log(f"manifest written to {MANIFEST.relative_to(REPO)} ({len(hosts)} hosts, serving: {serving})")


def ensure_tls(address: str) -> dict[str, str]:
    """A lab CA and the front door's certificate for its management address (openssl, 0600 keys).

    The load client trusts the CA file only, so TLS is verified for real: a certificate for
    another address fails the handshake.
    """
    TLS_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
    ca_key, ca_crt = TLS_DIR / "ca.key", TLS_DIR / "ca.crt"
    key, csr, crt, ext = (TLS_DIR / f"frontdoor.{suffix}" for suffix in ("key", "csr", "crt", "ext"))
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    if not ca_crt.exists():
        run(
            [
                "openssl",
                "req",
                "-x509",
                *ec,
                "-keyout",
                str(ca_key),
                "-out",
                str(ca_crt),
                "-days",
                "30",
                "-subj",
                "/CN=gpufleet lab CA",
            ]
        )
    wanted = f"subjectAltName=IP:{address}\nextendedKeyUsage=serverAuth\n"
    if not crt.exists() or not ext.exists() or ext.read_text() != wanted:
        ext.write_text(wanted)
        run(["openssl", "req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={address}"])
        run(
            [
                "openssl",
                "x509",
                "-req",
                "-in",
                str(csr),
                "-CA",
                str(ca_crt),
                "-CAkey",
                str(ca_key),
                "-CAcreateserial",
                "-out",
                str(crt),
                "-days",
                "30",
                "-extfile",
                str(ext),
            ]
        )
    for path in (ca_key, key):
        path.chmod(0o600)
    return {"ca": str(ca_crt), "certificate": str(crt), "key": str(key)}


def write_group_vars(manifest: dict, hosts: dict[str, dict], serving: str) -> None:
    """Group variables that need Jinja (the plugin's values are never templated) or the lab's TLS files."""
    GROUP_VARS.mkdir(parents=True, exist_ok=True)
    if serving == "site":
        # The site layout admits exactly the front door (its checks, Prometheus) and the API
        # client host, so the port scans from the outsider host see the API port closed.
        admitted = [SITE_LAYOUT["frontdoor"], *SITE_LAYOUT["api_client"]]
        clients = [hosts[name]["gpufleet_fabric_address"] for name in admitted]
        allowed = json.dumps(clients)
        opened = "the front door and the API client host"
    else:
        allowed, opened = '["{{ gpufleet_fabric_subnet }}"]', "the fabric subnet, from where the front door reaches it"
    if serving == "site":
        (GROUP_VARS / "llama_coordinator.yml").write_text(
            "---\n# Written by scripts/lab.py up. llama-server listens on the fabric address, where the front door\n"
            "# reaches it.\n"
            'llama_server_host: "{{ gpufleet_fabric_address }}"\n'
        )
    (GROUP_VARS / "vllm_nodes.yml").write_text(
        f"---\n# Written by scripts/lab.py up. The API listens on the fabric address, open to {opened}.\n"
        'vllm_api_host: "{{ gpufleet_fabric_address }}"\n'
        f"vllm_api_allowed_clients: {allowed}\n"
    )
    frontends = manifest.get("operations", {}).get("frontends", [])
    target = GROUP_VARS / "inference_frontends.yml"
    if not frontends:
        target.unlink(missing_ok=True)
        return
    address = hosts[frontends[0]]["ansible_host"]
    tls = ensure_tls(address)
    settings = {
        "frontdoor_bind_address": address,
        "frontdoor_port": FRONTDOOR_PORT,
        "frontdoor_tls_certificate": tls["certificate"],
        "frontdoor_tls_key": tls["key"],
        **SERVING_ACCEPTANCE,
        "serving_acceptance_ca_src": tls["ca"],
    }
    target.write_text(
        "---\n# Written by scripts/lab.py up: TLS with the lab CA's certificate for the management address, and\n"
        "# the serving acceptance scaled to the tiny model (the front door is the load host).\n" + yaml_dump(settings)
    )


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
    MANIFEST.unlink(missing_ok=True)
    SITE_GROUPS.unlink(missing_ok=True)
    shutil.rmtree(GROUP_VARS, ignore_errors=True)
    shutil.rmtree(SSH_DIR, ignore_errors=True)
    log("lab removed")


def container_cpu(
    container_id: str, proc_root: Path = Path("/proc"), cgroup_root: Path = Path("/sys/fs/cgroup")
) -> dict:
    """CPU seconds of one lab host: the container's cgroup total and its live processes by unit.

    A process counts with its reaped children (utime+stime+cutime+cstime), so an sshd's figure
    holds the Ansible modules its sessions ran; a service that died (a restarted vLLM) counts
    under systemd, which reaped it. "other" is what no live process accounts for.
    """
    tick = os.sysconf("SC_CLK_TCK")
    total = None
    for path, scale in (
        (cgroup_root / "cpuacct" / "docker" / container_id / "cpuacct.usage", 1e-9),
        (cgroup_root / "system.slice" / f"docker-{container_id}.scope" / "cpu.stat", 1e-6),
    ):
        if path.exists():
            text = path.read_text()
            value = text.split() if path.name == "cpuacct.usage" else text.split("usage_usec", 1)[1].split()
            total = int(value[0]) * scale
            break
    units: dict[str, float] = {}
    marker = f"docker/{container_id}"
    marker_v2 = f"docker-{container_id}.scope"
    for proc in proc_root.iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text().splitlines()
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        # The systemd hierarchy (v1's name=systemd, or v2's 0::) holds the unit of the process.
        path = next(
            (
                line.split(":", 2)[2]
                for line in cgroups
                if (":name=systemd:" in line or line.startswith("0::")) and (marker in line or marker_v2 in line)
            ),
            "",
        )
        if not path:
            continue
        inner = path.split(marker_v2 if marker_v2 in path else marker, 1)[1].strip("/")
        unit = inner.rsplit("/", 1)[-1] or "(container root)"
        fields = stat.rsplit(")", 1)[1].split()
        used = sum(int(value) for value in fields[11:15]) / tick
        units[unit] = units.get(unit, 0.0) + used
    top = dict(sorted(((unit, round(secs, 1)) for unit, secs in units.items() if secs >= 0.5), key=lambda kv: -kv[1]))
    result: dict = {"total_s": round(total, 1) if total is not None else None, "units_s": top}
    if total is not None:
        result["units_s"]["other"] = round(max(total - sum(units.values()), 0.0), 1)
    return result


def cpu(output: str | None) -> int:
    report = {}
    for name in lab_containers():
        state = container_state(name)
        if state and state["State"]["Running"]:
            report[name] = container_cpu(state["Id"])
    totals = [host["total_s"] for host in report.values() if host["total_s"] is not None]
    summary = {"hosts": report, "all_hosts_total_s": round(sum(totals), 1)}
    for name, host in report.items():
        units = ", ".join(f"{unit} {secs}" for unit, secs in list(host["units_s"].items())[:6])
        log(f"{name}: {host['total_s']} s CPU ({units})")
    log(f"all hosts: {summary['all_hosts_total_s']} s CPU")
    if output:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        Path(output).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


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
        nets = state["NetworkSettings"]["Networks"]
        mgmt = nets.get(MGMT_NETWORK, {}).get("IPAddress", "-")
        fabric = nets.get(NETWORK, {}).get("IPAddress", "-")
        print(f"{name}: {running} management {mgmt} fabric {fabric}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("engine")
    sub.add_parser("image")
    p_up = sub.add_parser("up")
    p_up.add_argument("--hosts", type=int, default=int(os.environ.get("LAB_HOSTS", "3")))
    p_up.add_argument(
        "--serving", choices=("vllm", "site", "llama", "none"), default=os.environ.get("LAB_SERVING", "vllm")
    )
    sub.add_parser("status")
    p_cpu = sub.add_parser("cpu")
    p_cpu.add_argument("--output")
    p_down = sub.add_parser("down")
    p_down.add_argument("--purge", action="store_true")
    args = parser.parse_args(argv)

    if args.cmd == "engine":
        ensure_engine()
    elif args.cmd == "image":
        ensure_engine()
        print(ensure_image())
    elif args.cmd == "up":
        up(args.hosts, args.serving)
    elif args.cmd == "status":
        return status()
    elif args.cmd == "cpu":
        return cpu(args.output)
    elif args.cmd == "down":
        down(args.purge)
    return 0


if __name__ == "__main__":
    sys.exit(main())
