# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the vllm_bench_serve module, with a fake ``vllm`` that plays back real result files."""

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import vllm_bench_serve
from ansible_collections.gpufleet.inference.tests.unit.plugins.module_utils.test__serving_acceptance import plan

FIXTURES = Path(__file__).parents[1] / "module_utils" / "fixtures" / "serving"
GOOD = FIXTURES / "vllm-bench-sweep-serve-er0080-v0.25.1-opt125m-c2-run0.json"
ALL_FAILED = FIXTURES / "vllm-bench-serve-er0080-v0.25.1-all-requests-failed.json"
API_KEY = "sk-unit-test-0d6f2a9c41b7e358"

# The fake vllm: records its argv and environment, refuses anything but `bench serve`, then copies
# the result it was given to --result-dir/--result-filename, and/or writes stderr, sleeps, exits rc.
FAKE = """#!{python}
import json, os, shutil, sys, time
config = json.load(open({config!r}))
args = sys.argv[1:]
with open({argv!r}, "w") as handle:
    json.dump(args, handle)
with open({env!r}, "w") as handle:
    json.dump(dict(os.environ), handle)
if args[:2] != ["bench", "serve"]:
    sys.stderr.write("vllm: unknown command %r\\n" % args[:2])
    sys.exit(2)
if config["result"]:
    target = os.path.join(args[args.index("--result-dir") + 1], args[args.index("--result-filename") + 1])
    shutil.copyfile(config["result"], target)
if config["stderr"]:
    sys.stderr.write(config["stderr"])
    sys.stderr.flush()
if config["sleep"]:
    time.sleep(config["sleep"])
sys.exit(config["rc"])
"""


class Fake:
    """A fake vllm in tmp_path: .path to pass as executable, .argv() and .env() of its last run."""

    def __init__(self, tmp_path, result=None, rc=0, stderr="", sleep=0):
        self.dir = tmp_path / "venv" / "bin"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "vllm"
        config = self.dir / "fake.json"
        behaviour = {"result": str(result) if result else None, "rc": rc, "stderr": stderr, "sleep": sleep}
        config.write_text(json.dumps(behaviour))
        self.argv_file, self.env_file = self.dir / "argv.json", self.dir / "env.json"
        self.path.write_text(
            FAKE.format(python=sys.executable, config=str(config), argv=str(self.argv_file), env=str(self.env_file))
        )
        self.path.chmod(0o755)

    def ran(self):
        return self.argv_file.exists()

    def argv(self):
        return json.loads(self.argv_file.read_text())

    def env(self):
        return json.loads(self.env_file.read_text())


def bench_args(results, filename="pp-c2.json"):
    return [
        "--backend", "openai", "--base-url", "http://127.0.0.1:9", "--model", "tiny-llama",
        "--max-concurrency", "2", "--save-result", "--result-dir", str(results), "--result-filename", filename,
    ]  # fmt: skip


def module_args(tmp_path, fake, **extra):
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    args = {
        "executable": str(fake.path),
        "args": bench_args(results),
        "result_path": str(results / "pp-c2.json"),
        "target": "pp",
        "point": "c2",
    }
    args.update(extra)
    return args


