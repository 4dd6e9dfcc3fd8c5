# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host_tuning role's input rules, for its preflight (the _role_problems filter): the NICs
exist, the sysctl_apply module's check-mode verdict on the kernel settings, and the ring and
channel requests nic_tuning would take (module_utils/_ethtool.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.inference.plugins.module_utils import _ethtool

# What an absent key can be told: a default of the role the kernel lacks is removed, not renamed.
ABSENT_HINT = "; or remove it with null in host_tuning_sysctl_overrides"


def _sorted_names(names):
    # As Jinja's sort filter orders them by default: ignoring case.
    return sorted((str(name) for name in names), key=str.lower)


def interface_problems(interfaces, present, host):
    if not isinstance(interfaces, (list, tuple)):
        return ["host_tuning_interfaces=%s must be a list of the NICs of %s" % (interfaces, host)]
    missing = []
    for name in interfaces:
        if name not in present and name not in missing:
            missing.append(name)
    if not missing:
        return []
    return [
        "host_tuning_interfaces=%s names %s, which %s does not have (it has %s)."
        % (interfaces, ", ".join(str(name) for name in missing), host, ", ".join(_sorted_names(present)))
    ]


def sysctl_problems(live, host):
    """The refusal of the sysctl_apply module run in check mode (live: its registered result)."""
    live = live if isinstance(live, dict) else {}
    if "msg" not in live:
        return []
    hint = ABSENT_HINT if live.get("absent") else ""
    return ["host_tuning_sysctls / host_tuning_sysctl_overrides on %s: %s%s." % (host, live["msg"], hint)]


def settings_problems(settings):
    """Every problem of the host_tuning settings at once.

    settings: host_tuning_interfaces, host_tuning_rings and host_tuning_channels; the host's
    interfaces (ansible_facts['interfaces']) and inventory_hostname; sysctl_check, the registered
    result of sysctl_apply in check mode over the merged sysctls."""
    host = settings["inventory_hostname"]
    problems = interface_problems(settings["host_tuning_interfaces"], settings["interfaces"] or [], host)
    problems += sysctl_problems(settings["sysctl_check"], host)
    for kind in ("rings", "channels"):
        variable = "host_tuning_" + kind
        problems += _ethtool.request_problems(settings[variable], kind, variable)
    return problems
