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
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"
# Outside the checkout (inside it, ansible-test would see the checkout's git ignore rules), and
# one per run, so two runs on one machine never delete each other's copy.
COPY_ROOT = Path(tempfile.mkdtemp(prefix="gpufleet-ansible-test-"))
atexit.register(shutil.rmtree, COPY_ROOT, True)
COLLECTION_COPY = COPY_ROOT / "ansible_collections" / "gpufleet" / "inference"
GET_PIP_STANDIN = REPO / "scripts" / "ansible_test_get_pip.py"
PYTHON_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}:{e.get('PATH', '')}"
    e["MOLECULE_GLOB"] = "molecule/*/molecule.yml"
    e["PYTHONPATH"] = str(REPO / "collections")
    e["ANSIBLE_FORCE_COLOR"] = "0"
    e["NO_COLOR"] = "1"
    e["PY_COLORS"] = "0"
    return e


def copy_collection() -> Path:
    """ansible-test must run from .../ansible_collections/<ns>/<name>: copy what git would ship."""
    files = (
        subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True, capture_output=True
        )
        .stdout.decode()
        .split("\0")
    )
    if COLLECTION_COPY.exists():
        shutil.rmtree(COLLECTION_COPY)
    for name in filter(None, files):
        src = REPO / name
        if not src.is_file():
            continue
        dest = COLLECTION_COPY / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest, follow_symlinks=False)
    return COLLECTION_COPY


def install_get_pip_standin() -> None:
    """Put the local pip bootstrap where ansible-test looks before it tries to download one."""
    sys.path.insert(0, str(next((VENV_BIN.parent / "lib").glob("python3*/site-packages"))))
    from ansible_test._internal.python_requirements import get_venv_packages  # noqa: PLC0415

    class _Python:
        version = PYTHON_VERSION

    version = get_venv_packages(_Python())["pip"]
    cache = Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    cache.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(GET_PIP_STANDIN, cache)


def ansible_test(*args: str) -> tuple[list[str], Path]:
    install_get_pip_standin()
    cwd = copy_collection()
    return [str(VENV_BIN / "ansible-test"), *args, "--venv", "--python", PYTHON_VERSION, "--color", "no"], cwd


def lab(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "scripts" / "lab.py"), *args]


DOCS_SITE_TEST = REPO / "tests" / "packaging" / "test_docs_site.py"
# Stages that only run when named: each with the reason it is not in `make test` yet, printed in
# the summary of every run that leaves it out.
OPTIONAL = {
    "docs-site": "not in make test yet: it passes (about 25 s warm, plus Chromium and a venv cold), but "
    "the suite is not yet measured under its 50 minutes with it (issue 13, docs/docs-site.md); "
    "run it with `scripts/run_tests.py docs-site`",
}

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
    # tests/unit runs once, under ansible-test units (the same pytest files, in the collection
    # layout); plain pytest runs only what ansible-test does not collect.
    "pytest": [
        ["pytest", "-q", "-p", "no:cacheprovider", "tests/lab", "tests/packaging", f"--ignore={DOCS_SITE_TEST}"]
    ],
    # The antsibull-docs site read back in headless Chromium (docs/docs-site.md); see OPTIONAL.
    "docs-site": [["pytest", "-q", "-p", "no:cacheprovider", str(DOCS_SITE_TEST)]],
    # One `molecule test -s NAME` per scenario (what --all runs), so the summary shows each one's time;
    # run in lanes (molecule_lanes) because one scenario alone leaves half of the 2 cores idle.
    "molecule": [["molecule", "test", "-s", path.parent.name] for path in sorted(REPO.glob("molecule/*/molecule.yml"))],
    # The flagship composition end to end on a 10-host lab built from a topology manifest and
    # reached over SSH: plan, fabric at MTU 9000, NCCL, two one-node vLLM replicas, the
    # front door and monitoring, all-pairs acceptance, then the idempotent second run
    # (benchmarks/site.py run fails unless it changed nothing).
    "lab": [
        # The checkout resolves its own FQCNs through ansible.cfg, no installed copy needed.
        [str(VENV_BIN / "ansible"), "localhost", "-m", "gpufleet.inference.nccl_info"],
        lab("up", "--hosts", "10", "--serving", "vllm-ops"),
        [str(VENV_BIN / "ansible"), "-i", "inventories/lab", "all", "-m", "ansible.builtin.ping"],
        [str(VENV_BIN / "ansible-inventory"), "-i", "inventories/lab", "--graph"],
        [str(VENV_BIN / "python"), str(REPO / "benchmarks" / "site.py"), "run"],
        # Two replicas behind the front door under a bounded client load: a rolling restart, a
        # kill -9, a fabric link down, an operator's drain; then Prometheus' series (docs/operations.md).
        [str(VENV_BIN / "python"), str(REPO / "benchmarks" / "operations.py"), "run"],
        lab("down"),
    ],
}

# Seconds each scenario took in the last clean-clone run with two lanes (docs/testing.md, Time
# budget), to balance the lanes; a new scenario counts as DEFAULT_SECONDS until measured. Each
# scenario has its own containers, network and subnet, so lanes share nothing but the read-only
# caches. vllm is about as long as all the others together.
SCENARIO_SECONDS = {
    "vllm": 1425,
    "fabric_network": 546,
    "gpu_stack": 472,
    "fabric_validate": 369,
    "llama_rpc": 302,
    "nccl": 70,
}
DEFAULT_SECONDS = 300
LANES_ENV = "GPUFLEET_MOLECULE_LANES"
LOG_DIR = REPO / "tests" / "output" / "molecule"

PYTEST_COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|warnings?)")


