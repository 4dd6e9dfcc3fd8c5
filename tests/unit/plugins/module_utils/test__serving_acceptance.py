# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Serving acceptance: workload, points, targets and the verdict (module_utils/_serving_acceptance.py)."""

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_acceptance as sa

FIXTURES = Path(__file__).parent / "fixtures" / "serving"
KEY = "k" * 24
DEFAULTS = {
    "vllm_api_host": "127.0.0.1",
    "vllm_api_port": 8000,
    "vllm_api_key": "",
    "vllm_served_model_name": "",
    "vllm_model_path": "/var/lib/gpufleet/models/model",
    "llama_server_host": "127.0.0.1",
    "llama_server_port": 8080,
    "llama_server_api_key": "",
    "llama_server_model_path": "/var/lib/gpufleet/models/model.gguf",
    "llama_server_ctx_size": 4096,
    "llama_server_parallel": 1,
    "llama_rpc_port": 50052,
}
# The lab's tiny model: 512 tokens, 8 sequences, 128 MiB of KV cache in blocks of 16 tokens.
PLAN = {"max_num_seqs": 8, "num_blocks": 2048, "block_size": 16, "max_model_len": 512}


def vllm_host(replica, rank, address, **extra):
    host = {
        "vllm_replica": replica,
        "vllm_node_rank": rank,
        "ansible_host": address,
        "vllm_api_host": address.replace("192.168", "10.20"),
        "vllm_api_key": KEY,
        "vllm_served_model_name": "tiny-llama",
        "vllm_model_path": "/var/lib/gpufleet/models/tiny-llama",
        "vllm_capacity": dict(PLAN),
    }
    host.update(extra)
    return host


def lab(llama=True):
    hostvars = {
        "lab-head": vllm_host("pp", 0, "192.168.0.11"),
        "lab-w1": vllm_host("pp", 1, "192.168.0.12"),
        "lab-w2": vllm_host("tp", 0, "192.168.0.13"),
        "lab-w9": {"ansible_host": "192.168.0.20"},
    }
    groups = {"vllm_nodes": ["lab-head", "lab-w1", "lab-w2"], "inference_frontends": ["lab-w9"]}
    if llama:
        hostvars["lab-w3"] = {
            "ansible_host": "192.168.0.14",
            "llama_server_host": "10.20.0.14",
            "llama_server_api_key": KEY,
            "llama_server_extra_args": ["--alias", "tiny-llama"],
            "llama_server_ctx_size": 512,
            "llama_server_parallel": 2,
        }
        hostvars["lab-w4"] = {"ansible_host": "192.168.0.15"}
        groups["llama_coordinator"] = ["lab-w3"]
        groups["llama_rpc_workers"] = ["lab-w4"]
    return hostvars, groups


FRONTDOOR = {"host": "lab-w9", "address": "192.168.0.20", "port": 8443, "tls": True}


def settings(**values):
    out = {"serving_acceptance_" + name: value for name, value in values.items()}
    out.setdefault("serving_acceptance_dir", "/var/lib/gpufleet/serving-acceptance")
    return out


def plan(front=True, llama=True, **values):
    hostvars, groups = lab(llama)
    return sa.run_plan(settings(**values), hostvars, groups, "lab-w9", DEFAULTS, dict(FRONTDOOR) if front else None)


def problems(**values):
    with pytest.raises(sa.ServingError) as caught:
        plan(**values)
    return caught.value.problems


# --- the workload -------------------------------------------------------------------------------


