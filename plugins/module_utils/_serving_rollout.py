# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rules of a change of what a cluster serves, taken one replica (or one batch) at a time.

A replica's *revision* is what its nodes run: the vLLM venv (the lock), the model's digest and a
digest of the files whose change restarts the replica (``config.yaml``, ``vllm.env`` and the unit;
``secrets.env`` is left out of the digest, so no digest of a key is ever recorded). Each node
records the revision it runs, and the one before it, beside its configuration
(``<vllm_config_dir>/<replica>/revision.json``, docs/upgrades.md).

From the revisions the nodes recorded and the revision each replica is to run, ``plan`` decides
which replicas a rollout switches, in which batches, and refuses a rollout that would drain the
front door below what the operator allows, before any replica is touched. A rerun after a stop
(a rollback, a killed controller) finds the replicas already at the target done, and a replica
whose nodes disagree (a switch cut off mid-way) first.

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


class RolloutError(Exception):
    def __init__(self, problems):
        super().__init__("\n".join(problems))
        self.problems = list(problems)


def revision(venv, model, digests):
    """The revision of a node: {id, venv, model, config}. digests: {name in DIGESTED: sha256 hex}.

    id is the first 12 hex digits of the sha256 of the other three, so that two nodes (or two
    replicas) run the same revision exactly when their ids are equal."""
    missing = [name for name in DIGESTED if not digests.get(name)]
    if missing:
        raise ValueError("no digest of %s" % ", ".join(missing))
    config = hashlib.sha256("\n".join("%s %s" % (name, digests[name]) for name in DIGESTED).encode("utf-8")).hexdigest()
    found = {"venv": str(venv), "model": str(model), "config": config}
    found["id"] = hashlib.sha256(json.dumps(found, sort_keys=True).encode("utf-8")).hexdigest()[:12]
    return found


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


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def settings_problems(settings, replica_names):
    """Every problem of the rollout's own inputs, one message each, naming the variable."""
    problems = []
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
    batch = settings.get(P + "batch_size", 1)
    if not _is_int(batch) or batch < 1:
        problems.append("%sbatch_size=%r must be a whole number of replicas, 1 or more" % (P, batch))
    least = settings.get(P + "min_serving", 1)
    if not _is_int(least) or least < 0:
        problems.append(
            "%smin_serving=%r must be a whole number of replicas, 0 or more (the least that keep serving)" % (P, least)
        )
    if not isinstance(settings.get(P + "allow_outage", False), bool):
        problems.append("%sallow_outage=%r must be true or false" % (P, settings.get(P + "allow_outage")))
    return problems


def plan(replicas, recorded, target, settings):
    """The batches of a rollout. Raises RolloutError with every problem when it must not start.

    replicas: the front door's replicas in its order, [{name, serving (bool)}];
    recorded: {replica: {node: record or None}} as the nodes recorded them;
    target: {replica: revision id} each replica is to run once switched;
    settings: serving_upgrade_replicas, _batch_size, _min_serving, _allow_outage.

    Returns {batches: [[name]], done: [name], mixed: [name], order: [name]}: replicas already at
    their target are done; a mixed replica comes first (a switch of it was cut off); a replica
    that does not serve now is switched like the others but counts for no capacity."""
    names = [r["name"] for r in replicas]
    problems = settings_problems(settings, names)
    if problems:
        raise RolloutError(problems)
    chosen = settings.get(P + "replicas") or names
    batch = settings.get(P + "batch_size", 1)
    least = settings.get(P + "min_serving", 1)
    outage = settings.get(P + "allow_outage", False)
    missing = [name for name in chosen if not target.get(name)]
    if missing:
        raise RolloutError(["no target revision for replica %s: its nodes were not staged" % ", ".join(missing)])
    states = {name: replica_state(recorded.get(name) or {}) for name in chosen}
    done = [n for n in chosen if not states[n]["mixed"] and states[n]["revision"] == target[n]]
    mixed = [n for n in chosen if states[n]["mixed"]]
    order = mixed + [n for n in chosen if n not in done and n not in mixed]
    serving = [r["name"] for r in replicas if r.get("serving")]
    if order and not outage:
        if len(replicas) == 1:
            problems.append(
                "replica %s is the only one behind the front door: its switch is an outage; set %sallow_outage: true"
                " to take it anyway" % (names[0], P)
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
