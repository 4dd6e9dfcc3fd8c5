# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm role's cache seeding step through a real play on this machine, without a peer.

A model with a digest keys its node's cache: the play reads the key, says that no peer holds a
cache of its shape, and changes nothing. A hub model whose revision is a branch has no digest:
the play says why its caches are neither recorded nor seeded, and does not fail. (The seed from
a peer over the fabric is proven in the lab, tests/site/staging.py.)"""

import pytest
from ansible_collections.gpufleet.inference.tests.unit.conftest import local_play

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Publish the node, as the vllm role's preflight does
      ansible.builtin.set_fact:
        __vllm_node: {replica: "{{ vllm_replica }}", address: 127.0.0.1}

    - name: Name the lock
      ansible.builtin.include_role:
        name: gpufleet.inference.vllm
        tasks_from: lock

    - name: Seed the cold caches
      ansible.builtin.include_role:
        name: gpufleet.inference.vllm
        tasks_from: cache_seed
"""

BASE = {"vllm_platform": "cpu", "vllm_version": "0.32.0", "vllm_replica": "unit-cache-seed"}


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ({"vllm_model_checksum": "sha256:" + "4" * 64}, "localhost: no peer holds a vLLM cache of its shape (sha256:"),
        (
            {"vllm_model_hub_id": "org/model", "vllm_args": {"revision": "main"}},
            "Replica unit-cache-seed: the model 'hub:org/model@main' has no digest to key a vLLM cache by",
        ),
    ],
)
def test_without_a_peer_the_play_says_why_and_changes_nothing(tmp_path, model, said):
    proc = local_play(tmp_path, PLAY, dict(BASE, **model))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert said in " ".join(proc.stdout.split()), proc.stdout[-4000:]
    assert "changed=0" in proc.stdout
