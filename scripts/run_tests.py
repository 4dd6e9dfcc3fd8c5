"""Run the whole test suite in stages, stop at the first failure, end with a pytest-style summary.

    run_tests.py                 every stage, in order
    run_tests.py STAGE ...       only these stages (names as listed by --list)
    run_tests.py --list          list the stages

`make test` (and so .ci/run) calls this. Each stage is a real command; a stage that does not run
because an earlier one failed is reported as "not run", never silently dropped.
"""

from __future__ import annotations

import argparse
import atexit
import io
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO, TypeVar

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"
# Outside the checkout (inside it, ansible-test would see the checkout's git ignore rules), and
# one per run, so two runs on one machine never delete each other's copy.
COPY_ROOT = Path(tempfile.mkdtemp(prefix="gpufleet-ansible-test-"))
atexit.register(shutil.rmtree, COPY_ROOT, True)
GET_PIP_STANDIN = REPO / "scripts" / "ansible_test_get_pip.py"
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
T = TypeVar("T")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}:{e.get('PATH', '')}"
    e["MOLECULE_GLOB"] = "molecule/*/molecule.yml"
    e["PYTHONPATH"] = str(REPO / "collections")
    e["ANSIBLE_FORCE_COLOR"] = "0"
    e["NO_COLOR"] = "1"
    e["PY_COLORS"] = "0"
    return e


def copy_collection(name: str) -> Path:
    """ansible-test must run from .../ansible_collections/<ns>/<name>: copy what git would ship.

    One copy per ansible-test command (name), so sanity and units can run side by side."""
    copy = COPY_ROOT / name / "ansible_collections" / "gpufleet" / "inference"
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    if copy.exists():
        shutil.rmtree(copy)
    for path in filter(None, files):
        src = REPO / path
        if not src.is_file():
            continue
        dest = copy / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest, follow_symlinks=False)
    return copy


def install_get_pip_standin() -> None:
    """Put the local pip bootstrap where ansible-test looks before it tries to download one."""
    sys.path.insert(0, str(next((VENV_BIN.parent / "lib").glob("python3*/site-packages"))))
    from ansible_test._internal.python_requirements import get_venv_packages  # noqa: PLC0415

    class _Python:
        version = PYTHON_VERSION

    version = get_venv_packages(_Python())["pip"]
    cache = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    # Written by a rename: an ansible-test running beside (STATIC_LANES) may be reading it.
    cache.parent.mkdir(parents=True, exist_ok=True)
    partial = cache.with_name(f"{cache.name}.{os.getpid()}.{threading.get_ident()}")
    shutil.copyfile(GET_PIP_STANDIN, partial)
    partial.replace(cache)


def ansible_test(*args: str) -> tuple[list[str], Path]:
    install_get_pip_standin()
    cwd = copy_collection(args[0])
    return [str(VENV_BIN / "ansible-test"), *args, "--venv", "--python", PYTHON_VERSION, "--color", "no"], cwd


def lab(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "scripts" / "lab.py"), *args]


def lab_cpu(after: str) -> list[str]:
    """The lab hosts' CPU seconds so far, by systemd unit, after one step of the lab stage: where
    the lab's time goes (docs/testing.md, Time budget), in tests/output/site/."""
    return lab("cpu", "--output", str(REPO / "tests" / "output" / "site" / f"lab-cpu-after-{after}.json"))


DOCS_SITE_TEST = REPO / "tests" / "packaging" / "test_docs_site.py"
BAD_INPUTS_TEST = REPO / "tests" / "lab" / "test_bad_inputs.py"
SITE = REPO / "tests" / "site"
LAB_INVENTORY = "inventories/lab"

