"""The model fan-out's lab proofs, on the site the deploy step left serving.

    .venv/bin/python scripts/lab.py up --hosts 10 --serving site
    .venv/bin/python tests/site/deploy.py
    .venv/bin/python tests/site/staging.py

The lab's vLLM replicas are staged with vllm_model_staging=fanout (scripts/lab.py vllm_vars): the
model landed once, on the play's first vLLM host, and the nodes fetched it from each other.

1. Each node holds what the plan says and nothing else. The PP=2 replica `pp`'s rank 0 holds
   stage 0's shards and rank 1 stage 1's, each with its own model.safetensors.index.json naming
   only its own shards; a one-node replica holds the whole model. The plan is recomputed here from
   the lab model with the collection's own module_utils. (verify_vllm.yml then proves that `pp`
   answers exactly as HF transformers does on the whole model.)
2. Nothing of the run's access is left: no transfer key on any host, no line of it in root's
   authorized_keys.
3. A missing shard stops vLLM's loader with its own message: on a copy of rank 1's directory
   without one of its shards, the node's vLLM (its venv) runs the loader's index check, which
   vllm serve runs before it loads a weight.
4. The site was deployed with no route to any hub: every vLLM unit's environment file sets
   HF_HUB_OFFLINE=1 and TRANSFORMERS_OFFLINE=1, and from every vLLM host a connection to
   huggingface.co:443 fails (the lab reaches no address outside this machine).
5. An archive fans out too (vllm_model_url): the lab model as a .tar.gz, served over HTTP by one
   lab host that runs no vLLM, is staged by staging_url.yml onto three others, each a one-node
   replica. The archive is downloaded once, by the staging host; every host then holds the whole
   model as its manifest lists it, and a second run changes nothing. The three hosts' copies are
   removed after.

6. A vLLM cache seeds a new node of the same replica shape, and no other: the deploy recorded
   each vLLM node's shape beside its cache (tp's and pp's, with their ranks and sizes and the
   model's digest). cache_seed.yml then makes two hosts without vLLM nodes of replicas of pp rank
   1's shape and of another TP: the first copies that node's modelinfos/ and torch_compile_cache/
   over the fabric (through rrsync), the second gets nothing, a second run changes nothing, and
   no key of the run is left. The two hosts' caches are removed after. (On the lab's CPU build the
   copied files are the model-class inspection: pp's compile with the eager backend leaves an
   empty torch_compile_cache/.)

The bytes each node holds, against the whole model, go to tests/output/site/staging.json.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time

import _jobs

ROOT = _jobs.ROOT
OUTPUT = ROOT / "tests" / "output" / "site"
sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import _model_staging  # noqa: E402
import _vllm_model  # noqa: E402

LOADER_CHECK = r"""
import glob, os, sys
from vllm.model_executor.model_loader.weight_utils import filter_duplicate_safetensors_files
folder = sys.argv[1]
try:
    filter_duplicate_safetensors_files(glob.glob(os.path.join(folder, "*.safetensors")), folder,
                                       "model.safetensors.index.json")
except FileNotFoundError as exc:
    print(exc)
    sys.exit(3)
"""

CACHES = "/var/cache/gpufleet-vllm"
CACHE_KEY = "gpufleet-cache-key.json"

HUB_CONNECT = r"""
import socket, sys
try:
    socket.create_connection(("huggingface.co", 443), timeout=10).close()
except OSError as exc:
    print(f"{type(exc).__name__}: {exc}")
    sys.exit(3)
