# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NIC ring buffers and channels: parse `ethtool -g` / `ethtool -l`, plan `ethtool -G` / `ethtool -L`.

Facts the code relies on (captures in tests/unit/plugins/module_utils/fixtures/ethtool/):
- Both outputs have a "Pre-set maximums:" block and a "Current hardware settings:" block. ethtool
  before the netlink interface printed 0 for a parameter the driver lacks; netlink ethtool prints
  "n/a". Either way a maximum of 0 or n/a means the driver does not offer that parameter, while a
  current value of 0 can be real (ice reports RX 0 / TX 0 channels next to Combined 4).
- Newer ethtool adds lines such as "RX Buf Len", "CQE Size", "TX Push", "TCP data split", also
  inside the maximums block ("TX push buff len"); they are ignored here.
- A driver without the callback makes ethtool exit non-zero with "Operation not supported":
  "netlink error: Operation not supported" (netlink, veth for -g) or "Cannot get device channel
  parameters\\n: Operation not supported" (ioctl era).
- Syntax (ethtool(8)): -G|--set-ring devname [rx N] [rx-mini N] [rx-jumbo N] [tx N];
  -L|--set-channels devname [rx N] [tx N] [other N] [combined N].
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The model's keys are the ethtool -G/-L argument names, so a plan turns into argv unchanged.
RING_LABELS = (("RX", "rx"), ("RX Mini", "rx-mini"), ("RX Jumbo", "rx-jumbo"), ("TX", "tx"))
CHANNEL_LABELS = (("RX", "rx"), ("TX", "tx"), ("Other", "other"), ("Combined", "combined"))

KINDS = {
    # kind: (labels, read flag, write flag, smallest value a request may ask for)
    # A ring of 0 descriptors is meaningless; 0 channels of one type is how rx/tx-only channels
    # are turned off in favour of combined ones.
    "rings": (RING_LABELS, "-g", "-G", 1),
    "channels": (CHANNEL_LABELS, "-l", "-L", 0),
}

MAX_HEADER = "Pre-set maximums:"
CURRENT_HEADER = "Current hardware settings:"
NOT_SUPPORTED = "Operation not supported"


class EthtoolParseError(ValueError):
    """ethtool printed something this parser does not understand."""


def keys(kind):
    return [key for _label, key in KINDS[kind][0]]


def _number(text, label):
    if text == "n/a":
        return None
    try:
        return int(text)
    except ValueError:
        raise EthtoolParseError("%s: %r is neither a number nor n/a" % (label, text)) from None


def parse(kind, text):
    """{'max': {key: int|None}, 'current': {key: int|None}} from `ethtool -g` (rings) or `-l` (channels)."""
    labels = dict(KINDS[kind][0])
    model = {"max": {}, "current": {}}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if line == MAX_HEADER:
            section = "max"
        elif line == CURRENT_HEADER:
            section = "current"
        elif section and ":" in line:
            label, _sep, value = line.partition(":")
            key = labels.get(label.strip())
            if key:
                model[section][key] = _number(value.strip(), label.strip())
    if not model["max"] or not model["current"]:
        raise EthtoolParseError(
            "no %r and %r blocks with %s lines" % (MAX_HEADER, CURRENT_HEADER, "/".join(sorted(labels)))
        )
    for block in model.values():
        for key in labels.values():
            block.setdefault(key, None)
    return model


def unsupported_reason(rc, stdout, stderr):
    """The driver's refusal as one line when ethtool failed with "Operation not supported", else None."""
    if rc == 0:
        return None
    text = "\n".join(part for part in (stderr, stdout) if part)
    if NOT_SUPPORTED not in text:
        return None
    # The ioctl era splits the message over two lines ("...parameters\n: Operation not supported").
    lines = [line.strip() for line in (stderr or stdout).splitlines() if line.strip()]
    return " ".join(lines).replace(" : ", ": ")


def normalize_request(kind, request):
    """({key: int or 'max'}, problems) from the module option; problems name the option and the value."""
    normalized = {}
    problems = []
    allowed = keys(kind)
    minimum = KINDS[kind][3]
    for key in sorted(request or {}, key=str):
        value = request[key]
        name = "%s.%s" % (kind, key)
        if key not in allowed:
            problems.append("%s is not a %s parameter; use %s" % (name, kind, ", ".join(allowed)))
            continue
        if isinstance(value, str) and value.strip().isdigit():
            # A templated number arrives as a string.
            value = int(value)
        if isinstance(value, str) and value.strip() == "max":
            normalized[key] = "max"
        elif isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
            normalized[key] = value
        else:
            problems.append("%s=%r must be an integer of at least %d or 'max'" % (name, value, minimum))
    return normalized, problems


def request_problems(request, kind, variable):
    """The problems of a request as a role variable gives it (None: nothing asked), each naming
    the variable instead of the module option: the preflight form of normalize_request."""
    if request is None:
        return []
    if not isinstance(request, dict):
        return ["%s must be a dict of %s, got %r" % (variable, ", ".join(keys(kind)), request)]
    _normalized, problems = normalize_request(kind, request)
    # normalize_request names an entry <kind>.<key>; the operator set <variable>.<key>.
    return [variable + problem[len(kind) :] for problem in problems]


def plan(kind, model, request):
    """What to write for one kind, given the parsed model and a normalized request.

    Returns dict(requested={key: int}, changes={key: int}, unsupported=[str], problems=[str]).
    A key the NIC does not offer (maximum 0 or n/a) goes to `unsupported`; a value above the
    maximum goes to `problems`; only keys whose current value differs go to `changes`.
    """
    requested = {}
    changes = {}
    unsupported = []
    problems = []
    for key in keys(kind):
        if key not in request:
            continue
        name = "%s.%s" % (kind, key)
        maximum = model["max"].get(key)
        if not maximum:
            unsupported.append("%s: not supported by the NIC (maximum is %s)" % (name, "n/a" if maximum is None else 0))
            continue
        wanted = maximum if request[key] == "max" else request[key]
        if wanted > maximum:
            problems.append(
                "%s=%d is above the NIC's maximum %d; use at most %d or 'max'" % (name, wanted, maximum, maximum)
            )
            continue
        requested[key] = wanted
        if model["current"].get(key) != wanted:
            changes[key] = wanted
    return dict(requested=requested, changes=changes, unsupported=unsupported, problems=problems)


def read_argv(ethtool, kind, interface):
    return [ethtool, KINDS[kind][1], interface]


def write_argv(ethtool, kind, interface, changes):
    """`ethtool -G|-L IF key N ...` in ethtool's own parameter order, or None when nothing changes."""
    if not changes:
        return None
    argv = [ethtool, KINDS[kind][2], interface]
    for key in keys(kind):
        if key in changes:
            argv += [key, str(changes[key])]
    return argv


def mismatches(kind, model, requested):
    """Requested keys whose current value, re-read after the write, is not the requested one."""
    return [
        "%s.%s is %s, expected %d" % (kind, key, model["current"].get(key), value)
        for key, value in sorted(requested.items())
        if model["current"].get(key) != value
    ]
