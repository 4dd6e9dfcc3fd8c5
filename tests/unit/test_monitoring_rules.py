# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The alert rules pass promtool's checks and their unit tests (monitoring/prometheus/)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

RULES = Path(__file__).resolve().parents[2] / "monitoring" / "prometheus"


def promtool():
    path = os.environ.get("GPUFLEET_PROMTOOL") or shutil.which("promtool")
    if not path or not os.access(path, os.X_OK):
        pytest.skip(
            "no promtool: set GPUFLEET_PROMTOOL or put promtool on PATH (Debian: apt-get download prometheus; "
            "dpkg -x prometheus_*.deb DIR; DIR/usr/bin/promtool)"
        )
    return path


def run(*argv):
    result = subprocess.run([promtool(), *argv], cwd=RULES, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_rules_are_valid():
    assert "SUCCESS" in run("check", "rules", "gpufleet-alerts.yml")


def test_rule_unit_tests_pass():
    assert "SUCCESS" in run("test", "rules", "gpufleet-alerts.test.yml")


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not():
    yaml = pytest.importorskip("yaml")
    groups = yaml.safe_load((RULES / "gpufleet-alerts.yml").read_text())["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"]}
    fired, quiet = set(), set()
    for test in yaml.safe_load((RULES / "gpufleet-alerts.test.yml").read_text())["tests"]:
        for case in test["alert_rule_test"]:
            (fired if case.get("exp_alerts") else quiet).add(case["alertname"])
    assert alerts - fired == set()
    assert alerts - quiet == set()
