# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's one check (module_utils/_monitoring_rules.py): its settings, its host and
the scrape targets of the inventory, every problem at once."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _monitoring_rules, _prometheus_targets

HOSTVARS = {
    "gpu01": {"ansible_host": "192.0.2.11", "vllm_replica": "r0", "vllm_node_rank": 0, "vllm_api_host": "10.20.0.11"},
    "fd01": {"ansible_host": "192.0.2.5"},
    "mon01": {"ansible_host": "192.0.2.9"},
}
GROUPS = {"vllm_nodes": ["gpu01"], "inference_frontends": ["fd01"], "prometheus_servers": ["mon01"]}
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def monitoring_settings(**changes):
    settings = {
        "inventory_hostname": "mon01",
        "os_family": "Debian",
        "distribution": "Ubuntu",
        "monitoring_install": True,
        "promtool": "/usr/bin/promtool",
        "promtool_stat": SKIPPED,
        "monitoring_scrape_interval": "15s",
        "monitoring_evaluation_interval": "15s",
        "monitoring_external_labels": {"cluster": "gpu-west"},
        "monitoring_alertmanagers": ["alertmanager.example:9093"],
        "monitoring_extra_scrape_configs": [],
        "monitoring_url": "http://127.0.0.1:9090",
        "monitoring_verify_timeout": 120,
        "hostvars": HOSTVARS,
        "groups": GROUPS,
    }
    settings.update(changes)
    return settings


def test_good_settings_pass():
    assert _monitoring_rules.settings_problems(monitoring_settings()) == []


def test_an_installed_promtool_passes_without_installing():
    stat = {"changed": False, "stat": {"exists": True, "path": "/usr/bin/promtool"}}
    assert _monitoring_rules.settings_problems(monitoring_settings(monitoring_install=False, promtool_stat=stat)) == []


@pytest.mark.parametrize("install", [False, "false", "no", 0])
def test_no_promtool_without_installing_is_refused(install):
    stat = {"changed": False, "stat": {"exists": False}}
    assert _monitoring_rules.settings_problems(monitoring_settings(monitoring_install=install, promtool_stat=stat)) == [
        "monitoring_install=false, but /usr/bin/promtool does not exist on mon01. Install the prometheus package "
        "(Debian layout), or set monitoring_install: true."
    ]


@pytest.mark.parametrize("family, distribution, shown", [("RedHat", "Rocky", "Rocky"), (None, None, "an unknown OS")])
def test_a_host_that_is_not_debian_is_refused(family, distribution, shown):
    assert _monitoring_rules.settings_problems(monitoring_settings(os_family=family, distribution=distribution)) == [
        f"mon01 runs {shown}: the monitoring role knows the Debian prometheus package only (/etc/prometheus, "
        "/etc/default/prometheus, promtool). Use a Debian or Ubuntu host for prometheus_servers."
    ]


def test_the_settings_and_the_inventory_are_checked_together():
    hostvars = dict(HOSTVARS, gpu01=dict(HOSTVARS["gpu01"], vllm_api_host="127.0.0.1"))
    problems = _monitoring_rules.settings_problems(
        monitoring_settings(
            monitoring_scrape_interval="0s", monitoring_alertmanagers=["am.example:0"], hostvars=hostvars
        )
    )
    assert len(problems) == 3
    assert problems[0].startswith("monitoring_scrape_interval='0s' is zero")
    assert problems[1].startswith("monitoring_alertmanagers[0]='am.example:0' has port '0'")
    assert problems[2].startswith("vllm_api_host=127.0.0.1 on gpu01 is a loopback address")


def test_the_settings_are_the_ones_the_prometheus_targets_filter_checks():
    settings = monitoring_settings(monitoring_external_labels={"cluster-name": "prod"}, monitoring_verify_timeout=0)
    own = dict((name, settings[name]) for name in _monitoring_rules.MONITORING_VARIABLES)
    assert _monitoring_rules.settings_problems(settings) == _prometheus_targets.settings_problems(own)


def test_groups_that_are_not_a_mapping_are_an_error_of_the_role():
    with pytest.raises(ValueError, match="groups must be the inventory's groups"):
        _monitoring_rules.settings_problems(monitoring_settings(groups=["gpu01"]))