def test_the_chat_preset_sweeps_every_replica_up_to_its_plan():
    run = plan(prompt_tokens=64, output_tokens=32)
    names = [t["name"] for t in run["targets"]]
    assert names == ["pp", "tp", "lab-w3", "frontdoor"]
    pp = run["targets"][0]
    assert [p["concurrency"] for p in pp["points"]] == [1, 2, 4, 8]
    assert pp["plan_concurrency"] == 8
    assert pp["url"] == "http://10.20.0.11:8000"
    # llama.cpp: two slots of 256 tokens each.
    llama = run["targets"][2]
    assert llama["engine"] == "llama.cpp" and [p["concurrency"] for p in llama["points"]] == [1, 2]
    # The front door balances by least connections: three replicas, the smallest holding 2.
    front = run["targets"][3]
    assert front["url"] == "https://192.168.0.20:8443"
    assert [p["concurrency"] for p in front["points"]] == [1, 2, 4, 6]
    assert run["targets"][3]["plan_concurrency"] == 6
    assert run["load"]["slo"] == {
        "percentile": 99,
        "ttft_ms": 2000.0,
        "tpot_ms": 100.0,
        "min_goodput_rps": None,
        "frontdoor_min_goodput_rps": None,
    }
    assert run["tokenizer_from"] == {"host": "lab-head", "path": "/var/lib/gpufleet/models/tiny-llama"}
    assert run["vllm_head"] == "lab-head"


def test_the_kv_cache_limits_the_sweep_below_max_num_seqs():
    hostvars, groups = lab(llama=False)
    hostvars["lab-w2"]["vllm_capacity"]["num_blocks"] = 20  # 20 blocks of 16 tokens: three 96-token requests
    run = sa.run_plan(settings(prompt_tokens=64, output_tokens=32), hostvars, groups, "lab-w9", DEFAULTS, None)
    tp = next(t for t in run["targets"] if t["name"] == "tp")
    assert tp["plan_concurrency"] == 3
    assert [p["concurrency"] for p in tp["points"]] == [1, 2, 3]


def test_requests_per_point_scale_with_concurrency():
    run = plan(
        prompt_tokens=64, output_tokens=32, concurrency=[1, 8], min_requests=4, requests_per_concurrency=2, llama=False
    )
    assert [(p["concurrency"], p["num_prompts"]) for p in run["targets"][0]["points"]] == [(1, 4), (8, 16)]


def test_rate_mode_sends_at_each_rate_capped_by_the_plan():
    run = plan(prompt_tokens=64, output_tokens=32, mode="rate", request_rates=[0.5, 2], rate_duration_s=10, llama=False)
    points = run["targets"][0]["points"]
    assert [(p["name"], p["request_rate"], p["concurrency"], p["num_prompts"]) for p in points] == [
        ("r0.5", 0.5, 8, 8),
        ("r2", 2.0, 8, 20),
    ]
    assert "--request-rate" in points[1]["args"] and "--max-concurrency" in points[1]["args"]


def test_long_context_doubles_the_prompt_up_to_what_the_replica_admits():
    run = plan(profile="long_context", prompt_tokens=64, output_tokens=16, front=False, llama=False)
    pp = run["targets"][0]
    assert [(p["prompt_tokens"], p["concurrency"]) for p in pp["points"]] == [(64, 1), (128, 1), (256, 1), (496, 1)]
    assert pp["points"][-1]["name"] == "p496-c1"


def test_bench_args_hold_the_workload_and_the_goodput_limits():
    run = plan(prompt_tokens=64, output_tokens=32, concurrency=[4], ttft_ms=500, tpot_ms=80.5, llama=False)
    args = run["targets"][0]["points"][0]["args"]
    joined = " ".join(args)
    assert "--base-url http://10.20.0.11:8000" in joined
    assert "--model tiny-llama" in joined
    assert "--random-input-len 64 --random-output-len 32" in joined
    assert "--max-concurrency 4" in joined
    assert "--goodput ttft:500 tpot:80.5" in joined
    assert "--metric-percentiles 50,90,99" in joined
    assert "--tokenizer /var/lib/gpufleet/serving-acceptance/tokenizer" in joined
    assert args[args.index("--result-filename") + 1] == "pp-c4.json"
    assert KEY not in joined


