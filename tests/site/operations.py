"""Operations trials on the lab: the front door under a bounded client load while things go wrong.

    .venv/bin/python scripts/lab.py up --hosts 10 --serving site
    .venv/bin/python tests/site/deploy.py
    .venv/bin/python tests/site/operations.py [--concurrency 2] [--requests 4000] [--cap 480]

It needs two vLLM replicas behind the front door (`pp`: PP=2 over two hosts, and `tp`: TP=2 on one
host, the site layout of scripts/lab.py), the health agents and the front door's controller
(playbooks/operations.yml), and Prometheus (playbooks/monitoring.yml): the site composition
deploys all of them. The lab stage of `make test` runs it after the site's idempotent rerun.

Each trial runs a client load through the front door over TLS (the lab CA is the only trust
anchor): at most --requests completions, --concurrency at a time, for at most --cap seconds, and
stops when the trial is over. Reported per trial: requests sent, failed (any answer but 200, or no
answer), and the times that matter:

rolling:   playbooks/rolling_restart.yml restarts the `pp` replica and the llama.cpp
           coordinator, one at a time (the template's `replicas`). Must fail 0. `tp` is left
           out: its restart is the same sequence over one node instead of two, and one vLLM
           start less on the lab's two cores is minutes less.
kill:      kill -9 of the `pp` replica's vLLM worker on its last node (the headless rank). The replica is drained by the
           controller within the detection window, the other replica takes the load, and the
           replica comes back and is undrained by the controller alone.
link:      the `tp` replica's fabric link goes down for --link-down seconds (ip link set down)
           and comes back. Reported: the ping mesh's detection time (from the agent's own record),
           time to drain, failed requests, and time to serving again after the link returns.
operator:  playbooks/frontdoor_drain.yml drains `tp`; the replica is healthy, and the drain must
           survive several controller undrain windows; then playbooks/frontdoor_undrain.yml.
monitoring: Prometheus on the front-door host has scraped every job, and the series of the agents,
           the controller, HAProxy and vLLM exist.

The playbooks run as the controller runs them: their job templates (controller/job_templates.yml)
launched with ansible-runner (tests/site/_jobs.py), whose status, rc and set_stats are checked:
the restart's steps name every replica, the drain's front door status holds the operator's record
and its reason, the undrain's holds no record.

A trial whose expectation fails makes the command fail (`make test` runs it). Times are reported,
never asserted against a number, except the bounds that define a trial (the detection window).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import shlex
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request

import _jobs

ROOT = _jobs.ROOT
MANIFEST = _jobs.MANIFEST
# Each run's figures and, for a failed trial, what the units said (ignored by git).
OUTPUT = ROOT / "tests" / "output" / "site"
CA = ROOT / ".cache" / "lab-tls" / "ca.crt"


REASON = "operations trial: operator drain"


def log(message: str) -> None:
    print(f"operations: {time.strftime('%H:%M:%S')} {message}", flush=True)


class Lab:
    """What the trials need to know about the lab, read from its inventory."""

    def __init__(self) -> None:
        data = _jobs.inventory()
        self.hostvars = data["_meta"]["hostvars"]
        groups = {name: body.get("hosts", []) for name, body in data.items() if isinstance(body, dict)}
        frontends = groups.get("inference_frontends") or []
        if not frontends:
            sys.exit("operations: the lab has no front door; run `scripts/lab.py up --hosts 10 --serving site`")
        self.front = frontends[0]
        self.front_address = self.hostvars[self.front]["ansible_host"]
        self.replicas = {
            name[len("vllm_replica_") :]: hosts for name, hosts in groups.items() if name.startswith("vllm_replica_")
        }
        if sorted(self.replicas) != ["pp", "tp"]:
            sys.exit(f"operations: the trials need the site layout's replicas pp and tp, found {sorted(self.replicas)}")
        # Every replica behind the front door: the vLLM replicas and each llama.cpp coordinator.
        self.fronted = sorted([*self.replicas, *groups.get("llama_coordinator", [])])
        # The rolling trial's: every one but tp, a one-node replica (pp's sequence over one node).
        self.rolling = [name for name in self.fronted if name != "tp"]
        head = self.hostvars[self.replicas["pp"][0]]
        self.api_key = head["vllm_api_key"]
        self.model = head["vllm_served_model_name"]
        self.ssh_key = head["ansible_ssh_private_key_file"]
        self.ssh_args = head["ansible_ssh_common_args"].split()
        self.port = int(self._group_var("frontdoor_port", 8443))

    def _group_var(self, name: str, default):
        path = MANIFEST.parent / "group_vars" / "inference_frontends.yml"
        import yaml

        return (yaml.safe_load(path.read_text()) or {}).get(name, default) if path.exists() else default

    def ssh(self, host: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        address = self.hostvars[host]["ansible_host"]
        cmd = ["ssh", "-i", self.ssh_key, *self.ssh_args, "-o", "BatchMode=yes", f"root@{address}", *argv]
        return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=120)

    def status(self) -> dict:
        """The front door's view (gpufleet-frontdoor status on the front-door host)."""
        proc = self.ssh(self.front, "/usr/local/bin/gpufleet-frontdoor", "status", check=False)
        try:
            return json.loads(proc.stdout)
        except json.JSONDecodeError:
            return {"error": (proc.stdout + proc.stderr)[-500:]}

    def agent(self, host: str) -> dict:
        hv = self.hostvars[host]
        url = f"http://{hv.get('health_agent_listen_address', hv['ansible_host'])}:9105/health"
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            return json.load(error)
        except OSError as error:
            return {"error": str(error)}

    def job(self, name: str, **kwargs):
        """Launch job template name on the lab as the controller does (tests/site/_jobs.py); the
        finished job, or a TrialError unless it succeeded."""
        log(f"job template {name!r} {kwargs}")
        job = _jobs.launch(name, self.hostvars, **kwargs)
        if job.status != "successful" or job.rc != 0:
            sys.stdout.write(job.stdout[-6000:])
            raise TrialError(f"job template {name!r} failed (status {job.status}, rc {job.rc})")
        return job


