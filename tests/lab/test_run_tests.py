# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tests for the pure parts of scripts/run_tests.py: the molecule lanes and the step labels."""

import pytest
from script_loader import load_script

run_tests = load_script("scripts/run_tests.py")
STEPS = [["molecule", "test", "-s", name] for name in ("fabric_network", "nccl", "vllm")]


def labels(lanes):
    return [[run_tests.step_label(step) for step in lane] for lane in lanes]


MEASURED = {"vllm": 1425, "fabric_network": 546, "gpu_stack": 472, "fabric_validate": 369, "llama_rpc": 302, "nccl": 70}


def test_the_longest_scenario_starts_first_and_the_others_fill_the_other_lane(monkeypatch):
    monkeypatch.setattr(run_tests, "SCENARIO_SECONDS", MEASURED)
    assert labels(run_tests.molecule_lanes(STEPS, 2)) == [["vllm"], ["fabric_network", "nccl"]]


def test_a_short_scenario_follows_the_longest_when_that_lane_ends_first(monkeypatch):
    monkeypatch.setattr(run_tests, "SCENARIO_SECONDS", MEASURED)
    # vllm 1425 s; the others 1689 s before nccl (70 s), which then goes after vllm.
    steps = sorted(["molecule", "test", "-s", name] for name in MEASURED)
    lanes = labels(run_tests.molecule_lanes(steps, 2))
    assert lanes == [["vllm", "nccl"], ["fabric_network", "gpu_stack", "fabric_validate", "llama_rpc"]]


def test_one_lane_runs_every_scenario_in_order():
    assert labels(run_tests.molecule_lanes(STEPS, 1)) == [["fabric_network", "nccl", "vllm"]]


def test_more_lanes_than_scenarios_give_each_scenario_a_lane(monkeypatch):
    monkeypatch.setattr(run_tests, "SCENARIO_SECONDS", MEASURED)
    assert labels(run_tests.molecule_lanes(STEPS, 4)) == [["vllm"], ["fabric_network"], ["nccl"]]


def test_the_shared_lanes_are_balanced_by_the_measured_times(monkeypatch):
    monkeypatch.setattr(run_tests, "SCENARIO_SECONDS", MEASURED)
    steps = sorted(["molecule", "test", "-s", name] for name in MEASURED)
    lanes = labels(run_tests.molecule_lanes(steps, 3))
    assert lanes == [["vllm"], ["fabric_network", "llama_rpc"], ["gpu_stack", "fabric_validate", "nccl"]]


def test_an_unmeasured_scenario_counts_as_the_default(monkeypatch):
    monkeypatch.setattr(run_tests, "SCENARIO_SECONDS", MEASURED)
    steps = [*STEPS, ["molecule", "test", "-s", "new_role"]]
    # fabric_network (546 s) fills one shared lane, the new one (300 s) and nccl (70 s) the other.
    assert labels(run_tests.molecule_lanes(steps, 3)) == [["vllm"], ["fabric_network"], ["new_role", "nccl"]]


def test_every_step_of_the_molecule_stage_runs_exactly_once():
    steps = run_tests.STAGES["molecule"]
    lanes = run_tests.molecule_lanes(steps, 2)
    assert sorted(map(tuple, (step for lane in lanes for step in lane))) == sorted(map(tuple, steps))


def test_make_test_runs_the_scenarios_the_lab_cannot_and_checks_the_syntax_of_the_others():
    steps = {tuple(step) for step in run_tests.STAGES["molecule"]}
    for scenario in run_tests.SCENARIOS:
        tested = ("molecule", "test", "-s", scenario) in steps
        syntax = ("molecule", "syntax", "-s", scenario) in steps
        assert tested != syntax, scenario
        assert tested == (scenario in run_tests.MOLECULE_IN_TEST), scenario
    assert set(run_tests.MOLECULE_IN_TEST) <= set(run_tests.SCENARIOS)


def test_each_scenario_says_what_it_proves_that_the_lab_does_not():
    # The header comment of molecule.yml, before the first key.
    for scenario in run_tests.SCENARIOS:
        text = (run_tests.REPO / "molecule" / scenario / "molecule.yml").read_text()
        header = " ".join(line.lstrip("# ") for line in text.splitlines() if line.startswith("#"))
        if scenario in run_tests.MOLECULE_IN_TEST:
            assert "What the lab stage cannot prove:" in header, scenario
        else:
            assert "a role developer's scenario" in header and "`make test` only checks its syntax" in header, scenario