print("connected")
"""


def fail(message: str) -> None:
    sys.exit(f"staging: {message}")


def on(host: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", "exec", host, *argv], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        fail(f"{host}: {' '.join(argv)} exited {proc.returncode}: {proc.stderr.strip()}")
    return proc


def held(host: str, path: str) -> dict[str, int]:
    """{relative path: size} of every file under path on host."""
    out = on(host, "find", path, "-type", "f", "-printf", "%P\t%s\n").stdout
    return {rel: int(size) for rel, size in (line.split("\t") for line in out.splitlines())}


def offline_proof(hosts: list[str]) -> dict[str, str]:
    """Every vLLM unit's environment is offline and no host reaches the hub; the error each host got."""
    offline = {}
    for host in hosts:
        envs = on(
            host, "sh", "-c", "grep -H -E '^(HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE)=' /etc/gpufleet/vllm/*/vllm.env"
        )
        units: dict[str, set[str]] = {}
        for line in envs.stdout.splitlines():
            name, setting = line.split(":", 1)
            # The role writes systemd's quoted form, NAME="value".
            units.setdefault(name, set()).add(setting.strip().replace('"', ""))
        if not units or any(s != {"HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1"} for s in units.values()):
            fail(f"{host}: a vLLM unit's environment lacks the hub's offline settings: {units or envs.stdout}")
        venv = on(host, "sh", "-c", "ls -d /opt/gpufleet/vllm/*/bin/python | head -1").stdout.strip()
        route = on(host, venv, "-c", HUB_CONNECT, check=False)
        if route.returncode != 3:
            fail(f"{host} reached huggingface.co:443, so this run does not prove an offline site: {route.stdout}")
        offline[host] = route.stdout.strip()
    print(f"staging: every vLLM unit is offline and no host reaches the hub: {json.dumps(offline)}")
    return offline


def archive_proof(model: str, manifest: dict, others: list[str], hostvars: dict) -> dict:
    """Stage the lab model from a .tar.gz over HTTP onto three hosts without vLLM (others), from a fourth."""
    if len(others) < 4:
        fail(f"the archive proof needs four hosts without vLLM; the lab has {others}")
    server, hosts = others[-1], others[-4:-1]
    work = OUTPUT / "url-proof"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    archive = work / "tiny-llama.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(model, arcname="tiny-llama")
    checksum = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    address = hostvars[server]["ansible_host"]
    port = 18731
    url = f"http://{address}:{port}/tiny-llama.tar.gz"
    path = "/var/lib/gpufleet/models/url-proof"
    served = "/var/tmp/url-proof"  # not /tmp, a tmpfs that docker cp cannot write into
    on(server, "mkdir", "-p", served)
    subprocess.run(["docker", "cp", str(archive), f"{server}:{served}/"], check=True, capture_output=True)
    on(server, "sh", "-c", f"setsid python3 -m http.server {port} --bind {address} -d {served} >/dev/null 2>&1 &")
    try:
        # The server is up when the archive's first bytes come back (each try waits for them).
        for _attempt in range(60):
            probe = on(
                hosts[0],
                "python3",
                "-c",
                f"import urllib.request; urllib.request.urlopen({url!r}, timeout=5)",
                check=False,
            )
            if probe.returncode == 0:
                break
            time.sleep(1)
        else:
            fail(f"the archive server on {server} did not answer at {url}: {probe.stderr.strip()}")
        extra = {"proof_url": url, "proof_checksum": checksum, "proof_path": path}
        runs = [staging_play(hosts, extra) for _run in range(2)]
        want = {e["path"]: e["size"] for e in manifest["entries"]}
        for host in hosts:
            have = held(host, path)
            if have != want:
                fail(f"{host} holds {sorted(have)} from the archive, not the model's {sorted(want)}")
        downloaded = [h for h in hosts if on(h, "test", "-f", f"{path}.source.download", check=False).returncode == 0]
        if downloaded != hosts[:1]:
            fail(f"the archive was downloaded onto {downloaded}, not once onto the staging host {hosts[0]}")
        recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", runs[1], re.M)
        if not recap or any(changed != "0" for _host, changed in recap):
            fail(f"a second run of the archive's fan-out changed something: {recap}\n{runs[1][-5000:]}")
    finally:
        on(server, "sh", "-c", f"pkill -f 'http.server {port}'; rm -rf {served}", check=False)
        for host in hosts:
            on(
                host,
                "rm",
                "-rf",
                path,
                f"{path}.source",
                f"{path}.source.download",
                f"{path}.source.manifest.json",
                f"{path}.staging",
                check=False,
            )
    result = {"url": url, "hosts": hosts, "downloaded_on": hosts[0], "archive_bytes": archive.stat().st_size}
    print(f"staging: the archive fanned out from {hosts[0]} to {hosts[1:]}, and a second run changed nothing")
    return result


def staging_play(hosts: list[str], extra: dict, play: str = "staging_url.yml") -> str:
    proc = _jobs.playbook(
        f"tests/site/{play}", "--limit", ",".join(hosts), "-f", str(len(hosts)), "-e", json.dumps(extra)
    )
    if proc.returncode != 0:
        fail(f"{play} failed on {hosts}:\n{proc.stdout[-5000:]}\n{proc.stderr[-2000:]}")
    return proc.stdout


