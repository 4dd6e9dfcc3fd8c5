# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The programs gpufleet.inference runs on the hosts it manages (agents/README.md).

- gpufleet-health-agent (health_agent): the health of one serving node, /health and /metrics;
- gpufleet-frontdoor (frontdoor): the front door's controller and its operator CLI;
- gpufleet-vllm-guard (vllm_guard): one failure domain out of a multi-host vLLM replica.

_gpu, _vllm_metrics, _frontdoor and _health_agent_config are the collection's module_utils files
of the same names (links in the source tree, files in the wheel): the modules and the roles'
preflights use the same code on the controller.
"""

# The collection's version (galaxy.yml); tests/packaging/test_agents_wheel.py holds them equal.
__version__ = "0.1.0"