def test_a_run_returns_the_figures_of_its_result_file(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    args = module_args(tmp_path, fake)
    result = run_module(vllm_bench_serve, args)
    assert result["changed"] is False
    measurement = result["measurement"]
    assert measurement["target"] == "pp" and measurement["point"] == "c2"
    assert measurement["rc"] == 0
    assert measurement["error"] is None
    assert isinstance(measurement["load_cpu_s"], float) and measurement["load_cpu_s"] >= 0
    assert isinstance(measurement["wall_s"], float) and measurement["wall_s"] >= 0
    figures = measurement["result"]
    assert figures["completed"] == 8 and figures["failed"] == 0
    assert figures["duration_s"] == pytest.approx(1.3653671270003542)
    assert figures["output_throughput"] == pytest.approx(93.74767963046673)
    assert figures["ttft_ms"]["p99"] == pytest.approx(762.4942294094944)
    assert figures["tpot_ms"]["median"] == pytest.approx(8.323490332986694)
    assert figures["e2el_ms"]["mean"] == pytest.approx(340.3411977451469)
    # The fixture has no p50/p90 keys and no goodput: null, not zero.
    assert figures["ttft_ms"]["p50"] is None and figures["goodput_rps"] is None
    assert fake.argv()[:2] == ["bench", "serve"]
    assert fake.argv()[2:] == args["args"]


def test_the_percentiles_asked_for_are_the_ones_returned(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    result = run_module(vllm_bench_serve, module_args(tmp_path, fake, percentiles=[99, 95]))
    assert sorted(result["measurement"]["result"]["ttft_ms"]) == ["mean", "median", "p95", "p99"]
    assert result["measurement"]["result"]["ttft_ms"]["p95"] is None


def test_a_run_where_every_request_failed_returns_that_result(run_module, tmp_path):
    fake = Fake(tmp_path, result=ALL_FAILED)
    measurement = run_module(vllm_bench_serve, module_args(tmp_path, fake))["measurement"]
    assert measurement["error"] is None
    assert measurement["result"]["completed"] == 0 and measurement["result"]["failed"] == 8


def test_the_args_of_a_planned_point_run_and_their_result_is_read(run_module, tmp_path):
    run = plan(llama=False, prompt_tokens=64, output_tokens=32, dir=str(tmp_path / "sa"))
    point = run["targets"][1]["points"][1]  # tp c2
    (tmp_path / "sa" / "results").mkdir(parents=True)
    fake = Fake(tmp_path, result=GOOD)
    args = {"executable": str(fake.path), "args": point["args"], "result_path": point["result_path"]}
    result = run_module(vllm_bench_serve, dict(args, percentiles=run["load"]["percentiles"], target="tp", point="c2"))
    assert fake.argv() == ["bench", "serve"] + point["args"]
    assert result["measurement"]["result"]["completed"] == 8
    assert Path(point["result_path"]) == tmp_path / "sa" / "results" / "tp-c2.json"


def test_the_api_key_reaches_the_process_in_its_environment_only(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    result = run_module(vllm_bench_serve, module_args(tmp_path, fake, api_key=API_KEY))
    assert fake.env()["OPENAI_API_KEY"] == API_KEY
    assert not any(API_KEY in arg for arg in fake.argv())
    assert API_KEY not in json.dumps(result)
    assert result["invocation"]["module_args"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_an_empty_api_key_replaces_one_inherited_from_the_environment(run_module, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-inherited-from-the-controller")
    fake = Fake(tmp_path, result=GOOD)
    run_module(vllm_bench_serve, module_args(tmp_path, fake))
    assert fake.env()["OPENAI_API_KEY"] == ""


def test_environment_entries_reach_the_process(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    environment = {"HF_HUB_OFFLINE": 1, "SSL_CERT_FILE": "/etc/gpufleet/frontdoor-ca.pem"}
    run_module(vllm_bench_serve, module_args(tmp_path, fake, environment=environment))
    env = fake.env()
    assert env["HF_HUB_OFFLINE"] == "1"
    assert env["SSL_CERT_FILE"] == "/etc/gpufleet/frontdoor-ca.pem"


def test_a_stale_result_is_removed_before_the_run(run_module, tmp_path):
    fake = Fake(tmp_path, result=None)  # exits 0 and writes nothing
    args = module_args(tmp_path, fake)
    shutil.copyfile(GOOD, args["result_path"])
    measurement = run_module(vllm_bench_serve, args)["measurement"]
    assert fake.ran()
    assert measurement["result"] is None
    assert measurement["rc"] == 0
    assert measurement["error"].startswith("vllm bench serve exited 0 and wrote no result")
    assert not Path(args["result_path"]).exists()


def test_a_failed_run_returns_its_error_without_failing_the_task(run_module, tmp_path):
    stderr = "".join(f"log line {number}\n" for number in range(20)) + "ConnectionRefusedError: [Errno 111]\n"
    fake = Fake(tmp_path, result=None, rc=1, stderr=stderr)
    result = run_module(vllm_bench_serve, module_args(tmp_path, fake))
    measurement = result["measurement"]
    assert measurement["result"] is None
    assert measurement["rc"] == 1
    prefix = "vllm bench serve exited 1 and wrote no result: "
    assert measurement["error"].startswith(prefix)
    # The last 12 lines of the error output, not all of it.
    tail = measurement["error"][len(prefix) :].splitlines()
    assert tail == [f"log line {number}" for number in range(9, 20)] + ["ConnectionRefusedError: [Errno 111]"]


@pytest.mark.parametrize("content", ["{not json", "[]", '{"completed": 8}'])
def test_a_result_file_that_is_no_result_is_an_error(run_module, tmp_path, content):
    written = tmp_path / "garbage.json"
    written.write_text(content)
    fake = Fake(tmp_path, result=written)
    args = module_args(tmp_path, fake)
    measurement = run_module(vllm_bench_serve, args)["measurement"]
    assert measurement["result"] is None
    assert measurement["error"].startswith("{} holds no vllm bench serve result: ".format(args["result_path"]))


def test_a_run_past_its_timeout_is_stopped(run_module, tmp_path):
    fake = Fake(tmp_path, result=None, stderr="Starting initial single prompt test run...\n", sleep=30)
    started = time.monotonic()
    measurement = run_module(vllm_bench_serve, module_args(tmp_path, fake, timeout=1))["measurement"]
    # The module killed the fake: it did not wait out its 30 s.
    assert time.monotonic() - started < 20
    assert measurement["result"] is None
    assert measurement["rc"] is None
    assert measurement["error"].startswith("stopped after 1 s (timeout)")
    assert "Starting initial single prompt test run..." in measurement["error"]


def test_check_mode_sends_no_load(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    args = module_args(tmp_path, fake)
    shutil.copyfile(ALL_FAILED, args["result_path"])
    result = run_module(vllm_bench_serve, args, check_mode=True)
    assert not fake.ran()
    assert result["changed"] is False
    assert result["measurement"]["error"] == "check mode: no load sent"
    assert result["measurement"]["result"] is None and result["measurement"]["rc"] is None
    # Nothing is removed either.
    assert Path(args["result_path"]).read_bytes() == ALL_FAILED.read_bytes()


def test_args_without_save_result_fail(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    args = module_args(tmp_path, fake)
    args["args"] = [arg for arg in args["args"] if arg != "--save-result"]
    result = run_module(vllm_bench_serve, args, failed=True)
    assert result["msg"] == "args must include --save-result, or the run writes no result to read"
    assert not fake.ran()


@pytest.mark.parametrize("timeout", [0, -5])
def test_a_timeout_under_one_second_fails(run_module, tmp_path, timeout):
    fake = Fake(tmp_path, result=GOOD)
    result = run_module(vllm_bench_serve, module_args(tmp_path, fake, timeout=timeout), failed=True)
    assert result["msg"] == f"timeout={timeout} must be 1 or more seconds"
    assert not fake.ran()


def test_a_vllm_that_is_not_executable_fails(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    fake.path.chmod(0o644)
    result = run_module(vllm_bench_serve, module_args(tmp_path, fake), failed=True)
    assert result["msg"] == f"{fake.path} is not an executable vllm; install the client first"
    assert not fake.ran()


def test_a_missing_vllm_fails(run_module, tmp_path):
    fake = Fake(tmp_path, result=GOOD)
    missing = tmp_path / "no-venv" / "bin" / "vllm"
    result = run_module(vllm_bench_serve, module_args(tmp_path, fake, executable=str(missing)), failed=True)
    assert result["msg"] == f"{missing} is not an executable vllm; install the client first"