def replica_view(status: dict, name: str) -> dict:
    for replica in status.get("replicas", []):
        if replica.get("name") == name:
            return replica
    return {}


def serving(view: dict) -> bool:
    """Admin state ready and the deep check passing (gpufleet-frontdoor status: haproxy.serving)."""
    return bool((view.get("haproxy") or {}).get("serving"))


def drained(view: dict) -> bool:
    return (view.get("haproxy") or {}).get("admin") in ("drain", "maint")


def drained_view(lab: Lab, name: str) -> dict | None:
    view = replica_view(lab.status(), name)
    return view if drained(view) else None


def owner(view: dict):
    """Who holds the drain: operator, auto or restart (gpufleet-frontdoor's record), or None."""
    return (view.get("record") or {}).get("owner")


class TrialError(Exception):
    pass


class Load:
    """A bounded client load through the front door: at most `requests`, `concurrency` at a time, `cap` seconds.

    Each client pauses `pause` seconds between its requests: the lab's replicas share two cores
    with the client, HAProxy and each other, and a saturating load would only measure how slowly
    a restarting replica starts on a starved CPU. A vLLM CPU worker busy-polls for a second after
    each request it reads, so requests less than a second apart at a replica keep its workers
    spinning: with 0.5 s the serving TP=2 replica's two workers took 40 % of a core each while
    the killed PP=2 replica restarted beside them (481 s to serve again at a load average of 15);
    the default of 2 s leaves each replica gaps of several seconds.
    """

    def __init__(self, lab: Lab, args) -> None:
        self.lab, self.limit, self.concurrency, self.cap = lab, args.requests, args.concurrency, args.cap
        self.pause = args.pause
        self.context = ssl.create_default_context(cafile=str(CA))
        self.lock = threading.Lock()
        self.sent = self.failed = 0
        self.failures: dict[str, int] = {}
        self.stop = threading.Event()
        self.body = json.dumps({"model": lab.model, "prompt": "The capital of France is", "max_tokens": 4})
        self.threads = [threading.Thread(target=self.worker, daemon=True) for _index in range(self.concurrency)]

    def __enter__(self) -> Load:
        self.start = time.monotonic()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=max(5.0, self.cap))
        self.wall = round(time.monotonic() - self.start, 1)

    def take(self) -> bool:
        with self.lock:
            if self.stop.is_set() or self.sent >= self.limit or time.monotonic() - self.start > self.cap:
                return False
            self.sent += 1
            return True

    def worker(self) -> None:
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.lab.api_key}"}
        while self.take():
            problem = None
            try:
                conn = http.client.HTTPSConnection(
                    self.lab.front_address, self.lab.port, context=self.context, timeout=120
                )
                conn.request("POST", "/v1/completions", body=self.body, headers=headers)
                response = conn.getresponse()
                payload = response.read()
                conn.close()
                if response.status != 200:
                    problem = f"HTTP {response.status}"
                elif not json.loads(payload).get("choices"):
                    problem = "no choices"
            except (OSError, http.client.HTTPException, ValueError) as error:
                problem = type(error).__name__
            if problem:
                with self.lock:
                    self.failed += 1
                    self.failures[problem] = self.failures.get(problem, 0) + 1
            self.stop.wait(self.pause)

    def figures(self) -> dict:
        return {
            "requests_sent": self.sent,
            "requests_failed": self.failed,
            "failures": self.failures,
            "concurrency": self.concurrency,
            "pause_s": self.pause,
            "load_s": getattr(self, "wall", None),
        }


