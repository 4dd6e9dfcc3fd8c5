# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_engine_info against a local HTTP server that serves a real vLLM /metrics capture."""

import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import vllm_engine_info

CAPTURE = Path(__file__).parents[1] / "module_utils" / "fixtures" / "vllm" / "metrics-0.32.0-cpu-pp2.txt"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.server.paths.append(self.path)
        status, body = self.server.answer
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    fake = HTTPServer(("127.0.0.1", 0), Handler)
    fake.paths = []
    fake.answer = (200, CAPTURE.read_bytes())
    fake.url = f"http://127.0.0.1:{fake.server_address[1]}"
    thread = threading.Thread(target=fake.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()
    thread.join(5)


def test_reads_the_kv_cache_of_the_engine(run_module, server):
    result = run_module(vllm_engine_info, {"url": server.url + "/"})
    assert server.paths == ["/metrics"]
    assert result["changed"] is False
    assert result["block_size"] == 128
    assert result["kv_cache_tokens"] == result["num_gpu_blocks"] * 128
    assert result["requests_running"] == 0


def test_an_http_error_names_the_url(run_module, server):
    server.answer = (503, b"not ready")
    result = run_module(vllm_engine_info, {"url": server.url}, failed=True)
    assert result["failed"] is True
    assert f"GET {server.url}/metrics answered 503" in result["msg"]


def test_a_server_that_is_not_vllm_is_refused(run_module, server):
    server.answer = (200, b"process_cpu_seconds_total 1.0\n")
    result = run_module(vllm_engine_info, {"url": server.url}, failed=True)
    assert "no vllm:cache_config_info" in result["msg"]
