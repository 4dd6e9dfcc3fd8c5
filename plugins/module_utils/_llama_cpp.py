# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llama.cpp facts the roles build on: flag dialects, argument validation, build identity.

Facts (llama.cpp's common/arg.cpp and tools/rpc at the pinned build, and their --help):
- The RPC worker target is `ggml-rpc-server`; older trees call it `rpc-server`.
- `-fa/--flash-attn` takes on|off|auto; older builds had a bare boolean `-fa`.
- `-lm/--load-mode` replaced `--no-mmap`, `--mlock` and `--mmap`.
- The RPC server has no authentication: it binds to one fabric address, never 0.0.0.0.

Everything here is pure, so the filters, the modules and the unit tests share it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import ipaddress
import re

from ansible_collections.gpufleet.inference.plugins.module_utils._render import check_text, ip_problem

LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")
FLASH_ATTN = ("on", "off", "auto")
LEGACY_MMAP_FLAGS = ("--no-mmap", "--mlock", "--mmap")
# Flags the llama_server role owns: passing them in llama_server_extra_args would duplicate
# them, and --api-key would put the secret into the unit file and the process list.
MANAGED_FLAGS = {
    "-m": "llama_server_model_path",
    "--model": "llama_server_model_path",
    "--rpc": "the llama_rpc_workers group",
    "--host": "llama_server_host",
    "--port": "llama_server_port",
    "--api-key": "llama_server_api_key",
    "--api-key-file": "llama_server_api_key",
    "-ngl": "llama_server_n_gpu_layers",
    "--gpu-layers": "llama_server_n_gpu_layers",
    "--n-gpu-layers": "llama_server_n_gpu_layers",
    "-ncmoe": "llama_server_n_cpu_moe",
    "--n-cpu-moe": "llama_server_n_cpu_moe",
    "-ot": "llama_server_override_tensor",
    "--override-tensor": "llama_server_override_tensor",
    "-c": "llama_server_ctx_size",
    "--ctx-size": "llama_server_ctx_size",
    "-np": "llama_server_parallel",
    "--parallel": "llama_server_parallel",
    "-lm": "llama_server_load_mode",
    "--load-mode": "llama_server_load_mode",
    "-fa": "llama_server_flash_attn",
    "--flash-attn": "llama_server_flash_attn",
}


# Flags the llama_rpc_worker role owns (tools/rpc/rpc-server.cpp, print_usage).
RPC_MANAGED_FLAGS = {
    "-H": "llama_rpc_bind_address",
    "--host": "llama_rpc_bind_address",
    "-p": "llama_rpc_port",
    "--port": "llama_rpc_port",
    "-t": "llama_rpc_threads",
    "--threads": "llama_rpc_threads",
    "-d": "llama_rpc_devices",
    "--device": "llama_rpc_devices",
    "-c": "llama_rpc_cache",
    "--cache": "llama_rpc_cache",
}

# An option line of --help: llama-server's (common/arg.cpp, common_params_print_usage) starts at
# column 0, rpc-server's (tools/rpc/rpc-server.cpp, print_usage) after two spaces; description
# continuation lines are indented far deeper, so they never match.
_HELP_OPTION = re.compile(r"^ {0,4}(-[^\s,].*)$")
_FLAG = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_NUMBER = re.compile(r"^-(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?\Z")


def help_flags(help_text):
    """The flags a llama.cpp binary's --help lists: {flag: takes_value}.

    An option line is its spellings separated by commas, then an optional placeholder for the
    value (``N``, ``FNAME``, ``[on|off|auto]``, ``<dev1,dev2,...>``), then the description after
    a run of spaces: ``-ngl,  --gpu-layers, --n-gpu-layers N      max. number of layers...``.
    """
    flags = {}
    for line in (help_text or "").splitlines():
        match = _HELP_OPTION.match(line.rstrip())
        if not match:
            continue
        head = re.split(r"\s{2,}(?=[^-\s])", match.group(1), maxsplit=1)[0]
        spellings, takes_value = [], False
        for part in head.split(","):
            words = part.split()
            if not words or not _FLAG.match(words[0]):
                break
            spellings.append(words[0])
            if len(words) > 1:
                # A placeholder follows the last spelling; it may hold commas (<dev1,dev2,...>).
                takes_value = True
                break
        for flag in spellings:
            flags[flag] = takes_value
    return flags


def check_flags(args, flags, variable, managed=None, binary="llama-server"):
    """Problems for pass-through arguments that the build's --help does not list.

    args: the list (llama_server_extra_args, llama_rpc_extra_args); flags: help_flags() of the
    binary being deployed; managed: {flag: variable} the role sets itself (refused elsewhere, with
    their own message, and skipped here). ``--flag=value`` counts as ``--flag``; the word after a
    flag that takes a value is that value, never a flag; so is a negative number there.
    """
    managed = managed or {}
    problems = []
    # What the previous word leaves for this one: "value" (it is a value), "maybe" (an unknown
    # flag came before: a word without a dash is taken as its value), or None.
    pending = None
    for index, raw in enumerate(args):
        word = str(raw)
        is_flag = word.startswith("-") and not _NUMBER.match(word)
        if pending == "value" or (pending == "maybe" and not is_flag):
            pending = None
            continue
        pending = None
        if not is_flag:
            previous = str(args[index - 1]) if index else ""
            problems.append(
                "%s[%d]=%r is not a flag, and %s; put each flag first, then its value as the next item"
                % (variable, index, word, "%s takes no value" % previous if previous else "it comes first")
            )
            continue
        flag, sep, _value = word.partition("=")
        if flag in flags or flag in managed:
            pending = "value" if not sep and flags.get(flag, False) else None
            continue
        close = difflib.get_close_matches(flag, list(flags), n=1, cutoff=0.6)
        if close and close[0] in managed:
            hint = "the closest real flag is %s, which the role sets from %s" % (close[0], managed[close[0]])
        elif close:
            hint = "the closest real flag is %s" % close[0]
        else:
            hint = "see `%s --help` for the flags it takes" % binary
        problems.append(
            "%s[%d]=%r: %s is not a flag of the %s being deployed (its --help does not list it); %s"
            % (variable, index, word, flag, binary, hint)
        )
        pending = None if sep else "maybe"
    return problems


def cuda_architecture(compute_cap):
    """'12.0' -> '120' (Blackwell), '9.0' -> '90' (Hopper), '8.9' -> '89' (Ada), '8.6' -> '86'."""
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", str(compute_cap))
    if not match:
        raise ValueError("not a CUDA compute capability: %r" % (compute_cap,))
    return "%d%d" % (int(match.group(1)), int(match.group(2)))


def cuda_architectures(compute_caps):
    """Distinct CMAKE_CUDA_ARCHITECTURES values, sorted numerically, for the GPUs found."""
    return sorted({cuda_architecture(cap) for cap in compute_caps}, key=int)


def dialect_from_source(arg_cpp, rpc_cmakelists):
    """The flag dialect of a llama.cpp tree, from common/arg.cpp and tools/rpc/CMakeLists.txt."""
    target = re.search(r"set\s*\(\s*TARGET\s+([\w-]+)\s*\)", rpc_cmakelists or "")
    return {
        "rpc_server_binary": target.group(1) if target else "",
        "flash_attn_value": bool(re.search(r'"--flash-attn"\s*\}\s*,\s*"\[on\|off\|auto\]"', arg_cpp)),
        "load_mode": '"--load-mode"' in arg_cpp,
        "legacy_mmap_flags": '"--no-mmap"' in arg_cpp,
    }


def dialect_from_help(help_text, rpc_server_binary=""):
    """The flag dialect of a built llama-server, from its --help output."""
    return {
        "rpc_server_binary": rpc_server_binary,
        "flash_attn_value": bool(re.search(r"--flash-attn\s+\[on\|off\|auto\]", help_text)),
        "load_mode": bool(re.search(r"--load-mode\b", help_text)),
        "legacy_mmap_flags": bool(re.search(r"--no-mmap\b", help_text)),
    }


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _int_like(value):
    if _is_int(value):
        return True
    return isinstance(value, str) and re.match(r"^-?\d+\Z", value) is not None


def server_argv(settings, dialect, flags=None):
    """Validate the llama_server settings against a dialect and build llama-server's arguments.

    settings: model_path, rpc (list of 'host:port'), host, port, n_gpu_layers, n_cpu_moe,
    override_tensor (list), ctx_size, parallel, load_mode, flash_attn, extra_args (list).
    flags: help_flags() of the llama-server being deployed, or None while it is not installed;
    extra_args are checked against it.
    Returns (argv, problems); argv is only meaningful when problems is empty.
    """
    problems = []
    argv = ["--model", settings.get("model_path") or ""]
    if not settings.get("model_path"):
        problems.append("llama_server_model_path is empty; set it to the GGUF path on the coordinator")
    rpc = settings.get("rpc") or []
    if rpc:
        argv += ["--rpc", ",".join(rpc)]
    argv += ["--host", str(settings.get("host")), "--port", str(settings.get("port"))]
    if not settings.get("host"):
        problems.append("llama_server_host is empty; set it to 127.0.0.1, or to an address clients reach")
    port = settings.get("port")
    if not _int_like(port) or not 0 < int(port) < 65536:
        problems.append("llama_server_port=%r is not a TCP port; set it to 1..65535" % (port,))

    ngl = settings.get("n_gpu_layers")
    if ngl is not None:
        if str(ngl) in ("auto", "all") or (_int_like(ngl) and int(ngl) >= 0):
            argv += ["--n-gpu-layers", str(ngl)]
        else:
            problems.append("llama_server_n_gpu_layers=%r is invalid; use an integer >= 0, 'auto' or 'all'" % (ngl,))
    for name, flag, minimum in (
        ("n_cpu_moe", "--n-cpu-moe", 0),
        ("ctx_size", "--ctx-size", 0),
        ("parallel", "--parallel", 1),
    ):
        value = settings.get(name)
        if value is None:
            continue
        if _int_like(value) and int(value) >= minimum:
            argv += [flag, str(int(value))]
        else:
            problems.append("llama_server_%s=%r is invalid; use an integer >= %d" % (name, value, minimum))
    for rule in settings.get("override_tensor") or []:
        pattern, sep, buffer_type = str(rule).partition("=")
        if not sep or not pattern or not buffer_type:
            problems.append(
                "llama_server_override_tensor entry %r is not '<tensor regex>=<buffer type>'; "
                "for example 'blk\\.(1[0-9])\\.ffn_.*_exps\\.=CPU'" % (rule,)
            )
            continue
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append("llama_server_override_tensor entry %r has a bad regex: %s" % (rule, exc))
            continue
        argv += ["--override-tensor", str(rule)]

    problems += _flash_attn(settings.get("flash_attn"), dialect, argv)
    problems += _load_mode(settings.get("load_mode"), dialect, argv)
    problems += _extra_args(settings.get("extra_args") or [], dialect, argv)
    if flags and isinstance(settings.get("extra_args"), list):
        problems += check_flags(settings["extra_args"], flags, "llama_server_extra_args", MANAGED_FLAGS)
    problems += _control_characters(settings)
    return argv, problems


def server_plan(settings, dialect, workers, endpoints, addresses, subnet="", flags=None):
    """server_argv() for a coordinator and its RPC workers: --rpc lists every endpoint of the
    workers in order, and the problems also cover a coordinator without workers and a worker
    address outside the fabric subnet.

    workers: inventory names; endpoints and addresses: for each worker, what its llama_rpc_worker
    preflight published (llama_rpc_endpoints, llama_rpc_addresses). Raises ValueError when the
    three lists differ in length (a caller's mistake, not an input problem).
    Returns (argv, problems); argv is only meaningful when problems is empty."""
    problems = []
    if not workers:
        problems.append(
            "the coordinator has no RPC workers: the llama_rpc_workers group is empty or its hosts did not run "
            "the llama_rpc_worker role. Add the workers to the llama_rpc_workers group"
        )
    if not len(workers or []) == len(endpoints or []) == len(addresses or []):
        raise ValueError(
            "llama_server_argv: workers, endpoints and addresses must have one entry per worker, got %d, %d and %d"
            % (len(workers or []), len(endpoints or []), len(addresses or []))
        )
    rpc = []
    for worker, worker_endpoints, worker_addresses in zip(workers or [], endpoints or [], addresses or []):
        for address in worker_addresses or []:
            problem = check_fabric_address("llama_rpc_bind_address of %s" % worker, address, subnet)
            if problem:
                problems.append(problem)
        rpc += worker_endpoints or []
    argv, more = server_argv(dict(settings, rpc=rpc), dialect or {}, flags)
    return argv, problems + more


def _control_characters(settings):
    """Problems for values with newlines or other control characters: ExecStart is one unit-file
    line, so an embedded newline would start a directive of its own (ExecStartPre=+... as root)."""
    values = [("llama_server_model_path", settings.get("model_path")), ("llama_server_host", settings.get("host"))]
    for key in ("override_tensor", "extra_args"):
        entries = settings.get(key)
        if isinstance(entries, list):
            values += [("llama_server_%s[%d]" % (key, index), entry) for index, entry in enumerate(entries)]
    problems = []
    for origin, value in values:
        if value is None:
            continue
        try:
            check_text(value, origin)
        except ValueError as exc:
            problems.append(str(exc))
    return problems


def _flash_attn(value, dialect, argv):
    if value is None:
        return []
    if isinstance(value, bool):
        value = "on" if value else "off"
    if not isinstance(value, str) or value not in FLASH_ATTN:
        return ["llama_server_flash_attn=%r is invalid; use one of on, off, auto" % (value,)]
    if dialect.get("flash_attn_value"):
        argv += ["--flash-attn", value]
    elif value == "on":
        argv.append("--flash-attn")
    elif value == "auto":
        return [
            "llama_server_flash_attn=auto needs a build whose -fa takes on|off|auto; this one has a bare -fa. "
            "Use on or off, or build a newer llama.cpp"
        ]
    return []


def _load_mode(value, dialect, argv):
    if value is None:
        return []
    if value not in LOAD_MODES:
        return ["llama_server_load_mode=%r is invalid; use one of %s" % (value, ", ".join(LOAD_MODES))]
    if dialect.get("load_mode"):
        argv += ["--load-mode", value]
        return []
    # --load-mode mlock is "no mmap, then mlock"; an old --mlock alone keeps mmap on (mmap+mlock).
    legacy = {
        "none": ["--no-mmap"],
        "mlock": ["--no-mmap", "--mlock"],
        "mmap+mlock": ["--mlock"],
        "mmap": [],
        "auto": [],
    }
    if value not in legacy:
        return ["llama_server_load_mode=%s needs a build with --load-mode; this one only has --no-mmap/--mlock" % value]
    argv += legacy[value]
    return []


def _extra_args(extra, dialect, argv):
    problems = []
    if not isinstance(extra, list):
        return ["llama_server_extra_args must be a list of arguments, got %r" % (extra,)]
    for index, raw in enumerate(extra):
        flag = str(raw).split("=", 1)[0]
        following = str(extra[index + 1]) if index + 1 < len(extra) else None
        if flag in MANAGED_FLAGS:
            if flag in ("-fa", "--flash-attn") and dialect.get("flash_attn_value") and following not in FLASH_ATTN:
                problems.append(
                    "llama_server_extra_args has a bare %s: this llama.cpp's -fa takes on|off|auto. "
                    "Remove it and set llama_server_flash_attn: on" % flag
                )
            else:
                problems.append(
                    "llama_server_extra_args has %s, which the role sets from %s; remove it and set that instead"
                    % (flag, MANAGED_FLAGS[flag])
                )
        elif flag in LEGACY_MMAP_FLAGS and dialect.get("load_mode") and not dialect.get("legacy_mmap_flags"):
            # An old --mlock kept mmap on, so its --load-mode equivalent is mmap+mlock.
            replacement = {"--no-mmap": "none", "--mlock": "mmap+mlock", "--mmap": "mmap"}[flag]
            problems.append(
                "llama_server_extra_args has %s, which this llama.cpp replaced with --load-mode. "
                "Remove it and set llama_server_load_mode: %s" % (flag, replacement)
            )
    argv += [str(arg) for arg in extra]
    return problems


GGML_DEVICE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*\Z")


def check_rpc_devices(devices):
    """Problems for llama_rpc_devices entries that are not ggml device names (CUDA0, Vulkan1)."""
    if not isinstance(devices, list):
        return ["llama_rpc_devices must be a list of ggml device names like CUDA0, got %r" % (devices,)]
    return [
        "llama_rpc_devices[%d]=%r is not a ggml device name; use names like CUDA0 or Vulkan1, as "
        "`llama-server --list-devices` prints them on that host" % (index, device)
        for index, device in enumerate(devices)
        if not isinstance(device, str) or not GGML_DEVICE.match(device)
    ]


def check_rpc_sources(sources):
    """Problems for llama_rpc_allowed_sources entries that are not single IP addresses."""
    if not isinstance(sources, list):
        return ["llama_rpc_allowed_sources must be a list of the coordinators' fabric IPs, got %r" % (sources,)]
    return [
        "llama_rpc_allowed_sources[%d]=%r %s; the firewall admits single addresses "
        "(the coordinators' fabric IPs, like 10.10.0.1), not names or networks" % (index, source, ip_problem(source))
        for index, source in enumerate(sources)
        if ip_problem(source)
    ]


def rpc_instances(devices, per_device, gpu_count, base_port):
    """The RPC servers of one worker: [{'port': int, 'device': str or ''}]."""
    if per_device:
        devices = list(devices or []) or ["CUDA%d" % i for i in range(int(gpu_count or 0))]
    if not per_device or not devices:
        return [{"port": int(base_port), "device": ",".join(devices or [])}]
    return [{"port": int(base_port) + i, "device": device} for i, device in enumerate(devices)]


def rpc_server_argv(instance, address, threads, cache=False, extra_args=None, flags=None):
    """The RPC server's arguments for one planned instance, and the problems of extra_args
    (rpc_extra_args_problems())."""
    argv = ["--host", str(address), "--port", str(instance["port"]), "--threads", str(threads)]
    if instance.get("device"):
        argv += ["--device", instance["device"]]
    if cache:
        argv.append("--cache")
    extra = [] if extra_args is None else extra_args
    problems = rpc_extra_args_problems(extra, flags)
    if not isinstance(extra, list):
        return argv, problems
    return argv + [str(arg) for arg in extra], problems


def rpc_extra_args_problems(extra, flags=None):
    """Problems of llama_rpc_extra_args: not a list, a flag the role sets, a control character,
    or, when the flags of the deployed binary are known (help_flags()), a flag its --help does not
    list."""
    if not isinstance(extra, list):
        return ["llama_rpc_extra_args must be a list of arguments, got %r" % (extra,)]
    problems = []
    for index, raw in enumerate(extra):
        try:
            check_text(raw, "llama_rpc_extra_args[%d]" % index)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        flag = str(raw).split("=", 1)[0]
        if flag in RPC_MANAGED_FLAGS:
            problems.append(
                "llama_rpc_extra_args has %s, which the role sets from %s; remove it and set that instead"
                % (flag, RPC_MANAGED_FLAGS[flag])
            )
    if flags and not problems:
        problems += check_flags(extra, flags, "llama_rpc_extra_args", RPC_MANAGED_FLAGS, binary="RPC server")
    return problems


def rpc_address_problem(address, subnet=""):
    """What is wrong with llama_rpc_bind_address (check_fabric_address(), or an IPv6 address,
    which ggml-rpc cannot take), or ''."""
    problem = check_fabric_address("llama_rpc_bind_address", address, subnet)
    if problem or ":" not in str(address):
        return problem
    return (
        "llama_rpc_bind_address=%s is IPv6; ggml-rpc reads --rpc endpoints as HOST:PORT split at the first ':', "
        "so IPv6 endpoints cannot work. Use the node's IPv4 fabric address" % (address,)
    )


def rpc_port_problem(port, count=1):
    """What is wrong with llama_rpc_port as the first of count consecutive ports, or ''."""
    try:
        first = int(port)
    except (TypeError, ValueError):
        return "llama_rpc_port=%r is not a TCP port; set it to 1..65535" % (port,)
    if not 0 < first < 65536:
        return "llama_rpc_port=%r is not a TCP port; set it to 1..65535" % (first,)
    if first + count - 1 > 65535:
        return "llama_rpc_port=%s leaves no room for %d servers" % (first, count)
    return ""


def rpc_problems(
    address, port, per_device=False, devices=None, gpu_count=0, subnet="", sources=None, extra_args=None, flags=None
):
    """Every problem of one worker's RPC servers at once: the bind address, the devices, the
    allowed sources, the ports, and the extra arguments (None skips them)."""
    problems = [rpc_address_problem(address, subnet)]
    devices = [] if devices is None else devices
    problems += check_rpc_devices(devices)
    problems += check_rpc_sources([] if sources is None else sources)
    count = len(rpc_instances(devices, per_device, gpu_count, 1)) if isinstance(devices, list) else 1
    problems.append(rpc_port_problem(port, count))
    if extra_args is not None:
        problems += rpc_extra_args_problems(extra_args, flags)
    return [problem for problem in problems if problem]


def rpc_endpoint(address, port):
    ip = ipaddress.ip_address(str(address))
    return ("[%s]:%d" if ip.version == 6 else "%s:%d") % (ip, int(port))


def check_fabric_address(name, address, subnet):
    """A problem string when address is not an IP inside subnet (when one is given), else ''."""
    try:
        ip = ipaddress.ip_address(str(address))
    except ValueError:
        return "%s=%r is not an IP address; set it to the node's fabric address" % (name, address)
    if ip.is_unspecified:
        return (
            "%s=%s would expose the unauthenticated RPC server on every interface; "
            "set it to the node's fabric address" % (name, ip)
        )
    if subnet:
        try:
            network = ipaddress.ip_network(str(subnet), strict=False)
        except ValueError:
            return "gpufleet_fabric_subnet=%r is not a network; set it like 10.10.0.0/24" % (subnet,)
        if ip not in network:
            return (
                "%s=%s is outside the fabric subnet %s (gpufleet_fabric_subnet); the RPC traffic must stay "
                "on the fabric. Use the node's fabric address" % (name, ip, network)
            )
    return ""


def format_problems(problems):
    return "\n".join("- %s" % problem for problem in problems)
