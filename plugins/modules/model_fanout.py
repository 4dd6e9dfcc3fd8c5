#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fetch this host's model files from its peers with rsync, each verified against the manifest."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_fanout
short_description: Fetch a model's files from peer hosts with rsync and verify each one
version_added: 0.1.0
description:
  - Fetches the files in O(files) into O(path) with rsync, each from the first source in
    O(sources) that has it, so that a model copied onto one staging host reaches every host of a
    cluster over the fabric, the number of holders growing as it goes, rather than every host
    pulling from one place.
  - Every received file is checked against its size and sha256 before it enters O(path); a
    corrupted or truncated file is deleted and fetched again from the next source, and a source
    that fails or delivers nothing for O(stall_timeout) seconds is left for the next one.
  - An interrupted run resumes. Files already verified are kept without reading them again (a
    ledger beside O(path) records their size, time and sha256) and rsync continues a half-received
    file from its C(--partial-dir).
  - Files in O(path) that neither O(files) nor O(generated) name are removed (O(prune)), and the
    O(generated) files, such as a pipeline stage's own C(model.safetensors.index.json), are written.
  - Progress (files, bytes, rate, bytes per source) is written to O(status_path) while it works.
  - Meant to run with C(async) and C(poll=0) on every host at once, since each host waits for
    the files of the host before it.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.peer_rsync
options:
  path:
    description: The model directory on this host.
    type: path
    required: true
  files:
    description: The files this host holds, as in the manifest.
    type: list
    elements: dict
    required: true
  sources:
    description:
      - For each file path, where it is fetched from, in order. A source is a dict with C(name)
        (shown in results), C(host) (an address reached over ssh; empty for this host) and C(path)
        (the directory; over ssh, relative to the C(rrsync) root of the source).
      - In check mode a file may have no source, to ask what a directory lacks.
    type: dict
    required: true
  generated:
    description: Files written here rather than fetched, path -> C(content) and C(sha256).
    type: dict
    default: {}
  bwlimit:
    description: rsync's C(--bwlimit) in KiB/s per transfer, so that staging leaves room for serving traffic; 0 is none.
    type: int
    default: 0
  stall_timeout:
    description: Seconds a source may deliver nothing while files wait on it before they go to the next source.
    type: int
    default: 600
  timeout:
    description: Seconds the whole fetch may take.
    type: int
    default: 21600
  prune:
    description: Remove files in O(path) that the manifest does not name.
    type: bool
    default: true
  status_path:
    description: Where the progress is written; empty means C(<path>.staging/status.json).
    type: path
    default: ""
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: >-
      Check mode reports the files still to fetch (by name and size, without reading them), the
      bytes they need and the free bytes of the filesystem; nothing is written.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Fetch this node's stage of the model from the host before it
  gpufleet.inference.model_fanout:
    path: /var/lib/gpufleet/models/model
    files: "{{ __plan.files }}"
    sources: "{{ __plan.sources }}"
    ssh_key: /root/.ssh/gpufleet-model-stage
    known_hosts: /var/lib/gpufleet/models/model.staging/known_hosts
  async: 21600
  poll: 0
  register: __fetch
"""

RETURN = r"""
files_total:
  description: Files this host holds when done.
  type: int
  returned: always
files_done:
  description: Files in place and verified.
  type: int
  returned: always
bytes_total:
  description: Bytes of those files.
  type: int
  returned: always
bytes_fetched:
  description: Bytes of the files fetched by this run.
  type: int
  returned: always
bytes_received:
  description: Bytes that crossed the wire (rsync C(--stats)); a resumed file's kept part is not counted.
  type: int
  returned: success
resumed_files:
  description: Files that were already in place and verified.
  type: int
  returned: always
refetched:
  description: Received files that failed the check, with the source and why; each was fetched again elsewhere.
  type: list
  elements: dict
  returned: always
by_source:
  description: Bytes fetched from each source name.
  type: dict
  returned: always
elapsed_s:
  description: Seconds the fetch took.
  type: float
  returned: always
rate_bytes_s:
  description: Bytes fetched per second.
  type: float
  returned: always
needed_bytes:
  description: Bytes still to fetch (check mode).
  type: int
  returned: check mode
free_bytes:
  description: Free bytes of the filesystem that holds O(path).
  type: int
  returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils import _model_fanout, _model_staging


def free_bytes(path):
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    stat = os.statvfs(probe)
    return stat.f_bavail * stat.f_frsize


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            files=dict(type="list", elements="dict", required=True),
            sources=dict(type="dict", required=True),
            generated=dict(type="dict", default={}),
            **_model_fanout.PEER_SSH_ARGUMENT_SPEC,
            bwlimit=dict(type="int", default=0),
            stall_timeout=dict(type="int", default=600),
            timeout=dict(type="int", default=21600),
            prune=dict(type="bool", default=True),
            status_path=dict(type="path", default=""),
        ),
        supports_check_mode=True,
    )
    params = module.params
    problems = _model_staging.entry_problems(params["files"], "files")
    # Check mode reads only this host: it may be asked what a directory lacks without any source.
    missing = sorted(item.get("path") for item in params["files"] if not params["sources"].get(item.get("path")))
    if missing and not problems and not module.check_mode:
        problems.append("files %s have no source" % ", ".join(missing))
    if problems:
        module.fail_json(msg="; ".join(problems))
    remote = any(source.get("host") for chain in params["sources"].values() for source in chain)
    ssh_e = ""
    # Check mode reads only this host, so it needs no key.
    if remote and not module.check_mode:
        if not (params["ssh_key"] and params["known_hosts"]):
            module.fail_json(msg="sources on other hosts need ssh_key and known_hosts")
        ssh_e = _model_fanout.ssh_command(
            module.get_bin_path("ssh", required=True),
            params["ssh_key"],
            params["known_hosts"],
            params["ssh_user"],
            params["ssh_port"],
            os.path.dirname(params["known_hosts"]),
        )
    rsync = module.get_bin_path("rsync", required=not module.check_mode) or "rsync"
    fetch = _model_fanout.Fetch(
        params["path"],
        params["files"],
        params["sources"],
        generated=params["generated"],
        rsync=rsync,
        ssh_e=ssh_e,
        status_path=params["status_path"] or None,
        stall_s=params["stall_timeout"],
        timeout_s=params["timeout"],
        prune=params["prune"],
        rsync_args=["--bwlimit=%d" % params["bwlimit"]] if params["bwlimit"] else [],
    )
    try:
        changed, result = fetch.run(check_mode=module.check_mode)
    except _model_fanout.FetchError as exc:
        module.fail_json(msg=str(exc), **fetch.result)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot fetch into %s: %s" % (params["path"], exc), **fetch.result)
    result["free_bytes"] = free_bytes(params["path"])
    if module.check_mode:
        sizes = dict((item["path"], item["size"]) for item in params["files"])
        result["needed_bytes"] = sum(sizes[path] for path in result["pending"])
    module.exit_json(changed=changed, **result)


if __name__ == "__main__":
    main()
