# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ssh options of the modules that fetch from peer hosts with rsync (model_fanout, vllm_cache_seed)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
requirements:
  - rsync on this host and its sources; C(rrsync) on the sources restricts the job's key.
options:
  ssh_key:
    description: The private key of this job.
    type: path
    default: ""
  known_hosts:
    description: The known_hosts file holding the sources' host keys.
    type: path
    default: ""
  ssh_user:
    description: The user rsync logs in as on the sources.
    type: str
    default: root
  ssh_port:
    description: The sources' ssh port.
    type: int
    default: 22
"""
