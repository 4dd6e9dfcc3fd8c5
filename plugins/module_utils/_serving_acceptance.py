# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving acceptance: which load is sent to which endpoint, and how its results are judged.

The load generator is ``vllm bench serve`` (vLLM's own benchmark client); this file decides the
workload (a preset scaled by the role's variables), the points of a concurrency sweep or a
request-rate run for every replica and the front door, and judges what ``vllm bench serve
--save-result`` wrote against the targets and a saved baseline.

Facts it relies on (vLLM 0.32.0, vllm/benchmarks/serve.py):
- the result JSON holds ``completed``, ``duration``, ``request_throughput``,
  ``output_throughput``, ``total_token_throughput``, ``request_goodput`` (null without
  ``--goodput``), and ``mean_<m>_ms``, ``median_<m>_ms``, ``std_<m>_ms`` and ``p<P>_<m>_ms`` for
  m in ttft, tpot, itl, e2el and every P of ``--metric-percentiles``;
- goodput follows DistServe: a request is good when it meets every ``--goodput`` limit
  (``ttft:<ms>``, ``tpot:<ms>``, ``e2el:<ms>``), and goodput is good requests per second.
- vLLM's KV cache holds num_blocks blocks of block_size tokens; a request holds
  ceil(tokens / block_size) blocks, and the scheduler runs at most max-num-seqs requests.

Everything here is pure, so the filter, the module and the unit tests share it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math

from ansible_collections.gpufleet.inference.plugins.module_utils import _frontdoor, _render

SCHEMA = "gpufleet.inference/serving-acceptance/v1"
METRICS = ("ttft", "tpot", "itl", "e2el")
MODES = ("concurrency", "rate")
# Each preset's workload and targets. None means: from the capacity plan or the sweep rule.
# chat: an interactive user sees the first token within 2 s and reads at 10 tokens/s or more.
# throughput: 100 parallel requests of 512-token prompts and 1,024 generated tokens, the load the
#   articles quote for 8 GPUs; only the time per token matters to a batch client.
# long_context: one request at a time, the prompt doubling up to what the replica admits; the
#   first token of a long prompt waits for its whole prefill.
PROFILES = {
    "chat": {
        "prompt_tokens": 1024,
        "output_tokens": 256,
        "concurrency": None,
        "sweep_prompts": False,
        "ttft_ms": 2000.0,
        "tpot_ms": 100.0,
    },
    "throughput": {
        "prompt_tokens": 512,
        "output_tokens": 1024,
        "concurrency": [100],
        "sweep_prompts": False,
        "ttft_ms": 10000.0,
        "tpot_ms": 200.0,
    },
    "long_context": {
        "prompt_tokens": 1024,
        "output_tokens": 64,
        "concurrency": [1],
        "sweep_prompts": True,
        "ttft_ms": 30000.0,
        "tpot_ms": 200.0,
    },
}
P = "serving_acceptance_"
# The throughput at the saturation point is this share of the sweep's best.
SATURATED_SHARE = 0.9
# The largest values the variables accept: far beyond any cluster, they keep a typo from
# planning a run that never ends.
LIMITS = {"concurrency": 100000, "tokens": 10000000, "requests": 1000000, "rate": 100000.0}


class ServingError(ValueError):
    """Every problem found, one per line."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(ServingError, self).__init__("\n".join(self.problems))


def _number(value):
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _positive(problems, name, value, why, upper=None):
    number = _number(value)
    if number is None or number <= 0 or (upper is not None and number > upper):
        bound = " and at most %s" % _render._number(upper) if upper is not None else ""
        problems.append("%s%s=%s must be a number above 0%s (%s)" % (P, name, _render.shown(value), bound, why))
        return None
    return number


def _whole(problems, name, value, low, high, why):
    problem = _render.kind_problem("int", value, {"min": low, "max": high, "why": why})
    if problem:
        problems.append("%s%s=%s %s" % (P, name, _render.shown(value), problem))
        return None
    return int(value)


def _list(problems, name, value):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        problems.append("%s%s=%s must be a list, such as [1, 2, 4]" % (P, name, _render.shown(value)))
        return []
    return list(value)


def workload(settings):
    """The run's workload from the preset and the variables that override it:
    {profile, mode, prompt_tokens, output_tokens, concurrency, request_rates, prompt_lengths,
    requests_per_concurrency, min_requests, rate_duration_s, slo{percentile, ttft_ms, tpot_ms,
    min_goodput_rps, frontdoor_min_goodput_rps}, baseline_tolerance, saturation_factor}.
    Raises ServingError with every problem."""
    problems = []
    name = settings.get(P + "profile", "chat")
    preset = PROFILES.get(name) if isinstance(name, str) else None
    if preset is None:
        problems.append(
            "%sprofile=%s is not a preset; use one of %s, and scale it with %sprompt_tokens, %soutput_tokens "
            "and %sconcurrency" % (P, _render.shown(name), ", ".join(sorted(PROFILES)), P, P, P)
        )
        preset = PROFILES["chat"]
    mode = settings.get(P + "mode", "concurrency")
    if mode not in MODES:
        problems.append("%smode=%s must be one of %s" % (P, _render.shown(mode), ", ".join(MODES)))

    def given(key, default):
        value = settings.get(P + key)
        return default if value is None else value

    prompt = _whole(
        problems, "prompt_tokens", given("prompt_tokens", preset["prompt_tokens"]), 1, LIMITS["tokens"], "tokens"
    )
    output = _whole(
        problems, "output_tokens", given("output_tokens", preset["output_tokens"]), 1, LIMITS["tokens"], "tokens"
    )
    concurrency = []
    for value in _list(problems, "concurrency", given("concurrency", preset["concurrency"] or [])):
        number = _whole(problems, "concurrency", value, 1, LIMITS["concurrency"], "concurrent requests")
        if number is not None:
            concurrency.append(number)
    rates = []
    for value in _list(problems, "request_rates", settings.get(P + "request_rates")):
        number = _positive(problems, "request_rates", value, "requests per second", LIMITS["rate"])
        if number is not None:
            rates.append(number)
    if mode == "rate" and not rates and not problems:
        problems.append(
            "%smode='rate' needs %srequest_rates, the request rates to send (requests per second), "
            "such as [0.5, 1, 2]" % (P, P)
        )
    lengths = []
    for value in _list(problems, "prompt_lengths", settings.get(P + "prompt_lengths")):
        number = _whole(problems, "prompt_lengths", value, 1, LIMITS["tokens"], "prompt tokens")
        if number is not None:
            lengths.append(number)
    slo = {"percentile": _positive(problems, "slo_percentile", given("slo_percentile", 99), "a percentile", 100)}
    for key in ("ttft_ms", "tpot_ms"):
        value = given(key, preset[key])
        slo[key] = None if value is None else _positive(problems, key, value, "milliseconds; null sets no target")
    for key in ("min_goodput_rps", "frontdoor_min_goodput_rps"):
        value = settings.get(P + key)
        slo[key] = None if value is None else _positive(problems, key, value, "requests per second; null sets none")
    tolerance = _positive(
        problems, "baseline_tolerance", given("baseline_tolerance", 0.1), "the share of the baseline a run may lose", 1
    )
    factor = _positive(problems, "saturation_factor", given("saturation_factor", 2.0), "a ratio of concurrencies")
    if factor is not None and factor < 1:
        problems.append("%ssaturation_factor=%s must be 1 or more" % (P, _render.shown(factor)))
    per = _whole(
        problems,
        "requests_per_concurrency",
        given("requests_per_concurrency", 4),
        1,
        1000,
        "requests per concurrent request",
    )
    least = _whole(problems, "min_requests", given("min_requests", 8), 1, LIMITS["requests"], "requests per point")
    duration = _positive(problems, "rate_duration_s", given("rate_duration_s", 30), "seconds", 86400)
    if problems:
        raise ServingError(problems)
    if slo["percentile"] is not None and float(slo["percentile"]).is_integer():
        slo["percentile"] = int(slo["percentile"])
    return {
        "profile": name,
        "mode": mode,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "concurrency": concurrency,
        "request_rates": rates,
        "prompt_lengths": lengths or ([] if not preset["sweep_prompts"] else None),
        "requests_per_concurrency": per,
        "min_requests": least,
        "rate_duration_s": duration,
        "slo": slo,
        "baseline_tolerance": tolerance,
        "saturation_factor": factor,
    }


def plan_concurrency(capacity, tokens):
    """The requests a replica runs at once with tokens (prompt plus output) each: max-num-seqs,
    or fewer when the KV cache holds fewer; None without a plan."""
    if not capacity:
        return None
    seqs = capacity.get("max_num_seqs")
    blocks, size = capacity.get("num_blocks"), capacity.get("block_size")
    fits = None
    if blocks and size:
        fits = int(blocks) // math.ceil(float(tokens) / int(size))
    elif capacity.get("slots"):
        fits = int(capacity["slots"])
    values = [int(v) for v in (seqs, fits) if v is not None]
    return min(values) if values else None


def sweep(limit):
    """1, 2, 4, ... below limit, then limit itself."""
    points, value = [], 1
    while value < limit:
        points.append(value)
        value *= 2
    points.append(limit)
    return points


def _requests(load, concurrency=None, rate=None):
    if rate is not None:
        wanted = math.ceil(rate * load["rate_duration_s"])
    else:
        wanted = concurrency * load["requests_per_concurrency"]
    return max(load["min_requests"], wanted)


def _lengths(load, max_len):
    """The prompt lengths of a prompt sweep: doubling from prompt_tokens up to the longest prompt
    the replica admits with output_tokens."""
    longest = max_len - load["output_tokens"]
    if load["prompt_lengths"]:
        return list(load["prompt_lengths"])
    lengths, value = [], load["prompt_tokens"]
    while value < longest:
        lengths.append(value)
        value *= 2
    lengths.append(longest)
    return lengths


def points(load, target):
    """The points of one target (a replica or the front door), each a dict of name, concurrency,
    request_rate, prompt_tokens, output_tokens and num_prompts; raises ServingError when the
    workload cannot run on it (a prompt over max-model-len, a concurrency over the plan)."""
    problems = []
    _name, max_len = target["name"], target.get("max_model_len")
    prompts = [load["prompt_tokens"]]
    if load["prompt_lengths"] is None or load["prompt_lengths"]:
        if not max_len:
            problems.append(
                "%sprofile=%r sweeps the prompt up to the longest %s admits, but its max-model-len is unknown; "
                "give %sprompt_lengths" % (P, load["profile"], target["label"], P)
            )
        else:
            prompts = _lengths(load, int(max_len))
    for prompt in prompts:
        if max_len and prompt + load["output_tokens"] > int(max_len):
            problems.append(
                "%sprompt_tokens (%d) + %soutput_tokens (%d) = %d is over %s's max-model-len %d (%s); lower them, "
                "or raise the limit"
                % (
                    P,
                    prompt,
                    P,
                    load["output_tokens"],
                    prompt + load["output_tokens"],
                    target["label"],
                    int(max_len),
                    target.get("max_model_len_origin", "its capacity plan"),
                )
            )
    limit = plan_concurrency(target.get("capacity"), max(prompts) + load["output_tokens"])
    if load["mode"] == "rate":
        cap = max(load["concurrency"]) if load["concurrency"] else limit
        chosen = [(None, rate) for rate in load["request_rates"]]
    else:
        cap = None
        if load["concurrency"]:
            chosen = [(value, None) for value in load["concurrency"]]
        elif limit is None:
            problems.append(
                "%sconcurrency is empty, which sweeps up to the concurrency the capacity plan says %s holds, and "
                "there is no plan for it (vllm_capacity_plan); give %sconcurrency, such as [1, 2, 4, 8]"
                % (P, target["label"], P)
            )
            chosen = []
        else:
            chosen = [(value, None) for value in sweep(limit)]
    for value in [pair[0] for pair in chosen if pair[0] is not None] + ([cap] if cap else []):
        if limit is not None and value > limit:
            problems.append(
                "%sconcurrency=%d is over the %d concurrent requests %s holds with %d-token requests (%s); send at "
                "most %d, or give the replica more KV cache or max-num-seqs"
                % (
                    P,
                    value,
                    limit,
                    target["label"],
                    max(prompts) + load["output_tokens"],
                    target.get("capacity_origin", "its capacity plan"),
                    limit,
                )
            )
    if problems:
        raise ServingError(problems)
    out = []
    for prompt in prompts:
        for concurrency, rate in chosen:
            label = "c%d" % concurrency if rate is None else "r%s" % _render._number(rate)
            if len(prompts) > 1:
                label = "p%d-%s" % (prompt, label)
            out.append(
                {
                    "name": label,
                    "concurrency": concurrency if rate is None else cap,
                    "request_rate": rate,
                    "prompt_tokens": prompt,
                    "output_tokens": load["output_tokens"],
                    "num_prompts": _requests(load, concurrency, rate),
                }
            )
    return out, limit


def _vllm_capacity(hostvars, head):
    plan = (hostvars.get(head) or {}).get("vllm_capacity") or {}
    keys = ("max_num_seqs", "num_blocks", "block_size", "max_model_len")
    found = {key: plan.get(key) for key in keys if plan.get(key) is not None}
    return found or None


def _llama_capacity(hostvars, head, defaults):
    own = hostvars.get(head) or {}
    ctx = _render.jinja_int(own.get("llama_server_ctx_size", defaults.get("llama_server_ctx_size", 4096)))
    slots = max(1, _render.jinja_int(own.get("llama_server_parallel", defaults.get("llama_server_parallel", 1)), 1))
    return {"slots": slots, "max_model_len": ctx // slots}


def targets(hostvars, groups, load_host, defaults=None, frontdoor=None, only=None):
    """The endpoints to measure, replicas first (sorted by name) and then the front door:
    [{name, label, kind (replica|frontdoor), engine (vllm|llama.cpp|haproxy), url, model,
    api_key_host, api_key_var, capacity, max_model_len, head}]. frontdoor: {host, address, port,
    tls} or None. only: the names to keep (empty keeps all). Raises ServingError."""
    defaults = dict(defaults or {})
    try:
        plan = _frontdoor.plan(hostvars, groups, defaults, frontend=load_host)
    except _frontdoor.FrontdoorError as exc:
        raise ServingError(exc.problems) from None
    servers = {server["name"]: server for server in plan["servers"]}
    found = []
    for replica in plan["replicas"]:
        server = servers[replica["server"]]
        head = replica["nodes"][0]["name"]
        if replica["kind"] == "vllm":
            capacity, engine, key_var = _vllm_capacity(hostvars, head), "vllm", "vllm_api_key"
            origin = "vllm_args max-model-len of replica %s" % replica["name"]
        else:
            capacity, engine, key_var = _llama_capacity(hostvars, head, defaults), "llama.cpp", "llama_server_api_key"
            origin = "llama_server_ctx_size / llama_server_parallel on %s" % head
        found.append(
            {
                "name": replica["name"],
                "label": "replica %s" % replica["name"],
                "kind": "replica",
                "engine": engine,
                "url": "http://%s:%s" % (_url_host(server["address"]), server["port"]),
                "model": plan["model"],
                "head": head,
                "api_key_host": head,
                "api_key_var": key_var,
                "capacity": capacity,
                "capacity_origin": "the capacity plan of replica %s" % replica["name"]
                if engine == "vllm"
                else "llama_server_parallel on %s" % head,
                "max_model_len": (capacity or {}).get("max_model_len"),
                "max_model_len_origin": origin,
            }
        )
    if frontdoor and frontdoor["host"] != load_host and _frontdoor.is_loopback(str(frontdoor["address"])):
        raise ServingError(
            [
                "frontdoor_bind_address=%r on %s is reachable from that host only, and the load runs on %s; run the "
                "load from the front door host (leave the load_generators group empty), bind the front door to an "
                "address the load host reaches, or set %sfrontdoor: false"
                % (frontdoor["address"], frontdoor["host"], load_host, P)
            ]
        )
    if frontdoor:
        capacities = [t["capacity"] for t in found]
        lens = [t["max_model_len"] for t in found if t["max_model_len"]]
        found.append(
            {
                "name": "frontdoor",
                "label": "the front door on %s" % frontdoor["host"],
                "kind": "frontdoor",
                "engine": "haproxy",
                "url": "%s://%s:%s"
                % ("https" if frontdoor.get("tls") else "http", _url_host(frontdoor["address"]), frontdoor["port"]),
                "model": plan["model"],
                "head": frontdoor["host"],
                "api_key_host": found[0]["api_key_host"],
                "api_key_var": found[0]["api_key_var"],
                "capacity": {"members": capacities} if all(capacities) else None,
                "capacity_origin": "the replicas' capacity plans, balanced by least connections",
                "max_model_len": min(lens) if lens else None,
                "max_model_len_origin": "the smallest max-model-len of its replicas",
            }
        )
    if only:
        unknown = sorted(set(only) - {t["name"] for t in found})
        if unknown:
            raise ServingError(
                [
                    "%stargets names %s, which is neither a replica nor 'frontdoor'; the targets here are %s"
                    % (P, ", ".join(unknown), ", ".join(t["name"] for t in found))
                ]
            )
        found = [t for t in found if t["name"] in only]
    return found


def _url_host(address):
    return "[%s]" % address if ":" in str(address) and not str(address).startswith("[") else str(address)


def frontdoor_limit(target, tokens):
    """What a front door holds without queueing at any replica: it balances by least connections
    (HAProxy's leastconn, no per-server maxconn), which spreads requests evenly whatever each
    replica holds, so the replica that holds the fewest fills first."""
    members = (target.get("capacity") or {}).get("members")
    if not members:
        return None
    limits = [plan_concurrency(member, tokens) for member in members]
    if not all(limits):
        return None
    return len(limits) * min(limits)


def run_plan(settings, hostvars, groups, load_host, defaults=None, frontdoor=None):
    """{load, targets: [target + points + plan_concurrency]} for the role; raises ServingError with
    every problem of the variables and of every target."""
    load = workload(settings)
    every = targets(hostvars, groups, load_host, defaults, frontdoor)
    problems = []
    tokenizer = _tokenizer_source(settings, hostvars, defaults or {}, every, problems)
    only = settings.get(P + "targets") or []
    found = targets(hostvars, groups, load_host, defaults, frontdoor, only) if only else every
    for target in found:
        if target["kind"] == "frontdoor":
            # The front door's limit comes from its replicas', for the same request size.
            tokens = load["prompt_tokens"] + load["output_tokens"]
            limit = frontdoor_limit(target, tokens)
            target["capacity"] = {"max_num_seqs": limit} if limit else None
        try:
            target["points"], target["plan_concurrency"] = points(load, target)
        except ServingError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ServingError(problems)
    base = str(settings.get(P + "dir") or "/var/lib/gpufleet/serving-acceptance").rstrip("/")
    seed = _render.jinja_int(settings.get(P + "seed"), 0)
    for target in found:
        for point in target["points"]:
            point["result_path"] = "%s/results/%s-%s.json" % (base, target["name"], point["name"])
            point["args"] = bench_args(
                target,
                point,
                load,
                base + "/results",
                "%s-%s.json" % (target["name"], point["name"]),
                base + "/tokenizer",
                seed,
            )
    load["percentiles"] = [float(value) for value in _percentiles(load)]
    heads = [t["head"] for t in every if t["engine"] == "vllm"]
    return {"load": load, "targets": found, "tokenizer_from": tokenizer, "vllm_head": heads[0] if heads else ""}


def _tokenizer_source(settings, hostvars, defaults, every, problems):
    """Where the tokenizer comes from: {host: "localhost" or a replica's rank 0, path}."""
    given = settings.get(P + "tokenizer_src") or ""
    if given:
        return {"host": "localhost", "path": str(given)}
    for target in every:
        if target["engine"] != "vllm":
            continue
        own = hostvars.get(target["head"]) or {}
        if own.get("vllm_model_hub_id"):
            break
        return {"host": target["head"], "path": str(own.get("vllm_model_path") or defaults.get("vllm_model_path"))}
    problems.append(
        "%stokenizer_src is empty and no vLLM replica has a model directory to copy the tokenizer from (a llama.cpp "
        "model or a hub id holds none that vllm bench serve reads); give the model's Hugging Face directory on the "
        "controller, the one with tokenizer.json or tokenizer.model" % P
    )
    return None


ENGINE_ROLES = ("vllm", "llama_server", "llama_rpc_worker")


def plan_settings(settings):
    """run_plan() over the role's settings as its preflight hands them over: the
    serving_acceptance_* variables, inventory_hostname (the load host), hostvars, groups,
    role_defaults ({role: its defaults/main.yml} of the engine roles and the frontdoor role) and
    frontend (the front door measured, empty for none)."""
    hostvars = settings.get("hostvars") or {}
    role_defaults = settings.get("role_defaults") or {}
    defaults = {}
    for role in ENGINE_ROLES:
        defaults.update(role_defaults.get(role) or {})
    frontend = settings.get("frontend") or ""
    frontdoor = None
    if frontend:
        own, fallback = hostvars.get(frontend) or {}, role_defaults.get("frontdoor") or {}
        frontdoor = {
            "host": frontend,
            "address": own.get("frontdoor_bind_address", fallback.get("frontdoor_bind_address", "127.0.0.1")),
            "port": own.get("frontdoor_port", fallback.get("frontdoor_port", 8080)),
            "tls": bool(own.get("frontdoor_tls_certificate")),
        }
    return run_plan(
        settings, hostvars, settings.get("groups") or {}, settings.get("inventory_hostname") or "", defaults, frontdoor
    )


def settings_problems(settings):
    """Every problem of the role's inputs (_role_problems('serving_acceptance')), one message each:
    the workload's own, then, with the inventory in settings, what each target cannot take."""
    try:
        if "hostvars" in settings:
            plan_settings(settings)
        else:
            workload(settings)
    except ServingError as exc:
        return exc.problems
    return []


def bench_args(target, point, load, result_dir, result_file, tokenizer, seed=0):
    """The arguments of ``vllm bench serve`` for one point (after ``vllm bench serve``)."""
    args = [
        "--backend",
        "openai",
        "--base-url",
        target["url"],
        "--endpoint",
        "/v1/completions",
        "--model",
        target["model"],
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(point["prompt_tokens"]),
        "--random-output-len",
        str(point["output_tokens"]),
        "--random-range-ratio",
        "0",
        "--ignore-eos",
        "--num-prompts",
        str(point["num_prompts"]),
        "--seed",
        str(seed),
        "--percentile-metrics",
        ",".join(METRICS),
        "--metric-percentiles",
        ",".join(_percentiles(load)),
        "--save-result",
        "--save-detailed",
        "--result-dir",
        result_dir,
        "--result-filename",
        result_file,
        "--disable-tqdm",
    ]
    if target.get("engine") == "llama.cpp":
        # llama-server closes the connection after every streamed response although it answers
        # "Keep-Alive" (its stream callback ends the chunked body, then returns false, which
        # cpp-httplib takes for a cancel), and vllm bench serve reuses pooled connections: a request
        # sent before the close arrives fails with ServerDisconnectedError, more often on a busy
        # machine. Asking for a close after each response makes the client open a new connection
        # for each request, which is what the server gives it anyway (docs/serving-acceptance.md).
        args += ["--header", "Connection=close"]
    if point["request_rate"] is not None:
        args += ["--request-rate", _render._number(point["request_rate"])]
    if point["concurrency"] is not None:
        args += ["--max-concurrency", str(point["concurrency"])]
    goodput = ["%s:%s" % (key, _render._number(load["slo"][key + "_ms"])) for key in ("ttft", "tpot")]
    goodput = [item for item, key in zip(goodput, ("ttft", "tpot")) if load["slo"][key + "_ms"] is not None]
    if goodput:
        args += ["--goodput", *goodput]
    return args


def _percentiles(load):
    values = {50.0, 90.0, 99.0, float(load["slo"]["percentile"])}
    return [_render._number(value) for value in sorted(values)]


def _key(percentile):
    return "p%s" % _render._number(percentile)


def parse_result(data, percentiles=(50, 90, 99)):
    """The figures of one ``vllm bench serve`` result (its saved JSON, as a dict), normalised:
    {completed, failed, duration_s, <m>_ms: {mean, median, pNN...}, request_throughput,
    output_throughput, total_token_throughput, goodput_rps, errors}. Raises ValueError naming the
    missing key when data is not such a result."""
    if not isinstance(data, dict):
        raise ValueError("a vllm bench serve result is a JSON object, got %s" % type(data).__name__)
    for key in ("completed", "duration", "request_throughput", "output_throughput"):
        if key not in data:
            raise ValueError("not a vllm bench serve result: the key %r is missing" % key)
    out = {
        "completed": int(data["completed"]),
        "duration_s": _number(data["duration"]),
        "request_throughput": _number(data["request_throughput"]),
        "output_throughput": _number(data["output_throughput"]),
        "total_token_throughput": _number(data.get("total_token_throughput")),
        "goodput_rps": _number(data.get("request_goodput")),
    }
    prompts = data.get("num_prompts")
    failed = data.get("failed")
    if failed is None and prompts is not None:
        failed = int(prompts) - out["completed"]
    out["failed"] = int(failed) if failed is not None else None
    errors = [str(e) for e in data.get("errors") or [] if e]
    out["errors"] = sorted(set(errors))[:5]
    wanted = sorted({float(p) for p in percentiles})
    for metric in METRICS:
        figures = {
            "mean": _number(data.get("mean_%s_ms" % metric)),
            "median": _number(data.get("median_%s_ms" % metric)),
        }
        for percentile in wanted:
            figures[_key(percentile)] = _number(data.get("%s_%s_ms" % (_key(percentile), metric)))
        out["%s_ms" % metric] = figures
    return out


def _judge_point(target, point, load, failures):
    slo, key = load["slo"], _key(load["slo"]["percentile"])
    failed_metrics = []
    if point["failed"] or point["completed"] < point["num_prompts"]:
        lost = point["failed"] if point["failed"] is not None else point["num_prompts"] - point["completed"]
        failures.append(
            {
                "target": target["name"],
                "point": point["name"],
                "metric": "failed_requests",
                "measured": lost,
                "limit": 0,
                "kind": "errors",
                "message": "%s: %d of %d requests failed at %s%s"
                % (
                    target["label"],
                    lost,
                    point["num_prompts"],
                    point["name"],
                    " (%s)" % "; ".join(point.get("errors") or []) if point.get("errors") else "",
                ),
            }
        )
        failed_metrics.append("failed_requests")
    for metric in ("ttft", "tpot"):
        limit = slo["%s_ms" % metric]
        measured = point["%s_ms" % metric].get(key)
        if limit is None:
            continue
        name = "%s_ms.%s" % (metric, key)
        if measured is None or measured > limit:
            failures.append(
                {
                    "target": target["name"],
                    "point": point["name"],
                    "metric": name,
                    "measured": measured,
                    "limit": limit,
                    "kind": "slo",
                    "message": "%s: %s %s at %s is %s, over the target %s ms"
                    % (
                        target["label"],
                        key,
                        metric.upper(),
                        point["name"],
                        "not measured" if measured is None else "%.1f ms" % measured,
                        _render._number(limit),
                    ),
                }
            )
            failed_metrics.append(name)
    point["failed_metrics"] = failed_metrics
    point["passed"] = not failed_metrics


def saturation(target, factor):
    """Where the target's output throughput stops growing with concurrency: the least swept
    concurrency that reaches SATURATED_SHARE of the sweep's best, set beside the plan's."""
    swept = [p for p in target["points"] if p["request_rate"] is None and p.get("output_throughput") is not None]
    plan = target.get("plan_concurrency")
    if len({p["concurrency"] for p in swept}) < 2 or len({p["prompt_tokens"] for p in swept}) > 1:
        return None
    swept.sort(key=lambda p: p["concurrency"])
    best = max(p["output_throughput"] for p in swept)
    knee = next(p for p in swept if p["output_throughput"] >= SATURATED_SHARE * best)
    out = {"concurrency": knee["concurrency"], "plan_concurrency": plan, "ratio": None, "note": ""}
    rising = knee is swept[-1]
    if rising:
        out["note"] = (
            "throughput still rises at the largest concurrency swept (%d): saturation is there or above"
            % (knee["concurrency"])
        )
    if plan:
        out["ratio"] = round(float(knee["concurrency"]) / plan, 3)
        if out["ratio"] * factor < 1 and not rising:
            out["note"] = (
                "throughput saturates at concurrency %d, far below the %d the capacity plan admits: the engine is "
                "compute-bound before it runs out of KV cache, so a longer queue adds latency, not throughput"
                % (knee["concurrency"], plan)
            )
        elif out["ratio"] > factor:
            out["note"] = (
                "throughput saturates at concurrency %d, far above the plan's %d: the plan is conservative"
                % (
                    knee["concurrency"],
                    plan,
                )
            )
    return out


def _goodput(target, load, failures):
    key = "frontdoor_min_goodput_rps" if target["kind"] == "frontdoor" else "min_goodput_rps"
    limit = load["slo"][key] if load["slo"][key] is not None else load["slo"]["min_goodput_rps"]
    if limit is None:
        return
    measured = [p["goodput_rps"] for p in target["points"] if p.get("goodput_rps") is not None]
    best = max(measured) if measured else None
    if best is None or best < limit:
        failures.append(
            {
                "target": target["name"],
                "point": "best",
                "metric": "goodput_rps",
                "measured": best,
                "limit": limit,
                "kind": "slo",
                "message": "%s: the best goodput is %s, under the minimum %s requests/s (%s%s)"
                % (
                    target["label"],
                    "not measured" if best is None else "%.3f requests/s" % best,
                    _render._number(limit),
                    P,
                    key if load["slo"][key] is not None else "min_goodput_rps",
                ),
            }
        )


def _against_baseline(target, load, baseline, failures, notes):
    before = {t["name"]: t for t in baseline.get("targets") or []}.get(target["name"])
    if before is None:
        notes.append("%s is not in the baseline; nothing to compare" % target["label"])
        return
    earlier = {p["name"]: p for p in before.get("points") or []}
    keep = 1 - load["baseline_tolerance"]
    for point in target["points"]:
        old = earlier.get(point["name"])
        if old is None:
            notes.append("%s: point %s is not in the baseline" % (target["label"], point["name"]))
            continue
        for metric, what in (("goodput_rps", "goodput"), ("output_throughput", "output throughput")):
            now, then = point.get(metric), old.get(metric)
            if now is None or then is None or then <= 0 or now >= keep * then:
                continue
            failures.append(
                {
                    "target": target["name"],
                    "point": point["name"],
                    "metric": metric,
                    "measured": now,
                    "limit": round(keep * then, 6),
                    "kind": "baseline",
                    "message": "%s: %s at %s fell from %.3f to %.3f (%.0f %% lower; the baseline allows %.0f %%)"
                    % (
                        target["label"],
                        what,
                        point["name"],
                        then,
                        now,
                        100 * (1 - now / then),
                        100 * load["baseline_tolerance"],
                    ),
                }
            )
            point["passed"] = False
            point.setdefault("failed_metrics", []).append(metric)


def evaluate(run, measurements, baseline=None, baseline_path=""):
    """Judge the measured points. run: run_plan()'s value, as the role passes it on;
    measurements: one dict per point run, {target, point, result (parse_result()'s dict, or None
    when the run gave none), error, load_cpu_s}. Returns the document (SCHEMA) without its title
    and time; document["verdict"]["passed"] is the verdict."""
    load = run["load"]
    failures, notes = [], []
    out_targets = []
    found = {(m.get("target"), m.get("point")): m for m in measurements or [] if isinstance(m, dict)}
    for target in run["targets"]:
        judged = []
        for point in target["points"]:
            measured = found.get((target["name"], point["name"])) or {}
            entry = {key: value for key, value in point.items() if key not in ("args", "result_path")}
            figures = measured.get("result")
            if not figures:
                error = measured.get("error") or "not measured"
                entry.update({"completed": 0, "failed": point["num_prompts"], "errors": [error]})
                for metric in METRICS:
                    entry["%s_ms" % metric] = {}
            else:
                entry.update(figures)
            entry["load_cpu_s"] = measured.get("load_cpu_s")
            judged.append(entry)
        shown = {
            key: target.get(key)
            for key in ("name", "label", "kind", "engine", "url", "model", "plan_concurrency", "max_model_len")
        }
        shown["points"] = judged
        for point in judged:
            _judge_point(target, point, load, failures)
        _goodput(shown, load, failures)
        if baseline is not None:
            _against_baseline(shown, load, baseline, failures, notes)
        shown["saturation"] = saturation(shown, load["saturation_factor"])
        if shown["saturation"] and shown["saturation"]["note"]:
            notes.append("%s: %s" % (target["label"], shown["saturation"]["note"]))
        shown["passed"] = not any(f["target"] == target["name"] for f in failures)
        out_targets.append(shown)
    return {
        "schema": SCHEMA,
        "profile": {
            "name": load["profile"],
            "mode": load["mode"],
            "prompt_tokens": load["prompt_tokens"],
            "output_tokens": load["output_tokens"],
        },
        "slo": dict(load["slo"]),
        "baseline": None
        if baseline is None
        else {
            "path": baseline_path,
            "tolerance": load["baseline_tolerance"],
            "generated_at": baseline.get("generated_at", ""),
        },
        "targets": out_targets,
        "verdict": {"passed": not failures, "failures": failures, "notes": notes},
    }


def summary(document):
    """The headline figures per target, for the job's artifacts and the play's output."""
    key = _key(document["slo"]["percentile"])
    out = {}
    for target in document["targets"]:
        measured = [p for p in target["points"] if p.get("output_throughput") is not None]
        best = max(measured, key=lambda p: p["output_throughput"]) if measured else None
        first = measured[0] if measured else None
        out[target["name"]] = {
            "passed": target["passed"],
            "best_output_tokens_per_s": best["output_throughput"] if best else None,
            "best_at": best["name"] if best else None,
            "best_goodput_rps": max([p["goodput_rps"] for p in measured if p.get("goodput_rps") is not None] or [None]),
            "first_point": first["name"] if first else None,
            "ttft_ms_%s_first" % key: first["ttft_ms"].get(key) if first else None,
            "tpot_ms_%s_first" % key: first["tpot_ms"].get(key) if first else None,
            "saturation_concurrency": (target.get("saturation") or {}).get("concurrency"),
            "plan_concurrency": target.get("plan_concurrency"),
        }
    return out


def lines(document):
    """One line per target for the play's output: its verdict and headline figures."""
    key = _key(document["slo"]["percentile"])
    out = []
    for name, figures in sorted(summary(document).items()):
        first = figures["first_point"]
        out.append(
            "%s: %s; best %s output tokens/s at %s; at %s %s TTFT %s ms, TPOT %s ms; best goodput %s requests/s; "
            "saturation at concurrency %s (plan %s)"
            % (
                name,
                "passed" if figures["passed"] else "FAILED",
                _shown(figures["best_output_tokens_per_s"]),
                figures["best_at"],
                first,
                key,
                _shown(figures["ttft_ms_%s_first" % key]),
                _shown(figures["tpot_ms_%s_first" % key]),
                _shown(figures["best_goodput_rps"]),
                _shown(figures["saturation_concurrency"]),
                _shown(figures["plan_concurrency"]),
            )
        )
    return out


def _shown(value):
    if value is None:
        return "-"
    return "%.1f" % value if isinstance(value, float) else str(value)
