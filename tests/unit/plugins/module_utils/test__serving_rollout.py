# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The revision a node records, and which replicas a rollout switches in which batches."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_rollout as ro

DIGESTS = {"config.yaml": "a" * 64, "vllm.env": "b" * 64, "unit": "c" * 64}
VENV = "/opt/gpufleet/vllm/0.32.0-cpu-0d85b6e70cf3"
OLD = ro.revision(VENV, "sha256:" + "1" * 64, "/srv/r1", ro.config_digest(DIGESTS))
NEW = ro.revision(VENV, "sha256:" + "2" * 64, "/srv/r2", ro.config_digest(DIGESTS))


def at(rev, state="serving"):
    return ro.record(rev, None, state)


def replicas(*names, down=()):
    return [{"name": n, "serving": n not in down} for n in names]


def plan(recorded, pending=None, reps=None, **settings):
    reps = reps or replicas("pp", "tp")
    pending = {r["name"]: True for r in reps} if pending is None else pending
    return ro.plan(reps, recorded, pending, {"serving_upgrade_" + k: v for k, v in settings.items()})


def refused(recorded, **kwargs):
    with pytest.raises(ro.RolloutError) as caught:
        plan(recorded, **kwargs)
    return caught.value.problems


BOTH_OLD = {"pp": {"lab-head": at(OLD), "lab-w1": at(OLD)}, "tp": {"lab-w2": at(OLD)}}


def test_a_revision_changes_with_the_model_and_with_each_digested_file():
    assert OLD["id"] != NEW["id"] and len(OLD["id"]) == 12
    assert ro.revision(VENV, OLD["model"], "/srv/r1", ro.config_digest(DIGESTS)) == OLD
    for name in ro.DIGESTED:
        other = ro.revision(VENV, OLD["model"], "/srv/r1", ro.config_digest(dict(DIGESTS, **{name: "d" * 64})))
        assert other["id"] != OLD["id"], name
    assert "secrets.env" not in ro.DIGESTED and "secrets.env" in ro.RESTORED


def test_a_config_without_a_digest_is_refused():
    with pytest.raises(ValueError, match="no digest of unit"):
        ro.config_digest({"config.yaml": "a", "vllm.env": "b"})


def test_a_new_model_may_not_replace_the_one_in_place():
    message = ro.model_problem(at(OLD), NEW["model"], "/srv/r1")
    assert message.startswith("vllm_model_path=/srv/r1 holds the model sha256:111")
    assert "give the new model another vllm_model_path" in message
    assert ro.model_problem(at(OLD), NEW["model"], "/srv/r2") is None
    assert ro.model_problem(at(OLD), OLD["model"], "/srv/r1") is None
    assert ro.model_problem(None, NEW["model"], "/srv/r1") is None


def test_the_record_states_are_checked():
    assert ro.record(NEW, OLD, "switching", {"id": "r1"}, now=5)["rollout"] == {"id": "r1"}
    with pytest.raises(ValueError, match="state must be"):
        ro.record(NEW, OLD, "half")


def test_every_replica_switches_one_at_a_time_in_the_front_doors_order():
    found = plan(BOTH_OLD)
    assert found == {"batches": [["pp"], ["tp"]], "done": [], "mixed": [], "order": ["pp", "tp"]}


def test_a_rerun_skips_the_replicas_at_the_target_and_takes_a_cut_off_switch_first():
    recorded = {
        "a": {"n1": at(NEW)},
        "b": {"n2": at(OLD)},
        # One node switched, the other not yet: the controller died inside the switch.
        "c": {"n3": at(NEW), "n4": at(OLD)},
    }
    # The preflight finds a's and c's files already the target's.
    found = plan(recorded, pending={"a": False, "b": True, "c": False}, reps=replicas("a", "b", "c"))
    assert found["done"] == ["a"] and found["mixed"] == ["c"]
    assert found["batches"] == [["c"], ["b"]]