def wait_for(what: str, predicate, timeout: float, interval: float = 0.5):
    """Poll predicate() until it returns a truthy value; return (value, seconds waited)."""
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value, round(time.monotonic() - start, 1)
        if time.monotonic() - start > timeout:
            raise TrialError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def all_serving(lab: Lab, timeout: float = 600) -> None:
    def check():
        status = lab.status()
        return all(serving(replica_view(status, name)) for name in lab.fronted)

    _value, waited = wait_for("every replica serving behind the front door", check, timeout, 2)
    log(f"every replica serving (waited {waited} s)")


def trial_rolling(lab: Lab, args) -> dict:
    with Load(lab, args) as load:
        time.sleep(3)
        restart = lab.job("gpufleet rolling restart", extra_vars={"replicas": lab.rolling})
        time.sleep(3)
    # gpufleet-frontdoor restart prints one JSON line per step, then its summary.
    steps = [json.loads(line) for line in restart.stats.get("frontdoor_restart_steps") or [] if line.startswith("{")]
    summary = next((step for step in steps if step.get("summary")), {})
    if not summary.get("ok") or summary.get("restarted") != lab.rolling:
        raise TrialError(f"the rolling restart's set_stats do not show {lab.rolling} restarted in turn: {summary}")
    result = {
        "trial": f"planned rolling restart of {', '.join(lab.rolling)} "
        "(job template 'gpufleet rolling restart', playbooks/rolling_restart.yml)",
        "restart_s": restart.wall_s,
    }
    result.update(load.figures())
    history = lab.status()
    result["replicas_restarted"] = {
        name: (replica_view(history, name).get("restart") or {}).get("last_duration_s") for name in lab.rolling
    }
    result["ok"] = load.failed == 0 and load.sent > 0
    return result


def trial_kill(lab: Lab, args) -> dict:
    node = lab.replicas["pp"][-1]  # the last rank: a headless node of a PP replica
    window = args.detection_window
    with Load(lab, args) as load:
        time.sleep(3)
        t0 = time.monotonic()
        lab.ssh(node, "pkill", "-KILL", "-f", "VLLM::Worker")
        log(f"kill -9 of the vLLM worker on {node}")
        view, _waited = wait_for(
            "the pp replica drained",
            lambda: drained_view(lab, "pp"),
            window + 30,
            0.5,
        )
        drained_s = round(time.monotonic() - t0, 1)
        drain_owner = owner(view)
        wait_for(
            "the pp replica back and undrained by the controller",
            lambda: serving(replica_view(lab.status(), "pp")),
            args.recovery_timeout,
            2,
        )
        recovered_s = round(time.monotonic() - t0, 1)
        time.sleep(3)
    result = {
        "trial": f"kill -9 of the pp replica's vLLM worker on its last node ({node})",
        "detection_window_s": window,
        "drained_after_s": drained_s,
        "drain_owner": drain_owner,
        "serving_again_after_s": recovered_s,
    }
    result.update(load.figures())
    result["ok"] = drained_s <= window and drain_owner == "auto"
    return result


