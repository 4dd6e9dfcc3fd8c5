# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The /metrics reader, over a real capture of vLLM 0.32.0 (CPU) serving the lab's PP=2 replica."""

from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils._vllm_metrics import MetricsError, engine_state, parse

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"
# Captured from rank 0 of the lab replica (scripts/lab.py up --serving vllm, playbooks/site.yml):
# curl http://172.30.90.11:8000/metrics; the header of the file says so.
CAPTURE = (FIXTURES / "metrics-0.32.0-cpu-pp2.txt").read_text()


def test_real_capture_gives_the_kv_cache_and_the_queue():
    state = engine_state(CAPTURE)
    assert state["engines"] == 1
    assert state["block_size"] == 128
    assert state["num_gpu_blocks"] == 1024
    assert state["kv_cache_tokens"] == 1024 * 128  # the capacity plan of the same replica: 1024 blocks
    assert state["requests_running"] == 0
    assert state["requests_waiting"] == 0


def test_samples_keep_their_labels():
    samples = parse('vllm:num_requests_running{engine="0",model_name="tiny-llama"} 2.0\n')
    assert samples == [("vllm:num_requests_running", {"engine": "0", "model_name": "tiny-llama"}, 2.0)]


def test_escaped_label_values():
    ((_name, labels, _value),) = parse('x{a="q\\"uote",b="back\\\\slash",c="new\\nline"} 1')
    assert labels == {"a": 'q"uote', "b": "back\\slash", "c": "new\nline"}


def test_comments_blank_lines_and_timestamps():
    assert parse("# HELP x y\n# TYPE x gauge\n\nx 3 1700000000000\n") == [("x", {}, 3.0)]


def test_queue_gauges_are_summed_over_engines():
    text = (
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="10",engine="0"} 1.0\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="10",engine="1"} 1.0\n'
        'vllm:num_requests_running{engine="0"} 2.0\nvllm:num_requests_running{engine="1"} 3.0\n'
    )
    state = engine_state(text)
    assert state["engines"] == 2
    assert state["requests_running"] == 5
    assert state["requests_waiting"] is None


def test_not_started_engine_has_no_blocks():
    state = engine_state('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n')
    assert state["num_gpu_blocks"] is None
    assert state["kv_cache_tokens"] is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("process_cpu_seconds_total 3.0\n", "no vllm:cache_config_info"),
        ("<html>502</html>\n", "not a Prometheus metrics line"),
        ("x{a=unquoted} 1\n", "unparsable labels"),
        ("x 1.2.3\n", "not a number"),
        ('vllm:cache_config_info{block_size="sixteen"} 1.0\n', "block_size='sixteen' is not an integer"),
    ],
)
def test_bad_text_is_refused_with_what_is_wrong(text, message):
    with pytest.raises(MetricsError, match=message):
        engine_state(text)
