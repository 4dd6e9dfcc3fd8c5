# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Repository URLs with credentials: split for apt's auth.conf.d, never shown with the password."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.inference.plugins.filter._repository_url import repository_url
from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth

ORIGIN = "cuda_repository_url"


def test_a_url_without_credentials_is_kept_as_is():
    result = _apt_auth.split("https://mirror.example/cuda/repos/debian12/x86_64/", ORIGIN)
    assert result == {
        "url": "https://mirror.example/cuda/repos/debian12/x86_64/",
        "shown": "https://mirror.example/cuda/repos/debian12/x86_64/",
        "auth": None,
        "problem": "",
    }


def test_https_credentials_go_to_a_machine_without_protocol():
    result = _apt_auth.split("https://fleet:s3cr%40t@mirror.example:8443/cuda/repos/", ORIGIN)
    assert result["url"] == "https://mirror.example:8443/cuda/repos/"
    assert result["auth"] == {"machine": "mirror.example:8443/cuda/repos/", "login": "fleet", "password": "s3cr@t"}
    assert result["shown"] == "https://fleet:********@mirror.example:8443/cuda/repos/"
    assert result["problem"] == ""


def test_http_credentials_name_the_protocol_because_apt_matches_https_only_otherwise():
    result = _apt_auth.split("http://fleet:pw@10.0.0.5/cuda/", ORIGIN)
    assert result["auth"]["machine"] == "http://10.0.0.5/cuda/"
    assert result["url"] == "http://10.0.0.5/cuda/"


def test_the_machine_path_stops_before_apts_arch_substitution():
    result = _apt_auth.split("https://u:p@mirror.example/libnvidia-container/stable/deb/$(ARCH)", "nct")
    assert result["url"] == "https://mirror.example/libnvidia-container/stable/deb/$(ARCH)"
    assert result["auth"]["machine"] == "mirror.example/libnvidia-container/stable/deb/"


def test_the_auth_file_holds_the_three_tokens():
    text = _apt_auth.auth_conf({"machine": "mirror.example/cuda/", "login": "fleet", "password": "pw"})
    assert text.splitlines()[1:] == ["machine mirror.example/cuda/", "login fleet", "password pw"]
    assert text.startswith("# ") and text.endswith("\n")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://u:topsecret@mirror.example/cuda/\nSigned-By: /tmp/evil.gpg", "'\\n'"),
        ("https://u:top secret@mirror.example/cuda/", "' '"),
        ("https://u:topsecret\t@mirror.example/cuda/", "'\\t'"),
        ("ftp://u:topsecret@mirror.example/cuda/", "http://, https:// or file://"),
        ("mirror.example/cuda/", "http://, https:// or file://"),
        ("file://u:topsecret@/srv/cuda/", "file:// URL with credentials"),
        ("https://u:top/secret@mirror.example/cuda/", "percent-encode"),
        ("https://u:topsecret%0A@mirror.example/cuda/", "password that decodes to a space or a control character"),
        ("https://u%20x:topsecret@mirror.example/cuda/", "login that decodes"),
        ("https://:topsecret@mirror.example/cuda/", "both a login and a password"),
        ("https://u:@mirror.example/cuda/", "both a login and a password"),
        ("https://topsecret@mirror.example/cuda/", "both a login and a password"),
        ("https://u:topsecret@/cuda/", "names no host"),
    ],
)
def test_bad_urls_are_refused_naming_the_variable_without_the_password(url, expected):
    result = _apt_auth.split(url, ORIGIN)
    assert result["problem"].startswith(ORIGIN + "=")
    assert expected in result["problem"]
    assert "topsecret" not in result["problem"]
    assert "topsecret" not in result["shown"]
    assert result["auth"] is None and result["url"] == ""


def test_a_url_that_is_not_a_string_is_refused():
    result = _apt_auth.split(["https://mirror.example/"], ORIGIN)
    assert "is not a URL" in result["problem"]


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://u:p@h/x", "https://u:********@h/x"),
        ("https://token@h/x", "https://********@h/x"),
        ("https://u:p/w@d@h/x", "https://u:********@h/x"),
        ("https://h/x", "https://h/x"),
        ("not a url", "not a url"),
    ],
)
def test_masking_covers_passwords_tokens_and_unencoded_characters(url, shown):
    assert _apt_auth.masked(url) == shown


def test_the_filter_adds_the_auth_file_text_only_with_credentials():
    assert repository_url("https://mirror.example/cuda/", ORIGIN)["auth_conf"] == ""
    assert "password pw\n" in repository_url("https://u:pw@mirror.example/cuda/", ORIGIN)["auth_conf"]
    with pytest.raises(AnsibleFilterError):
        repository_url("https://mirror.example/cuda/", "")
