# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_rpc_worker role's input rules (the _role_problems filter): the firewall, the threads,
and the plan of the RPC servers that the llama_rpc_instances filter then builds (bind address,
devices, allowed sources, ports, extra arguments), with the same rules (_llama_cpp.rpc_problems).

The settings are the role's variables by name, plus ``gpufleet_fabric_subnet`` and what the
llama_cpp role published on the host: ``llama_cpp_gpu_count`` and ``llama_cpp_rpc_server_flags``."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _render
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import rpc_problems

WHOLE = re.compile(r"^[0-9]+\Z")


def settings_problems(settings):
    problems = []
    action = settings.get("llama_rpc_firewall_action")
    if action not in ("drop", "reject"):
        problems.append("llama_rpc_firewall_action=%s must be drop or reject" % (action,))
    threads = settings.get("llama_rpc_threads")
    if not WHOLE.match(str(threads)):
        problems.append("llama_rpc_threads=%s must be a whole number, 0 for all CPUs" % (threads,))
    sources = settings.get("llama_rpc_allowed_sources")
    if _render.ansible_bool(settings.get("llama_rpc_firewall")) and not sources:
        problems.append(
            "llama_rpc_allowed_sources is empty with the firewall on: the llama_coordinator group is empty or its "
            "hosts lack gpufleet_fabric_address; list the coordinators' fabric IPs, or set llama_rpc_firewall: false"
        )
    problems += rpc_problems(
        settings.get("llama_rpc_bind_address"),
        settings.get("llama_rpc_port"),
        per_device=_render.ansible_bool(settings.get("llama_rpc_per_device")),
        devices=settings.get("llama_rpc_devices"),
        gpu_count=_render.jinja_int(settings.get("llama_cpp_gpu_count")),
        subnet=settings.get("gpufleet_fabric_subnet") or "",
        sources=sources if sources is not None else [],
        extra_args=settings.get("llama_rpc_extra_args") if settings.get("llama_rpc_extra_args") is not None else [],
        flags=settings.get("llama_cpp_rpc_server_flags") or None,
    )
    return problems