def test_only_llama_cpp_targets_ask_for_a_close_after_each_response():
    # llama-server closes every streamed response's connection (docs/serving-acceptance.md): a
    # pooled connection reused before that close fails the request.
    run = plan(prompt_tokens=64, output_tokens=32, concurrency=[1])
    closing = {
        t["name"]: [" ".join(p["args"]).count("--header Connection=close") for p in t["points"]] for t in run["targets"]
    }
    assert closing == {"pp": [0], "tp": [0], "lab-w3": [1], "frontdoor": [0]}


def test_a_null_target_sends_no_goodput_limit_for_it():
    run = plan(prompt_tokens=64, output_tokens=32, concurrency=[1], ttft_ms=None, tpot_ms=None, profile="chat")
    # null takes the preset's value: the chat targets stay.
    assert "--goodput" in run["targets"][0]["points"][0]["args"]


def test_targets_can_be_named():
    run = plan(prompt_tokens=64, output_tokens=32, concurrency=[1], targets=["tp", "frontdoor"])
    assert [t["name"] for t in run["targets"]] == ["tp", "frontdoor"]


# --- refused before any load is sent ------------------------------------------------------------


def test_an_unknown_preset_is_refused_with_the_presets():
    [message] = problems(profile="burst")
    assert "serving_acceptance_profile='burst' is not a preset" in message
    assert "chat, long_context, throughput" in message


def test_a_prompt_that_does_not_fit_is_refused_naming_the_replica_and_the_fix():
    found = problems(prompt_tokens=512, output_tokens=1024, concurrency=[1], front=False, llama=False)
    assert len(found) == 2
    assert "serving_acceptance_prompt_tokens (512) + serving_acceptance_output_tokens (1024) = 1536" in found[0]
    assert "replica pp's max-model-len 512" in found[0]
    assert "lower them" in found[0]


def test_a_concurrency_over_the_plan_is_refused():
    found = problems(prompt_tokens=64, output_tokens=32, concurrency=[1, 100], front=False, llama=False)
    assert "serving_acceptance_concurrency=100 is over the 8 concurrent requests replica pp holds" in found[0]
    assert "send at most 8" in found[0]


def test_the_throughput_preset_does_not_fit_the_lab():
    found = problems(profile="throughput", front=False, llama=False)
    assert any("max-model-len 512" in line for line in found)


@pytest.mark.parametrize(
    "name, value, expected",
    [
        ("ttft_ms", 0, "serving_acceptance_ttft_ms=0 must be a number above 0"),
        ("tpot_ms", -5, "serving_acceptance_tpot_ms=-5 must be a number above 0"),
        ("min_goodput_rps", "fast", "serving_acceptance_min_goodput_rps='fast' must be a number above 0"),
        ("slo_percentile", 101, "serving_acceptance_slo_percentile=101 must be a number above 0 and at most 100"),
        ("baseline_tolerance", 2, "serving_acceptance_baseline_tolerance=2 must be a number above 0 and at most 1"),
        ("concurrency", [0], "serving_acceptance_concurrency=0 must be a whole number from 1"),
        ("concurrency", "4", "serving_acceptance_concurrency='4' must be a list"),
        ("prompt_tokens", 0, "serving_acceptance_prompt_tokens=0 must be a whole number from 1"),
        ("mode", "burst", "serving_acceptance_mode='burst' must be one of concurrency, rate"),
        ("request_rates", [float("nan")], "serving_acceptance_request_rates=nan must be a number above 0"),
    ],
)
def test_bad_values_are_refused_naming_the_variable_and_the_value(name, value, expected):
    found = problems(**dict({"prompt_tokens": 64, "output_tokens": 32}, **{name: value}))
    assert any(line.startswith(expected) for line in found), found


def test_rate_mode_without_rates_is_refused():
    [message] = problems(mode="rate", prompt_tokens=64, output_tokens=32)
    assert "serving_acceptance_request_rates" in message and "[0.5, 1, 2]" in message


