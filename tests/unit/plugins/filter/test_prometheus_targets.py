# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The prometheus_targets filter: the targets, and with settings the monitoring role's own variables, every
problem of both in one error."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter.prometheus_targets import FilterModule, prometheus_targets

HOSTVARS = {"fd01": {"ansible_host": "192.0.2.5"}}
GROUPS = {"inference_frontends": ["fd01"]}


def test_filter_is_registered():
    assert FilterModule().filters() == {"prometheus_targets": prometheus_targets}


def test_good_settings_return_the_targets():
    settings = {"monitoring_scrape_interval": "15s", "monitoring_alertmanagers": ["am.example:9093"]}
    assert prometheus_targets(HOSTVARS, GROUPS, settings=settings) == prometheus_targets(HOSTVARS, GROUPS)


def test_settings_and_inventory_problems_fail_together():
    hostvars = {"fd01": {"ansible_host": "127.0.0.1"}}
    settings = {"monitoring_scrape_interval": "0s", "monitoring_alertmanagers": ["am.example:99999"]}
    with pytest.raises(AnsibleFilterError) as excinfo:
        prometheus_targets(hostvars, GROUPS, settings=settings)
    lines = str(excinfo.value).splitlines()
    assert [line.split("=")[0] for line in lines] == [
        "monitoring_scrape_interval",
        "monitoring_alertmanagers[0]",
        "frontdoor_stats_address",
        "frontdoor_controller_metrics_address",
    ]


def test_settings_must_be_a_dict():
    with pytest.raises(AnsibleFilterError, match="settings must be a dict of variables"):
        prometheus_targets(HOSTVARS, GROUPS, settings=["15s"])
