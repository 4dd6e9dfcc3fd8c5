# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Validation and quoting of values that end up in files other programs parse.

One place for the rules, so a value that reaches a systemd unit, an EnvironmentFile or an
nftables rule is checked the same way everywhere:

* control characters (newlines included) are refused: one embedded newline in a unit file is
  a new directive (``ExecStartPre=+...`` runs as root);
* quoting follows the target format: the EnvironmentFile rules (``systemd.exec(7)``,
  ``EnvironmentFile=``: double-quoted values, backslash escapes, no expansion), and the command
  lines of ``systemd.service(5)`` (``ExecStart=``: quoted words, ``%%`` and ``$$``).

Every function raises ValueError with a message that names the variable (``origin``), the value
and what is allowed, so callers can pass it on unchanged.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import math
import re

from ansible_collections.gpufleet.inference.plugins.module_utils import _apt_auth

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
# Environment names whose value is a credential by convention (HF_TOKEN, AWS_SECRET_ACCESS_KEY,
# WANDB_API_KEY, PGPASSWORD, ...): their values are never shown in a message and go to a file
# that is neither logged nor diffed.
SECRET_NAME = re.compile(r"(?i)(TOKEN|SECRET|PASSW(OR)?D|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH)")


def check_text(value, origin, secret=False):
    """Return value as a string; refuse control characters (newlines, tabs, NUL, ESC, ...).
    With secret, a refusal says how long the value is instead of showing it."""
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, tuple)):
        raise ValueError("%s=%s must be a string or a number" % (origin, _hidden(value) if secret else repr(value)))
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        raise ValueError(
            "%s=%s contains the control character %r; newlines and other control characters are "
            "refused because the value is written into a file another program parses"
            % (origin, _hidden(text) if secret else repr(text), bad.group())
        )
    return text


def _hidden(value):
    return "<a secret of %d characters, not shown>" % len(str(value))