def test_an_unknown_target_name_is_refused_with_the_names():
    [message] = problems(prompt_tokens=64, output_tokens=32, targets=["pq"])
    assert "serving_acceptance_targets names pq" in message
    assert "pp, tp, lab-w3, frontdoor" in message


def test_a_sweep_without_a_capacity_plan_asks_for_concurrencies():
    hostvars, groups = lab(llama=False)
    del hostvars["lab-head"]["vllm_capacity"]
    with pytest.raises(sa.ServingError) as caught:
        sa.run_plan(settings(prompt_tokens=64, output_tokens=32), hostvars, groups, "lab-w9", DEFAULTS, None)
    assert "there is no plan for it" in caught.value.problems[0]
    assert "replica pp" in caught.value.problems[0]


def test_a_loopback_front_door_is_reachable_from_its_own_host_only():
    hostvars, groups = lab(llama=False)
    hostvars["lab-w8"] = {"ansible_host": "192.168.0.19"}
    front = dict(FRONTDOOR, address="127.0.0.1")
    with pytest.raises(sa.ServingError) as caught:
        sa.run_plan(settings(prompt_tokens=64, output_tokens=32), hostvars, groups, "lab-w8", DEFAULTS, front)
    assert "frontdoor_bind_address='127.0.0.1' on lab-w9" in caught.value.problems[0]
    # From the front door's own host it is fine.
    run = sa.run_plan(settings(prompt_tokens=64, output_tokens=32), hostvars, groups, "lab-w9", DEFAULTS, front)
    assert run["targets"][-1]["url"] == "https://127.0.0.1:8443"


def test_a_llama_only_cluster_needs_a_tokenizer_source():
    hostvars, groups = lab()
    groups["vllm_nodes"] = []
    with pytest.raises(sa.ServingError) as caught:
        sa.run_plan(settings(prompt_tokens=64, output_tokens=32), hostvars, groups, "lab-w9", DEFAULTS, None)
    assert "serving_acceptance_tokenizer_src is empty" in caught.value.problems[0]
    run = sa.run_plan(
        settings(prompt_tokens=64, output_tokens=32, tokenizer_src="/srv/tiny-llama"),
        hostvars,
        groups,
        "lab-w9",
        DEFAULTS,
        None,
    )
    assert run["tokenizer_from"] == {"host": "localhost", "path": "/srv/tiny-llama"}


# --- results and the verdict --------------------------------------------------------------------


def result(ttft=200.0, tpot=50.0, completed=8, prompts=8, throughput=100.0, goodput=1.0):
    data = {
        "num_prompts": prompts,
        "completed": completed,
        "duration": 8.0,
        "request_throughput": completed / 8.0,
        "output_throughput": throughput,
        "total_token_throughput": throughput * 3,
        "request_goodput": goodput,
    }
    for metric, value in (("ttft", ttft), ("tpot", tpot), ("itl", tpot), ("e2el", ttft + 32 * tpot)):
        data.update({f"mean_{metric}_ms": value, f"median_{metric}_ms": value, f"std_{metric}_ms": 1.0})
        data.update({f"p50_{metric}_ms": value, f"p90_{metric}_ms": value, f"p99_{metric}_ms": value * 1.2})
    return data


def measured(run, overrides=None, missing=()):
    out = []
    for target in run["targets"]:
        for point in target["points"]:
            key = (target["name"], point["name"])
            if key in missing:
                continue
            data = (overrides or {}).get(key) or result(throughput=50.0 * point["concurrency"])
            data = dict(data, num_prompts=point["num_prompts"], completed=data["completed"] + point["num_prompts"] - 8)
            out.append(
                {
                    "target": target["name"],
                    "point": point["name"],
                    "result": sa.parse_result(data),
                    "error": None,
                    "load_cpu_s": 1.5,
                }
            )
    return out


