# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run tests many times while every core is busy, to find the ones that depend on the machine's speed.

    stress_tests.py                      the default selection (below), each test 20 times
    stress_tests.py --runs 5 TEST ...    these test files or pytest node ids, each 5 times
    stress_tests.py --list               print the default selection and why, run nothing
    stress_tests.py --keep-going         every run even after a failure (failure rates)
    stress_tests.py --scan tests         select from these directories instead of the default

A test waits for an event with a bound that only guards against a hang (docs/testing.md). One
that sleeps and then asserts, or races a short timeout, passes on an idle machine and fails on a
busy CI machine; so can the program under test when it has a race of its own. This script makes
the machine busy: one burner process per CPU (`--burners`), started before pytest and killed when
it ends, also on Ctrl-C, SIGTERM or an error (a burner whose parent is gone stops by itself).
pytest runs once (`pytest -x -q -p no:cacheprovider`) with this file as a plugin that runs each
selected test `--runs` times in a row; `-x` stops at the first failed run, `--keep-going` drops it.
The summary gives, per test, the runs that passed out of --runs (and how many failed, skipped or
never ran), the seconds each file took over all its runs, and the wall time; the exit status is 1
when a run failed (pytest's own status when it failed otherwise, e.g. to collect).

Default selection: every test file under tests/unit and agents/tests (what the units and agents
stages run; `--scan` names other directories) whose code starts a process or a thread, or has
the code under test start one. The rule reads each file's syntax tree, so comments and strings do
not count. A file is selected when it
  - imports a module that starts processes or threads, or serves from threads: subprocess,
    threading, multiprocessing, concurrent.futures, socketserver, http.server, asyncio, pty;
  - calls os.fork, os.forkpty, os.system, os.popen, os.posix_spawn or an os.spawn* function;
  - calls fake_binary() (tests/unit/conftest.py), or chmod() with an execute bit: it writes an
    executable that the module under test runs;
  - imports a role program, a module roles/*/files/NAME.py, as `import NAME` or
    `importlib.import_module("NAME")` with its folder on sys.path (the daemons and tools the
    roles install, which the tests start or which start processes themselves).
Whole files are selected: the tests in them that start nothing cost little, and a rule per test
function would miss the fixtures and helpers that start the processes. --list prints each file
with what selected it; the run prints them too.

The environment is the one scripts/run_tests.py gives its stages: the venv's bin/ first on PATH,
PYTHONPATH=collections (the ansible_collections/gpufleet/inference link to this checkout), so
`pytest tests/unit` imports the collection as ansible-test units does.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = REPO / ".venv" / "bin"
PLUGIN = "gpufleet_stress_tests"  # the module name this file has inside the pytest it starts
DEFAULT_RUNS = 20
DEFAULT_SCAN = ("tests/unit", "agents/tests")
SPAWNING_MODULES = (
    "subprocess",
    "threading",
    "multiprocessing",
    "concurrent.futures",
    "socketserver",
    "http.server",
    "asyncio",
    "pty",
)
SPAWNING_OS_CALLS = ("fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp")
SPAWNING_HELPERS = ("fake_binary",)
# The module names of the role programs (roles/*/files/NAME.py), which the tests import from their folder.
ROLE_PROGRAMS = frozenset(path.stem for path in REPO.glob("roles/*/files/*.py"))
# Busy until its parent is gone: a burner orphaned by a SIGKILL of this script stops by itself.
BURNER = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1000000):\n        pass\n"


# Selection ---------------------------------------------------------------------------------


def spawn_reasons(source: str) -> list[str]:
    """What in a test file's code starts a process or a thread (empty: nothing)."""
    reasons = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            reasons.update(alias.name for alias in node.names if _spawning_module(alias.name))
            reasons.update(f"role program {alias.name}" for alias in node.names if alias.name in ROLE_PROGRAMS)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if _spawning_module(node.module):
                reasons.add(node.module)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os":
            if node.attr in SPAWNING_OS_CALLS or node.attr.startswith("spawn"):
                reasons.add(f"os.{node.attr}")
        elif isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name in SPAWNING_HELPERS:
                reasons.add(f"{name}()")
            elif name == "import_module" and _role_program(node.args):
                reasons.add(f"role program {node.args[0].value}")
            elif name == "chmod" and any(_executable_mode(arg) for arg in node.args):
                reasons.add("chmod(+x)")
    return sorted(reasons)