# The molecule scenarios `make test` runs: each proves what the lab stage's one deployment cannot
# (its own host shape, or a fault that would break the shared lab), as its molecule.yml says.
MOLECULE_IN_TEST = ("fabric_network", "fabric_validate", "gpu_stack")
# The others are for a role's developer, run alone (`molecule test -s NAME`): the lab stage makes
# their proofs (docs/testing.md). `make test` checks their syntax and names them, with this reason.
DEVELOPER_SCENARIO = "a role developer's scenario; the lab stage makes its proofs (docs/testing.md)"
# Stages that only run when named: each with the reason it is not in `make test` yet, printed in
# the summary of every run that leaves it out.
# docs-site joined `make test` once the suite was measured with it (docs/testing.md).
OPTIONAL: dict[str, str] = {
    "upgrade": "a trial stage of its own, `scripts/run_tests.py upgrade` (docs/upgrades.md): its lab and four "
    "rollouts under load take longer than make test's budget has left",
}

SCENARIOS = sorted(path.parent.name for path in REPO.glob("molecule/*/molecule.yml"))

# name -> list of commands (argv, or a callable returning (argv, cwd)); run in order.
STAGES: dict[str, list] = {
    "yamllint": [["yamllint", "--strict", "."]],
    "ansible-lint": [["ansible-lint", "--offline", "--strict"]],
    "ruff": [["ruff", "check", "."], ["ruff", "format", "--check", "--diff", "."]],
    "changelog-lint": [["antsibull-changelog", "lint"]],
    # The role README variable tables are generated from the argument specs (docs/role-docs.md).
    "role-docs": [[str(VENV_BIN / "python"), str(REPO / "scripts" / "role_docs.py"), "--check"]],
    "sanity": [lambda: ansible_test("sanity", "--requirements")],
    "units": [lambda: ansible_test("units", "--requirements")],
    # The gpufleet-agents package's own tests (agents/README.md), run as a package's tests are:
    # pytest takes its settings from agents/pyproject.toml.
    "agents": [["pytest", "-q", "-p", "no:cacheprovider", str(REPO / "agents")]],
    # tests/unit runs once, under ansible-test units (the same pytest files, in the collection
    # layout); plain pytest runs only what ansible-test does not collect.
    "pytest": [
        [
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/lab",
            "tests/packaging",
            f"--ignore={DOCS_SITE_TEST}",
            f"--ignore={BAD_INPUTS_TEST}",
        ]
    ],
    # Every role's bad inputs refused before any change, on the local machine in check mode
    # (docs/testing.md, The bad-input suite); a stage of its own so that `make check` runs it.
    "bad-inputs": [["pytest", "-q", "-p", "no:cacheprovider", str(BAD_INPUTS_TEST)]],
    # The antsibull-docs site read back in headless Chromium (docs/docs-site.md): a stage of its own,
    # so its time (a venv and Chromium on a fresh machine) shows in the summary.
    "docs-site": [["pytest", "-q", "-p", "no:cacheprovider", str(DOCS_SITE_TEST)]],
    # The scenarios of MOLECULE_IN_TEST, one `molecule test -s NAME` each, so the summary shows each
    # one's time; run in lanes (molecule_lanes) because one scenario alone leaves half of the 2 cores
    # idle. The developer scenarios are syntax-checked only.
    "molecule": [["molecule", "test", "-s", name] for name in MOLECULE_IN_TEST]
    + [["molecule", "syntax", "-s", name] for name in sorted(set(SCENARIOS) - set(MOLECULE_IN_TEST))],
    # The one deployment of the whole site on a 10-host lab built from a topology manifest and
    # reached over SSH (scripts/lab.py SITE_LAYOUT), which carries every proof that needs a real
    # multi-host cluster (docs/testing.md lists them): deployed as the controller launches it, then
    # verified, rerun from the built artifact (it fails unless nothing changed), put through the
    # operations trials, and removed. A lab left by an earlier run is removed first: the workflow's
    # preflight must meet fresh hosts.
    "lab": [
        # The checkout resolves its own FQCNs through ansible.cfg, no installed copy needed.
        [str(VENV_BIN / "ansible"), "localhost", "-m", "gpufleet.inference.nccl_info"],
        lab("down"),
        lab("up", "--hosts", "10", "--serving", "site"),
        [str(VENV_BIN / "ansible"), "-i", LAB_INVENTORY, "all", "-m", "ansible.builtin.ping"],
        [str(VENV_BIN / "ansible-inventory"), "-i", LAB_INVENTORY, "--graph"],
        # What an operator left on a host before the collection managed it.
        [str(VENV_BIN / "ansible-playbook"), "-i", LAB_INVENTORY, str(SITE / "prepare.yml")],
        # The workflow (preflight on the new hosts, deploy, validate) and the job templates,
        # through ansible-runner as AWX runs them.
        [str(VENV_BIN / "python"), str(SITE / "deploy.py")],
        lab_cpu("deploy"),
        # The model fan-out: each node holds its plan's files, no access is left, and vLLM's
        # loader refuses a stage without one of its shards.
        [str(VENV_BIN / "python"), str(SITE / "staging.py")],
        # The serving acceptance's bad inputs through the playbook, a slowed replica failing it by
        # name, and the same replica passing once the slowdown is undone.
        [str(VENV_BIN / "python"), str(SITE / "serving.py")],
        # The serving layer's, the collective layer's and the llama.cpp cluster's proofs.
        [str(VENV_BIN / "ansible-playbook"), "-i", LAB_INVENTORY, str(SITE / "verify.yml")],
        lab_cpu("verify"),
        # The idempotent second run of the whole site, from the built artifact installed into a
        # clean venv, by FQCN (scripts/installed_collection.py): roles, templates, files, modules,
        # filters and the topology inventory plugin all come from the artifact, and every host
        # must report changed=0. The validation layer is left out: each measurement writes a new
        # report. The settings are the checkout's ansible.cfg's, as a site's own would be.
        [
            "env",
            "ANSIBLE_FORKS=25",
            "ANSIBLE_PIPELINING=True",
            "ANSIBLE_GATHERING=smart",
            sys.executable,
            str(REPO / "scripts" / "installed_collection.py"),
            "playbook",
            "--unchanged",
            "site",
            "-i",
            "inventories/lab/topology.yml",
            "--skip-tags",
            "gpufleet_validation",
        ],
        lab_cpu("rerun"),
        # Two replicas behind the front door under a bounded client load: a rolling restart, a
        # kill -9, a fabric link down, an operator's drain; then Prometheus' series (docs/operations.md).
        [str(VENV_BIN / "python"), str(SITE / "operations.py")],
        lab_cpu("operations"),
        lab("down"),
    ],
    # The replica-by-replica upgrade's trials (tests/site/upgrade.py) on a lab of their own: the
    # site deployed as an operator deploys it (no workflow, no validation layer), then four rollouts
    # under a client load through the front door, and the lab removed.
    "upgrade": [
        lab("down"),
        lab("up", "--hosts", "10", "--serving", "site"),
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            LAB_INVENTORY,
            "playbooks/site.yml",
            "--skip-tags",
            "gpufleet_validation",
        ],
        [str(VENV_BIN / "python"), str(SITE / "upgrade.py")],
        lab("down"),
    ],
}