def cache_key(host: str, replica: str) -> dict:
    text = on(host, "cat", f"{CACHES}/{replica}/vllm/{CACHE_KEY}", check=False).stdout
    return json.loads(text) if text else {}


def cache_proof(vllm_hosts: list[str], holder: str, vllm_hostvars: dict, others: list[str]) -> dict:
    """The recorded shapes, and a seed of pp rank 1's cache onto a host of its shape only."""
    for host in vllm_hosts:
        want = vllm_hostvars[host]
        key = cache_key(host, want["vllm_replica"])
        shape = {
            "rank": int(want.get("vllm_node_rank", 0)),
            "tensor_parallel_size": int(want["vllm_tensor_parallel_size"]),
            "pipeline_parallel_size": int(want["vllm_pipeline_parallel_size"]),
            "model": want["vllm_model_checksum"],
        }
        if {name: key.get(name) for name in shape} != shape:
            fail(f"{host} recorded the cache key {key}, not its shape {shape}")
    held_before = held(holder, f"{CACHES}/pp/vllm")
    seeded = {p: size for p, size in held_before.items() if p.split("/")[0] in ("modelinfos", "torch_compile_cache")}
    if not any(p.startswith("modelinfos/") for p in seeded):
        fail(f"{holder}'s cache holds no modelinfos/ to seed from: {sorted(held_before)}")
    new, other = others[:2]
    replica = "pp-seeded"
    extra = {"proof_holder": holder, "proof_other": other, "proof_replica": replica}
    hosts = [holder, new, other]
    try:
        runs = [staging_play(hosts, extra, "cache_seed.yml") for _run in range(2)]
        got = held(new, f"{CACHES}/{replica}/vllm")
        if got != dict(seeded, **{CACHE_KEY: held_before[CACHE_KEY]}):
            fail(f"{new} was seeded with {sorted(got)}, not {holder}'s {sorted(seeded)} and its key")
        if cache_key(new, replica) != cache_key(holder, "pp"):
            fail(f"{new}'s seeded key differs from {holder}'s")
        if on(other, "test", "-e", f"{CACHES}/{replica}", check=False).returncode == 0:
            fail(f"{other} (TP 2) got a cache of pp's shape (TP 1): {held(other, f'{CACHES}/{replica}')}")
        if "no peer holds a vLLM cache of its shape" not in runs[0]:
            fail(f"the run did not say that {other} has no peer of its shape:\n{runs[0][-3000:]}")
        recap = re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", runs[1], re.M)
        if not recap or any(changed != "0" for _host, changed in recap):
            fail(f"a second run of the cache seeding changed something: {recap}\n{runs[1][-5000:]}")
        for host in hosts:
            left = on(
                host,
                "sh",
                "-c",
                "ls /etc/gpufleet/vllm/cache-seed/ 2>/dev/null;"
                " grep -c gpufleet-cache-seed /root/.ssh/authorized_keys || true",
            ).stdout.split()
            if "key" in left or "key.pub" in left or left[-1] != "0":
                fail(f"{host} still holds the cache seeding's key or its authorized_keys line: {left}")
    finally:
        for host in (new, other):
            on(host, "rm", "-rf", f"{CACHES}/{replica}", "/etc/gpufleet/vllm/cache-seed", check=False)
    result = {"holder": holder, "seeded": new, "refused": other, "files": len(seeded), "bytes": sum(seeded.values())}
    print(
        f"staging: {new} seeded its vLLM cache from {holder} ({len(seeded)} files, {sum(seeded.values())} bytes),"
        f" {other} of another TP got nothing, and a second run changed nothing"
    )
    return result


