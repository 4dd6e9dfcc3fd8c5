# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_server role's input rules (the _role_problems filter): the model source, the API's
exposure and key, and llama-server's arguments with the RPC workers, checked by the same code
that then builds them (_llama_cpp.server_plan, behind the llama_server_argv filter).

The settings are the role's variables by name, plus ``gpufleet_fabric_subnet``, what the
llama_cpp role published on the coordinator (``llama_cpp_dialect``, ``llama_cpp_server_flags``)
and, one entry per worker of ``llama_server_workers``, what its llama_rpc_worker preflight
published (``llama_rpc_endpoints``, ``llama_rpc_addresses``). The API key is a secret: the
messages say what is wrong with it, never the key."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _render
from ansible_collections.gpufleet.inference.plugins.module_utils._apt_auth import masked
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import server_plan

CHECKSUM = re.compile(r"^sha256:[0-9a-fA-F]{64}\Z")
PRINTABLE = re.compile(r"^[!-~]+\Z")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# The llama_server_argv filter's settings, each from llama_server_<key>.
ARGV_KEYS = (
    "model_path", "host", "port", "n_gpu_layers", "n_cpu_moe", "override_tensor", "ctx_size", "parallel",
    "load_mode", "flash_attn", "extra_args",
)  # fmt: skip


def _text(value):
    return "" if value is None else str(value)


def settings_problems(settings):
    problems = (
        model_problems(settings) + exposure_problems(settings) + key_problems(settings.get("llama_server_api_key"))
    )
    _argv, more = server_plan(
        {key: settings.get("llama_server_" + key) for key in ARGV_KEYS},
        settings.get("llama_cpp_dialect") or {},
        settings.get("llama_server_workers") or [],
        settings.get("llama_rpc_endpoints") or [],
        settings.get("llama_rpc_addresses") or [],
        settings.get("gpufleet_fabric_subnet") or "",
        settings.get("llama_cpp_server_flags") or None,
    )
    return problems + more


def model_problems(settings):
    """One message per problem of the model's path, its two sources and its checksum."""
    problems = []
    path = settings.get("llama_server_model_path")
    if not isinstance(path, str) or not path.startswith("/"):
        problems.append(
            "llama_server_model_path=%s must be an absolute path, such as /var/lib/gpufleet/models/model.gguf" % (path,)
        )
    url, src = settings.get("llama_server_model_url"), settings.get("llama_server_model_src")
    if url and src:
        problems.append(
            "set at most one of llama_server_model_url (%s) and llama_server_model_src (%s)" % (masked(url), src)
        )
    checksum = settings.get("llama_server_model_checksum")
    if (url or src) and not (isinstance(checksum, str) and CHECKSUM.match(checksum)):
        problems.append(
            "llama_server_model_checksum=%s must be sha256:<64 hex digits> when the model is downloaded or copied "
            "(llama_server_model_url or llama_server_model_src)" % (checksum,)
        )
    return problems


def exposure_problems(settings):
    """An API served beyond the host needs a key, or a proxy in front that authenticates."""
    host = _text(settings.get("llama_server_host"))
    if (
        host in LOOPBACK
        or host.startswith("127.")
        or _text(settings.get("llama_server_api_key"))
        or _render.ansible_bool(settings.get("llama_server_allow_unauthenticated"))
    ):
        return []
    return [
        "llama_server_host=%s serves the API beyond this host, and llama_server_api_key is empty. Set "
        "llama_server_api_key, keep llama_server_host at 127.0.0.1, or set llama_server_allow_unauthenticated: true "
        "if a proxy in front does the authentication." % (settings.get("llama_server_host"),)
    ]


def key_problems(key):
    """What is wrong with the API key, without showing it; [] for no key."""
    key = _text(key)
    if not key:
        return []
    problems = []
    if "," in key:
        problems.append(
            "llama_server_api_key contains a comma: llama-server splits LLAMA_API_KEY at commas into several keys, "
            "each of which it then accepts alone. Use a key without commas"
        )
    if len(key) < 16:
        problems.append(
            "llama_server_api_key is %d characters long: use at least 16 (for example the output of: "
            "openssl rand -hex 24)" % len(key)
        )
    if not PRINTABLE.match(key):
        problems.append(
            "llama_server_api_key contains a space or a control character: use printable ASCII without spaces"
        )
    return problems
