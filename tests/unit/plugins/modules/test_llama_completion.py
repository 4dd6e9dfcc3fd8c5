# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the llama_completion module, run against a local HTTP server that answers like llama-server."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import llama_completion

API_KEY = "gpufleet-test-key-7f3a9c"


def completion(index, tokens_predicted=4):
    """A /completion answer shaped like llama-server's (fields trimmed to those the module reads and a few more)."""
    prompt_per_second = (300.0, 100.0, 200.0, 250.0)[index % 4]
    predicted_per_second = (30.0, 10.0, 20.0, 25.0)[index % 4]
    return {
        "index": 0,
        "content": f" Paris, run {index}",
        "tokens": [],
        "id_slot": 0,
        "stop": True,
        "model": "tiny.gguf",
        "tokens_predicted": tokens_predicted,
        "tokens_evaluated": 6,
        "truncated": False,
        "stop_type": "limit",
        "timings": {
            "cache_n": 0,
            "prompt_n": 6,
            "prompt_ms": 6000.0 / prompt_per_second,
            "prompt_per_token_ms": 1000.0 / prompt_per_second,
            "prompt_per_second": prompt_per_second,
            "predicted_n": tokens_predicted,
            "predicted_ms": 1000.0 * tokens_predicted / predicted_per_second,
            "predicted_per_token_ms": 1000.0 / predicted_per_second,
            "predicted_per_second": predicted_per_second,
        },
    }


class FakeLlamaServer(HTTPServer):
    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.requests = []
        # answer(index, request) -> (status, body dict)
        self.answer = lambda index, request: (200, completion(index))

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        request = {
            "path": self.path,
            "headers": dict(self.headers.items()),
            "body": json.loads(self.rfile.read(length).decode("utf-8")),
        }
        self.server.requests.append(request)
        status, body = self.server.answer(len(self.server.requests) - 1, request)
        if body is None:
            data, content_type = b"<html><body>502 Bad Gateway</body></html>", "text/html"
        else:
            data, content_type = json.dumps(body).encode("utf-8"), "application/json; charset=utf-8"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def server(monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    fake = FakeLlamaServer()
    thread = threading.Thread(target=fake.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield fake
    fake.shutdown()
    fake.server_close()
    thread.join(5)


def test_one_completion(run_module, server):
    result = run_module(llama_completion, {"url": server.url})
    assert result.get("failed") is not True
    assert result["changed"] is False
    assert result["content"] == " Paris, run 0"
    assert result["tokens_predicted"] == 4
    assert result["tokens_evaluated"] == 6
    assert result["prefill_tokens_per_second"] == 300.0
    assert result["decode_tokens_per_second"] == 30.0
    assert result["runs"] == [completion(0)["timings"]]
    [request] = server.requests
    assert request["path"] == "/completion"
    assert request["body"] == {
        "prompt": "The capital of France is",
        "n_predict": 16,
        "seed": 42,
        "cache_prompt": False,
        "stream": False,
        "ignore_eos": False,
    }
    assert request["headers"]["Content-Type"] == "application/json"
    assert "Authorization" not in request["headers"]


def test_api_key_is_a_bearer_token_and_never_printed(run_module, server):
    result = run_module(
        llama_completion, {"url": server.url + "/", "api_key": API_KEY, "prompt": "Hi", "n_predict": 8, "seed": 7}
    )
    assert result.get("failed") is not True
    [request] = server.requests
    assert request["path"] == "/completion"
    assert request["headers"]["Authorization"] == f"Bearer {API_KEY}"
    assert request["body"] == {
        "prompt": "Hi",
        "n_predict": 8,
        "seed": 7,
        "cache_prompt": False,
        "stream": False,
        "ignore_eos": False,
    }
    assert API_KEY not in json.dumps(result)
    assert result["invocation"]["module_args"]["api_key"] == "VALUE_SPECIFIED_IN_NO_LOG_PARAMETER"


def test_medians_over_runs(run_module, server):
    result = run_module(llama_completion, {"url": server.url, "runs": 3})
    assert len(server.requests) == 3
    assert all(r["body"]["cache_prompt"] is False for r in server.requests)
    # Runs answered 300/100/200 prompt and 30/10/20 decode tokens per second.
    assert result["prefill_tokens_per_second"] == 200.0
    assert result["decode_tokens_per_second"] == 20.0
    assert result["runs"] == [completion(i)["timings"] for i in range(3)]
    assert result["content"] == " Paris, run 2"


def test_median_of_an_even_number_of_runs(run_module, server):
    result = run_module(llama_completion, {"url": server.url, "runs": 4})
    # 300, 100, 200, 250 -> (200 + 250) / 2
    assert result["prefill_tokens_per_second"] == 225.0
    assert result["decode_tokens_per_second"] == 22.5


def test_wrong_api_key_is_http_401(run_module, server):
    def answer(index, request):
        # llama-server's answer; echo the key to prove the module masks it.
        auth = request["headers"].get("Authorization", "")
        return 401, {"error": {"code": 401, "message": f"Invalid API Key {auth}", "type": "authentication_error"}}

    server.answer = answer
    result = run_module(llama_completion, {"url": server.url, "api_key": API_KEY, "runs": 3}, failed=True)
    assert result["failed"] is True
    assert result["msg"].startswith(f"{server.url} answered HTTP 401: ")
    assert "authentication_error" in result["msg"]
    assert len(server.requests) == 1
    assert API_KEY not in json.dumps(result)


def test_no_tokens_fails(run_module, server):
    server.answer = lambda index, request: (200, completion(index, tokens_predicted=0))
    result = run_module(llama_completion, {"url": server.url}, failed=True)
    assert result["msg"] == f"{server.url} returned no tokens"
    assert result["response"]["tokens_predicted"] == 0


def test_no_tokens_on_a_later_run_fails(run_module, server):
    server.answer = lambda index, request: (200, completion(index, tokens_predicted=0 if index else 4))
    result = run_module(llama_completion, {"url": server.url, "runs": 3}, failed=True)
    assert result["msg"] == f"{server.url} returned no tokens"
    assert len(server.requests) == 2


def test_html_instead_of_json_fails(run_module, server):
    server.answer = lambda index, request: (200, None)  # the handler sends an HTML page for None
    result = run_module(llama_completion, {"url": server.url}, failed=True)
    assert result["msg"].startswith(f"no completion from {server.url}: ")
    assert "Expecting value" in result["msg"]


def test_json_that_is_not_an_object_fails_cleanly(run_module, server):
    server.answer = lambda index, request: (200, ["not", "a", "completion"])
    result = run_module(llama_completion, {"url": server.url}, failed=True)
    assert result["msg"].startswith(server.url)


def test_connection_refused(run_module):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    result = run_module(llama_completion, {"url": url, "api_key": API_KEY}, failed=True)
    assert result["msg"].startswith(f"no completion from {url}: ")
    assert "Connection refused" in result["msg"]


@pytest.mark.parametrize(
    "args, msg",
    [
        ({"runs": 0}, "runs=0 and n_predict=16 must both be at least 1"),
        ({"n_predict": 0}, "runs=1 and n_predict=0 must both be at least 1"),
        ({"runs": -2, "n_predict": -1}, "runs=-2 and n_predict=-1 must both be at least 1"),
    ],
)
def test_runs_and_n_predict_must_be_positive(run_module, server, args, msg):
    result = run_module(llama_completion, dict(args, url=server.url), failed=True)
    assert result["msg"] == msg
    assert server.requests == []