# Seconds each scenario took in a measured run with two lanes (benchmarks/results/), to balance
# the lanes; a new scenario counts as DEFAULT_SECONDS until measured. Each scenario has its own
# containers, network and subnet, so lanes share nothing but the read-only caches.
SCENARIO_SECONDS = {
    "fabric_network": 546,
    "gpu_stack": 472,
    "fabric_validate": 369,
}
DEFAULT_SECONDS = 300
# A developer scenario's syntax check (no hosts).
SYNTAX_SECONDS = 10
# Stages that run beside the molecule scenarios when both are selected, as steps of their lanes:
# they use neither molecule's hosts nor the lab's (docs/testing.md, Time budget). Their rows in
# the summary stay their own. Seconds by step label, as SCENARIO_SECONDS.
BESIDE_MOLECULE = ("pytest", "docs-site")
BESIDE_SECONDS = {"pytest": 80, "test_docs_site": 60}
# The lab stage, the longest by far, starts with the first stage in a lane of its own (a nested
# `run_tests.py --no-record lab`, its steps in turn) when molecule runs in lanes too: its hosts
# and subnets are nobody else's, and it spends part of its time waiting (engines starting, the
# trials' holds), which the static stages and the molecule lane fill. That lane is one of
# GPUFLEET_MOLECULE_LANES. GPUFLEET_LAB_BESIDE=0 runs the lab last, alone, instead.
LAB_BESIDE_ENV = "GPUFLEET_LAB_BESIDE"
LAB_STEP = [sys.executable, str(Path(__file__).resolve()), "--no-record", "lab"]
LANES_ENV = "GPUFLEET_MOLECULE_LANES"
LOG_DIR = REPO / "tests" / "output" / "molecule"

