# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules of a change of what a cluster serves, taken one replica (or one batch) at a time.

A replica's *revision* is what its nodes run: the vLLM venv (the lock), the model's digest and a
digest of the files whose change restarts the replica (``config.yaml``, ``vllm.env`` and the unit;
``secrets.env`` is left out of the digest, so no digest of a key is ever recorded). Each node
records the revision it runs, and the one before it, beside its configuration
(``<vllm_config_dir>/<replica>/revision.json``, docs/upgrades.md).

From the records of the nodes and what the vllm role's preflight found changed, ``plan`` decides
which replicas a rollout switches, in which batches, and refuses a rollout that would drain the
front door below what the operator allows, before any replica is touched. A rerun after a stop
(a rollback, a killed controller) finds the replicas whose files are already the target's done,
and takes a replica whose nodes disagree (a switch cut off mid-way) first.

Private module_utils; Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json

SCHEMA = "gpufleet.inference/serving-revision/v1"
REVISION_FILE = "revision.json"
# The files of a replica whose change restarts it (roles/vllm/tasks/configure_replica.yml), by
# their name in the snapshot a rollback restores. secrets.env is restored, never digested.
DIGESTED = ("config.yaml", "vllm.env", "unit")
RESTORED = (*DIGESTED, "secrets.env")
P = "serving_upgrade_"
# What an operator may declare the rollout changes (serving_upgrade_change): the venv (a new vLLM
# lock) and the model are checked against the nodes' records; "settings" changes neither.
CHANGES = ("any", "model", "vllm", "settings")
# The batches playbooks/upgrade_serving.yml imports its batch play for.
MAX_BATCHES = 12


class RolloutError(Exception):
    def __init__(self, problems):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def config_digest(digests):
    """The sha256 over the digests of the files in DIGESTED ({name: sha256 hex})."""
    missing = [name for name in DIGESTED if not digests.get(name)]
    if missing:
        raise ValueError("no digest of %s" % ", ".join(missing))
    return hashlib.sha256("\n".join("%s %s" % (name, digests[name]) for name in DIGESTED).encode("utf-8")).hexdigest()