def trial_link(lab: Lab, args) -> dict:
    node = lab.replicas["tp"][0]
    interface = lab.hostvars[node]["gpufleet_fabric_interface"]
    with Load(lab, args) as load:
        time.sleep(3)
        down_at = time.time()
        t0 = time.monotonic()
        lab.ssh(node, "ip", "link", "set", interface, "down")
        log(f"{node}: {interface} down for {args.link_down} s")
        detected = None
        drained_s = None
        while time.monotonic() - t0 < args.link_down:
            health = lab.agent(node)
            ping = (health.get("checks") or {}).get("ping") or {}
            if detected is None and ping.get("state") == "failing":
                detected = round(float(ping.get("since", time.time())) - down_at, 2)
                log(f"ping mesh: failing after {detected} s ({ping.get('reason')})")
            if drained_s is None and drained(replica_view(lab.status(), "tp")):
                drained_s = round(time.monotonic() - t0, 1)
                log(f"tp drained after {drained_s} s")
            time.sleep(0.2)
        lab.ssh(node, "ip", "link", "set", interface, "up")
        up_at = time.monotonic()
        log(f"{node}: {interface} up")
        wait_for("tp serving again", lambda: serving(replica_view(lab.status(), "tp")), args.recovery_timeout, 1)
        recovered_s = round(time.monotonic() - up_at, 1)
        time.sleep(3)
    result = {
        "trial": f"fabric link of the tp replica ({node} {interface}) down for {args.link_down} s",
        "link_down_s": args.link_down,
        "ping_detection_s": detected,
        "drained_after_s": drained_s,
        "serving_again_after_link_up_s": recovered_s,
    }
    result.update(load.figures())
    result["ok"] = detected is not None and drained_s is not None
    return result


def trial_operator(lab: Lab, args) -> dict:
    hold = args.operator_hold
    with Load(lab, args) as load:
        time.sleep(3)
        drain = lab.job("gpufleet drain a replica", answers={"replica": "tp", "reason": REASON})
        for front, view in drain.stats["frontdoor_status"].items():
            record = replica_view(view, "tp").get("record") or {}
            if (record.get("owner"), record.get("reason")) != ("operator", REASON):
                raise TrialError(f"the drain job's set_stats show {front}'s record of tp as {record}")
        start = time.monotonic()
        undone = None
        while time.monotonic() - start < hold:
            view = replica_view(lab.status(), "tp")
            if not drained(view) or owner(view) != "operator":
                undone = view
                break
            time.sleep(1)
        undrain = lab.job("gpufleet undrain a replica", answers={"replica": "tp"})
        records = {
            front: replica_view(view, "tp").get("record") for front, view in undrain.stats["frontdoor_status"].items()
        }
        if any(records.values()):
            raise TrialError(f"the undrain job's set_stats still show drain records of tp: {records}")
        _value, back_s = wait_for(
            "tp serving after the undrain", lambda: serving(replica_view(lab.status(), "tp")), 120, 1
        )
        time.sleep(3)
    result = {
        "trial": "an operator's drain of tp held against the controller (job templates 'gpufleet drain a "
        "replica' and 'gpufleet undrain a replica')",
        "held_s": hold,
        "drain_undone_by_automation": undone is not None,
        "serving_after_undrain_s": back_s,
    }
    result.update(load.figures())
    result["ok"] = undone is None and load.failed == 0
    return result


def prometheus_query(lab: Lab, query: str) -> list:
    url = f"http://{lab.front_address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)["data"]["result"]


SERIES = (
    "gpufleet_health_healthy",
    "gpufleet_health_check_ok",
    "gpufleet_health_ping_peer_up",
    "gpufleet_frontdoor_replica_serving",
    "gpufleet_frontdoor_actions_total",
    "haproxy_backend_active_servers",
    "haproxy_server_status",
    "vllm:num_requests_running",
)


def promtool_tests(lab: Lab) -> str:
    """The shipped alert rules' unit tests, run by the front-door host's own promtool (Debian's)."""
    rules = ROOT / "monitoring" / "prometheus"
    script = (
        "set -e; d=$(mktemp -d); trap 'rm -rf $d' EXIT; "
        "printf '%s' \"$1\" | base64 -d > $d/gpufleet-alerts.yml; "
        "printf '%s' \"$2\" | base64 -d > $d/gpufleet-alerts.test.yml; "
        "cd $d && promtool test rules gpufleet-alerts.test.yml"
    )
    encoded = [
        base64.b64encode((rules / name).read_bytes()).decode()
        for name in ("gpufleet-alerts.yml", "gpufleet-alerts.test.yml")
    ]
    proc = lab.ssh(lab.front, "sh", "-c", shlex.quote(script), "promtool-tests", *encoded, check=False)
    if proc.returncode != 0:
        raise TrialError(f"promtool test rules failed: {(proc.stdout + proc.stderr)[-1500:]}")
    return proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else "SUCCESS"


# The gpufleet-agents programs export the package's version as a label; every one the lab runs must
# be the checkout's: galaxy.yml's, which tests/packaging/test_agents_wheel.py holds equal to the package's.
VERSION_SERIES = ("gpufleet_health_agent_info", "gpufleet_frontdoor_info")