def step_label(argv: list[str]) -> str:
    """A short name for a step in the summary: the scenario of a molecule run, else the script or command."""
    if argv[:3] == ["molecule", "test", "-s"]:
        return argv[3]
    # An option (pytest's --ignore=PATH) names no script of the step.
    script = next((a for a in argv[1:] if a.endswith(".py") and not a.startswith("-")), None)
    if script is None:
        return Path(argv[0]).name
    rest = argv[argv.index(script) + 1 :]
    return f"{Path(script).stem} {rest[0]}" if rest else Path(script).stem


def molecule_lanes(steps: list[list[str]], lanes: int) -> list[list[list[str]]]:
    """Split the molecule steps into at most `lanes` lanes run side by side; 1 runs them in turn.

    Longest first (SCENARIO_SECONDS), each onto the lane with the least expected time so far: the
    longest scenario starts at once, and the short ones fill the lane that would end first."""
    if lanes < 1:
        raise ValueError(f"{LANES_ENV}={lanes}: use 1 (one scenario at a time) or more")
    if lanes == 1:
        return [steps]
    shared: list[list[list[str]]] = [[] for _lane in range(lanes)]
    load = [0] * lanes
    for step in sorted(steps, key=lambda s: (-SCENARIO_SECONDS.get(step_label(s), DEFAULT_SECONDS), step_label(s))):
        emptiest = load.index(min(load))
        shared[emptiest].append(step)
        load[emptiest] += SCENARIO_SECONDS.get(step_label(step), DEFAULT_SECONDS)
    return [lane for lane in shared if lane]


def lane_count() -> int:
    raw = os.environ.get(LANES_ENV, "2")
    try:
        return int(raw)
    except ValueError:
        raise SystemExit(f"{LANES_ENV}={raw!r} is not a number: use 1 (one scenario at a time) or 2") from None


def run_lanes(name: str, lanes: list[list[list[str]]]) -> tuple[bool, str]:
    """Run each lane's steps in turn, the lanes side by side. A step's output goes to its log file
    and is printed whole when it ends, so the CI log reads one scenario at a time. After a failure
    no lane starts another step; the steps already running finish (and destroy their hosts)."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    printing = threading.Lock()
    failed = threading.Event()
    timings: dict[str, str] = {}
    failures: list[str] = []

    def lane(steps: list[list[str]]) -> None:
        for argv in steps:
            if failed.is_set():
                return
            label = step_label(argv)
            log = LOG_DIR / f"{label}.log"
            with printing:
                print(f"\n----- {name}: {' '.join(argv)} started (log: {log})", flush=True)
            t0 = time.monotonic()
            with log.open("w") as out:
                proc = subprocess.run(argv, cwd=REPO, env=env(), stdout=out, stderr=subprocess.STDOUT, check=False)
            code = proc.returncode
            timings[label] = f"{label} {time.monotonic() - t0:.0f}s"
            with printing:
                print(f"\n----- {name}: {' '.join(argv)}", flush=True)
                sys.stdout.write(log.read_text(errors="replace"))
                print(f"----- {name}: {timings[label]} (exit {code})", flush=True)
            if code != 0:
                failures.append(f"exit {code}: {' '.join(argv)}")
                failed.set()
                return

    threads = [threading.Thread(target=lane, args=(steps,)) for steps in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    order = [step_label(s) for steps in lanes for s in steps]
    done = ", ".join(timings[label] for label in sorted(order) if label in timings)
    lane_text = " | ".join(", ".join(step_label(s) for s in steps) for steps in lanes)
    if failures:
        return False, "; ".join(failures) + f"; {done}"
    return True, f"{done} (lanes: {lane_text})"


def run_stage(name: str) -> tuple[bool, str]:
    if name == "molecule":
        lanes = molecule_lanes(STAGES[name], lane_count())
        if len(lanes) > 1:
            return run_lanes(name, lanes)
    counts: list[str] = []
    timings: list[str] = []
    for step in STAGES[name]:
        argv, cwd = step() if callable(step) else (step, REPO)
        print(f"\n----- {name}: {' '.join(argv)}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, cwd=cwd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            if name != "molecule" and PYTEST_COUNTS.search(line) and ("passed" in line or "failed" in line):
                counts.append(line.strip().strip("= "))
        sys.stdout.flush()
        code = proc.wait()
        timings.append(f"{step_label(argv)} {time.monotonic() - t0:.0f}s")
        print(f"----- {name}: {timings[-1]} (exit {code})", flush=True)
        if code != 0:
            return False, f"exit {code}: {' '.join(argv)}; " + ", ".join(timings)
    if len(STAGES[name]) > 1 and name in ("molecule", "lab"):
        counts.append(", ".join(timings))
    return True, "; ".join(counts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stages", nargs="*", help="stages to run (default: all)")
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(STAGES))
        return 0
    unknown = [s for s in args.stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(STAGES)}")
    selected = args.stages or [name for name in STAGES if name not in OPTIONAL]

    results: list[tuple[str, str, float, str]] = []
    results += [(name, "SKIPPED", 0.0, reason) for name, reason in OPTIONAL.items() if name not in selected]
    start = time.monotonic()
    failed = False
    for name in selected:
        if failed:
            results.append((name, "NOT RUN", 0.0, "an earlier stage failed"))
            continue
        t0 = time.monotonic()
        ok, detail = run_stage(name)
        results.append((name, "PASSED" if ok else "FAILED", time.monotonic() - t0, detail))
        failed = not ok

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
    print(f" {tail} in {time.monotonic() - start:.1f}s ".center(78, "="))
    return 1 if nfailed else 0


if __name__ == "__main__":
    sys.exit(main())
