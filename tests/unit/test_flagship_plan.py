# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The plan layer on the flagship's own inventory: it accepts the flagship and refuses a cluster
whose cards are too small, before any host is touched (plan.yml runs on the controller only, so
the flagship's ten unreachable hosts are never contacted)."""

import json
import os
import subprocess
from pathlib import Path

from ansible_collections.gpufleet.inference.tests.unit.conftest import ansible_playbook

REPO = Path(__file__).resolve().parents[2]
FLAGSHIP = "inventories/cluster-80x5090/topology.yml"


def plan(tmp_path, *extra):
    argv, collections = ansible_playbook()
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=collections,
        ANSIBLE_NOCOLOR="1",
        # Nothing here may reach a host; any attempt fails fast instead of waiting on SSH.
        ANSIBLE_TIMEOUT="1",
        ANSIBLE_CACHE_PLUGIN="memory",
    )
    report = tmp_path / "reports"
    return report, subprocess.run(
        [*argv, "-i", FLAGSHIP, "playbooks/plan.yml", "-e", f"vllm_capacity_report_dir={report}", *extra],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_flagship_plan_fits_and_is_written(tmp_path):
    report, result = plan(tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Capacity plan of replica kimi:" in result.stdout
    assert "unreachable=1" not in result.stdout
    data = json.loads((report / "capacity-plan-kimi.json").read_text())
    partition = [int(n) for n in data["pp_layer_partition"].split(",")]
    assert len(partition) == 10
    assert data["kv_tokens"] > 0
    assert data["max_concurrency"] >= 8  # the flagship's max-num-seqs at 32768 tokens


def test_a_plan_that_does_not_fit_stops_the_run(tmp_path):
    report, result = plan(tmp_path, "-e", json.dumps({"vllm_capacity_gpu": {"memory_mib": 12288}}))
    assert result.returncode != 0
    assert "Compute the plan on the controller" in result.stdout
    assert "do not fit" in result.stdout
    # The refusal names what the operator sets, not the module's option names.
    assert "a larger vllm_pipeline_parallel_size" in " ".join(result.stdout.split())
    assert not (report / "capacity-plan-kimi.json").exists()