def test_zero_lanes_is_refused():
    with pytest.raises(ValueError, match="GPUFLEET_MOLECULE_LANES=0"):
        run_tests.molecule_lanes(STEPS, 0)


def test_lane_count_from_the_environment(monkeypatch):
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "1")
    assert run_tests.lane_count() == 1
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "two")
    with pytest.raises(SystemExit, match="is not a number"):
        run_tests.lane_count()


def test_step_labels():
    assert run_tests.step_label(["molecule", "test", "-s", "vllm"]) == "vllm"
    assert run_tests.step_label(["molecule", "syntax", "-s", "vllm"]) == "vllm syntax"
    assert run_tests.step_label(["/venv/bin/python", "/repo/tests/site/deploy.py"]) == "deploy"
    assert run_tests.step_label(["/venv/bin/python", "/repo/benchmarks/site.py", "ssh"]) == "site ssh"
    assert run_tests.step_label(["/venv/bin/ansible", "localhost"]) == "ansible"


def test_the_pytest_stage_is_labelled_pytest_not_by_the_file_it_leaves_out():
    assert run_tests.step_label(run_tests.STAGES["pytest"][0]) == "pytest"


def stub_stages(monkeypatch, tmp_path, side_exit=0):
    """Two stub scenarios and one stub beside-stage step, each a tiny script (its label is its name)."""
    scripts = {}
    for name, body in (
        ("scen_a", "print('a')"),
        ("scen_b", "import time; time.sleep(0.5); print('b')"),
        ("side_tests", f"print('=== 3 passed in 0.1s ==='); raise SystemExit({side_exit})"),
    ):
        path = tmp_path / f"{name}.py"
        path.write_text(body + "\n")
        scripts[name] = [run_tests.sys.executable, str(path)]
    monkeypatch.setattr(
        run_tests,
        "STAGES",
        {"molecule": [scripts["scen_a"], scripts["scen_b"]], "pytest": [scripts["side_tests"]]},
    )
    monkeypatch.setattr(run_tests, "LOG_DIR", tmp_path / "logs")
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "2")


def test_a_stage_beside_the_lanes_keeps_its_own_row_and_counts(monkeypatch, tmp_path):
    stub_stages(monkeypatch, tmp_path)
    rows = {row[0]: row for row in run_tests.run_molecule_with(["pytest"], 2)}
    assert rows["molecule"][1] == "PASSED"
    # Its time is its own row's; the lanes say where it ran.
    times, lanes = rows["molecule"][3].split(" (lanes: ")
    assert "side_tests" not in times and "side_tests" in lanes
    assert rows["pytest"][1] == "PASSED"
    assert rows["pytest"][3] == "3 passed in 0.1s (beside the molecule lanes)"


def test_a_failure_beside_the_lanes_fails_its_stage_and_stops_the_scenarios_not_started(monkeypatch, tmp_path):
    stub_stages(monkeypatch, tmp_path, side_exit=1)
    monkeypatch.setattr(run_tests, "SCENARIO_SECONDS", {"scen_a": 30, "scen_b": 5})
    monkeypatch.setattr(run_tests, "BESIDE_SECONDS", {"side_tests": 20})
    # Lanes: [scen_a] and [side_tests, scen_b]: scen_b never starts after side_tests fails.
    rows = {row[0]: row for row in run_tests.run_molecule_with(["pytest"], 2)}
    assert rows["pytest"][1] == "FAILED" and rows["pytest"][3].startswith("exit 1: side_tests")
    assert rows["molecule"][1] == "FAILED"
    assert "not run after a failure beside them: scen_b" in rows["molecule"][3]


def test_static_lanes_run_side_by_side_only_when_two_lanes_are_selected():
    every = list(run_tests.STAGES)
    assert run_tests.static_lanes(every) == [list(lane) for lane in run_tests.STATIC_LANES]
    # `make lint` selects one lane's stages only: they run in turn, as before.
    assert run_tests.static_lanes(["yamllint", "ruff"]) == [["yamllint", "ruff"]]
    assert run_tests.static_lanes(["molecule", "lab"]) == []


