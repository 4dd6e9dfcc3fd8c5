# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The _role_problems filter: one Python check per role, dispatched by role name."""

from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter._role_problems import RULES, role_problems

ROLES = Path(__file__).resolve().parents[4] / "roles"


def test_every_role_has_its_rules_and_its_preflight_calls_them():
    roles = sorted(path.name for path in ROLES.iterdir() if (path / "tasks" / "preflight.yml").is_file())
    assert sorted(RULES) == roles
    for role in roles:
        preflight = (ROLES / role / "tasks" / "preflight.yml").read_text()
        assert f"_role_problems('{role}')" in preflight, f"{role}: the preflight does not call its rules"


def test_an_unknown_role_or_a_non_mapping_is_an_error():
    with pytest.raises(AnsibleFilterError, match="no rules for role 'nope'"):
        role_problems({}, "nope")
    with pytest.raises(AnsibleFilterError, match="takes a mapping of settings, got list"):
        role_problems([], "roce")


def test_a_problem_comes_back_as_a_message():
    problems = role_problems(
        {
            "inventory_hostname": "node-1",
            "interfaces": ["eth0"],
            "roce_interfaces": ["eth0"],
            "roce_pfc_priority": 3,
            "roce_cnp_priority": 6,
            "roce_dscp": 26,
            "roce_cnp_dscp": 26,
            "roce_ets": None,
            "roce_rdma_cm_mode": "RoCE v2",
        },
        "roce",
    )
    assert any("roce_dscp=26 and roce_cnp_dscp=26 must differ" in problem for problem in problems), problems
