# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The frontdoor role's one check (module_utils/_frontdoor_rules.py): its ports and user, its own
settings with its replicas (_frontdoor.plan), and the TLS pair, every problem at once."""

import pytest
from ansible_collections.gpufleet.inference.plugins.module_utils import _frontdoor, _frontdoor_rules

KEY = "k" * 24
DEFAULTS = {"vllm_api_host": "127.0.0.1", "vllm_api_port": 8000, "vllm_api_key": "", "vllm_served_model_name": ""}
PUBKEY = (
    "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAGb9ECWmEzf6FQbrBZ9w7lshQhqowtrbLDFw4rXAxZuE=\n-----END PUBLIC KEY-----"
)
OTHER_PUBKEY = PUBKEY.replace("AGb9", "AHc0")  # another key
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def inventory():
    """Replica r0 of two nodes, and the front door fd."""
    hostvars = {
        "gpu01": {
            "vllm_replica": "r0",
            "vllm_node_rank": 0,
            "ansible_host": "192.168.0.11",
            "vllm_api_host": "10.20.0.11",
            "vllm_api_key": KEY,
            "vllm_served_model_name": "tiny",
        },
        "gpu02": {"vllm_replica": "r0", "vllm_node_rank": 1, "ansible_host": "192.168.0.12"},
        "fd": {"ansible_host": "192.168.0.20"},
    }
    return hostvars, {"vllm_nodes": ["gpu01", "gpu02"], "inference_frontends": ["fd"]}


def frontdoor_settings(**changes):
    """The role's defaults as vars/main.yml hands them over, with the inventory, and changes."""
    hostvars, groups = inventory()
    values = {
        "inventory_hostname": "fd",
        "hostvars": hostvars,
        "groups": groups,
        "engine_defaults": DEFAULTS,
        "tls_openssl": {"cert_pubkey": SKIPPED, "key_pubkey": SKIPPED, "cert_valid": SKIPPED},
        "frontdoor_bind_address": "127.0.0.1",
        "frontdoor_port": 8080,
        "frontdoor_tls_certificate": "",
        "frontdoor_tls_key": "",
        "frontdoor_stats_address": "192.168.0.20",
        "frontdoor_stats_port": 8404,
        "frontdoor_controller_metrics_address": "192.168.0.20",
        "frontdoor_controller_metrics_port": 9106,
        "frontdoor_controller_interval": 1.0,
        "frontdoor_max_auto_drained": 1,
        "frontdoor_restart_ssh_user": "root",
        "frontdoor_restart_interval": "48h",
    }
    values.update(changes)
    return values


def openssl(cert_rc=0, key_rc=0, valid_rc=0, key_pubkey=PUBKEY, stderr=""):
    """The registered results of the three openssl commands of the preflight."""
    return {
        "cert_pubkey": {"rc": cert_rc, "stdout": PUBKEY if cert_rc == 0 else "", "stderr": stderr},
        "key_pubkey": {"rc": key_rc, "stdout": key_pubkey if key_rc == 0 else "", "stderr": ""},
        "cert_valid": {"rc": valid_rc, "stdout": "Certificate will not expire" if valid_rc == 0 else "", "stderr": ""},
    }


@pytest.fixture
def pair(tmp_path):
    certificate, key = tmp_path / "fd.pem", tmp_path / "fd.key"
    certificate.write_text("certificate")
    key.write_text("key")
    return {"frontdoor_tls_certificate": str(certificate), "frontdoor_tls_key": str(key)}


def test_good_settings_with_replicas_pass():
    assert _frontdoor_rules.settings_problems(frontdoor_settings()) == []


def test_a_good_tls_pair_passes(pair):
    settings = frontdoor_settings(frontdoor_bind_address="0.0.0.0", tls_openssl=openssl(), **pair)
    assert _frontdoor_rules.settings_problems(settings) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"frontdoor_port": 70000}, "frontdoor_port=70000 is not a TCP port: use 1..65535"),
        ({"frontdoor_stats_port": "http"}, "frontdoor_stats_port='http' is not a TCP port: use 1..65535"),
        ({"frontdoor_controller_metrics_port": 0}, "frontdoor_controller_metrics_port=0 is not a TCP port"),
        ({"frontdoor_restart_ssh_user": "Root User"}, "frontdoor_restart_ssh_user='Root User' is not a user name"),
    ],
)
def test_the_ports_and_the_user_are_checked_first(changes, message):
    problems = _frontdoor_rules.settings_problems(frontdoor_settings(**changes))
    assert problems[0].startswith(message)


