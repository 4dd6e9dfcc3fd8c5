# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight form of nic_tuning's request check: same rules, the role's variable in the message."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter.ethtool_request_problems import ethtool_request_problems


def test_valid_requests_have_no_problems():
    assert ethtool_request_problems({"rx": "max", "tx": 4096}, "rings", "host_tuning_rings") == []
    assert ethtool_request_problems({"combined": 0, "other": "2"}, "channels", "host_tuning_channels") == []
    assert ethtool_request_problems({}, "rings", "host_tuning_rings") == []
    assert ethtool_request_problems(None, "rings", "host_tuning_rings") == []


def test_an_unknown_key_names_the_variable_and_the_allowed_keys():
    [problem] = ethtool_request_problems({"rxx": 4096}, "rings", "host_tuning_rings")
    assert problem.startswith("host_tuning_rings.rxx is not a rings parameter")
    assert "rx, rx-mini, rx-jumbo, tx" in problem


@pytest.mark.parametrize(
    ("kind", "value", "minimum"),
    [("rings", 0, "1"), ("rings", "lots", "1"), ("channels", -1, "0"), ("channels", True, "0")],
)
def test_a_bad_value_names_the_variable_the_value_and_the_fix(kind, value, minimum):
    [problem] = ethtool_request_problems({"rx": value}, kind, "host_tuning_" + kind)
    assert problem == f"host_tuning_{kind}.rx={value!r} must be an integer of at least {minimum} or 'max'"


def test_a_request_that_is_not_a_dict_is_a_problem():
    assert ethtool_request_problems(["rx"], "rings", "host_tuning_rings") == [
        "host_tuning_rings must be a dict of rx, rx-mini, rx-jumbo, tx, got ['rx']"
    ]


def test_an_unknown_kind_is_an_error():
    with pytest.raises(AnsibleFilterError, match="kind must be one of rings, channels"):
        ethtool_request_problems({}, "queues", "x")
