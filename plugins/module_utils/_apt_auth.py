# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Repository URLs that carry credentials (``https://user:password@host/path``), split for apt.

apt reads repository credentials from ``/etc/apt/auth.conf.d/*.conf`` (apt_auth.conf(5),
https://manpages.debian.org/bookworm/apt/apt_auth.conf.5.en.html): whitespace-separated tokens,
``machine [protocol://]host[:port][/path] login NAME password SECRET``, in a file only root
reads. A machine token without a protocol matches https (and tor+https) only, so an http
repository gets ``http://`` in its token. The deb822 source then names the URL without the
credentials and stays world-readable, and every message shows the password as ``********``.

The URL is checked whole first: no control characters and no spaces (a newline in a deb822
field starts a new field, such as ``Signed-By:``). Credentials in the URL are percent-decoded
(RFC 3986 section 2.1: ``@`` is ``%40``, ``/`` is ``%2F``), as apt and curl decode them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from urllib.parse import unquote, urlsplit

MASK = "********"
SCHEMES = ("http", "https", "file")
# Control characters, space and DEL: each one ends a token of auth.conf or a field of deb822.
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")


def masked(url):
    """The URL as a message may show it: the password, or a login given without one (a token),
    replaced by ********. Works on any text, also one that is not a valid URL."""
    text = str(url)
    head, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    # The last "@" ends the credentials, also where a password holds an unencoded "/" or "@".
    userinfo, _at, tail = rest.rpartition("@")
    login, colon, _password = userinfo.partition(":")
    return "%s://%s@%s" % (head, login + ":" + MASK if colon else MASK, tail)


def _url_problem(url, parts):
    """What is wrong with the URL as a whole, or an empty string."""
    bad = _UNSAFE.search(url)
    if bad:
        return (
            "contains %r: spaces, newlines and other control characters are refused (a newline adds a "
            "field to the apt source); percent-encode them (%%20) or remove them" % bad.group()
        )
    if parts.scheme not in SCHEMES or not url.startswith(parts.scheme + "://"):
        return "is not an http://, https:// or file:// URL"
    if "@" not in parts.netloc and "@" in url:
        return "has an '@' after the host; percent-encode '/', '?', '#' and '@' in a password (%2F, %3F, %23, %40)"
    if "@" in parts.netloc and parts.scheme == "file":
        return "is a file:// URL with credentials; remove 'login:password@'"
    return ""


def _credentials_problem(parts):
    """What is wrong with the credentials of the URL, or an empty string."""
    userinfo, _at, hostport = parts.netloc.rpartition("@")
    login, colon, password = userinfo.partition(":")
    if not hostport:
        return "names no host after the credentials"
    if not colon or not login or not password:
        return "needs both a login and a password in its credentials: https://LOGIN:PASSWORD@host/path"
    for name, value in (("login", unquote(login)), ("password", unquote(password))):
        if _UNSAFE.search(value):
            return (
                "has a %s that decodes to a space or a control character, which apt's auth.conf.d cannot hold "
                "(its tokens are separated by whitespace); use another %s" % (name, name)
            )
    return ""


def split(url, origin):
    """Split a repository URL into what the deb822 source may hold and what apt's auth file holds.

    Returns a dict: ``url`` (without credentials), ``shown`` (for messages), ``auth`` (None, or
    ``machine``, ``login`` and ``password`` for auth.conf.d) and ``problem`` (an empty string, or
    one line that names ``origin``, shows the URL masked and says what to fix)."""
    if not isinstance(url, str):
        problem = "%s=%r is not a URL: give a string such as https://mirror.example/repo/" % (origin, url)
        return {"url": "", "shown": repr(url), "auth": None, "problem": problem}
    shown = masked(url)
    parts = urlsplit(url)
    what = _url_problem(url, parts) or ("@" in parts.netloc and _credentials_problem(parts))
    if what:
        # repr() only where it is needed to make a newline or a tab visible.
        problem = "%s=%s %s" % (origin, repr(shown) if _UNSAFE.search(shown) else shown, what)
        return {"url": "", "shown": shown, "auth": None, "problem": problem}
    if "@" not in parts.netloc:
        return {"url": url, "shown": shown, "auth": None, "problem": ""}
    userinfo, _at, hostport = parts.netloc.rpartition("@")
    login, _colon, password = userinfo.partition(":")
    path = parts.path
    # apt substitutes $(ARCH) before it looks the credentials up: match the prefix before it.
    if "$(" in path:
        path = path[: path.index("$(")]
    machine = hostport + path
    return {
        "url": "%s://%s" % (parts.scheme, url[len(parts.scheme) + 3 + len(userinfo) + 1 :]),
        "shown": shown,
        "auth": {
            "machine": machine if parts.scheme == "https" else parts.scheme + "://" + machine,
            "login": unquote(login),
            "password": unquote(password),
        },
        "problem": "",
    }


_HEADER = "# Managed by gpufleet.inference: the credentials of one apt repository (apt_auth.conf(5)).\n"


def auth_conf(auth):
    """The text of an /etc/apt/auth.conf.d file for one split() ``auth``."""
    return _HEADER + "machine %s\nlogin %s\npassword %s\n" % (auth["machine"], auth["login"], auth["password"])
