# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpufleet-unit-ctl: the forced command of the front doors' restart key on a serving node.

sshd runs this program instead of whatever the client asked for, and puts the client's request
in SSH_ORIGINAL_COMMAND (sshd(8), AUTHORIZED_KEYS FILE FORMAT, command="..."). The request must
be exactly one of

    start UNIT | stop UNIT | is-active UNIT

with UNIT listed in /etc/gpufleet/unit-ctl/units (one unit per line, # comments), written by the
gpufleet.inference.frontdoor role (tasks_from node_access). The request is never given to a shell:
systemctl runs with an argument list. Anything else exits 2 with a message on stderr and a line in
syslog (facility auth, like sshd). systemctl's output and exit status are passed on, so
`is-active` prints the state and exits 0 for an active unit, 3 for an inactive one (systemctl(1)).

Python 3.8+, standard library only.
"""

import os
import re
import subprocess
import sys

try:
    import syslog
except ImportError:  # not on every platform; the refusal still goes to stderr
    syslog = None

# Constants, not environment variables: this runs as root for a remote client, and sshd may be
# configured to pass the client's environment on (AcceptEnv). The tests replace them.
UNITS_FILE = "/etc/gpufleet/unit-ctl/units"
SYSTEMCTL = "/usr/bin/systemctl"
ACTIONS = ("start", "stop", "is-active")
UNIT = re.compile(r"^[A-Za-z0-9:_.@-]+\.(service|target)$")
REFUSED = 2


def log(message, priority="info"):
    """One line in syslog; the refusal must be seen even when stderr goes nowhere."""
    if syslog is None:
        return
    try:
        syslog.openlog("gpufleet-unit-ctl", 0, syslog.LOG_AUTH)
        syslog.syslog(syslog.LOG_WARNING if priority == "warning" else syslog.LOG_INFO, message)
    except OSError:
        pass


def allowed_units(path=None):
    path = path or UNITS_FILE
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return set()
    return {line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")}


def parse(request, units):
    """(action, unit) for an allowed request, or raise ValueError saying why not."""
    words = (request or "").split(" ")
    if not request:
        raise ValueError("no command: this key runs only 'start UNIT', 'stop UNIT' or 'is-active UNIT'")
    if len(words) != 2 or words[0] not in ACTIONS:
        raise ValueError(f"refused {request[:200]!r}: this key runs only 'start UNIT', 'stop UNIT' or 'is-active UNIT'")
    action, unit = words
    if not UNIT.fullmatch(unit) or unit not in units:
        raise ValueError(
            "refused {!r}: {} is not a unit this node serves ({})".format(
                request[:200], unit[:100], ", ".join(sorted(units)) or "none listed in " + UNITS_FILE
            )
        )
    return action, unit


def main(environ=None, run=subprocess.call):
    environ = os.environ if environ is None else environ
    request = environ.get("SSH_ORIGINAL_COMMAND", "")
    client = (environ.get("SSH_CLIENT", "") or "?").split(" ")[0]
    try:
        action, unit = parse(request, allowed_units())
    except ValueError as exc:
        log(f"from {client}: {exc}", "warning")
        sys.stderr.write(f"gpufleet-unit-ctl: {exc}\n")
        return REFUSED
    if action != "is-active":
        log(f"from {client}: {action} {unit}")
    try:
        return run([SYSTEMCTL, action, unit])
    except OSError as exc:
        sys.stderr.write(f"gpufleet-unit-ctl: cannot run {SYSTEMCTL}: {exc}\n")
        return 1


if __name__ == "__main__":
    sys.exit(main())