def main() -> int:
    data = _jobs.inventory()
    hostvars = data["_meta"]["hostvars"]
    groups = {name: body.get("hosts", []) for name, body in data.items() if isinstance(body, dict)}
    pp = sorted(groups.get("vllm_replica_pp", []), key=lambda h: int(hostvars[h].get("vllm_node_rank", 0)))
    vllm_hosts = sorted(h for h in hostvars if hostvars[h].get("vllm_model_staging") == "fanout")
    if len(pp) != 2 or not vllm_hosts:
        fail(f"the lab has no PP=2 replica `pp` staged with the fan-out (pp: {pp}, fan-out hosts: {vllm_hosts})")
    assets = json.loads(
        subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "lab" / "vllm_assets.py")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    model = assets["model"]
    manifest = _model_staging.build(model)
    if manifest["digest"] != assets["model_checksum"]:
        fail(f"the lab model's manifest digest {manifest['digest']} is not its checksum {assets['model_checksum']}")
    with open(f"{model}/{_model_staging.INDEX_NAME}") as handle:
        index = json.load(handle)
    config = _vllm_model.read_model_config(model)
    stages = _model_staging.stages(manifest, index, config, 2)
    whole = {e["path"]: e["size"] for e in manifest["entries"]}
    figures = {"model_bytes": manifest["size_bytes"], "hosts": {}}

    path = hostvars[pp[0]]["vllm_model_path"]
    for rank, host in enumerate(pp):
        stage = stages[rank]
        want = {f["path"]: f["size"] for f in stage["files"]}
        want[_model_staging.INDEX_NAME] = stage["generated"][_model_staging.INDEX_NAME]["size"]
        have = held(host, path)
        if have != want:
            fail(f"{host} (pp rank {rank}) holds {sorted(have)}, not its stage's {sorted(want)}")
        own = json.loads(on(host, "cat", f"{path}/{_model_staging.INDEX_NAME}").stdout)
        shards = sorted(p for p in want if p.endswith(".safetensors"))
        if sorted(set(own["weight_map"].values())) != shards:
            fail(f"{host}'s index names {sorted(set(own['weight_map'].values()))}, not its shards {shards}")
        figures["hosts"][host] = {"stage": rank, "bytes": sum(have.values()), "shards": shards}
    for host in vllm_hosts:
        if host in pp or hostvars[host].get("vllm_pipeline_parallel_size", 1) != 1:
            continue
        have = held(host, hostvars[host]["vllm_model_path"])
        if have != whole:
            fail(f"{host} (one node) holds {sorted(have)}, not the whole model {sorted(whole)}")
        figures["hosts"][host] = {"stage": None, "bytes": sum(have.values())}
    for item in figures["hosts"].values():
        item["of_model"] = round(item["bytes"] / manifest["size_bytes"], 3)
    print(f"staging: each node holds its plan: {json.dumps(figures['hosts'])}")

    for host in vllm_hosts:
        keys = on(
            host,
            "sh",
            "-c",
            f"ls {hostvars[host]['vllm_model_path']}.staging/ 2>/dev/null; "
            "grep -c gpufleet-model-stage /root/.ssh/authorized_keys || true",
        ).stdout.split()
        if "key" in keys or "key.pub" in keys or keys[-1] != "0":
            fail(f"{host} still holds the transfer key or its authorized_keys line: {keys}")
    print("staging: no transfer key or authorized_keys line is left on any host")

    host = pp[1]
    shard = figures["hosts"][host]["shards"][-1]
    venv = on(host, "sh", "-c", "ls -d /opt/gpufleet/vllm/*/bin/python | head -1").stdout.strip()
    on(host, "sh", "-c", f"rm -rf /tmp/stage-copy && cp -a {path} /tmp/stage-copy && rm /tmp/stage-copy/{shard}")
    proc = on(host, venv, "-c", LOADER_CHECK, "/tmp/stage-copy", check=False)
    on(host, "rm", "-rf", "/tmp/stage-copy")
    if proc.returncode != 3 or shard not in proc.stdout or "missing" not in proc.stdout:
        fail(
            f"vLLM's loader on {host} did not refuse a stage without {shard}:"
            f" rc {proc.returncode}, {proc.stdout}{proc.stderr}"
        )
    figures["missing_shard_message"] = proc.stdout.strip()
    print(f"staging: vLLM's loader refuses a stage without {shard}: {proc.stdout.strip()}")

    figures["offline"] = offline_proof(vllm_hosts)
    # The hosts without vLLM, in name order: the archive proof takes the last four, the cache
    # seeding two of them after it.
    others = sorted((h for h in hostvars if h not in vllm_hosts), key=lambda h: (len(h), h))
    figures["archive"] = archive_proof(model, manifest, others, hostvars)
    figures["cache_seed"] = cache_proof(vllm_hosts, pp[1], hostvars, others[-4:-2])

    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "staging.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
