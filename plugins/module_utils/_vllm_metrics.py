# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read what a vLLM engine says about itself on /metrics (Prometheus text format 0.0.4).

Pure functions, standard library only: the gpufleet-agents package (agents/) holds this file as
gpufleet_agents._vllm_metrics for the front door controller. The families read here are vLLM's own
(vllm/v1/metrics/loggers.py): ``vllm:cache_config_info`` (an info gauge whose labels are the
engine's CacheConfig, among them ``block_size`` and ``num_gpu_blocks``, the KV blocks the engine
allocated, CPU backends included), ``vllm:num_requests_running`` and
``vllm:num_requests_waiting``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# name{labels} value [timestamp]; the text format of
# https://prometheus.io/docs/instrumenting/exposition_formats/#text-based-format
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?\s*$")
_LABEL = re.compile(r'\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)="(?P<value>(?:[^"\\]|\\.)*)"\s*(?:,|$)')
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class MetricsError(ValueError):
    """The text is not Prometheus text format, or lacks what the caller needs."""


def _labels(text, line):
    labels = {}
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if not match:
            raise MetricsError("unparsable labels in metrics line: %r" % line)
        labels[match.group("key")] = re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], match.group("value"))
        pos = match.end()
    return labels


def parse(text):
    """Return [(name, labels dict, float value)] for every sample line; comments are skipped."""
    samples = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            raise MetricsError("not a Prometheus metrics line: %r" % line)
        try:
            value = float(match.group("value"))
        except ValueError:
            raise MetricsError("not a number in metrics line: %r" % line) from None
        samples.append((match.group("name"), _labels(match.group("labels") or "", line), value))
    return samples


def _int_label(labels, key):
    raw = labels.get(key)
    if raw in (None, "", "None"):
        return None
    try:
        return int(raw)
    except ValueError:
        raise MetricsError("vllm:cache_config_info label %s=%r is not an integer" % (key, raw)) from None


def engine_state(text):
    """Summarise an engine's /metrics: its KV cache and its request queue.

    ``kv_cache_tokens`` is num_gpu_blocks x block_size, the figure vLLM logs as "KV cache size:
    N tokens". Queue gauges are summed over engines (data-parallel ranks), per model name.
    """
    samples = parse(text)
    cache = [labels for name, labels, _value in samples if name == "vllm:cache_config_info"]
    if not cache:
        raise MetricsError("no vllm:cache_config_info in the metrics: not a vLLM engine, or not started")
    first = cache[0]
    blocks = _int_label(first, "num_gpu_blocks")
    block_size = _int_label(first, "block_size")

    def total(metric):
        values = [value for name, _labels, value in samples if name == metric]
        return int(sum(values)) if values else None

    return {
        "engines": len(cache),
        "block_size": block_size,
        "num_gpu_blocks": blocks,
        "kv_cache_tokens": blocks * block_size if blocks is not None and block_size is not None else None,
        "cache_dtype": first.get("cache_dtype"),
        "requests_running": total("vllm:num_requests_running"),
        "requests_waiting": total("vllm:num_requests_waiting"),
    }