def stub_static(monkeypatch, tmp_path, bodies):
    """Stub stages, each one script (name -> body), in two lanes: [slow] and [quick, after]."""
    stages = {}
    for name, body in bodies.items():
        path = tmp_path / f"{name}.py"
        path.write_text(body + "\n")
        stages[name] = [[run_tests.sys.executable, str(path)]]
    monkeypatch.setattr(run_tests, "STAGES", stages)
    monkeypatch.setattr(run_tests, "OPTIONAL", {})
    monkeypatch.setattr(run_tests, "STATIC_LANES", (("slow",), ("quick", "after")))
    monkeypatch.setattr(run_tests, "RESULTS_DIR", tmp_path / "results")
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "2")


def test_static_lanes_overlap_and_keep_a_row_and_counts_per_stage(monkeypatch, tmp_path, capsys):
    marker = tmp_path / "quick-ran"
    stub_static(
        monkeypatch,
        tmp_path,
        {
            # slow comes first in the stage order: run in turn, it would wait for quick in vain.
            "slow": (
                "import pathlib, sys, time\n"
                f"marker = pathlib.Path({str(marker)!r})\n"
                "deadline = time.monotonic() + 30\n"
                "while not marker.exists() and time.monotonic() < deadline: time.sleep(0.05)\n"
                "sys.exit(0 if marker.exists() else 'quick never ran beside slow')"
            ),
            "quick": f"import pathlib; pathlib.Path({str(marker)!r}).write_text('x'); print('quick done')",
            "after": "print('=== 1 passed in 0.1s ===')",
        },
    )
    assert run_tests.main([]) == 0
    out = capsys.readouterr().out
    # Each stage's output is printed whole, after its start line and before its end line.
    assert out.index("===== quick: started") < out.index("quick done") < out.index("===== quick: PASSED")
    summary = out[out.index(" stage summary ") :]
    assert "PASSED   after" in summary and "1 passed in 0.1s (static lanes)" in summary
    assert "3 passed in" in summary


def test_an_optional_stage_is_skipped_with_its_reason_unless_named(monkeypatch, tmp_path, capsys):
    marker = tmp_path / "trial-ran"
    stub_static(
        monkeypatch,
        tmp_path,
        {"quick": "pass", "trial": f"import pathlib; pathlib.Path({str(marker)!r}).write_text('x')"},
    )
    monkeypatch.setattr(run_tests, "STATIC_LANES", (("quick",),))
    monkeypatch.setattr(run_tests, "OPTIONAL", {"trial": "a stage of its own"})
    assert run_tests.main([]) == 0
    summary = capsys.readouterr().out.split(" stage summary ", 1)[1]
    assert "SKIPPED  trial" in summary and "a stage of its own" in summary and not marker.exists()
    assert run_tests.main(["trial"]) == 0
    assert marker.exists()


def test_a_failed_static_stage_stops_the_lanes_and_the_stages_after_them(monkeypatch, tmp_path, capsys):
    stub_static(
        monkeypatch,
        tmp_path,
        {
            "slow": "import time; time.sleep(1.0)",
            "quick": "raise SystemExit(3)",
            "after": "print('must not run')",
            "later": "print('must not run either')",
        },
    )
    assert run_tests.main([]) == 1
    out = capsys.readouterr().out
    assert "must not run" not in out.replace("===", "")
    summary = out[out.index(" stage summary ") :]
    assert "FAILED   quick" in summary
    # The stage already running beside it finishes; the next in the failed lane never starts.
    assert "PASSED   slow" in summary
    assert "NOT RUN  after" in summary and "a stage beside it failed" in summary
    assert "NOT RUN  later" in summary and "an earlier stage failed" in summary
    assert "1 failed, 1 passed, 2 not run" in summary


# The raise ends the lane's thread, and threading prints its traceback: that is the point.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_static_stage_that_raises_fails_its_row_instead_of_vanishing(monkeypatch, tmp_path):
    stub_static(monkeypatch, tmp_path, {"slow": "pass", "quick": "pass", "after": "pass"})

    def boom():
        raise OSError("no git here")

    run_tests.STAGES["quick"] = [boom]
    rows = {row[0]: row for row in run_tests.run_static_lanes([["slow"], ["quick", "after"]])}
    assert rows["quick"][1] == "FAILED" and "raised an error" in rows["quick"][3]
    assert rows["after"][1] == "NOT RUN"