def env_line(name, value, origin):
    """NAME="value" for a systemd EnvironmentFile (no variable or specifier expansion there)."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise ValueError(
            "%s: %r is not an environment variable name (letters, digits and _, not starting with a digit)"
            % (origin, name)
        )
    text = check_text(value, "%s.%s" % (origin, name), secret=bool(SECRET_NAME.search(name)))
    return '%s="%s"' % (name, text.replace("\\", "\\\\").replace('"', '\\"'))


PARTS = ("all", "public", "secret")


def env_file(mapping, origin, part="all"):
    """The lines of an EnvironmentFile, sorted by name; raises on the first bad entry. part
    "public" keeps the names SECRET_NAME does not match, "secret" only those; every entry is
    checked whichever part is kept."""
    if not isinstance(mapping, dict):
        raise ValueError("%s must be a mapping of variable names to values, got %r" % (origin, mapping))
    if part not in PARTS:
        raise ValueError("env_file: part must be one of %s, got %r" % (", ".join(PARTS), part))
    lines = [env_line(name, mapping[name], origin) for name in sorted(mapping)]
    if part == "all":
        return lines
    return [line for line in lines if bool(SECRET_NAME.search(line.partition("=")[0])) == (part == "secret")]


def exec_word(value, origin):
    """One word of a systemd ExecStart= command line (systemd.service(5), "Command lines"),
    always double-quoted: backslash and double quote are escaped (the line is C-unescaped inside
    quotes), ``%`` becomes ``%%`` (specifiers) and ``$`` becomes ``$$`` (environment variable
    substitution), so the program receives the value unchanged. A quoted ``;`` is a plain word,
    not the command separator."""
    text = check_text(value, origin)
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")


def exec_line(argv, origin):
    """A whole ExecStart= value: the absolute path of the program, then its arguments, every word
    quoted by exec_word. The path is quoted too, so no prefix character (``-``, ``+``, ``!``, ``@``,
    ``:``) can be smuggled in front of it."""
    if not isinstance(argv, (list, tuple)) or not argv:
        raise ValueError("%s must be a non-empty list: the program, then its arguments, got %r" % (origin, argv))
    program = check_text(argv[0], "%s[0]" % origin)
    if not program.startswith("/"):
        raise ValueError("%s[0]=%r must be the absolute path of the program" % (origin, program))
    return " ".join(exec_word(word, "%s[%d]" % (origin, index)) for index, word in enumerate(argv))


def ip_problem(value):
    """None for one IPv4 or IPv6 address, else what is wrong with the value."""
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return "is not an IP address"
    return None


def _port(value, options):
    text = str(value)
    low = options.get("min", 1)
    if isinstance(value, bool) or not re.match(r"^[0-9]{1,5}\Z", text) or not low <= int(text) <= 65535:
        if low > 1:
            return "is not a TCP port of %d..65535 (%s)" % (low, options.get("why", "below %d is reserved" % low))
        return "is not a TCP port: use 1..65535"
    return None


def _file_name(value, options):
    text = str(value)
    if not text or text in (".", "..") or "/" in text or _CONTROL.search(text):
        return "is not a file name: no '/', no control characters, not empty, '.' or '..'"
    return None


def _text(value, options):
    if isinstance(value, (dict, list, tuple)):
        return "must be a string, not a %s" % type(value).__name__
    return (
        "contains a control character (a newline starts a new line in the file)"
        if _CONTROL.search(str(value))
        else None
    )


def _int(value, options):
    """A whole number in [min, max] (default 0 .. 2**31-1), given as a number or its digits."""
    low, high = options.get("min", 0), options.get("max", 2**31 - 1)
    text = str(value).strip()
    whole = not isinstance(value, (bool, float)) and re.match(r"^-?[0-9]{1,12}\Z", text)
    if not whole or not low <= int(text) <= high:
        return "must be a whole number from %d to %d%s" % (low, high, _why(options))
    return None


def _seconds(value, options):
    """A number of seconds above 0 (fractions allowed), at most max (default a week): a zero,
    negative, NaN or infinite timeout or interval is never what was meant."""
    high = options.get("max", 7 * 86400)
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not (0 < number <= high):  # False for NaN
        return "must be a number of seconds above 0 and at most %s%s" % (_number(high), _why(options))
    return None


def _abs_path(value, options):
    """An absolute path that can stand unquoted in a unit file or a command line."""
    text = str(value)
    if isinstance(value, (bool, dict, list, tuple)) or not _ABS_PATH.match(text) or "/../" in text + "/":
        return (
            "must be an absolute path of letters, digits and ._+@:/- without '..' (it is written into files "
            "other programs parse)"
        )
    return None


def _user(value, options):
    text = str(value)
    if isinstance(value, (bool, dict, list, tuple)) or not _USER.match(text):
        return "is not a user name: a lowercase letter or _, then up to 31 lowercase letters, digits, _ or -"
    return None


def _network(value, options):
    """An IP network written with its host bits clear (10.0.0.0/8), or one address."""
    try:
        ipaddress.ip_network(str(value), strict=True)
    except ValueError:
        try:
            network = ipaddress.ip_network(str(value), strict=False)
        except ValueError:
            return "is not an IP address or network such as 10.0.0.0/8"
        return "has host bits set: write the network as %s (or one address as %s/%d)" % (
            network,
            str(value).split("/", maxsplit=1)[0],
            network.max_prefixlen,
        )
    return None


def _url(value, options):
    schemes = options.get("schemes", ["http", "https"])
    text = str(value)
    scheme, sep, rest = text.partition("://")
    if isinstance(value, (bool, dict, list, tuple)) or not sep or scheme not in schemes or not rest.strip("/"):
        return "is not a URL of scheme %s" % " or ".join("%s://" % name for name in schemes)
    if re.search(r"[\x00-\x20\x7f]", text):
        return "contains a space or a control character; percent-encode it (%20)"
    return None


def _regex(value, options):
    if not isinstance(value, str):
        return "must be a regular expression as a string"
    try:
        re.compile(value)
    except re.error as exc:
        return "is not a regular expression (%s); escape literal characters with \\" % exc
    return None


def _serial(value, options):
    """A play's serial: a batch size (a whole number >= 1 or a percentage 1%..100%), or a list of
    them for growing batches. Ansible reads 0 and negative numbers as one batch of every host, and
    fails with a traceback on text."""
    items = value if isinstance(value, list) and value else [value]
    for item in items:
        text = str(item).strip()
        if isinstance(item, (bool, float, dict, list)) or not re.match(
            r"^([1-9][0-9]{0,5}|([1-9][0-9]?|100)%)\Z", text
        ):
            return (
                "is not a batch size: give a whole number of hosts >= 1, a percentage such as 20%, or a list of "
                "them such as [1, '50%', '100%']"
            )
    return None


def _why(options):
    return " (%s)" % options["why"] if options.get("why") else ""


def _number(value):
    return ("%d" % value) if float(value).is_integer() else ("%s" % value)


_BATCH = re.compile(r"^([1-9][0-9]{0,5}|([1-9][0-9]?|100)%)\Z")
_ABS_PATH = re.compile(r"^/[A-Za-z0-9._+@:/-]*\Z")
# shadow-utils' default NAME_REGEX without the trailing $ of machine accounts, at most 32 characters.
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}\Z")

KINDS = {
    "ip": lambda value, options: ip_problem(value),
    "port": _port,
    "file_name": _file_name,
    "text": _text,
    "int": _int,
    "seconds": _seconds,
    "abs_path": _abs_path,
    "user": _user,
    "network": _network,
    "url": _url,
    "regex": _regex,
    "serial": _serial,
}


def kind_problem(kind, value, options=None):
    """What is wrong with one value of a kind (the text after the variable and the value in an
    input_problems message), or None: for callers that word the rest of the message themselves."""
    return KINDS[kind](value, options or {})


# Ansible's and Jinja's own coercions, for rules that read a value as the roles' templates did.
_BOOL_TRUE = ("yes", "on", "true", "1")


def ansible_bool(value):
    """Ansible's ``| bool`` (ansible-core 2.19, plugins/filter/core.py to_bool): yes, on, true and
    1 in any case, True and the number 1 are true; anything else is false."""
    if isinstance(value, str):
        return value.lower() in _BOOL_TRUE
    if isinstance(value, int):  # True and False too
        return str(value).lower() in _BOOL_TRUE
    try:
        return value == 1
    except TypeError:
        return False


def jinja_int(value, default=0):
    """Jinja's ``| int``: whole numbers, numbers written as text, the whole part of a float;
    anything else is the default."""
    try:
        return int(value, 10) if isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        try:
            return int(float(value))
        except (TypeError, ValueError, OverflowError):
            return default


def shown(value):
    """A value as a message shows it: repr, with the password of any URL inside replaced by
    ********, so a refusal never prints a credential."""
    return _apt_auth.masked(repr(value)) if isinstance(value, str) else repr(value)


def input_problems(checks):
    """One message per failing [kind, variable name, value] or [kind, name, value, options] check,
    each naming the variable and the value (a URL's password masked) and what is allowed.

    Kinds: ip (one IP address), port (1..65535, options min and why), file_name (one path
    component), text (no control characters), int (options min, max, why; default 0..2**31-1),
    seconds (above 0, option max, default a week), abs_path (an absolute path that needs no
    quoting), user (a POSIX user name), network (an IP network with its host bits clear, or one
    address), url (option schemes, default http and https), regex (a Python regular expression),
    serial (a play's batch size: a whole number >= 1, a percentage or a list of them)."""
    problems = []
    for check in checks:
        if (
            not isinstance(check, (list, tuple))
            or len(check) not in (3, 4)
            or check[0] not in KINDS
            or (len(check) == 4 and not isinstance(check[3], dict))
        ):
            raise ValueError(
                "input_problems: each check is [kind, name, value] or [kind, name, value, options] with kind "
                "one of %s, got %r" % (", ".join(KINDS), check)
            )
        kind, name, value = check[:3]
        problem = KINDS[kind](value, check[3] if len(check) == 4 else {})
        if problem:
            problems.append("%s=%s %s" % (name, shown(value), problem))
    return problems
