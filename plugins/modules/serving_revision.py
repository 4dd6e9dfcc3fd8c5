#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read, record, snapshot and restore the revision a vLLM node runs, for a rollout's switch and its rollback."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: serving_revision
short_description: Record what a vLLM node runs, and keep the files to switch it back
version_added: 0.1.0
description:
  - A replica's revision is its vLLM venv, its model's digest and the digest of the files whose
    change restarts it (C(config.yaml), C(vllm.env) and the unit). The record,
    C(revision.json) in O(path), holds the revision the node runs, the one before it and the
    state of the rollout that switched it (docs/upgrades.md).
  - O(state=read) changes nothing; it returns the record and the revision of the files in place,
    labelled with the record's venv and model when the record describes those files, else unlabelled.
  - O(venv), O(model) and O(model_path) describe the target, what the vllm role writes; O(state=recorded)
    labels the files in place with them.
  - O(state=snapshot), before a switch, copies the files in place (C(secrets.env) too) into
    C(previous/) in O(path) and records the node as C(switching). A snapshot over one whose
    switch never finished keeps the older files, the ones the node last served with.
  - O(state=recorded), after the switched replica passed its checks, records the files in place
    as the node's revision, the snapshot's as the previous one, and the node as C(serving).
  - O(state=restored) copies the snapshot back in place and records the node as C(rolled_back);
    the caller then reloads systemd and restarts the replica.
author:
  - gpufleet.inference developers (@gpufleet)
options:
  path:
    description: The replica's configuration directory on the node (C(<vllm_config_dir>/<replica>)).
    type: path
    required: true
  unit_path:
    description: The replica's vLLM unit file.
    type: path
    required: true
  venv:
    description: The venv of the target, the revision the vllm role writes (its versioned venv).
    type: str
    default: ""
  model:
    description: The target's model digest (C(sha256:<hex>) or C(hub:<id>@<commit>)).
    type: str
    default: ""
  model_path:
    description: The target's model directory on the node.
    type: str
    default: ""
  state:
    description: What to do, see the description.
    type: str
    choices: [read, snapshot, recorded, restored]
    default: read
  rollout:
    description: The rollout taking the switch (its id, the replica, the batch), kept in the record.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Keep what the node runs before its replica switches
  gpufleet.inference.serving_revision:
    path: /etc/gpufleet/vllm/pp
    unit_path: /etc/systemd/system/gpufleet-vllm-pp.service
    venv: /opt/gpufleet/vllm/0.32.0-cpu-0d85b6e70cf3
    model: sha256:47c13f3e64edcc41b898645074c1399354427ac2680761f5ba1a6c9801e4d294
    model_path: /var/lib/gpufleet/models/kimi-r2
    state: snapshot
    rollout: {id: "20261205T150000Z", replica: pp}
"""

RETURN = r"""
record:
  description:
    - The node's record after the task (C(current), C(previous), C(state), C(rollout), C(since)).
    - Null when the node has none.
  type: dict
  returned: always
in_place:
  description:
    - The revision of the files in place (C(id), C(venv), C(model), C(model_path), C(config)).
    - Null when a file is missing.
  type: dict
  returned: always
snapshot:
  description: The revision of the files in C(previous/); null when there is no snapshot.
  type: dict
  returned: always
"""

import json
import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_rollout as ro
from ansible_collections.gpufleet.inference.plugins.module_utils._model_fanout import atomic_write
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_model import file_sha256

SNAPSHOT = "previous"


def _files(path, unit_path):
    """{name in RESTORED: its path in place}."""
    found = {name: os.path.join(path, name) for name in ro.RESTORED if name != "unit"}
    found["unit"] = unit_path
    return found


def _config(files):
    """The config digest of the files in place, or None when one is missing."""
    if not all(os.path.isfile(files[name]) for name in ro.DIGESTED):
        return None
    return ro.config_digest({name: file_sha256(files[name]) for name in ro.DIGESTED})


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ValueError("cannot read %s: %s" % (path, exc)) from None


def _write_json(path, data):
    atomic_write(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"))


def _copy(src, dest):
    """Copy src over dest atomically, keeping src's mode."""
    with open(src, "rb") as handle:
        atomic_write(dest, handle.read(), stat.S_IMODE(os.stat(src).st_mode))