PYTEST_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|warnings?)")


def step_label(argv: list[str]) -> str:
    """A short name for a step in the summary: the scenario of a molecule run, else the script or command."""
    if argv[:3] == ["molecule", "test", "-s"]:
        return argv[3]
    if argv[:3] == ["molecule", "syntax", "-s"]:
        return f"{argv[3]} syntax"
    # An option (pytest's --ignore=PATH) names no script of the step.
    script = next((a for a in argv[1:] if a.endswith(".py") and not a.startswith("-")), None)
    if script is None:
        return Path(argv[0]).name
    rest = [a for a in argv[argv.index(script) + 1 :] if not a.startswith("-")]
    return f"{Path(script).stem} {rest[0]}" if rest else Path(script).stem


def molecule_lanes(steps: list[list[str]], lanes: int) -> list[list[list[str]]]:
    """Split the molecule steps into at most `lanes` lanes run side by side; 1 runs them in turn.

    The syntax checks come first (in one lane too), so that a broken scenario fails in seconds;
    then longest first (SCENARIO_SECONDS), each onto the lane with the least expected time so far: the longest
    scenario starts at once, and the short ones fill the lane that would end first."""
    if lanes < 1:
        raise ValueError(f"{LANES_ENV}={lanes}: use 1 (one scenario at a time) or more")
    if lanes == 1:
        return [sorted(steps, key=lambda s: not step_label(s).endswith(" syntax"))]
    shared: list[list[list[str]]] = [[] for _lane in range(lanes)]
    load = [0] * lanes
    order = sorted(steps, key=lambda s: (not step_label(s).endswith(" syntax"), -expected_seconds(s), step_label(s)))
    for step in order:
        emptiest = load.index(min(load))
        shared[emptiest].append(step)
        load[emptiest] += expected_seconds(step)
    return [lane for lane in shared if lane]


def expected_seconds(step: list[str]) -> int:
    label = step_label(step)
    if label.endswith(" syntax"):
        return SYNTAX_SECONDS
    return SCENARIO_SECONDS.get(label, BESIDE_SECONDS.get(label, DEFAULT_SECONDS))


def lane_count() -> int:
    raw = os.environ.get(LANES_ENV, "2")
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{LANES_ENV}={raw!r} is not a number: use 1 (one scenario at a time) or 2") from None


