#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Documentation of the model_fanout_wait action; the work is in plugins/action/model_fanout_wait.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: model_fanout_wait
short_description: Wait for a model fan-out started with async, printing its progress
version_added: 0.1.0
description:
  - Waits for a M(gpufleet.inference.model_fanout) job started with C(async) and C(poll=0), and
    every O(interval) seconds prints one line per host with the files and bytes in place, the
    share done, the rate and the bytes from each source, read from the job's status file.
  - The lines go to the standard error of C(ansible-playbook), as progress does, so that a
    machine-readable standard output (the C(json) callback) stays one document.
  - Returns the job's own result when it ends (the figures M(gpufleet.inference.model_fanout)
    returns), and fails with its message when it failed, or when it has not ended within
    O(timeout) seconds.
  - Removes the job's async result file once it has read it.
  - An action plugin, run on the controller, that reads the host's job status with modules.
author:
  - gpufleet.inference developers (@gpufleet)
options:
  jid:
    description: The job id that the C(async) task registered (C(ansible_job_id)).
    type: str
    required: true
  path:
    description: The model directory the job fills (its status is C(<path>.staging/status.json)).
    type: path
    required: true
  status_path:
    description: The job's status file, where it is not the default of O(path).
    type: path
    default: ""
  timeout:
    description: Seconds to wait for the job to end.
    type: int
    required: true
  interval:
    description: Seconds between two progress lines.
    type: int
    default: 10
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: none
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
"""

EXAMPLES = r"""
- name: Start fetching this node's files
  gpufleet.inference.model_fanout:
    path: /var/lib/gpufleet/models/model
    files: "{{ __plan.files }}"
    sources: "{{ __plan.sources }}"
  async: 21660
  poll: 0
  register: __fetch

- name: Wait for this node's files, showing the progress
  gpufleet.inference.model_fanout_wait:
    jid: "{{ __fetch.ansible_job_id }}"
    path: /var/lib/gpufleet/models/model
    timeout: 21660
"""

RETURN = r"""
files_done:
  description: Files in place when the job ended; the other figures are those of M(gpufleet.inference.model_fanout).
  returned: when the job ended
  type: int
"""