def small_run(**values):
    values = dict(dict(prompt_tokens=64, output_tokens=32, ttft_ms=500, tpot_ms=100), **values)
    return plan(llama=False, **values)


def test_a_run_within_its_targets_passes():
    run = small_run()
    doc = sa.evaluate(run, measured(run))
    assert doc["verdict"] == {"passed": True, "failures": [], "notes": doc["verdict"]["notes"]}
    assert all(t["passed"] for t in doc["targets"])
    point = doc["targets"][0]["points"][0]
    assert point["ttft_ms"]["p99"] == 240.0 and point["load_cpu_s"] == 1.5
    assert "args" not in point and "result_path" not in point
    assert json.loads(json.dumps(doc)) == doc


def test_a_slow_replica_fails_by_name_metric_measurement_and_limit():
    run = small_run()
    doc = sa.evaluate(run, measured(run, {("tp", "c4"): result(ttft=3000.0)}))
    assert not doc["verdict"]["passed"]
    [failure] = doc["verdict"]["failures"]
    assert failure["target"] == "tp" and failure["point"] == "c4" and failure["metric"] == "ttft_ms.p99"
    assert failure["measured"] == 3600.0 and failure["limit"] == 500.0
    assert failure["message"] == "replica tp: p99 TTFT at c4 is 3600.0 ms, over the target 500 ms"
    assert [t["passed"] for t in doc["targets"]] == [True, False, True]


def test_failed_requests_and_points_without_a_result_fail():
    run = small_run()
    bad = dict(result(completed=6), errors=["", "ServerDisconnectedError", "ServerDisconnectedError"])
    doc = sa.evaluate(run, measured(run, {("pp", "c1"): bad}, missing={("tp", "c2")}))
    messages = [f["message"] for f in doc["verdict"]["failures"]]
    assert "replica pp: 2 of 8 requests failed at c1 (ServerDisconnectedError)" in messages
    assert any(m.startswith("replica tp: 8 of 8 requests failed at c2 (not measured)") for m in messages)


def test_the_best_goodput_must_reach_the_minimum():
    run = small_run(min_goodput_rps=2.0, frontdoor_min_goodput_rps=0.5)
    doc = sa.evaluate(run, measured(run))
    failed = {f["target"]: f for f in doc["verdict"]["failures"]}
    assert set(failed) == {"pp", "tp"}
    assert failed["pp"]["message"] == (
        "replica pp: the best goodput is 1.000 requests/s, under the minimum 2 requests/s "
        "(serving_acceptance_min_goodput_rps)"
    )


def test_a_run_that_lost_throughput_against_the_baseline_fails():
    run = small_run()
    before = sa.evaluate(run, measured(run))
    worse = {("pp", "c8"): result(throughput=300.0)}  # 400 tokens/s in the baseline
    doc = sa.evaluate(run, measured(run, worse), copy.deepcopy(before), "/srv/baseline.json")
    [failure] = doc["verdict"]["failures"]
    assert failure["kind"] == "baseline" and failure["metric"] == "output_throughput"
    assert "fell from 400.000 to 300.000 (25 % lower; the baseline allows 10 %)" in failure["message"]
    assert doc["baseline"] == {"path": "/srv/baseline.json", "tolerance": 0.1, "generated_at": ""}
    # Within the tolerance it passes.
    same = sa.evaluate(run, measured(run, {("pp", "c8"): result(throughput=380.0)}), before, "/srv/baseline.json")
    assert same["verdict"]["passed"]


def test_saturation_is_set_beside_the_plan():
    run = small_run()
    flat = {
        ("pp", name): result(throughput=value)
        for name, value in (("c1", 100.0), ("c2", 190.0), ("c4", 195.0), ("c8", 200.0))
    }
    doc = sa.evaluate(run, measured(run, flat))
    pp = doc["targets"][0]
    assert pp["saturation"] == {
        "concurrency": 2,
        "plan_concurrency": 8,
        "ratio": 0.25,
        "note": pp["saturation"]["note"],
    }
    assert "far below the 8 the capacity plan admits" in pp["saturation"]["note"]
    assert any(note.startswith("replica pp: throughput saturates at concurrency 2") for note in doc["verdict"]["notes"])
    # Still rising at the top of the sweep: said so.
    assert "still rises" in doc["targets"][1]["saturation"]["note"]