def revision(venv, model, model_path, config):
    """The revision of a node: {id, venv, model, model_path, config}, config being config_digest's.

    id is the first 12 hex digits of the sha256 of the other four, so that two nodes (or two
    replicas) run the same revision exactly when their ids are equal. venv, model and model_path
    are empty for files no rollout recorded (what a node ran before its first rollout)."""
    found = {"venv": str(venv), "model": str(model), "model_path": str(model_path), "config": str(config)}
    found["id"] = hashlib.sha256(json.dumps(found, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return found


def model_problem(recorded, model, model_path):
    """Why a target must not replace the model in place, or None. recorded: a node's record.

    The previous model stays on the nodes until the rollout is done, for the rollback: a new
    model (another digest) must come at another vllm_model_path."""
    current = (recorded or {}).get("current") or {}
    if current.get("model") and current.get("model_path") == model_path and current.get("model") != model:
        return (
            "vllm_model_path=%s holds the model %s that the replica serves, and the target is %s: give the new "
            "model another vllm_model_path, so the previous one stays for a rollback"
            % (model_path, current["model"], model)
        )
    return None


def record(current, previous=None, state="serving", rollout=None, now=None):
    """The content of a node's revision file: what it runs, what it ran before (for the rollback)
    and the state of the rollout that switched it (serving, switching, rolled_back)."""
    if state not in ("serving", "switching", "rolled_back"):
        raise ValueError("state must be serving, switching or rolled_back, not %r" % (state,))
    found = {"schema": SCHEMA, "current": current, "previous": previous, "state": state}
    if rollout:
        found["rollout"] = rollout
    if now is not None:
        found["since"] = round(float(now), 3)
    return found


def replica_state(nodes):
    """What a replica runs, from its nodes' records ({node: record or None}):
    {revision: id or None, mixed: bool, states: {node: state}, missing: [nodes without a record]}.
    A replica is mixed when its nodes record different revisions, or one records none while
    another does, or one is still switching: a switch of it was cut off."""
    ids, states, missing = set(), {}, []
    for node in sorted(nodes):
        found = nodes[node]
        if not found:
            missing.append(node)
            continue
        ids.add(((found.get("current") or {}).get("id")))
        states[node] = found.get("state")
    mixed = len(ids) > 1 or bool(ids and missing) or "switching" in states.values()
    return {
        "revision": next(iter(ids)) if len(ids) == 1 and not missing else None,
        "mixed": mixed,
        "states": states,
        "missing": missing,
    }


def change_problem(recorded, target, declared):
    """Why the target changes more than the operator declared (serving_upgrade_change), or None.
    Only a node whose record names its venv and model can tell (not before its first rollout)."""
    current = (recorded or {}).get("current") or {}
    if declared not in ("model", "vllm", "settings") or not current.get("venv") or not current.get("model"):
        return None
    changed = []
    if current["venv"] != target.get("venv") and declared != "vllm":
        changed.append("the vLLM venv (%s -> %s)" % (current["venv"], target.get("venv")))
    if current["model"] != target.get("model") and declared != "model":
        changed.append("the model (%s -> %s)" % (current["model"], target.get("model")))
    if not changed:
        return None
    return "the target changes %s, and %schange is %s: fix the target, or declare what it changes" % (
        " and ".join(changed),
        P,
        declared,
    )


def _int(value):
    """An int from an int or a string of digits (-e and AWX surveys give strings), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _bool(value):
    """A bool from a bool or true/false/yes/no (AWX's multiple choice gives "true"), else None."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "false", "no"):
        return value.strip().lower() in ("true", "yes")
    return None


def settings_of(settings, replica_names):
    """(the rollout's settings, with their defaults and types, every problem of them, one message
    each, naming the variable)."""
    problems, found = [], {}
    names = settings.get(P + "replicas")
    if names is not None:
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            problems.append(
                "%sreplicas=%r must be a non-empty list of replica names (leave it out to upgrade every replica)"
                % (P, names)
            )
        else:
            unknown = [n for n in names if n not in replica_names]
            if unknown:
                problems.append(
                    "%sreplicas names %s, which the front door does not serve; its replicas are %s"
                    % (P, ", ".join(repr(n) for n in unknown), ", ".join(replica_names) or "none")
                )
            doubled = sorted(set(n for n in names if names.count(n) > 1))
            if doubled:
                problems.append("%sreplicas names %s twice; name each replica once" % (P, ", ".join(doubled)))
    found["replicas"] = names or list(replica_names)
    raw = settings.get(P + "batch_size", 1)
    found["batch_size"] = _int(raw)
    if found["batch_size"] is None or found["batch_size"] < 1:
        problems.append("%sbatch_size=%r must be a whole number of replicas, 1 or more" % (P, raw))
    raw = settings.get(P + "min_serving", 1)
    found["min_serving"] = _int(raw)
    if found["min_serving"] is None or found["min_serving"] < 0:
        problems.append(
            "%smin_serving=%r must be a whole number of replicas, 0 or more (the least that keep serving)" % (P, raw)
        )
    raw = settings.get(P + "change", "any")
    found["change"] = raw if raw in CHANGES else None
    if found["change"] is None:
        problems.append("%schange=%r must be one of %s" % (P, raw, ", ".join(CHANGES)))
    raw = settings.get(P + "allow_outage", False)
    found["allow_outage"] = _bool(raw)
    if found["allow_outage"] is None:
        problems.append("%sallow_outage=%r must be true or false" % (P, raw))
    return found, problems


def plan(replicas, recorded, pending, settings):
    """The batches of a rollout. Raises RolloutError with every problem when it must not start.

    replicas: the front door's replicas in its order, [{name, serving (bool), kind}]; only vLLM
    replicas are switched, every serving replica counts for the capacity;
    recorded: {replica: {node: record or None}} as the nodes recorded them;
    pending: {replica: bool}, whether the vllm role's preflight found files of the replica that
    the target changes (or a deferred restart);
    settings: serving_upgrade_replicas, _batch_size, _min_serving, _allow_outage.

    Returns {batches: [[name]], done: [name], mixed: [name], order: [name]}: a replica neither
    pending nor mixed is done; a mixed replica comes first (a switch of it was cut off); a replica
    that does not serve now is switched like the others but counts for no capacity."""
    names = [r["name"] for r in replicas if r.get("kind", "vllm") == "vllm"]
    found, problems = settings_of(settings, names)
    if problems:
        raise RolloutError(problems)
    chosen, batch, least, outage = (found[k] for k in ("replicas", "batch_size", "min_serving", "allow_outage"))
    states = {name: replica_state(recorded.get(name) or {}) for name in chosen}
    mixed = [n for n in chosen if states[n]["mixed"]]
    done = [n for n in chosen if n not in mixed and not pending.get(n)]
    order = mixed + [n for n in chosen if n not in done and n not in mixed]
    serving = [r["name"] for r in replicas if r.get("serving")]
    if order and not outage:
        if len(replicas) == 1:
            problems.append(
                "replica %s is the only one behind the front door: its switch is an outage; set %sallow_outage: true"
                " to take it anyway" % (replicas[0]["name"], P)
            )
        else:
            # Each batch leaves at least the serving replicas outside it.
            worst = min(len([s for s in serving if s not in order[i : i + batch]]) for i in range(0, len(order), batch))
            if worst < least:
                problems.append(
                    "%sbatch_size=%d leaves %d of the %d serving replicas (%s) in service while a batch switches, "
                    "and %smin_serving is %d; lower %sbatch_size, lower %smin_serving or set %sallow_outage: true"
                    % (P, batch, worst, len(serving), ", ".join(serving) or "none", P, least, P, P, P)
                )
    if problems:
        raise RolloutError(problems)
    batches = [order[i : i + batch] for i in range(0, len(order), batch)]
    return {"batches": batches, "done": done, "mixed": mixed, "order": order}


def from_play(status, hostvars, hosts, settings):
    """The rollout of a play: the front door's ``gpufleet-frontdoor status`` (a dict) and, on each
    vLLM host, the facts the upgrade play set: ``__vllm_node`` (the vllm role's preflight),
    ``__vllm_node_changes`` (the files the target changes), ``__serving_upgrade_read`` (module
    serving_revision, state=read) and ``__serving_upgrade_target`` ({venv, model, model_path}).

    Returns plan()'s dict with ``nodes`` ({replica: [host by rank]}), ``members`` (each batch's
    hosts and their group), ``revisions`` ({replica: {nodes: {host: record}}}, what the front door's
    status shows) and ``problems`` (empty when the rollout may start); never raises for bad input."""
    replicas = [
        {
            "name": r.get("name"),
            "kind": "vllm" if r.get("kind") == "vllm" else str(r.get("kind")),
            "serving": bool((r.get("haproxy") or {}).get("serving")),
        }
        for r in (status or {}).get("replicas") or []
    ]
    known = set(r["name"] for r in replicas)
    recorded, pending, ranks, problems = {}, {}, {}, []
    for host in hosts:
        facts = hostvars[host]
        node = facts.get("__vllm_node")
        if not isinstance(node, dict):
            continue
        name = node.get("replica")
        if name not in known:
            problems.append(
                "replica %s (%s) is not behind the front door, whose replicas are %s: a rollout drains each replica "
                "there before it switches" % (name, host, ", ".join(sorted(known)) or "none")
            )
            continue
        record = (facts.get("__serving_upgrade_read") or {}).get("record")
        recorded.setdefault(name, {})[host] = record
        pending[name] = pending.get(name, False) or bool(facts.get("__vllm_node_changes"))
        ranks.setdefault(name, []).append((int(node.get("rank", 0)), host))
        target = facts.get("__serving_upgrade_target") or {}
        why = model_problem(record, target.get("model"), target.get("model_path"))
        if why:
            problems.append("%s: %s" % (host, why))
        why = change_problem(record, target, settings.get(P + "change", "any"))
        if why:
            problems.append("%s: %s" % (host, why))
    empty = {"batches": [], "done": [], "mixed": [], "order": [], "members": [], "revisions": {}}
    if problems:
        return dict(empty, nodes={}, problems=problems)
    try:
        found = plan(replicas, recorded, pending, settings)
    except RolloutError as exc:
        return dict(empty, nodes={}, problems=exc.problems)
    if len(found["batches"]) > MAX_BATCHES:
        return dict(
            empty,
            nodes={},
            problems=[
                "the rollout takes %d batches of %s%s=%s, and playbooks/upgrade_serving.yml runs at most %d: raise "
                "%sbatch_size, or name fewer replicas in %sreplicas and run it again for the others"
                % (
                    len(found["batches"]),
                    P,
                    "batch_size",
                    settings_of(settings, [])[0]["batch_size"],
                    MAX_BATCHES,
                    P,
                    P,
                )
            ],
        )
    found["nodes"] = {name: [host for _rank, host in sorted(pairs)] for name, pairs in ranks.items()}
    found["members"] = [
        {"name": host, "group": "gpufleet_upgrade_batch_%d" % (index + 1), "replica": name}
        for index, names in enumerate(found["batches"])
        for name in names
        for host in found["nodes"].get(name, [])
    ]
    found["revisions"] = {name: {"nodes": hosts} for name, hosts in recorded.items()}
    found["problems"] = []
    return found


def _seconds(times, later, earlier):
    try:
        return round(float(times[later]) - float(times[earlier]), 3)
    except (KeyError, TypeError, ValueError):
        return None


def outcome(hostvars, nodes, replicas, load_host, now, rest=()):
    """The outcome of each replica of a batch, from the facts the batch's plays set:
    ``__serving_upgrade_failed`` on a node whose switch failed ({step, task, error}),
    ``__serving_upgrade_missed`` on the load host ({replica: the acceptance's message}) and
    ``__serving_upgrade_times`` on each node ({drain, started, ready}: epoch seconds).

    Returns {replicas: {replica: {upgraded, step, error, node, task, out_of_service_s,
    engine_start_s, acceptance}}, message}: step and error say why a replica is rolled back (None
    when upgraded); out_of_service_s runs from its drain to now (its return to the front door),
    switch_s from its drain to its rank 0's answer (the drain's wait, the stop, the start),
    engine_start_s from its units' start to its rank 0's answer; acceptance is the serving
    acceptance report's entry for it. message is failure_message's, for the replicas of rest not
    switched. revisions: {replica: {nodes: {host: record}}} from ``__serving_upgrade_now`` (module
    serving_revision, state=read, after the batch), for each replica all of whose nodes read it."""
    found = {}
    load = hostvars[load_host] if load_host in hostvars else {}
    missed = load.get("__serving_upgrade_missed") or {}
    report = {
        t.get("name"): {k: v for k, v in t.items() if k not in ("url", "label")}
        for t in (load.get("__serving_acceptance_report") or {}).get("targets") or []
        if isinstance(t, dict)
    }
    for name in replicas:
        hosts = nodes.get(name) or []
        why = None
        for host in hosts:
            failed = hostvars[host].get("__serving_upgrade_failed") if host in hostvars else None
            if failed:
                why = {"step": failed.get("step", "start"), "error": failed.get("error", ""), "node": host}
                if failed.get("task"):
                    why["task"] = failed["task"]
                break
        if why is None and name in missed:
            why = {"step": "acceptance", "error": str(missed[name])}
        times = dict(hostvars[hosts[0]].get("__serving_upgrade_times") or {}) if hosts and hosts[0] in hostvars else {}
        times["now"] = now
        found[name] = {
            "upgraded": why is None,
            "step": (why or {}).get("step"),
            "error": (why or {}).get("error"),
            "node": (why or {}).get("node"),
            "task": (why or {}).get("task"),
            "out_of_service_s": _seconds(times, "now", "drain"),
            "switch_s": _seconds(times, "ready", "drain"),
            "engine_start_s": _seconds(times, "ready", "started"),
            "acceptance": report.get(name),
        }
    revisions = {}
    for name in replicas:
        hosts = nodes.get(name) or []
        reads = [(hostvars[h].get("__serving_upgrade_now") or {}) if h in hostvars else {} for h in hosts]
        if hosts and all("record" in read for read in reads):
            revisions[name] = {"nodes": {host: read["record"] for host, read in zip(hosts, reads)}}
    return {"replicas": found, "message": failure_message(found, list(rest)), "revisions": revisions}


def failure_message(found, not_attempted):
    """The message a rollout stops with, naming each rolled-back replica, its step and why."""
    lines = []
    for name in sorted(found):
        item = found[name]
        if item["upgraded"]:
            continue
        where = " on %s" % item["node"] if item.get("node") else ""
        task = " (task %r)" % item["task"] if item.get("task") else ""
        lines.append(
            "replica %s failed at %s%s%s and was switched back to the revision it served before, which serves "
            "again: %s" % (name, item["step"], where, task, item["error"])
        )
    if not lines:
        return ""
    lines.append(
        "The rollout stopped; replicas not switched: %s. Fix the target and run the playbook again: it continues "
        "where it stopped." % (", ".join(not_attempted) or "none")
    )
    return "\n".join(lines)
