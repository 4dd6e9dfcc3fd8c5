# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The frontdoor role's input rules, in one check (filter _role_problems, role frontdoor).

The front door's own settings and its replicas are checked by _frontdoor.plan() (the
frontdoor_replicas filter runs the same code, and gpufleet-frontdoor its config_problems()); this
adds the ports and the user as the collection's input kinds check them, and the TLS pair the role
reads on the controller. _frontdoor.py stays importable beside gpufleet-frontdoor without the
rest of the collection, so the role's whole check lives here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.inference.plugins.module_utils import _frontdoor, _render

SCALARS = (
    ("port", "frontdoor_port"),
    ("port", "frontdoor_stats_port"),
    ("port", "frontdoor_controller_metrics_port"),
    ("user", "frontdoor_restart_ssh_user"),
)


def settings_problems(settings):
    """Every problem of the frontdoor role on this front door, one message each.

    settings: the frontdoor_* variables; inventory_hostname (the front door); hostvars, groups and
    engine_defaults (the serving roles' defaults), from which the replicas are planned; tls_openssl,
    the registered results of openssl on the controller (cert_pubkey, key_pubkey and cert_valid;
    skipped without a certificate). Without hostvars only the front door's own settings are checked
    (the rules that need the replicas are then skipped). The TLS files are looked for on the
    controller, where this runs."""
    problems = _render.input_problems([[kind, name, settings[name]] for kind, name in SCALARS if name in settings])
    own = dict((name, value) for name, value in settings.items() if name.startswith("frontdoor_"))
    if "hostvars" in settings:
        try:
            _frontdoor.plan(
                settings["hostvars"],
                settings.get("groups") or {},
                settings.get("engine_defaults") or {},
                settings.get("inventory_hostname", ""),
                settings=own,
            )
        except _frontdoor.FrontdoorError as exc:
            problems += exc.problems
        except ValueError as exc:
            problems.append(str(exc))
    else:
        problems += _frontdoor.settings_problems(own, settings.get("inventory_hostname", ""))
    problems += tls_problems(own, settings.get("tls_openssl") or {})
    return problems


def _given(value):
    return isinstance(value, str) and value != ""


def tls_problems(settings, openssl):
    """The TLS pair: both files on the controller, a PEM certificate that has not expired and its
    unencrypted key. Checked when both are set (one without the other is _frontdoor's problem).
    openssl: {cert_pubkey, key_pubkey, cert_valid}, the registered results of `openssl x509 -pubkey`,
    `openssl pkey -pubout` and `openssl x509 -checkend 0`; the first of their problems is reported."""
    certificate = settings.get("frontdoor_tls_certificate")
    key = settings.get("frontdoor_tls_key")
    if not (_given(certificate) and _given(key)):
        return []
    missing = [
        "%s=%s" % (name, path)
        for name, path in (("frontdoor_tls_certificate", certificate), ("frontdoor_tls_key", key))
        if not os.path.isfile(path)
    ]
    if missing:
        return [
            "%s not found on the controller: give the paths of the PEM certificate (chain included) and of its "
            "private key." % " and ".join(missing)
        ]
    results = [openssl.get(name) or {} for name in ("cert_pubkey", "key_pubkey", "cert_valid")]
    if any(not isinstance(result, dict) or "rc" not in result for result in results):
        return []  # not read (skipped): nothing to judge
    cert_pubkey, key_pubkey, cert_valid = results
    checks = (
        (
            cert_pubkey["rc"] != 0,
            "frontdoor_tls_certificate=%s is not a PEM certificate (openssl: %s)"
            % (certificate, str(cert_pubkey.get("stderr", "")).strip()),
        ),
        (
            key_pubkey["rc"] != 0,
            "frontdoor_tls_key=%s is not a PEM private key, or it is encrypted (HAProxy cannot ask for a passphrase)"
            % key,
        ),
        (cert_valid["rc"] != 0, "frontdoor_tls_certificate=%s has expired: renew it" % certificate),
        (
            cert_pubkey.get("stdout") != key_pubkey.get("stdout"),
            "frontdoor_tls_key=%s is not the key of frontdoor_tls_certificate=%s (their public keys differ): give "
            "the matching pair" % (key, certificate),
        ),
    )
    return [message for failed, message in checks if failed][:1]
