# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_config filter: a thin wrapper over module_utils/_vllm_catalogue.py."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: _vllm_config
short_description: Validate pass-through vLLM flags and build the vllm serve --config mapping
version_added: 0.1.0
description:
  - Checks O(_input), the operator's extra C(vllm serve) flags, against the flag catalogue of one
    vLLM release, generated from that release's own argument parser (docs/vllm-flags.md).
  - Keys may use dashes or underscores, with or without leading C(--); short aliases (C(-q)) and
    negative forms (C(no-enforce-eager), C(disable-prefix-caching) on 0.33) are folded into the
    canonical long name. A C(null) value leaves the flag at vLLM's default and is dropped.
  - Fails with one line per problem, all at once. Unknown flags get the closest real one; flags
    vLLM removed or never had (C(swap-space), C(worker-use-ray), C(moe-top-k), ...) get the
    replacement; flags the role sets itself name the role variable to use; values are checked
    against the flag's type and choices.
options:
  _input:
    description: Extra flags, a mapping of long flag names to values.
    type: dict
    required: true
  version:
    description: The vLLM version whose catalogue applies.
    type: str
    choices: ['0.32.0', '0.33.0']
    required: true
  owned:
    description:
      - Flags the caller sets itself, mapped to the variable to use instead (C(null) for none).
      - Defaults to the flags the C(gpufleet.inference.vllm) role owns (parallel sizes, multi-node
        launch, API host/port/key, model, served name, shutdown timeout, C(config)).
    type: dict
"""

EXAMPLES = r"""
- name: Build the validated vllm serve --config mapping
  ansible.builtin.set_fact:
    __vllm_config: "{{ vllm_args | gpufleet.inference._vllm_config(version='0.33.0') }}"
"""

RETURN = r"""
_value:
  description:
    - The mapping to write as the C(vllm serve --config) YAML file, keyed by long flag names
      without dashes (C(max-num-batched-tokens)).
    - JSON-valued flags (C(compilation-config)) given as JSON text come back as mappings.
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_catalogue import (
    format_problems,
    validate,
    versions,
)


def vllm_config(args, version, owned=None):
    if str(version) not in versions():
        raise AnsibleFilterError(
            "gpufleet.inference._vllm_config: no flag catalogue for vLLM %r; shipped: %s"
            % (version, ", ".join(versions()))
        )
    config, problems = validate(args, str(version), owned=owned)
    if problems:
        raise AnsibleFilterError(format_problems(problems, version))
    return config


class FilterModule:
    def filters(self):
        return {"_vllm_config": vllm_config}