class Node:
    """The replica's files on this node: in place, their snapshot and the record."""

    def __init__(self, params):
        self.files = _files(params["path"], params["unit_path"])
        self.record_path = os.path.join(params["path"], ro.REVISION_FILE)
        self.snap_dir = os.path.join(params["path"], SNAPSHOT)
        self.snap_files = {name: os.path.join(self.snap_dir, name) for name in ro.RESTORED}
        self.before = _read_json(self.record_path)
        self.config = _config(self.files)
        current = (self.before or {}).get("current") or {}
        if self.config is None:
            self.in_place = None
        elif current.get("config") == self.config:
            self.in_place = current
        else:
            self.in_place = ro.revision("", "", "", self.config)
        self.target = (params["venv"], params["model"], params["model_path"])
        self.snapshot = (_read_json(os.path.join(self.snap_dir, ro.REVISION_FILE)) or {}).get("revision")

    def write(self, new):
        _write_json(self.record_path, new)


def snapshot(node, rollout, now, check_mode):
    # A switch cut off before its record: the snapshot holds what the node last served with.
    before = node.before or {}
    keep = bool(before.get("state") == "switching" and node.snapshot)
    served = node.snapshot if keep else node.in_place
    new = ro.record(served, before.get("previous") if keep else before.get("current"), "switching", rollout, now)
    if not check_mode:
        if not keep:
            os.makedirs(node.snap_dir, mode=0o700, exist_ok=True)
            for name in ro.RESTORED:
                if os.path.isfile(node.files[name]):
                    _copy(node.files[name], node.snap_files[name])
                elif os.path.exists(node.snap_files[name]):
                    os.unlink(node.snap_files[name])
            _write_json(os.path.join(node.snap_dir, ro.REVISION_FILE), {"revision": node.in_place})
        node.write(new)
    return {"changed": True, "record": new, "snapshot": served}


def recorded(node, rollout, now, check_mode):
    new = ro.record(
        ro.revision(*node.target, node.config),
        node.snapshot or (node.before or {}).get("previous"),
        "serving",
        rollout,
        now,
    )
    fields = ("current", "previous", "state")
    if node.before and all(node.before.get(k) == new[k] for k in fields):
        return {}
    if not check_mode:
        node.write(new)
    return {"changed": True, "record": new, "in_place": new["current"]}


def restored(node, rollout, now, check_mode):
    if not node.snapshot or not all(os.path.isfile(node.snap_files[name]) for name in ro.DIGESTED):
        raise ValueError("no snapshot to restore in %s: the node was never switched by a rollout" % node.snap_dir)
    new = ro.record(node.snapshot, node.in_place, "rolled_back", rollout, now)
    if not check_mode:
        for name in ro.RESTORED:
            if os.path.isfile(node.snap_files[name]):
                _copy(node.snap_files[name], node.files[name])
        node.write(new)
    return {"changed": True, "record": new, "in_place": node.snapshot}


STATES = {"snapshot": snapshot, "recorded": recorded, "restored": restored}


def run(params, check_mode):
    node = Node(params)
    result = {"changed": False, "record": node.before, "in_place": node.in_place, "snapshot": node.snapshot}
    state = params["state"]
    if state == "read":
        return result
    if node.in_place is None and state != "restored":
        raise ValueError(
            "the replica's files are not all in place (%s): the vllm role configures the replica first"
            % ", ".join(node.files[name] for name in ro.DIGESTED if not os.path.isfile(node.files[name]))
        )
    result.update(STATES[state](node, params["rollout"] or None, time.time(), check_mode))
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "unit_path": {"type": "path", "required": True},
            "venv": {"type": "str", "default": ""},
            "model": {"type": "str", "default": ""},
            "model_path": {"type": "str", "default": ""},
            "state": {"type": "str", "choices": ["read", "snapshot", "recorded", "restored"], "default": "read"},
            "rollout": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    try:
        result = run(module.params, module.check_mode)
    except (ValueError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