def side_by_side(lanes: list[list[T]], run: Callable[[T], bool]) -> None:
    """Run each lane's items in turn with run, the lanes side by side in threads. After an item
    fails (run returns False or raises), no lane starts another; the items running finish."""
    failed = threading.Event()

    def lane(items: list[T]) -> None:
        for item in items:
            if failed.is_set():
                return
            ok = False
            try:
                ok = run(item)
            finally:
                if not ok:
                    failed.set()
            if not ok:
                return

    threads = [threading.Thread(target=lane, args=(items,)) for items in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run_lanes(
    name: str, lanes: list[list[list[str]]], steps_of: dict[str, str] | None = None
) -> tuple[bool, str, dict[str, tuple[int, float, Path]]]:
    """Run each lane's steps in turn, the lanes side by side. A step's output goes to its log file
    and is printed whole when it ends, so the CI log reads one scenario at a time. After a failure
    no lane starts another step; the steps already running finish (and destroy their hosts).

    steps_of names the stage of a step label that belongs to another stage (BESIDE_MOLECULE); the
    detail covers the rest. Returns (ok, detail, {label: (exit code, seconds, log)} of every step run)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    printing = threading.Lock()
    timings: dict[str, str] = {}
    failures: list[tuple[str, str]] = []
    ran: dict[str, tuple[int, float, Path]] = {}
    steps_of = steps_of or {}

    def step(argv: list[str]) -> bool:
        label = step_label(argv)
        log = LOG_DIR / f"{label}.log"
        with printing:
            print(f"\n----- {steps_of.get(label, name)}: {' '.join(argv)} started (log: {log})", flush=True)
        t0 = time.monotonic()
        with log.open("w") as out:
            proc = subprocess.run(argv, cwd=REPO, env=env(), stdout=out, stderr=subprocess.STDOUT, check=False)
        code = proc.returncode
        seconds = time.monotonic() - t0
        ran[label] = (code, seconds, log)
        if label not in steps_of:
            timings[label] = f"{label} {seconds:.0f}s"
        with printing:
            show_step_log(steps_of.get(label, name), argv, log, seconds, code)
        if code != 0:
            failures.append((label, f"exit {code}: {' '.join(argv)}"))
        return code == 0

    side_by_side(lanes, step)
    order = [step_label(s) for steps in lanes for s in steps]
    done = ", ".join(timings[label] for label in sorted(order) if label in timings)
    lane_text = " | ".join(", ".join(step_label(s) for s in steps) for steps in lanes)
    own = [text for label, text in failures if label not in steps_of]
    if own:
        return False, "; ".join(own) + f"; {done}", ran
    return True, f"{done} (lanes: {lane_text})", ran


def show_step_log(stage: str, argv: list[str], log: Path, seconds: float, code: int) -> None:
    """Print a step's log whole, between its command line and its time and exit code."""
    print(f"\n----- {stage}: {' '.join(argv)}", flush=True)
    sys.stdout.write(log.read_text(errors="replace"))
    print(f"----- {stage}: {step_label(argv)} {seconds:.0f}s (exit {code})", flush=True)


def pytest_counts(text: str) -> list[str]:
    return [
        line.strip().strip("= ")
        for line in text.splitlines()
        if PYTEST_COUNTS.search(line) and ("passed" in line or "failed" in line)
    ]


def run_molecule_with(beside: list[str], lanes: int) -> list[tuple[str, str, float, str]]:
    """The molecule stage with the stages in beside as steps of its lanes (at most lanes of them);
    a summary row for each: (stage, PASSED/FAILED/NOT RUN, seconds, detail)."""
    steps_of = {step_label(step): stage for stage in beside for step in STAGES[stage]}
    steps = STAGES["molecule"] + [s for b in beside for s in STAGES[b]]
    t0 = time.monotonic()
    ok, detail, ran = run_lanes("molecule", molecule_lanes(steps, lanes), steps_of)
    missing = [step_label(step) for step in STAGES["molecule"] if step_label(step) not in ran]
    if ok and missing:
        ok, detail = False, f"not run after a failure beside them: {', '.join(missing)}; {detail}"
    rows = [("molecule", "PASSED" if ok else "FAILED", time.monotonic() - t0, detail)]
    for stage in beside:
        labels = [step_label(step) for step in STAGES[stage]]
        if not all(label in ran for label in labels):
            rows.append((stage, "NOT RUN", 0.0, "an earlier step of the molecule lanes failed"))
            continue
        codes = [ran[label][0] for label in labels]
        secs = sum(ran[label][1] for label in labels)
        counts = [c for label in labels for c in pytest_counts(ran[label][2].read_text(errors="replace"))]
        note = "; ".join(counts) + " (beside the molecule lanes)"
        failed = next((f"exit {code}: {label}" for code, label in zip(codes, labels) if code), None)
        rows.append((stage, "FAILED" if failed else "PASSED", secs, f"{failed}; {note}" if failed else note))
    return rows


def run_stage(name: str, out: TextIO | None = None) -> tuple[bool, str]:
    """Run a stage's steps in turn, their output to out (standard output if None)."""
    out = out or sys.stdout
    if name == "molecule":
        lanes = molecule_lanes(STAGES[name], lane_count())
        if len(lanes) > 1:
            ok, detail, _ran = run_lanes(name, lanes)
            return ok, detail
    counts: list[str] = []
    timings: list[str] = []
    for step in STAGES[name]:
        argv, cwd = step() if callable(step) else (step, REPO)
        print(f"\n----- {name}: {' '.join(argv)}", file=out, flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            out.write(line)
            if name != "molecule" and PYTEST_COUNTS.search(line) and ("passed" in line or "failed" in line):
                counts.append(line.strip().strip("= "))
        out.flush()
        code = proc.wait()
        timings.append(f"{step_label(argv)} {time.monotonic() - t0:.0f}s")
        print(f"----- {name}: {timings[-1]} (exit {code})", file=out, flush=True)
        if code != 0:
            return False, f"exit {code}: {' '.join(argv)}; " + ", ".join(timings)
    if len(STAGES[name]) > 1 and name in ("molecule", "lab"):
        counts.append(", ".join(timings))
    return True, "; ".join(counts)


# Stages that use no hosts and come before molecule. With more than one lane (lane_count()), each
# tuple is a lane, and when stages of two lanes are selected the lanes run side by side: sanity
# spends most of its time building its venvs and in single-threaded linters, the others together
# take about as long (docs/testing.md, Time budget). Each stage keeps its own row and its time.
STATIC_LANES = (
    ("sanity", "bad-inputs"),
    ("yamllint", "ansible-lint", "ruff", "changelog-lint", "role-docs", "units", "agents"),
)


def static_lanes(selected: list[str]) -> list[list[str]]:
    """The selected stages of STATIC_LANES, one list per lane that has any, in STATIC_LANES order."""
    lanes = [[name for name in lane if name in selected] for lane in STATIC_LANES]
    return [lane for lane in lanes if lane]


def run_static_lanes(lanes: list[list[str]]) -> list[tuple[str, str, float, str]]:
    """Run each lane's stages in turn, the lanes side by side; a summary row for each stage.

    A stage's output is printed whole when it ends. After a failure no lane starts another stage
    (those are NOT RUN); a stage already running finishes."""
    printing = threading.Lock()
    rows: dict[str, tuple[str, str, float, str]] = {}

    def stage(name: str) -> bool:
        with printing:
            print(f"\n===== {name}: started (its output follows when it ends)", flush=True)
        buffer = io.StringIO()
        t0 = time.monotonic()
        ok, detail = False, "it raised an error (its traceback follows the stage's output)"
        try:
            ok, detail = run_stage(name, buffer)
        finally:
            seconds = time.monotonic() - t0
            with printing:
                sys.stdout.write(buffer.getvalue())
                print(f"===== {name}: {'PASSED' if ok else 'FAILED'} in {seconds:.0f}s", flush=True)
            rows[name] = (name, "PASSED" if ok else "FAILED", seconds, f"{detail} (static lanes)".lstrip())
        return ok

    side_by_side(lanes, stage)
    # The stages no lane started after a failure.
    for name in (name for names in lanes for name in names if name not in rows):
        rows[name] = (name, "NOT RUN", 0.0, "a stage beside it failed")
    return [rows[name] for name in STAGES if name in rows]


RESULTS_DIR = REPO / "benchmarks" / "results"
LAB_CACHE = Path(os.environ.get("GPUFLEET_LAB_CACHE", "/var/cache/gpufleet-lab"))


def cache_state() -> dict:
    """What the expensive builds' cache holds when the run starts (docs/testing.md, Time budget)."""
    return {
        "lab_cache": str(LAB_CACHE),
        "entries": sorted(path.name for path in LAB_CACHE.iterdir()) if LAB_CACHE.is_dir() else [],
        "llama_cpp_builds": sorted(path.name for path in (LAB_CACHE / "llama.cpp").glob("*.tar.gz")),
    }


def busy_cpu_seconds(stat: Path = Path("/proc/stat")) -> float:
    """The machine's CPU time spent not idle since boot, all cores together (/proc/stat): on a
    CPU-bound machine a run's wall time follows this, so the record keeps it beside the wall time."""
    fields = [int(value) for value in stat.read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    # steal and guest (already counted in user) are not this machine's work.
    busy = sum(fields[:8]) - idle - (fields[7] if len(fields) > 7 else 0)
    return busy / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """User and system CPU of every process this run started and waited for, with theirs: the
    controller's side (ansible-playbook and its forks, molecule, pytest), not the lab's hosts."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def record_run(
    stages: list[str],
    results: list[tuple[str, str, float, str]],
    seconds: float,
    caches: dict,
    busy_s: float,
    children_s: float,
) -> Path:
    """Write the run's stage table to benchmarks/results/test-run-<time>.json: measured runs are
    kept as files there, not as tables in the docs."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=False)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True, check=False)
    record = {
        "command": "scripts/run_tests.py " + " ".join(stages),
        "commit": head.stdout.strip(),
        "uncommitted_changes": bool(dirty.stdout.strip()),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpus": os.cpu_count(),
        "caches_at_start": caches,
        "wall_s": round(seconds, 1),
        # Every process of the machine, the lab's hosts included (docs/testing.md, Time budget).
        "machine_busy_cpu_s": round(busy_s, 1),
        # The processes this run started (the lab's containers are not among them).
        "run_processes_cpu_s": round(children_s, 1),
        "stages": [
            {"stage": name, "state": state, "seconds": round(secs, 1), "detail": detail}
            for name, state, secs, detail in results
        ],
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"test-run-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    return out


def print_summary(results: list[tuple[str, str, float, str]], seconds: float) -> int:
    """Print a row per stage and a pytest-style closing line; the exit code (1 if a stage failed)."""
    print("\n" + " stage summary ".center(78, "="))
    for name, state, secs, detail in results:
        print(f"{state:8} {name:15} {secs:7.1f}s  {detail}")
    passed = sum(1 for r in results if r[1] == "PASSED")
    nfailed = sum(1 for r in results if r[1] == "FAILED")
    not_run = sum(1 for r in results if r[1] == "NOT RUN")
    skipped = sum(1 for r in results if r[1] == "SKIPPED")
    # Same order and wording as pytest's closing line ("1 failed, 3 passed in 2.0s").
    counts = [f"{nfailed} failed"] if nfailed else []
    counts.append(f"{passed} passed")
    if not_run:
        counts.append(f"{not_run} not run")
    if skipped:
        counts.append(f"{skipped} skipped")
    tail = ", ".join(counts)
    print(f" {tail} in {seconds:.1f}s ".center(78, "="))
    return 1 if nfailed else 0


def beside_molecule(selected: list[str]) -> list[str]:
    """The selected stages that run inside the molecule lanes: BESIDE_MOLECULE, with molecule in
    two lanes or more."""
    if "molecule" not in selected or lane_count() < 2:
        return []
    return [name for name in BESIDE_MOLECULE if name in selected]


def lab_ahead(selected: list[str]) -> bool:
    """Whether the lab stage starts with the first stage, in a lane of its own (LAB_STEP)."""
    return (
        "lab" in selected
        and "molecule" in selected
        and lane_count() >= 2
        and os.environ.get(LAB_BESIDE_ENV, "1") != "0"
    )


class LabLane:
    """The lab stage as a nested run in a lane of its own, from the first stage to the last: its
    output goes to its log file and is printed whole when it ends, as a molecule lane's step is."""

    def __init__(self) -> None:
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        self.log = LOG_DIR / f"{step_label(LAB_STEP)}.log"
        print(f"\n----- lab: {' '.join(LAB_STEP)} started in a lane of its own (log: {self.log})", flush=True)
        self.started = time.monotonic()
        self.out = self.log.open("w")
        self.proc = subprocess.Popen(LAB_STEP, cwd=REPO, env=env(), stdout=self.out, stderr=subprocess.STDOUT)

    def finish(self) -> tuple[str, str, float, str]:
        """Wait for the lab to end; its summary row."""
        code = self.proc.wait()
        seconds = time.monotonic() - self.started
        self.out.close()
        show_step_log("lab", LAB_STEP, self.log, seconds, code)
        counts = pytest_counts(self.log.read_text(errors="replace"))
        detail = "; ".join(counts) + " (a lane of its own from the first stage)"
        if code:
            return "lab", "FAILED", seconds, f"exit {code}: {' '.join(LAB_STEP)}; {detail}"
        return "lab", "PASSED", seconds, detail


def developer_scenario_rows(molecule_ok: bool) -> list[tuple[str, str, float, str]]:
    """The developer scenarios, named with the reason `make test` runs only their syntax check."""
    checked = "syntax checked" if molecule_ok else "its syntax check did not pass or run"
    return [
        (f"molecule {scenario}", "SKIPPED", 0.0, f"{DEVELOPER_SCENARIO}; {checked}")
        for scenario in SCENARIOS
        if scenario not in MOLECULE_IN_TEST
    ]


def remove_lab() -> None:
    """Remove a lab left by `make demo` or an earlier run before the first stage, when the lab
    stage is not that stage: the lab stage removes it before deploying its own, but until then its
    idle replicas' probes take CPU from the stages before it."""
    print(f"\n----- {' '.join(lab('down'))} (the lab stage starts from fresh hosts)", flush=True)
    subprocess.run(lab("down"), cwd=REPO, env=env(), check=False)


def run_selected(selected: list[str]) -> list[tuple[str, str, float, str]]:
    """Run the selected stages in STAGES order; a summary row for each (and the skipped ones)."""
    results = [(name, "SKIPPED", 0.0, reason) for name, reason in OPTIONAL.items() if name not in selected]
    beside = beside_molecule(selected)
    # The lab runs from now on beside everything else, holding one of the lanes.
    lab_lane = LabLane() if lab_ahead(selected) else None
    lanes = lane_count() - (1 if lab_lane else 0)
    # With lanes, the STATIC_LANES stages run side by side where the first of them would run.
    static = static_lanes(selected) if lane_count() > 1 else []
    static = static if len(static) > 1 else []
    in_static = [name for name in selected if any(name in lane for lane in static)]
    failed = False
    for name in selected:
        if name in in_static:
            # All of them run, side by side, where the first of them comes; each gets its row there.
            if name == in_static[0]:
                rows = [(n, "NOT RUN", 0.0, "an earlier stage failed") for n in in_static]
                rows = rows if failed else run_static_lanes(static)
                results += rows
                failed = failed or any(row[1] != "PASSED" for row in rows)
            continue
        if name == "lab" and lab_lane:
            continue
        if failed:
            results.append((name, "NOT RUN", 0.0, "an earlier stage failed"))
            continue
        if name in beside:
            continue
        if name == "molecule" and (beside or lab_lane):
            rows = run_molecule_with(beside, lanes)
        else:
            t0 = time.monotonic()
            ok, detail = run_stage(name)
            rows = [(name, "PASSED" if ok else "FAILED", time.monotonic() - t0, detail)]
        results += rows
        failed = any(row[1] != "PASSED" for row in rows)
        if name == "molecule":
            results += developer_scenario_rows(rows[0][1] == "PASSED")
    if lab_lane:
        # Whatever failed beside it, the lab ends its own run (and removes its hosts).
        results.append(lab_lane.finish())
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stages", nargs="*", help="stages to run (default: all)")
    parser.add_argument("--list", action="store_true")
    # A nested run (the lab beside the molecule lanes) leaves the record to the run that started it.
    parser.add_argument("--no-record", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(STAGES))
        return 0
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    selected = args.stages or [name for name in STAGES if name not in OPTIONAL]
    caches = cache_state()
    start, busy_at_start = time.monotonic(), busy_cpu_seconds()
    if "lab" in selected[1:] and not lab_ahead(selected):
        remove_lab()
    results = run_selected(selected)
    seconds = time.monotonic() - start
    code = print_summary(results, seconds)
    busy, children = busy_cpu_seconds() - busy_at_start, children_cpu_seconds()
    print(f"CPU: the machine {busy:.0f} s, this run's processes {children:.0f} s (docs/testing.md, Time budget)")
    if not args.no_record:
        print(f"stage table written to {record_run(selected, results, seconds, caches, busy, children)}")
    return code


if __name__ == "__main__":
    sys.exit(main())