def _executable_mode(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and bool(node.value & 0o111)


def _role_program(args: list[ast.expr]) -> bool:
    """Whether import_module()'s arguments name a role program."""
    return bool(args) and isinstance(args[0], ast.Constant) and args[0].value in ROLE_PROGRAMS


def _spawning_module(name: str) -> bool:
    return any(name == module or name.startswith(module + ".") for module in SPAWNING_MODULES)


def default_selection(scan: list[str]) -> dict[str, list[str]]:
    """{test file relative to the checkout: why it is selected}, in path order."""
    selected = {}
    for directory in scan:
        for path in sorted((REPO / directory).rglob("test_*.py")):
            reasons = spawn_reasons(path.read_text())
            if reasons:
                selected[str(path.relative_to(REPO))] = reasons
    return selected


# Load and pytest ---------------------------------------------------------------------------


def env(plugin_dir: str) -> dict[str, str]:
    """scripts/run_tests.py's environment for its pytest stages, and this file as a plugin."""
    e = dict(os.environ)
    e["PATH"] = f"{VENV_BIN}:{e.get('PATH', '')}"
    e["PYTHONPATH"] = os.pathsep.join([str(REPO / "collections"), plugin_dir])
    e["ANSIBLE_FORCE_COLOR"] = "0"
    e["NO_COLOR"] = "1"
    e["PY_COLORS"] = "0"
    return e


def start_burners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BURNER]) for _burner in range(count)]


def stop(processes: list[subprocess.Popen]) -> None:
    for proc in processes:
        if proc.poll() is None:
            proc.kill()
    for proc in processes:
        proc.wait()


