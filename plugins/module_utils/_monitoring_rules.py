# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The monitoring role's input rules, in one check (filter _role_problems, role monitoring).

The rules of prometheus.yml's settings and of the scrape targets are _prometheus_targets.py's
(the prometheus_targets filter runs the same code); this adds what the role needs of its host:
the Debian prometheus package's layout, and promtool where the role does not install Prometheus.
Its own settings_problems() takes the role's monitoring_* variables only, so the role's whole
check lives here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.inference.plugins.module_utils import _prometheus_targets, _render

# The role's variables that _prometheus_targets.settings_problems checks.
MONITORING_VARIABLES = (
    "monitoring_scrape_interval",
    "monitoring_evaluation_interval",
    "monitoring_external_labels",
    "monitoring_alertmanagers",
    "monitoring_extra_scrape_configs",
    "monitoring_url",
    "monitoring_verify_timeout",
)


def settings_problems(settings):
    """Every problem of the monitoring role on this host, one message each.

    settings: the monitoring_* variables (any of MONITORING_VARIABLES, and monitoring_install),
    inventory_hostname, os_family and distribution (ansible_facts), promtool (the path the role
    runs) and promtool_stat (its registered stat; skipped where the role installs Prometheus),
    hostvars and groups (the inventory, whose scrape targets are checked)."""
    host = settings.get("inventory_hostname", "this host")
    problems = []
    if "os_family" in settings and settings["os_family"] != "Debian":
        problems.append(
            "%s runs %s: the monitoring role knows the Debian prometheus package only (/etc/prometheus, "
            "/etc/default/prometheus, promtool). Use a Debian or Ubuntu host for prometheus_servers."
            % (host, settings.get("distribution") or "an unknown OS")
        )
    own = dict((name, settings[name]) for name in MONITORING_VARIABLES if name in settings)
    problems += _prometheus_targets.settings_problems(own)
    if "hostvars" in settings:
        groups = settings.get("groups")
        if not isinstance(groups, dict):
            raise ValueError("monitoring: groups must be the inventory's groups, a dict of lists, got %r" % (groups,))
        problems += _prometheus_targets.inventory_targets(settings["hostvars"], groups)[1]
    stat = settings.get("promtool_stat") or {}
    if "monitoring_install" in settings and not _render.ansible_bool(settings["monitoring_install"]):
        if not (isinstance(stat, dict) and (stat.get("stat") or {}).get("exists")):
            problems.append(
                "monitoring_install=false, but %s does not exist on %s. Install the prometheus package (Debian "
                "layout), or set monitoring_install: true." % (settings.get("promtool"), host)
            )
    return problems
