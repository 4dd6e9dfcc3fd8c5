# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""fabric_validate's verdict cannot be talked into a pass: an extra var beats a fact, and an AWX
workflow hands a job's artifacts to the next jobs as extra vars, so the verdict reads a private copy
of what report.yml measured, not the public fact fabric_validate_passed."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = textwrap.dedent("""\
    - name: Judge one failing pair of two hosts
      hosts: all
      gather_facts: false
      vars:
        # What the preflight and the rounds leave for report.yml.
        __fabric_validate_rounds: [[[a, b]]]
        __fabric_validate_engine: iperf3
      tasks:
        - name: Record what a measured
          ansible.builtin.set_fact:
            __fabric_validate_results: >-
              {{ [{'a': 'a', 'b': 'b', 'gbps': 0.0, 'ok': false, 'jumbo_ok': false, 'error': 'no route to b',
                   'link_speed_mbps': none, 'retransmits': none, 'round': 1}] if inventory_hostname == 'a' else [] }}

        - name: Write the report
          ansible.builtin.include_role:
            name: gpufleet.inference.fabric_validate
            tasks_from: report

        - name: Give the verdict
          ansible.builtin.include_role:
            name: gpufleet.inference.fabric_validate
            tasks_from: verdict
    """)


@pytest.mark.parametrize(
    "extra",
    [
        {},
        # What a workflow node receives from an earlier acceptance job that passed (before 2026-12
        # the artifacts were named as the facts), or what an operator may pass by hand.
        {"fabric_validate_passed": True, "fabric_validate_failing": [], "fabric_validate_outliers": []},
        {"fabric_acceptance": {"passed": True}},
    ],
    ids=["plain", "public-facts-as-extra-vars", "artifact-as-extra-var"],
)
def test_a_failing_pair_fails_the_verdict_whatever_the_extra_vars(tmp_path, extra):
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "hosts").write_text(
        "".join(f"{name} ansible_connection=local ansible_python_interpreter={sys.executable}\n" for name in "ab")
    )
    extra = {"fabric_validate_report_dir": str(tmp_path / "report"), **extra}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(tmp_path / "hosts"),
            str(tmp_path / "play.yml"),
            "-e",
            json.dumps(extra),
        ],
        cwd=REPO,
        env=dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1"),
        capture_output=True,
        text=True,
        check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "1 pair(s) failed the fabric acceptance test" in out, out
    report = json.loads((tmp_path / "report" / "fabric-report.json").read_text())
    assert report["passed"] is False