def test_summary_and_lines_carry_the_headline_figures():
    run = small_run()
    doc = sa.evaluate(run, measured(run))
    summary = sa.summary(doc)
    assert summary["pp"]["best_output_tokens_per_s"] == 400.0 and summary["pp"]["best_at"] == "c8"
    assert summary["pp"]["ttft_ms_p99_first"] == 240.0
    [line] = [line for line in sa.lines(doc) if line.startswith("pp:")]
    assert line.startswith("pp: passed; best 400.0 output tokens/s at c8; at c1 p99 TTFT 240.0 ms")


# --- real result files ----------------------------------------------------------------------------


def test_parse_result_names_a_missing_key():
    with pytest.raises(ValueError, match="the key 'completed' is missing"):
        sa.parse_result({"duration": 1})


def real_results():
    """Every result in the fixtures: one per .json file, one per line of a .jsonl file (--append-result)."""
    out = []
    for path in sorted(FIXTURES.glob("*.json*")):
        texts = path.read_text().splitlines() if path.suffix == ".jsonl" else [path.read_text()]
        out += [pytest.param(json.loads(text), id=f"{path.name}-{index}") for index, text in enumerate(texts)]
    return out


@pytest.mark.parametrize("data", real_results())
def test_real_vllm_bench_serve_results_parse(data):
    figures = sa.parse_result(data)
    assert figures["completed"] == data["completed"]
    if not figures["completed"]:
        # A run whose every request failed: nothing to judge but the failures.
        assert figures["failed"] == data["num_prompts"] > 0
        return
    assert figures["output_throughput"] > 0
    assert figures["ttft_ms"]["mean"] > 0 and figures["ttft_ms"]["p99"] >= figures["ttft_ms"]["median"]
    assert figures["tpot_ms"]["p99"] is not None


def test_the_role_rules_check_the_workload_alone_or_with_the_inventory():
    # As a bad-input case host gives them: no replicas known, the workload's own rules.
    assert sa.settings_problems(settings(ttft_ms=0))[0].startswith("serving_acceptance_ttft_ms=0 must be")
    assert sa.settings_problems(settings(prompt_tokens=64, output_tokens=32)) == []
    # As the preflight gives them: with the inventory, what each target cannot take.
    hostvars, groups = lab(llama=False)
    hostvars["lab-w9"].update(frontdoor_bind_address="192.168.0.20", frontdoor_tls_certificate="/etc/fd.crt")
    inventory = {
        "hostvars": hostvars,
        "groups": groups,
        "inventory_hostname": "lab-w9",
        "role_defaults": {
            "vllm": DEFAULTS,
            "frontdoor": {"frontdoor_bind_address": "127.0.0.1", "frontdoor_port": 8080},
        },
    }
    found = sa.settings_problems(dict(settings(prompt_tokens=64, output_tokens=32, concurrency=[16]), **inventory))
    assert [line.split(" is over")[0] for line in found] == ["serving_acceptance_concurrency=16"] * 2
    run = sa.plan_settings(dict(settings(prompt_tokens=64, output_tokens=32), frontend="lab-w9", **inventory))
    assert [t["name"] for t in run["targets"]] == ["pp", "tp", "frontdoor"]
    # The front door's own port is the role's default; its address and TLS the inventory's.
    assert run["targets"][-1]["url"] == "https://192.168.0.20:8080"
    assert (
        sa.plan_settings(dict(settings(prompt_tokens=64, output_tokens=32), frontend="", **inventory))["targets"][-1][
            "name"
        ]
        == "tp"
    )