def command_line(tests: list[str], runs: int, keep_going: bool, report: str) -> list[str]:
    python = VENV_BIN / "python"
    argv = [str(python if python.exists() else sys.executable), "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += [] if keep_going else ["-x"]
    return [*argv, "-p", PLUGIN, f"--stress-runs={runs}", f"--stress-report={report}", *tests]


def summarize(outcomes: dict[str, list[str]], runs: int) -> tuple[list[str], int]:
    """(a line per test, the number of failed runs); tests with a failed run come last."""
    rows = []
    failed_runs = 0
    for nodeid, results in outcomes.items():
        passed, failed, skipped = (results.count(kind) for kind in ("passed", "failed", "skipped"))
        failed_runs += failed
        notes = [f"{count} {kind}" for count, kind in ((failed, "failed"), (skipped, "skipped")) if count]
        if passed + failed + skipped < runs:
            notes.append(f"{runs - passed - failed - skipped} not run")
        rows.append(
            (failed > 0, nodeid, f"{passed:>4}/{runs:<4} {nodeid}" + (f"  ({', '.join(notes)})" if notes else ""))
        )
    return [line for _failed, _nodeid, line in sorted(rows)], failed_runs


def seconds_per_file(seconds: dict[str, float]) -> list[tuple[str, float]]:
    per_file: dict[str, float] = {}
    for nodeid, spent in seconds.items():
        path = nodeid.split("::", 1)[0]
        per_file[path] = per_file.get(path, 0.0) + spent
    return sorted(per_file.items(), key=lambda item: -item[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tests", nargs="*", help="test files or node ids (default: the selection below)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help=f"runs of each test (default {DEFAULT_RUNS})")
    parser.add_argument(
        "--burners", type=int, default=os.cpu_count() or 2, help="busy processes (default: one per CPU)"
    )
    parser.add_argument("--keep-going", action="store_true", help="no -x: every run, even after a failure")
    parser.add_argument(
        "--scan", action="append", help=f"directory to select from (repeatable; default {', '.join(DEFAULT_SCAN)})"
    )
    parser.add_argument("--list", action="store_true", help="print the default selection and exit")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.burners < 0:
        parser.error("--runs must be >= 1 and --burners >= 0")
    tests = args.tests
    if not tests or args.list:
        selection = default_selection(args.scan or list(DEFAULT_SCAN))
        print(f"{len(selection)} test files start a process or a thread (rule: scripts/stress_tests.py):")
        for path, reasons in selection.items():
            print(f"  {path}  ({', '.join(reasons)})")
        if args.list:
            return 0
        tests = list(selection)
    print(f"{args.runs} runs of each test of {' '.join(tests)}, beside {args.burners} CPU burners", flush=True)
    # Outside the checkout: the plugin's name must not shadow anything, and the report is scratch.
    with tempfile.TemporaryDirectory(prefix="gpufleet-stress-") as scratch:
        os.symlink(Path(__file__).resolve(), os.path.join(scratch, f"{PLUGIN}.py"))
        report = os.path.join(scratch, "outcomes.json")
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
        burners, child = [], []
        started = time.monotonic()
        try:
            burners = start_burners(args.burners)
            child = [
                subprocess.Popen(command_line(tests, args.runs, args.keep_going, report), cwd=REPO, env=env(scratch))
            ]
            rc = child[0].wait()
        except KeyboardInterrupt:
            rc = 130  # pytest got the Ctrl-C too: let it print what it has
            try:
                child[0].wait(timeout=30)
            except (KeyboardInterrupt, subprocess.TimeoutExpired, IndexError):
                pass
        finally:
            stop(child + burners)
        wall = time.monotonic() - started
        recorded = json.loads(Path(report).read_text()) if os.path.exists(report) else {}
    lines, failed_runs = summarize(recorded.get("outcomes", {}), args.runs)
    print(f"\nruns passed per test ({len(lines)} tests):")
    print("\n".join(lines))
    print("\nseconds per test file, all runs (setup, call and teardown):")
    print("\n".join(f"{seconds:8.1f}  {path}" for path, seconds in seconds_per_file(recorded.get("seconds", {}))))
    print(f"{failed_runs} failed runs; wall time {wall:.0f} s (pytest exit status {rc})")
    if failed_runs:
        return 1
    return rc


# The plugin, inside the pytest that main() starts --------------------------------------------

_outcomes: dict[str, list[str]] = {}
_seconds: dict[str, float] = {}


def pytest_addoption(parser) -> None:
    group = parser.getgroup("stress", "scripts/stress_tests.py")
    group.addoption("--stress-runs", type=int, default=1, help="run each test this many times in a row")
    group.addoption("--stress-report", default=None, help="write each test's run outcomes and seconds here (JSON)")


def pytest_collection_finish(session) -> None:
    """Every selected test, so that one -x never reached is reported as not run."""
    for item in session.items:
        _outcomes.setdefault(item.nodeid, [])


def pytest_runtest_protocol(item, nextitem):
    """Each test --stress-runs times, each run set up and torn down as pytest runs one test."""
    from _pytest.runner import runtestprotocol  # noqa: PLC0415 - only inside pytest

    for _run in range(item.config.getoption("stress_runs")):
        _outcomes.setdefault(item.nodeid, []).append("")
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        runtestprotocol(item, nextitem=nextitem, log=True)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        if item.session.shouldfail or item.session.shouldstop:
            break
    return True


def pytest_runtest_logreport(report) -> None:
    """A run's outcome: failed if any phase failed, skipped if one skipped, else passed."""
    runs = _outcomes.get(report.nodeid)
    if not runs:
        return  # not a run of a test (a collection report)
    _seconds[report.nodeid] = _seconds.get(report.nodeid, 0.0) + report.duration
    if report.failed:
        runs[-1] = "failed"
    elif report.skipped and runs[-1] != "failed":
        runs[-1] = "skipped"
    elif report.when == "call" and not runs[-1]:
        runs[-1] = "passed"


def pytest_sessionfinish(session) -> None:
    path = session.config.getoption("stress_report")
    if path:
        Path(path).write_text(json.dumps({"outcomes": _outcomes, "seconds": _seconds}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
