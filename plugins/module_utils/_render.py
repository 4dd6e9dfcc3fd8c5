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
import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


def check_text(value, origin):
    """Return value as a string; refuse control characters (newlines, tabs, NUL, ESC, ...)."""
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, tuple)):
        raise ValueError("%s=%r must be a string or a number" % (origin, value))
    text = str(value)
    bad = _CONTROL.search(text)
    if bad:
        raise ValueError(
            "%s=%r contains the control character %r; newlines and other control characters are "
            "refused because the value is written into a file another program parses" % (origin, text, bad.group())
        )
    return text


def env_line(name, value, origin):
    """NAME="value" for a systemd EnvironmentFile (no variable or specifier expansion there)."""
    if not isinstance(name, str) or not ENV_NAME.match(name):
        raise ValueError(
            "%s: %r is not an environment variable name (letters, digits and _, not starting with a digit)"
            % (origin, name)
        )
    text = check_text(value, "%s.%s" % (origin, name))
    return '%s="%s"' % (name, text.replace("\\", "\\\\").replace('"', '\\"'))


def env_file(mapping, origin):
    """The lines of an EnvironmentFile, sorted by name; raises on the first bad entry."""
    if not isinstance(mapping, dict):
        raise ValueError("%s must be a mapping of variable names to values, got %r" % (origin, mapping))
    return [env_line(name, mapping[name], origin) for name in sorted(mapping)]


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


def _port(value):
    text = str(value)
    if isinstance(value, bool) or not re.match(r"^[0-9]{1,5}\Z", text) or not 1 <= int(text) <= 65535:
        return "is not a TCP port: use 1..65535"
    return None


def _file_name(value):
    text = str(value)
    if not text or text in (".", "..") or "/" in text or _CONTROL.search(text):
        return "is not a file name: no '/', no control characters, not empty, '.' or '..'"
    return None


def _text(value):
    return (
        "contains a control character (a newline starts a new line in the file)"
        if _CONTROL.search(str(value))
        else None
    )


KINDS = {"ip": ip_problem, "port": _port, "file_name": _file_name, "text": _text}


def input_problems(checks):
    """One message per failing [kind, variable name, value] check, each naming the variable and the
    value; kinds: ip (one IP address), port (1..65535), file_name (one path component), text (no
    control characters)."""
    problems = []
    for check in checks:
        if not isinstance(check, (list, tuple)) or len(check) != 3 or check[0] not in KINDS:
            raise ValueError(
                "input_problems: each check is [kind, name, value] with kind one of %s, got %r"
                % (", ".join(KINDS), check)
            )
        kind, name, value = check
        problem = KINDS[kind](value)
        if problem:
            problems.append("%s=%r %s" % (name, value, problem))
    return problems
