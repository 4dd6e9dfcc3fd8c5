# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nccl role's real templates, rendered with Ansible's filters, read back by
module_utils/_nccl.parse_env_lines (what nccl_info and nccl_tests read on a host). Here, not beside
test_nccl.py: ansible-test units runs module_utils tests without the controller's packages."""

from pathlib import Path

import jinja2
import pytest
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.gpufleet.inference.plugins.module_utils._nccl import parse_env_lines

TEMPLATES = Path(__file__).resolve().parents[4] / "roles" / "nccl" / "templates"


def render_role_template(name, **variables):
    """Render roles/nccl/templates/NAME as the template module does (trim_blocks, Ansible's filters)."""
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)), trim_blocks=True, undefined=jinja2.StrictUndefined
    )
    environment.filters.update(CoreFilters().filters())
    return environment.get_template(name).render(ansible_managed="Ansible managed", **variables)


ROLE_ENV = {"NCCL_SOCKET_IFNAME": "=eth0", "NCCL_IB_DISABLE": "1", "NCCL_BUFFSIZE": "8388608"}


@pytest.mark.parametrize("template", ["nccl.conf.j2", "nccl.env.j2"])
def test_parse_env_lines_reads_what_the_role_writes(template):
    text = render_role_template(
        template,
        nccl_transport="socket",
        nccl_conf_path="/etc/nccl.conf",
        nccl_env_file="/etc/gpufleet/nccl.env",
        __nccl_env=ROLE_ENV,
    )
    assert parse_env_lines(text) == ROLE_ENV
    # NCCL reads nccl.conf as `#` comments and KEY=value lines, systemd an EnvironmentFile the same way
    # (systemd.exec(5)): anything else is a line either of them would misread.
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert lines == ["NCCL_BUFFSIZE=8388608", "NCCL_IB_DISABLE=1", "NCCL_SOCKET_IFNAME==eth0"]
    assert text.startswith("#\n# Ansible managed\n#\n")
