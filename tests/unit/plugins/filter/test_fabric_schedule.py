# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the fabric_schedule filter."""

import itertools

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter import _fabric_schedule as schedule_filter

fabric_schedule = schedule_filter.fabric_schedule
HOSTS = [f"gpu{index:02d}" for index in range(1, 11)]


def test_registered_under_its_name():
    assert schedule_filter.FilterModule().filters() == {"_fabric_schedule": fabric_schedule}


def test_circle_is_the_default_and_returns_lists():
    assert fabric_schedule(["a", "b", "c", "d"]) == [
        [["a", "d"], ["b", "c"]],
        [["a", "c"], ["b", "d"]],
        [["a", "b"], ["c", "d"]],
    ]
    rounds = fabric_schedule(HOSTS, mode="circle")
    # Lists, not tuples: a tuple never equals a list, and templates get plain YAML-able lists.
    assert isinstance(rounds, list)
    assert all(isinstance(pairs, list) and all(isinstance(pair, list) for pair in pairs) for pairs in rounds)


def test_circle_ten_hosts_is_nine_rounds_of_five():
    rounds = fabric_schedule(HOSTS)
    assert [len(pairs) for pairs in rounds] == [5] * 9
    covered = sorted(tuple(pair) for pairs in rounds for pair in pairs)
    assert covered == list(itertools.combinations(HOSTS, 2))
    assert rounds == fabric_schedule(list(HOSTS))


def test_ring():
    assert fabric_schedule(["a", "b", "c", "d", "e"], mode="ring") == [
        [["a", "b"], ["c", "d"]],
        [["b", "c"], ["d", "e"]],
        [["e", "a"]],
    ]
    rounds = fabric_schedule(HOSTS, mode="ring")
    assert [len(pairs) for pairs in rounds] == [5, 5]


@pytest.mark.parametrize("mode", ["circle", "ring", "sequential"])
def test_fewer_than_two_hosts_give_no_rounds(mode):
    assert fabric_schedule([], mode=mode) == []
    assert fabric_schedule(["gpu01"], mode=mode) == []


@pytest.mark.parametrize(
    "hosts, mode, message",
    [
        (HOSTS, "mesh", "fabric_schedule mode='mesh' is unknown; use circle, ring or sequential"),
        (["a", "a"], "circle", "fabric_schedule: hosts lists 'a' twice; name each host once"),
        ("a,b", "ring", "fabric_schedule: hosts must be a list of host names, got 'a,b'"),
        (["a", 7], "circle", "fabric_schedule: hosts[1]=7 is not a host name; give inventory hostnames as strings"),
    ],
)
def test_bad_input_fails_with_the_reason(hosts, mode, message):
    with pytest.raises(AnsibleFilterError) as exc:
        fabric_schedule(hosts, mode=mode)
    assert exc.value.message == message


def test_sequential_is_the_circle_schedule_one_pair_per_round():
    hosts = ["h1", "h2", "h3", "h4", "h5"]
    circle = fabric_schedule(hosts, mode="circle")
    sequential = fabric_schedule(hosts, mode="sequential")
    assert sequential == [[pair] for pairs in circle for pair in pairs]
    assert len(sequential) == 10
