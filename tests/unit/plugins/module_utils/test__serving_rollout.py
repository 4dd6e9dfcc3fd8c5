# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The revision a node records, and which replicas a rollout switches in which batches."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _serving_rollout as ro

DIGESTS = {"config.yaml": "a" * 64, "vllm.env": "b" * 64, "unit": "c" * 64}
OLD = ro.revision("/opt/gpufleet/vllm/0.32.0-cpu-0d85b6e70cf3", "sha256:" + "1" * 64, DIGESTS)
NEW = ro.revision("/opt/gpufleet/vllm/0.32.0-cpu-0d85b6e70cf3", "sha256:" + "2" * 64, DIGESTS)


def at(rev, state="serving"):
    return ro.record(rev, None, state)


def replicas(*names, down=()):
    return [{"name": n, "serving": n not in down} for n in names]


def plan(recorded, targets=None, reps=None, **settings):
    reps = reps or replicas("pp", "tp")
    targets = targets or {r["name"]: NEW["id"] for r in reps}
    return ro.plan(reps, recorded, targets, {"serving_upgrade_" + k: v for k, v in settings.items()})


def refused(recorded, **kwargs):
    with pytest.raises(ro.RolloutError) as caught:
        plan(recorded, **kwargs)
    return caught.value.problems


BOTH_OLD = {"pp": {"lab-head": at(OLD), "lab-w1": at(OLD)}, "tp": {"lab-w2": at(OLD)}}


def test_a_revision_changes_with_the_model_and_with_each_digested_file():
    assert OLD["id"] != NEW["id"] and len(OLD["id"]) == 12
    assert ro.revision(OLD["venv"], OLD["model"], DIGESTS) == OLD
    for name in ro.DIGESTED:
        other = ro.revision(OLD["venv"], OLD["model"], dict(DIGESTS, **{name: "d" * 64}))
        assert other["id"] != OLD["id"], name
    assert "secrets.env" not in ro.DIGESTED and "secrets.env" in ro.RESTORED


def test_a_revision_without_a_digest_is_refused():
    with pytest.raises(ValueError, match="no digest of unit"):
        ro.revision("v", "m", {"config.yaml": "a", "vllm.env": "b"})


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
    found = plan(recorded, reps=replicas("a", "b", "c"))
    assert found["done"] == ["a"] and found["mixed"] == ["c"]
    assert found["batches"] == [["c"], ["b"]]


def test_a_node_left_switching_or_without_a_record_makes_its_replica_mixed():
    assert ro.replica_state({"n1": at(NEW, "switching"), "n2": at(NEW)})["mixed"] is True
    state = ro.replica_state({"n1": at(NEW), "n2": None})
    assert state == {"revision": None, "mixed": True, "states": {"n1": "serving"}, "missing": ["n2"]}
    assert ro.replica_state({"n1": None})["mixed"] is False


def test_nothing_to_do_when_every_replica_runs_the_target():
    done = {"pp": {"lab-head": at(NEW), "lab-w1": at(NEW)}, "tp": {"lab-w2": at(NEW)}}
    assert plan(done) == {"batches": [], "done": ["pp", "tp"], "mixed": [], "order": []}


def test_the_only_replica_is_an_outage_unless_allowed():
    one = replicas("flagship")
    [message] = refused({"flagship": {"n": at(OLD)}}, reps=one)
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
    problems = refused(BOTH_OLD, replicas=["tp", "nope", "tp"], batch_size=0, min_serving=-1, allow_outage="yes")
    assert len(problems) == 5
    assert (
        "serving_upgrade_replicas names 'nope', which the front door does not serve; its replicas are pp, tp"
        in (problems[0])
    )
    assert "serving_upgrade_replicas names tp twice" in problems[1]
    assert "serving_upgrade_batch_size=0 must be a whole number of replicas, 1 or more" in problems[2]
    assert "serving_upgrade_min_serving=-1" in problems[3]
    assert "serving_upgrade_allow_outage='yes' must be true or false" in problems[4]
    assert "must be a non-empty list" in refused(BOTH_OLD, replicas="tp")[0]


def test_a_replica_without_a_target_was_not_staged():
    [message] = refused(BOTH_OLD, targets={"pp": NEW["id"]})
    assert message == "no target revision for replica tp: its nodes were not staged"
