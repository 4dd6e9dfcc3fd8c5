#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Make the live kernel settings match the requested ones, writing only those that differ."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: sysctl_apply
short_description: Set live kernel settings under /proc/sys, only those that differ, with a read-back
version_added: 0.1.0
description:
  - Checks every key and value of O(sysctls), reads the live values from O(proc_root), and writes
    only the ones that differ. Each write is read back; a value the kernel did not keep is a failure.
  - A key the kernel does not have fails the task, naming it, before anything is written (a typo, or a
    kernel module that is not loaded).
  - In a container (O(container) set), which shares its host's kernel, a refused write and an absent
    C(net.core.*) key (the kernel keeps most of them for the host's network namespace) are reported in
    RV(refused) and RV(hidden) instead of failing; they apply where the task runs on the host itself.
  - It does not persist anything; write a C(sysctl.d) file for the next boot as well.
author:
  - gpufleet.inference developers (@gpufleet)
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: full
options:
  sysctls:
    description:
      - The settings, keyed by dotted name (C(net.core.rmem_max)). A value is a number or space-separated
        numbers (C(4096 87380 16777216)); whitespace is compared normalised, as the kernel prints tabs.
    type: dict
    required: true
  container:
    description:
      - The container type when the task runs in a container, as the
        C(gpufleet.inference._container_kind) filter returns it; empty on a host or a VM.
    type: str
    default: ""
  proc_root:
    description: The C(/proc/sys) directory; another root is for tests.
    type: path
    default: /proc/sys
notes:
  - Writing needs root. Writing a file under C(/proc/sys) is what C(sysctl -w) does, see sysctl(8).
  - In check mode a container's key that is not writable is predicted as refused, not as a change.
"""

EXAMPLES = r"""
- name: Apply the kernel settings
  gpufleet.inference.sysctl_apply:
    sysctls:
      net.core.rmem_max: 16777216
      net.ipv4.tcp_rmem: "4096 87380 16777216"
    container: "{{ ansible_facts | gpufleet.inference._container_kind }}"

- name: Check that the kernel has every key, without writing
  gpufleet.inference.sysctl_apply:
    sysctls: "{{ my_sysctls }}"
  check_mode: true
  changed_when: false
"""

RETURN = r"""
written:
  description: The keys written (in check mode, that would be written).
  returned: always
  type: list
  elements: str
  sample: ["net.ipv4.tcp_rmem"]
refused:
  description: In a container, the keys whose write the kernel refused or did not keep, with the reason.
  returned: always
  type: dict
  sample: {"net.core.rmem_max": "the kernel refused the write: Permission denied"}
hidden:
  description: In a container, the C(net.core.*) keys its network namespace does not have.
  returned: always
  type: list
  elements: str
absent:
  description: The keys the kernel does not have (the task fails when there is one).
  returned: always
  type: list
  elements: str
live:
  description: The live values after the task, normalised; null for a key the kernel does not have.
  returned: always
  type: dict
  sample: {"net.ipv4.tcp_rmem": "4096 87380 16777216"}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils import _sysctl


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysctls=dict(type="dict", required=True),
            container=dict(type="str", default=""),
            proc_root=dict(type="path", default="/proc/sys"),
        ),
        supports_check_mode=True,
    )
    sysctls = module.params["sysctls"]
    container = module.params["container"] or ""
    proc_root = module.params["proc_root"]

    problems = _sysctl.input_problems(sysctls)
    if problems:
        module.fail_json(msg="; ".join(problems), problems=problems)

    try:
        live = _sysctl.read(proc_root, sorted(sysctls))
    except (IOError, OSError) as exc:
        module.fail_json(msg="could not read %s: %s" % (exc.filename or proc_root, exc.strerror or exc))
    planned = _sysctl.plan(sysctls, live, container)
    result = dict(changed=False, written=[], refused={}, hidden=planned["hidden"], absent=planned["absent"], live=live)
    if planned["absent"]:
        module.fail_json(
            msg="the kernel has no %s (no %s); check the name, or load the kernel module that provides it"
            % (", ".join(planned["absent"]), _sysctl.path_of(proc_root, planned["absent"][0])),
            **result,
        )

    before = dict(live)
    for key in planned["differ"]:
        if module.check_mode:
            if container and not _sysctl.writable(proc_root, key):
                result["refused"][key] = "not writable in this container"
            else:
                result["written"].append(key)
            continue
        reason = _sysctl.write(proc_root, key, sysctls[key])
        if reason is None:
            result["written"].append(key)
        elif container:
            result["refused"][key] = reason
        else:
            module.fail_json(msg="%s=%s: %s" % (key, _sysctl.normalize(sysctls[key]), reason), **result)

    if not module.check_mode and planned["differ"]:
        live.update(_sysctl.read(proc_root, planned["differ"]))
    else:
        live.update((key, _sysctl.normalize(sysctls[key])) for key in result["written"])
    result["changed"] = bool(result["written"])
    if module._diff:
        result["diff"] = dict(
            before_header=proc_root,
            after_header=proc_root,
            before=_sysctl.render(result["written"], before),
            after=_sysctl.render(result["written"], live),
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