def test_a_node_left_switching_or_without_a_record_makes_its_replica_mixed():
    assert ro.replica_state({"n1": at(NEW, "switching"), "n2": at(NEW)})["mixed"] is True
    state = ro.replica_state({"n1": at(NEW), "n2": None})
    assert state == {"revision": None, "mixed": True, "states": {"n1": "serving"}, "missing": ["n2"]}
    assert ro.replica_state({"n1": None})["mixed"] is False


def test_nothing_to_do_when_every_replica_runs_the_target():
    done = {"pp": {"lab-head": at(NEW), "lab-w1": at(NEW)}, "tp": {"lab-w2": at(NEW)}}
    assert plan(done, pending={}) == {"batches": [], "done": ["pp", "tp"], "mixed": [], "order": []}
    # Never recorded (the first rollout of a cluster) and nothing to change: done as well.
    assert plan({}, pending={"pp": False, "tp": False})["done"] == ["pp", "tp"]


def test_only_vllm_replicas_are_switched_but_every_serving_one_counts():
    reps = [*replicas("pp"), {"name": "lab-w3", "serving": True, "kind": "llama.cpp"}]
    found = plan({}, pending={"pp": True}, reps=reps)
    assert found["batches"] == [["pp"]]
    assert "which the front door does not serve" in refused({}, reps=reps, replicas=["lab-w3"])[0]


def test_the_only_replica_is_an_outage_unless_allowed():
    one = replicas("flagship")
    [message] = refused({"flagship": {"n": at(OLD)}}, reps=one, pending={"flagship": True})
    assert "replica flagship is the only one behind the front door" in message
    assert "serving_upgrade_allow_outage: true" in message
    assert plan({"flagship": {"n": at(OLD)}}, reps=one, allow_outage=True)["batches"] == [["flagship"]]


def test_a_batch_may_not_drain_below_the_serving_minimum():
    four = replicas("r1", "r2", "r3", "r4")
    old = {name: {name + "-n": at(OLD)} for name in ("r1", "r2", "r3", "r4")}
    assert plan(old, reps=four, batch_size=2, min_serving=2)["batches"] == [["r1", "r2"], ["r3", "r4"]]
    [message] = refused(old, reps=four, batch_size=3, min_serving=2)
    assert "serving_upgrade_batch_size=3 leaves 1 of the 4 serving replicas" in message
    assert "serving_upgrade_min_serving is 2" in message
    # A replica already out of service counts for no capacity.
    [message] = refused(old, reps=replicas("r1", "r2", "r3", "r4", down=("r4",)), batch_size=2, min_serving=2)
    assert "leaves 1 of the 3 serving replicas (r1, r2, r3)" in message


def test_the_replicas_can_be_named_and_bad_settings_name_their_variable():
    assert plan(BOTH_OLD, replicas=["tp"])["batches"] == [["tp"]]
    problems = refused(BOTH_OLD, replicas=["tp", "nope", "tp"], batch_size=0, min_serving=-1, allow_outage="maybe")
    assert len(problems) == 5
    assert (
        "serving_upgrade_replicas names 'nope', which the front door does not serve; its replicas are pp, tp"
        in (problems[0])
    )
    assert "serving_upgrade_replicas names tp twice" in problems[1]
    assert "serving_upgrade_batch_size=0 must be a whole number of replicas, 1 or more" in problems[2]
    assert "serving_upgrade_min_serving=-1" in problems[3]
    assert "serving_upgrade_allow_outage='maybe' must be true or false" in problems[4]
    assert "serving_upgrade_batch_size='two'" in refused(BOTH_OLD, batch_size="two")[0]


def test_settings_from_the_command_line_and_awx_surveys_come_as_strings():
    four = replicas("r1", "r2", "r3", "r4")
    old = {name: {name + "-n": at(OLD)} for name in ("r1", "r2", "r3", "r4")}
    found = plan(old, reps=four, batch_size="2", min_serving="2", allow_outage="false")
    assert found["batches"] == [["r1", "r2"], ["r3", "r4"]]
    one = replicas("flagship")
    assert plan({}, reps=one, allow_outage="true")["batches"] == [["flagship"]]
    assert "must be a non-empty list" in refused(BOTH_OLD, replicas="tp")[0]