def test_static_stages_after_a_failed_stage_are_reported_not_run(monkeypatch, tmp_path, capsys):
    stub_static(monkeypatch, tmp_path, {"early": "raise SystemExit(1)", "slow": "pass", "quick": "pass"})
    assert run_tests.main(["early", "slow", "quick"]) == 1
    summary = capsys.readouterr().out.split(" stage summary ")[1]
    assert "NOT RUN  slow" in summary and "NOT RUN  quick" in summary
    assert "1 failed, 0 passed, 2 not run" in summary


def test_a_run_writes_its_stage_table_with_the_cache_state(monkeypatch, tmp_path):
    stub_static(monkeypatch, tmp_path, {"slow": "print('=== 2 passed in 0.1s ===')", "quick": "pass", "after": "pass"})
    cache = tmp_path / "cache"
    (cache / "llama.cpp").mkdir(parents=True)
    (cache / "llama.cpp" / "abc.tar.gz").write_text("")
    monkeypatch.setattr(run_tests, "LAB_CACHE", cache)
    assert run_tests.main(["slow", "quick"]) == 0
    (record,) = (tmp_path / "results").glob("test-run-*.json")
    table = run_tests.json.loads(record.read_text())
    assert [(row["stage"], row["state"]) for row in table["stages"]] == [("slow", "PASSED"), ("quick", "PASSED")]
    assert table["command"] == "scripts/run_tests.py slow quick"
    assert table["caches_at_start"]["llama_cpp_builds"] == ["abc.tar.gz"]
    assert table["wall_s"] >= 0 and table["commit"]
    assert table["machine_busy_cpu_s"] >= 0 and table["run_processes_cpu_s"] > 0


def test_the_lab_starts_with_the_first_stage_in_a_lane_of_its_own(monkeypatch):
    monkeypatch.delenv("GPUFLEET_LAB_BESIDE", raising=False)
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "2")
    every = list(run_tests.STAGES)
    assert run_tests.beside_molecule(every) == ["pytest", "docs-site"]
    assert run_tests.lab_ahead(every)
    assert run_tests.step_label(run_tests.LAB_STEP) == "run_tests lab" and "--no-record" in run_tests.LAB_STEP
    # Alone, after molecule, or with one lane, it runs where it comes, as any stage.
    assert not run_tests.lab_ahead(["lab"])
    assert not run_tests.lab_ahead(["units", "lab"])
    monkeypatch.setenv("GPUFLEET_LAB_BESIDE", "0")
    assert not run_tests.lab_ahead(every)
    monkeypatch.setenv("GPUFLEET_LAB_BESIDE", "1")
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "1")
    assert not run_tests.lab_ahead(every)


def stub_lab_run(monkeypatch, tmp_path, lab_body, stages):
    """Stub stages (name -> body), a stub molecule scenario and a stub lab step that first marks
    that it started (the scenario waits for that mark)."""
    stub_static(monkeypatch, tmp_path, stages)
    lab = tmp_path / "lab.py"
    lab.write_text(f"import pathlib; pathlib.Path({str(tmp_path / 'lab-started')!r}).write_text('x')\n{lab_body}\n")
    monkeypatch.setattr(run_tests, "LAB_STEP", [run_tests.sys.executable, str(lab)])
    run_tests.STAGES["lab"] = [["false"]]
    run_tests.STAGES["molecule"] = [[run_tests.sys.executable, str(tmp_path / "scen.py")]]
    # The scenario runs only beside a running lab: it waits for the lab's mark, then says go.
    (tmp_path / "scen.py").write_text(
        "import pathlib, sys, time\n"
        f"here = pathlib.Path({str(tmp_path)!r})\n"
        "deadline = time.monotonic() + 60\n"
        "while not (here / 'lab-started').exists() and time.monotonic() < deadline: time.sleep(0.05)\n"
        "(here / 'go').write_text('x')\n"
        "sys.exit(0 if (here / 'lab-started').exists() else 'no lab ran beside the scenario')\n"
    )
    monkeypatch.setattr(run_tests, "LOG_DIR", tmp_path / "logs")
    monkeypatch.delenv("GPUFLEET_LAB_BESIDE", raising=False)


