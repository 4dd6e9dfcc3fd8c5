#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Record the shape of a vLLM node's cache, or seed a cold cache from a peer of the same shape."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: vllm_cache_seed
short_description: Key a vLLM node's cache by its replica shape and seed a cold cache from a peer of that shape
version_added: 0.1.0
description:
  - A vLLM start fills its cache (C(VLLM_CACHE_ROOT)) with what the next start reuses, the
    model-class inspection (C(modelinfos/)) and the compiled graphs (C(torch_compile_cache/)).
  - With O(state=recorded), writes the node's cache key into the cache as C(gpufleet-cache-key.json),
    namely the O(shape) (vLLM lock, model digest, TP, PP, rank, GPUs) and this host's CPU model and
    feature flags, read from O(cpuinfo). The vllm role records it after the replica answered.
  - With O(state=seeded), a node whose cache lacks its own key copies C(modelinfos/) and
    C(torch_compile_cache/) with rsync from the first of O(sources) that answers and whose own
    key, fetched first, is this node's key; a peer of another shape is never copied from. rsync
    checks each file it receives against the sender's checksum; an interrupted seed leaves no
    key, so the next run seeds again and rsync keeps what already arrived.
  - A cache that cannot be seeded is not an error, since vLLM builds it at start; the result
    says why in O(state=seeded)'s C(tried), with a warning.
  - A model without a digest (C(model) neither C(sha256:<hex>) nor a hub id at a commit) keys no
    cache; the module then changes nothing and says why in C(reason).
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.peer_rsync
options:
  path:
    description: The node's C(VLLM_CACHE_ROOT).
    type: path
    required: true
  state:
    description: C(recorded) writes the key; C(seeded) seeds a cache that lacks it.
    type: str
    choices: [recorded, seeded]
    default: seeded
  shape:
    description:
      - The replica shape, C(vllm) (the lock's digest), C(model) (C(sha256:<hex>), or
        C(hub:<id>@<commit>)), C(tensor_parallel_size), C(pipeline_parallel_size), C(rank) and
        C(gpus) (the node's GPUs' PCI ids).
    type: dict
    required: true
  sources:
    description:
      - The peers to seed from, in order, each a dict with C(name) (shown in results), C(host)
        (an address reached over ssh; empty for a directory on this host) and C(path) (their
        cache; over ssh, relative to the C(rrsync) root of the source).
    type: list
    elements: dict
    default: []
  owner:
    description: The user the cache belongs to (the vLLM unit's); empty keeps the sender's owners.
    type: str
    default: ""
  bwlimit:
    description: rsync's C(--bwlimit) in KiB/s; 0 is none.
    type: int
    default: 0
  timeout:
    description: Seconds one source may take in all before the next one is tried.
    type: int
    default: 1800
  cpuinfo:
    description: The file the CPU is read from (a seam for tests).
    type: path
    default: /proc/cpuinfo
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Seed this node's cache from a peer of the same replica shape
  gpufleet.inference.vllm_cache_seed:
    path: /var/cache/gpufleet-vllm/r0/vllm
    shape:
      vllm: 5d41402abc4b2a76b9719d911017c592
      model: sha256:47c13f3e64edcc41b898645074c1399354427ac2680761f5ba1a6c9801e4d294
      tensor_parallel_size: 8
      pipeline_parallel_size: 10
      rank: 3
      gpus: ["10de:2b85", "10de:2b85"]
    sources:
      - {name: gpu-13, host: 10.10.0.13, path: r1/vllm}
    owner: gpufleet-vllm
    ssh_key: /etc/gpufleet/vllm/cache-seed/key
    known_hosts: /etc/gpufleet/vllm/cache-seed/known_hosts
"""

RETURN = r"""
keyed:
  description: Whether the model has a digest to key the cache by; nothing is recorded or seeded otherwise.
  type: bool
  returned: always
reason:
  description: Why the cache is not keyed; empty when it is.
  type: str
  returned: always
key:
  description: This node's cache key (the shape, C(cpu) and C(schema)).
  type: dict
  returned: when keyed
digest:
  description: The key's digest, C(sha256:<hex>); empty when the cache is not keyed.
  type: str
  returned: always
warm:
  description: Whether the cache held this key before the task.
  type: bool
  returned: always
present_digest:
  description: The digest of the key the cache held before the task, empty for none.
  type: str
  returned: when keyed
seeded_from:
  description: The source the cache was seeded from (or would be, in check mode); empty when not seeded.
  type: str
  returned: always
tried:
  description: Why each source before the one used, or every source when none was, was not used.
  type: list
  elements: str
  returned: always
bytes:
  description: The size of the files copied into the cache.
  type: int
  returned: when keyed
elapsed_s:
  description: Seconds the seed took.
  type: float
  returned: when keyed
"""

import json
import os
import pwd
import re
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout, _vllm_cache

# rsync --stats: the size of the files it copied, whichever side it reports from.
TRANSFERRED = re.compile(r"^Total transferred file size: ([0-9,]+)", re.M)
INCOMING_KEY = ".gpufleet-seed-key.json"


class SeedError(Exception):
    """One source could not seed the cache."""


def read_key(path):
    """The key recorded in the cache at path, or None."""
    try:
        with open(os.path.join(path, _vllm_cache.KEY_FILE), "rb") as handle:
            key = json.loads(handle.read().decode("utf-8"))
    except (IOError, OSError, ValueError):
        return None
    return key if isinstance(key, dict) else None


def make_dirs(path, owner):
    """Create path and its missing parents, giving those it creates to owner."""
    missing = []
    probe = path
    while not os.path.isdir(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for directory in reversed(missing):
        os.mkdir(directory, 0o755)
        if owner:
            os.chown(directory, owner.pw_uid, owner.pw_gid)


def write_key(path, key, owner):
    make_dirs(path, owner)
    text = json.dumps(key, indent=1, sort_keys=True) + "\n"
    _model_fanout.atomic_write(os.path.join(path, _vllm_cache.KEY_FILE), text.encode("utf-8"))


class Seed(object):
    def __init__(self, module, path, key, owner):
        self.module = module
        self.path = path
        self.key = key
        self.owner = owner
        params = module.params
        self.rsync = module.get_bin_path("rsync", required=True)
        self.ssh_e = ""
        if any(source.get("host") for source in params["sources"]):
            if not (params["ssh_key"] and params["known_hosts"]):
                module.fail_json(msg="sources on other hosts need ssh_key and known_hosts")
            self.ssh_e = _model_fanout.ssh_command(
                module.get_bin_path("ssh", required=True),
                params["ssh_key"],
                params["known_hosts"],
                params["ssh_user"],
                params["ssh_port"],
            )
        self.bytes = 0

    def _remote(self, source, name):
        base = source["path"].rstrip("/")
        if source.get("host"):
            return "%s:%s/%s" % (source["host"], base, name)
        return "%s/%s" % (base, name)

    def _rsync(self, source, names, dest, deadline):
        """Copy names from source into dest; returns the bytes of the files copied."""
        argv = [self.rsync, "--recursive", "--links", "--times", "--perms", "--stats", "--ignore-missing-args"]
        argv += ["--partial-dir=.rsync-partial", "--timeout=%d" % max(30, min(600, deadline - time.time()))]
        if self.module.params["bwlimit"]:
            argv.append("--bwlimit=%d" % self.module.params["bwlimit"])
        if self.owner:
            argv += ["--owner", "--group", "--chown=%d:%d" % (self.owner.pw_uid, self.owner.pw_gid)]
        if self.ssh_e:
            argv += ["-e", self.ssh_e]
        argv += [self._remote(source, name) for name in names]
        argv.append(dest)
        try:
            proc = subprocess.run(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=max(1, deadline - time.time()),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SeedError("rsync did not finish within %d s" % self.module.params["timeout"]) from exc
        out = proc.stdout.decode("utf-8", "replace")
        match = TRANSFERRED.search(out)
        copied = int(match.group(1).replace(",", "")) if match else 0
        # 24: files vanished on the sender, as a running vLLM replaces its own cache files.
        if proc.returncode not in (0, 24):
            err = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise SeedError("rsync exited %d: %s" % (proc.returncode, err[0] if err else "no message"))
        return copied

    def from_source(self, source):
        deadline = time.time() + self.module.params["timeout"]
        make_dirs(self.path, self.owner)
        incoming = os.path.join(self.path, INCOMING_KEY)
        try:
            # The key first, under another name: a peer whose cache is no longer of this shape
            # is left before any of its files arrive.
            self._rsync(source, [_vllm_cache.KEY_FILE], incoming, deadline)
            try:
                with open(incoming, "rb") as handle:
                    theirs = json.loads(handle.read().decode("utf-8"))
            except (IOError, OSError, ValueError) as exc:
                raise SeedError("it holds no readable %s" % _vllm_cache.KEY_FILE) from exc
            if theirs != self.key:
                shown = _vllm_cache.digest_of(theirs) if isinstance(theirs, dict) else "unreadable"
                raise SeedError("its cache key is %s, not this node's %s" % (shown, _vllm_cache.digest_of(self.key)))
            self.bytes += self._rsync(source, list(_vllm_cache.SEEDED), self.path + "/", deadline)
            os.chmod(incoming, 0o644)
            os.replace(incoming, os.path.join(self.path, _vllm_cache.KEY_FILE))
        finally:
            if os.path.exists(incoming):
                os.unlink(incoming)


def inputs(module):
    """This host's CPU identity and the owner's passwd entry (or None), after the arguments' checks."""
    params = module.params
    problems = _vllm_cache.shape_problems(params["shape"])
    for index, source in enumerate(params["sources"]):
        if not source.get("name") or not source.get("path"):
            problems.append("sources[%d] needs a name and a path, not %r" % (index, source))
    if problems:
        module.fail_json(msg="; ".join(problems))
    try:
        with open(params["cpuinfo"]) as handle:
            cpu = _vllm_cache.cpu_identity(handle.read())
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read the CPU from %s: %s" % (params["cpuinfo"], exc))
    owner = None
    if params["owner"]:
        try:
            owner = pwd.getpwnam(params["owner"])
        except KeyError:
            module.fail_json(msg="owner %s is no user on this host" % params["owner"])
    return cpu, owner


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            state=dict(type="str", choices=["recorded", "seeded"], default="seeded"),
            shape=dict(type="dict", required=True),
            sources=dict(type="list", elements="dict", default=[]),
            owner=dict(type="str", default=""),
            **_model_fanout.PEER_SSH_ARGUMENT_SPEC,
            bwlimit=dict(type="int", default=0),
            timeout=dict(type="int", default=1800),
            cpuinfo=dict(type="path", default="/proc/cpuinfo"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"].rstrip("/")
    cpu, owner = inputs(module)
    reason = _vllm_cache.model_problem(params["shape"]["model"])
    if reason:
        module.exit_json(changed=False, keyed=False, reason=reason, warm=False, digest="", seeded_from="", tried=[])
    key = _vllm_cache.key_of(params["shape"], cpu)
    present = read_key(path)
    result = dict(
        keyed=True,
        reason="",
        key=key,
        digest=_vllm_cache.digest_of(key),
        warm=present == key,
        present_digest=_vllm_cache.digest_of(present) if present else "",
        seeded_from="",
        tried=[],
        bytes=0,
        elapsed_s=0.0,
    )
    if result["warm"]:
        module.exit_json(changed=False, **result)
    if params["state"] == "recorded":
        if not module.check_mode:
            try:
                write_key(path, key, owner)
            except (IOError, OSError) as exc:
                module.fail_json(msg="cannot write the cache key in %s: %s" % (path, exc), **result)
        module.exit_json(changed=True, **result)
    if not params["sources"]:
        module.exit_json(changed=False, **result)
    if module.check_mode:
        result["seeded_from"] = params["sources"][0]["name"]
        module.exit_json(changed=True, **result)
    seed = Seed(module, path, key, owner)
    started = time.time()
    for source in params["sources"]:
        try:
            seed.from_source(source)
        except (SeedError, IOError, OSError) as exc:
            result["tried"].append("%s: %s" % (source["name"], exc))
            continue
        result["seeded_from"] = source["name"]
        break
    result["bytes"] = seed.bytes
    result["elapsed_s"] = round(time.time() - started, 3)
    if not result["seeded_from"]:
        module.warn(
            "the cache in %s was not seeded, so vLLM builds it at start: %s" % (path, "; ".join(result["tried"]))
        )
    # A peer left half-way may have copied files already.
    module.exit_json(changed=bool(result["seeded_from"]) or seed.bytes > 0, **result)


if __name__ == "__main__":
    main()