# --- from the play's facts ----------------------------------------------------------------------

STATUS = {
    "replicas": [
        {"name": "pp", "kind": "vllm", "haproxy": {"serving": True}},
        {"name": "tp", "kind": "vllm", "haproxy": {"serving": True}},
    ]
}


def facts(replica, rank, changes, record=None, model="sha256:" + "2" * 64, model_path="/srv/r2"):
    return {
        "__vllm_node": {"replica": replica, "rank": rank},
        "__vllm_node_changes": changes,
        "__serving_upgrade_read": {"record": record},
        "__serving_upgrade_target": {"model": model, "model_path": model_path},
    }


def test_the_play_facts_give_the_batches_and_each_replicas_nodes_by_rank():
    hostvars = {
        "lab-w1": facts("pp", 1, ["/etc/gpufleet/vllm/pp/config.yaml"], at(OLD)),
        "lab-head": facts("pp", 0, [], at(OLD)),
        "lab-w2": facts("tp", 0, [], at(OLD)),
        "lab-w9": {},
    }
    found = ro.from_play(STATUS, hostvars, ["lab-head", "lab-w1", "lab-w2", "lab-w9"], {})
    assert found["problems"] == []
    assert found["batches"] == [["pp"]] and found["done"] == ["tp"]
    assert found["nodes"] == {"pp": ["lab-head", "lab-w1"], "tp": ["lab-w2"]}
    assert found["revisions"]["pp"] == {"nodes": {"lab-w1": at(OLD), "lab-head": at(OLD)}}


def test_the_play_facts_refuse_a_replica_not_behind_the_front_door_and_a_model_replaced_in_place():
    hostvars = {
        "lab-head": facts("pp", 0, ["x"], at(OLD), model_path="/srv/r1"),
        "lab-w5": facts("other", 0, ["x"]),
    }
    found = ro.from_play(STATUS, hostvars, ["lab-head", "lab-w5"], {})
    assert found["batches"] == [] and len(found["problems"]) == 2
    assert found["problems"][0].startswith("lab-head: vllm_model_path=/srv/r1 holds the model")
    assert "replica other (lab-w5) is not behind the front door, whose replicas are pp, tp" in found["problems"][1]


def test_the_play_facts_give_each_batch_a_group_of_its_nodes_and_refuse_too_many_batches():
    hostvars = {
        "lab-w1": facts("pp", 1, ["x"]),
        "lab-head": facts("pp", 0, []),
        "lab-w2": facts("tp", 0, ["x"]),
    }
    found = ro.from_play(STATUS, hostvars, ["lab-head", "lab-w1", "lab-w2"], {})
    assert found["members"] == [
        {"name": "lab-head", "group": "gpufleet_upgrade_batch_1", "replica": "pp"},
        {"name": "lab-w1", "group": "gpufleet_upgrade_batch_1", "replica": "pp"},
        {"name": "lab-w2", "group": "gpufleet_upgrade_batch_2", "replica": "tp"},
    ]
    many = {"replicas": [{"name": f"r{i}", "kind": "vllm", "haproxy": {"serving": True}} for i in range(14)]}
    hostvars = {f"n{i}": facts(f"r{i}", 0, ["x"]) for i in range(14)}
    found = ro.from_play(many, hostvars, sorted(hostvars), {})
    assert found["batches"] == [] and found["members"] == []
    assert found["problems"][0].startswith("the rollout takes 14 batches of serving_upgrade_batch_size=1")


def test_the_play_facts_pass_the_settings_problems_on():
    hostvars = {"lab-head": facts("pp", 0, ["x"])}
    found = ro.from_play(STATUS, hostvars, ["lab-head"], {"serving_upgrade_batch_size": 0})
    assert found["problems"] == ["serving_upgrade_batch_size=0 must be a whole number of replicas, 1 or more"]