def test_the_own_settings_and_the_replicas_are_checked_by_the_plan():
    hostvars, _groups = inventory()
    hostvars["gpu02"]["vllm_node_rank"] = 0
    settings = frontdoor_settings(hostvars=hostvars, frontdoor_restart_interval="0", frontdoor_port=70000)
    problems = _frontdoor_rules.settings_problems(settings)
    assert len(problems) == 3
    assert problems[0].startswith("frontdoor_port=70000 is not a TCP port")
    assert problems[1].startswith("frontdoor_restart_interval=0 is shorter than an hour")
    assert problems[2].startswith("replica r0 has more than one rank 0")


def test_the_plan_problems_are_the_filters():
    """The frontdoor_replicas filter raises with the same problems, as the role's node_access reads it."""
    settings = frontdoor_settings(hostvars={"fd": {}}, groups={}, frontdoor_max_auto_drained=-1)
    own = dict((name, value) for name, value in settings.items() if name.startswith("frontdoor_"))
    with pytest.raises(_frontdoor.FrontdoorError) as excinfo:
        _frontdoor.plan({"fd": {}}, {}, DEFAULTS, "fd", settings=own)
    assert _frontdoor_rules.settings_problems(settings) == excinfo.value.problems


def test_without_an_inventory_the_own_settings_are_still_checked():
    settings = frontdoor_settings(frontdoor_bind_address="10.0.0.1")
    del settings["hostvars"]
    (problem,) = _frontdoor_rules.settings_problems(settings)
    assert problem.startswith("frontdoor_bind_address=10.0.0.1 exposes the API beyond fd without TLS")


def test_missing_tls_files_are_refused(tmp_path):
    settings = frontdoor_settings(
        frontdoor_tls_certificate=str(tmp_path / "fd.pem"), frontdoor_tls_key=str(tmp_path / "fd.key")
    )
    assert _frontdoor_rules.settings_problems(settings) == [
        f"frontdoor_tls_certificate={tmp_path / 'fd.pem'} and frontdoor_tls_key={tmp_path / 'fd.key'} not found on the "
        "controller: give the paths of the PEM certificate (chain included) and of its private key."
    ]


def test_a_missing_key_file_alone_is_named_alone(pair, tmp_path):
    settings = frontdoor_settings(**dict(pair, frontdoor_tls_key=str(tmp_path / "none.key")))
    (problem,) = _frontdoor_rules.settings_problems(settings)
    assert problem.startswith("frontdoor_tls_key=%s not found on the controller" % (tmp_path / "none.key"))


def test_half_a_pair_is_one_problem_not_a_missing_file():
    (problem,) = _frontdoor_rules.settings_problems(frontdoor_settings(frontdoor_tls_certificate="/etc/ssl/fd.pem"))
    assert problem == "set both frontdoor_tls_certificate (/etc/ssl/fd.pem) and frontdoor_tls_key (), or neither"


@pytest.mark.parametrize(
    ("results", "message"),
    [
        (
            openssl(cert_rc=1, stderr="Could not read certificate from fd.pem\n"),
            "frontdoor_tls_certificate={certificate} is not a PEM certificate (openssl: Could not read certificate "
            "from fd.pem)",
        ),
        (
            openssl(key_rc=1),
            "frontdoor_tls_key={key} is not a PEM private key, or it is encrypted "
            "(HAProxy cannot ask for a passphrase)",
        ),
        (openssl(valid_rc=1), "frontdoor_tls_certificate={certificate} has expired: renew it"),
        (
            openssl(key_pubkey=OTHER_PUBKEY),
            "frontdoor_tls_key={key} is not the key of frontdoor_tls_certificate={certificate} (their public keys "
            "differ): give the matching pair",
        ),
    ],
)
def test_a_tls_pair_openssl_refuses_is_refused(pair, results, message):
    settings = frontdoor_settings(tls_openssl=results, **pair)
    expected = message.format(certificate=pair["frontdoor_tls_certificate"], key=pair["frontdoor_tls_key"])
    assert _frontdoor_rules.settings_problems(settings) == [expected]


def test_every_problem_comes_back_at_once(tmp_path):
    settings = frontdoor_settings(
        frontdoor_port=0,
        frontdoor_timeout_client="0s",
        groups={},
        frontdoor_tls_certificate=str(tmp_path / "fd.pem"),
        frontdoor_tls_key=str(tmp_path / "fd.key"),
    )
    problems = _frontdoor_rules.settings_problems(settings)
    assert [problem.split("=")[0].split(" ")[0] for problem in problems] == [
        "frontdoor_port",
        "frontdoor_timeout_client",
        "no",
        "frontdoor_tls_certificate",
    ]