WAIT_FOR_GO = (
    "import pathlib, sys, time\n"
    "go = pathlib.Path(__file__).parent / 'go'\n"
    "deadline = time.monotonic() + 60\n"
    "while not go.exists() and time.monotonic() < deadline: time.sleep(0.05)\n"
    "print('=== 1 passed in 0.1s ===')\n"
    "sys.exit(0 if go.exists() else 'the molecule step never ran beside the lab')"
)


def test_the_lab_runs_beside_the_static_stages_and_molecule_and_keeps_its_row(monkeypatch, tmp_path, capsys):
    # The lab and molecule's scenario each wait for the other: in turn, one would wait in vain.
    stub_lab_run(monkeypatch, tmp_path, WAIT_FOR_GO, {"slow": "pass", "quick": "pass", "after": "pass"})
    assert run_tests.main(["slow", "quick", "molecule", "lab"]) == 0
    out = capsys.readouterr().out
    assert out.index("----- lab:") < out.index("===== slow: started")
    summary = out[out.index(" stage summary ") :]
    assert "PASSED   lab" in summary and "1 passed in 0.1s (a lane of its own from the first stage)" in summary
    assert summary.index("PASSED   molecule") < summary.index("PASSED   lab")


def test_a_failed_stage_beside_the_lab_leaves_the_lab_to_finish_and_report(monkeypatch, tmp_path, capsys):
    stub_lab_run(monkeypatch, tmp_path, "print('lab ran to its end')", {"slow": "pass", "quick": "raise SystemExit(2)"})
    assert run_tests.main(["slow", "quick", "molecule", "lab"]) == 1
    out = capsys.readouterr().out
    summary = out[out.index(" stage summary ") :]
    assert "FAILED   quick" in summary and "NOT RUN  molecule" in summary
    assert "PASSED   lab" in summary and "lab ran to its end" in out
    assert "NOT RUN  lab" not in summary


def test_a_failed_lab_fails_its_row(monkeypatch, tmp_path, capsys):
    stub_lab_run(monkeypatch, tmp_path, "raise SystemExit(4)", {"slow": "pass", "quick": "pass"})
    assert run_tests.main(["slow", "quick", "molecule", "lab"]) == 1
    summary = capsys.readouterr().out.split(" stage summary ")[1]
    assert "FAILED   lab" in summary and "exit 4:" in summary


def test_a_run_with_the_lab_stage_removes_a_running_lab_before_the_first_stage(monkeypatch, tmp_path):
    """`make demo` leaves its lab up; its replicas' probes would take CPU from every stage before the lab's."""
    calls = []
    monkeypatch.setattr(run_tests.subprocess, "run", lambda argv, **kw: calls.append(("run", argv[1:])))
    monkeypatch.setattr(run_tests, "run_selected", lambda selected: calls.append(("stages", selected)) or [])
    monkeypatch.setattr(run_tests, "record_run", lambda *a: tmp_path / "record.json")
    run_tests.main(["units", "lab"])
    assert calls[0] == ("run", [str(run_tests.REPO / "scripts" / "lab.py"), "down"])
    assert calls[1] == ("stages", ["units", "lab"])
    calls.clear()
    run_tests.main(["units"])
    run_tests.main(["--no-record", "lab"])
    assert [call[0] for call in calls] == ["stages", "stages"]
    # A lab that starts with the first stage removes the old one itself, as its first step.
    calls.clear()
    monkeypatch.setenv("GPUFLEET_MOLECULE_LANES", "2")
    monkeypatch.delenv("GPUFLEET_LAB_BESIDE", raising=False)
    run_tests.main(["units", "molecule", "lab"])
    assert [call[0] for call in calls] == ["stages"]


def test_busy_cpu_is_every_state_but_idle_iowait_and_steal(tmp_path, monkeypatch):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 5 50 1000 20 3 2 7 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    monkeypatch.setattr(run_tests.os, "sysconf", lambda name: 100)
    assert run_tests.busy_cpu_seconds(stat) == pytest.approx(1.6)