def checkout_version() -> str:
    import yaml

    return yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def trial_monitoring(lab: Lab, _args) -> dict:
    promtool = promtool_tests(lab)
    versions = {
        name: sorted({sample["metric"].get("version", "") for sample in prometheus_query(lab, name)})
        for name in VERSION_SERIES
    }
    down = prometheus_query(lab, "up == 0")
    jobs = sorted({sample["metric"]["job"] for sample in prometheus_query(lab, "up == 1")})
    missing = [name for name in SERIES if not prometheus_query(lab, f'count({{__name__="{name}"}})')]
    rules = prometheus_query(lab, "ALERTS")
    result = {
        "trial": "Prometheus (Debian) on the front-door host scrapes the lab",
        "jobs_up": jobs,
        "targets_down": [sample["metric"] for sample in down],
        "series_checked": list(SERIES),
        "series_missing": missing,
        "alerts_now": sorted({f"{s['metric'].get('alertname')} ({s['metric'].get('alertstate')})" for s in rules}),
        "promtool_test_rules": promtool,
        "agents_versions": versions,
    }
    same = all(found == [checkout_version()] for found in versions.values())
    result["ok"] = not missing and not down and len(jobs) >= 4 and same
    return result


TRIALS = {
    "rolling": trial_rolling,
    "kill": trial_kill,
    "link": trial_link,
    "operator": trial_operator,
    "monitoring": trial_monitoring,
}


def journal(lab: Lab, host: str, unit: str, lines: int = 30) -> list[str]:
    proc = lab.ssh(host, "journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-monotonic", check=False)
    return (proc.stdout or proc.stderr).splitlines()[-lines:]


def diagnose(lab: Lab) -> dict:
    """What the front door, its controller and the replicas' units say now, for a failed trial's record."""
    found: dict = {"status": lab.status(), "controller": journal(lab, lab.front, "gpufleet-frontdoor-controller")}
    for name, hosts in lab.replicas.items():
        for host in hosts:
            found[f"{host} gpufleet-vllm-{name}"] = journal(lab, host, f"gpufleet-vllm-{name}", 20)
    return found


def summary_line(result: dict) -> str:
    """One line per trial for the end of the output, where CI's tail shows it."""
    keys = [k for k in result if k not in ("trial", "ok", "diagnosis", "failures")]
    figures = ", ".join(f"{k}={result[k]}" for k in keys if not isinstance(result[k], (dict, list)))
    failures = result.get("failures") or {}
    return f"{'ok    ' if result.get('ok') else 'FAILED'} {result['trial']}: {figures}" + (
        f", failures={failures}" if failures else ""
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", nargs="+", choices=list(TRIALS), default=list(TRIALS))
    parser.add_argument("--requests", type=int, default=4000, help="at most this many requests per trial")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--pause", type=float, default=2.0, help="seconds each client waits between its requests")
    parser.add_argument("--cap", type=float, default=480, help="seconds a trial's load runs at most")
    parser.add_argument("--link-down", type=float, default=20)
    parser.add_argument("--operator-hold", type=float, default=30, help="seconds the operator's drain must hold")
    parser.add_argument(
        "--detection-window", type=float, default=30, help="seconds within which a killed replica must be drained"
    )
    # A bound against a hang only: a PP=2 replica restarting beside a loaded one on 2 busy cores took
    # over 7 minutes to serve again (tests/output/site/operations.json reports each run's time).
    parser.add_argument("--recovery-timeout", type=float, default=900)
    args = parser.parse_args()
    if not MANIFEST.exists():
        sys.exit("operations: no lab manifest; run `scripts/lab.py up --hosts 10 --serving site` first")
    lab = Lab()
    results = []
    for name in args.trials:
        log(f"trial {name}")
        try:
            if name != "monitoring":
                all_serving(lab)
            result = TRIALS[name](lab, args)
        except TrialError as error:
            result = {"trial": name, "ok": False, "error": str(error)}
        if not result.get("ok"):
            result["diagnosis"] = diagnose(lab)
            log(f"trial {name} failed; the front door and the units now:\n{json.dumps(result['diagnosis'], indent=1)}")
        log(json.dumps({k: v for k, v in result.items() if k != "diagnosis"}))
        results.append(result)
    record = {"frontdoor": lab.front, "replicas": lab.replicas, "trials": results}
    OUTPUT.mkdir(parents=True, exist_ok=True)
    (OUTPUT / "operations.json").write_text(json.dumps(record, indent=2) + "\n")
    print("\n".join(summary_line(result) for result in results), flush=True)
    failed = [r["trial"] for r in results if not r.get("ok")]
    if failed:
        print(f"operations: failed trials: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