# --- a batch's outcome --------------------------------------------------------------------------


def test_a_batch_outcome_names_the_step_and_the_measurement_and_times_the_switch():
    nodes = {"pp": ["lab-head", "lab-w1"], "tp": ["lab-w2"], "r3": ["lab-w4"]}
    hostvars = {
        "lab-head": {"__serving_upgrade_times": {"drain": "100.0", "started": "110.5", "ready": "150.0"}},
        "lab-w1": {"__serving_upgrade_failed": {}},
        "lab-w2": {"__serving_upgrade_times": {"drain": "100.0", "started": "111"}},
        "lab-w4": {
            "__serving_upgrade_failed": {
                "step": "start",
                "task": "Wait until rank 0 answers /health",
                "error": "timeout",
            }
        },
        "lab-w9": {
            "__serving_upgrade_missed": {"tp": "replica tp: tpot p99 41 ms over 20 ms"},
            "__serving_acceptance_report": {"targets": [{"name": "pp", "passed": True, "url": "http://x"}]},
        },
    }
    found = ro.outcome(hostvars, nodes, ["pp", "tp", "r3"], "lab-w9", now=160.0, rest=["r4"])
    pp, tp, r3 = (found["replicas"][name] for name in ("pp", "tp", "r3"))
    assert pp["upgraded"] and pp["out_of_service_s"] == 60.0 and pp["engine_start_s"] == 39.5
    assert pp["switch_s"] == 50.0
    assert pp["acceptance"] == {"name": "pp", "passed": True}
    assert not tp["upgraded"] and tp["step"] == "acceptance" and tp["engine_start_s"] is None
    assert r3["node"] == "lab-w4" and r3["out_of_service_s"] is None
    assert found["message"].splitlines() == [
        "replica r3 failed at start on lab-w4 (task 'Wait until rank 0 answers /health') and was switched back to "
        "the revision it served before, which serves again: timeout",
        "replica tp failed at acceptance and was switched back to the revision it served before, which serves "
        "again: replica tp: tpot p99 41 ms over 20 ms",
        "The rollout stopped; replicas not switched: r4. Fix the target and run the playbook again: it continues "
        "where it stopped.",
    ]
    assert ro.outcome(hostvars, nodes, ["pp"], "lab-w9", now=160.0)["message"] == ""
    # The records read after the batch go to the front door; a replica not read by all its nodes does not.
    assert found["revisions"] == {}
    hostvars["lab-head"]["__serving_upgrade_now"] = {"record": at(NEW)}
    hostvars["lab-w1"]["__serving_upgrade_now"] = {"record": at(NEW)}
    hostvars["lab-w2"]["__serving_upgrade_now"] = {"skipped": True}
    revisions = ro.outcome(hostvars, nodes, ["pp", "tp"], "lab-w9", now=160.0)["revisions"]
    assert revisions == {"pp": {"nodes": {"lab-head": at(NEW), "lab-w1": at(NEW)}}}


def test_a_target_that_changes_more_than_declared_is_refused():
    record = at(OLD)
    hostvars = {"lab-head": facts("pp", 0, ["x"], record)}
    hostvars["lab-head"]["__serving_upgrade_target"]["venv"] = VENV
    found = ro.from_play(STATUS, hostvars, ["lab-head"], {"serving_upgrade_change": "settings"})
    assert found["problems"] == [
        "lab-head: the target changes the model (sha256:" + "1" * 64 + " -> sha256:" + "2" * 64 + "), and "
        "serving_upgrade_change is settings: fix the target, or declare what it changes"
    ]
    assert ro.from_play(STATUS, hostvars, ["lab-head"], {"serving_upgrade_change": "model"})["problems"] == []
    assert "venv" in ro.change_problem(record, {"venv": "/opt/other", "model": OLD["model"]}, "model")
    assert ro.change_problem(None, {"venv": "/opt/other"}, "settings") is None
    assert "serving_upgrade_change='all' must be one of any, model, vllm, settings" in refused({}, change="all")[0]
