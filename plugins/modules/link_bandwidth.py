#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""One end of a TCP bandwidth test between two hosts, with iperf3 or a built-in Python engine."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: link_bandwidth
short_description: Measure TCP bandwidth between two hosts with iperf3 or a built-in engine
version_added: 0.1.0
description:
  - Runs one end of a TCP bandwidth test. O(mode=server) accepts exactly one test, or gives up
    after O(timeout) seconds, and exits; O(mode=client) runs the test against it.
  - With the C(iperf3) backend it runs C(iperf3 -J) and reads its JSON. iperf3 3.11 to 3.13 exit 0
    when a test fails, so the JSON's C(error) key decides, not the exit code.
  - The C(python) backend needs nothing on the host but Python. It runs one process per stream,
    sends with C(sendfile) from a memory file when O(zerocopy) is on and the kernel allows it, and
    counts received bytes without copying them where the kernel can (C(MSG_TRUNC)). It speaks its
    own protocol on O(port) only, so both ends must use the same backend.
  - The receiver's byte counts are authoritative. Both ends return figures; the client's are the
    test's result, the server's are what it saw.
  - Link speed comes from O(link_speed_mbps), or from sysfs for O(interface), or for the interface
    that holds O(bind) (on a client without O(bind), the source address of the route to O(peer)).
  - It never changes the host.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  mode:
    description: Which end of the test to run.
    type: str
    required: true
    choices: [server, client]
  backend:
    description:
      - C(iperf3) or the built-in C(python) engine; C(auto) uses iperf3 when O(iperf3_path) is found.
      - Both ends must use the same backend. Set it explicitly when some hosts may lack iperf3.
    type: str
    choices: [auto, iperf3, python]
    default: auto
  iperf3_path:
    description: Name or path of the iperf3 binary. iperf3 3.7 or later is needed (C(--bidir)).
    type: str
    default: iperf3
  port:
    description: TCP port the server listens on and the client connects to; the python engine uses no other.
    type: int
    default: 5201
  bind:
    description:
      - Address to listen on (server; all addresses when omitted) or to send from (client).
      - Also selects the interface whose speed is read, when O(interface) is omitted.
    type: str
  peer:
    description: Address or name of the server. Required when O(mode=client).
    type: str
  duration:
    description:
      - Seconds to transmit (client).
      - On a server it only bounds its lifetime (it is killed after O(timeout) + O(duration) + 30 s);
        the test runs for the client's value.
    type: int
    default: 10
  streams:
    description: Parallel TCP streams per direction (client).
    type: int
    default: 4
  direction:
    description:
      - C(forward) the client sends to the server, C(reverse) the server sends, C(bidir) both at once (client).
    type: str
    choices: [forward, reverse, bidir]
    default: forward
  timeout:
    description:
      - Server, seconds to wait for the one test before failing.
      - Client, seconds to keep retrying while the server is not listening yet or is still busy.
    type: int
    default: 60
  link_speed_mbps:
    description: Link speed in Mbit/s to compare with; overrides sysfs (use it for bonds or virtual links).
    type: int
  interface:
    description: Network interface whose speed is read from C(<sysfs_root>/class/net/<interface>/speed).
    type: str
  sysfs_root:
    description: Root of sysfs. A seam for tests.
    type: path
    default: /sys
  buffer_size:
    description:
      - Bytes per send and receive call of the python engine. 1 MiB keeps the per-call cost of Python
        negligible at 100 Gbit/s; the client's value is used on both ends.
    type: int
    default: 1048576
  zerocopy:
    description:
      - Whether the python engine sends with C(sendfile) (zero copy) when the kernel allows it.
        The client's value is used on both ends.
      - Over loopback it was slower than plain C(send), as iperf3's C(-Z) is.
    type: bool
    default: true
notes:
  - Start the server first (with C(async) and C(poll=0)) and then the client; the client retries for
    O(timeout) seconds, so their order within that window does not matter.
  - An iperf3 server runs one test at a time and iperf3 before 3.16 drives all streams from one thread,
    so one core limits it; the python engine uses one process per stream.
  - It runs in check mode too; it changes nothing.
"""

EXAMPLES = r"""
- name: Serve one bandwidth test on the fabric address
  gpufleet.inference.link_bandwidth:
    mode: server
    bind: "{{ fabric_address }}"
    timeout: 120
  async: 200
  poll: 0
  register: __link_bandwidth_server

- name: Measure bandwidth to the server, both directions at once
  gpufleet.inference.link_bandwidth:
    mode: client
    peer: "{{ hostvars[peer_host]['fabric_address'] }}"
    bind: "{{ fabric_address }}"
    direction: bidir
    streams: 8
    duration: 10
  register: __link_bandwidth

- name: Measure with the built-in engine against a known 100G link
  gpufleet.inference.link_bandwidth:
    mode: client
    backend: python
    peer: 10.10.0.2
    link_speed_mbps: 100000
"""

RETURN = r"""
backend:
  description: The backend that ran the test.
  returned: success
  type: str
  sample: iperf3
mode:
  description: O(mode).
  returned: success
  type: str
direction:
  description: Direction of the test, as the client asked for it.
  returned: success
  type: str
  sample: forward
duration:
  description: Seconds the test transmitted, as the client asked for it.
  returned: success
  type: int
streams:
  description: Parallel streams per direction.
  returned: success
  type: int
bits_per_second:
  description: Throughput counted by the receivers, summed over the streams; for C(bidir) the sum of both directions.
  returned: success
  type: float
  sample: 94012345678.9
sent_bits_per_second:
  description: For C(bidir), the direction this host sent in.
  returned: success and direction is bidir
  type: float
received_bits_per_second:
  description: For C(bidir), the direction this host received in.
  returned: success and direction is bidir
  type: float
per_stream:
  description:
    - One entry per stream, with C(bits_per_second), C(retransmits) (null when unknown) and C(direction)
      (C(forward) means client to server).
  returned: success
  type: list
  elements: dict
  sample: [{"bits_per_second": 23500000000.0, "retransmits": 0, "direction": "forward"}]
retransmits:
  description:
    - TCP retransmits of the senders.
    - Null when not known for every direction, as on an iperf3 server that received.
  returned: success
  type: int
interface:
  description: The interface whose speed was read; null when none was given or found.
  returned: success
  type: str
link_speed_mbps:
  description:
    - Link speed in Mbit/s, from O(link_speed_mbps) or sysfs.
    - Null when unknown; sysfs says -1 on virtual links and on links that are down.
  returned: success
  type: int
fraction_of_link:
  description:
    - RV(bits_per_second) over the link speed; for C(bidir) over twice the speed, as the link is full duplex.
    - Null when the speed is unknown.
  returned: success
  type: float
  sample: 0.94
local_address:
  description:
    - This host's address on the test connection; a client given O(bind) sends from it.
    - Null when iperf3 did not report it.
  returned: success
  type: str
  sample: 10.10.0.1
remote_address:
  description:
    - The other end's address on the test connection; on a server, the address the client sent from.
    - Null when iperf3 did not report it.
  returned: success
  type: str
  sample: 10.10.0.2
iperf3_version:
  description: Version iperf3 reported.
  returned: success and backend is iperf3
  type: str
  sample: "3.12"
zerocopy:
  description: Whether every sender of the python engine used C(sendfile).
  returned: success and backend is python
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._link_bandwidth import (
    MAX_STREAMS,
    LinkBandwidthError,
    fraction_of_link,
    interface_for_address,
    iperf3_client,
    iperf3_server,
    read_link_speed,
    run_client,
    serve_once,
    source_address_for,
)


def check_ranges(module, params):
    problems = []
    if not 0 < params["port"] < 65536:
        problems.append("port=%d is not a TCP port; use 1..65535" % params["port"])
    if not 1 <= params["streams"] <= MAX_STREAMS:
        problems.append("streams=%d is out of range; use 1..%d" % (params["streams"], MAX_STREAMS))
    if params["duration"] < 1:
        problems.append("duration=%d must be at least 1 second" % params["duration"])
    if params["timeout"] < (1 if params["mode"] == "server" else 0):
        problems.append("timeout=%d is too small for a %s" % (params["timeout"], params["mode"]))
    if params["buffer_size"] < 1024:
        problems.append("buffer_size=%d is too small; use at least 1024 bytes" % params["buffer_size"])
    if params["link_speed_mbps"] is not None and params["link_speed_mbps"] < 1:
        problems.append("link_speed_mbps=%d must be positive; omit it to read sysfs" % params["link_speed_mbps"])
    if problems:
        module.fail_json(msg="; ".join(problems))


def run_test(params, backend, iperf3):
    if params["mode"] == "client":
        args = (params["peer"], params["port"], params["duration"], params["streams"], params["direction"])
        if backend == "iperf3":
            return iperf3_client(iperf3, *args, timeout=params["timeout"], bind=params["bind"])
        return run_client(
            *args,
            timeout=params["timeout"],
            bind=params["bind"],
            buffer_size=params["buffer_size"],
            zerocopy=params["zerocopy"],
        )
    if backend == "iperf3":
        return iperf3_server(iperf3, params["port"], params["timeout"], params["duration"], bind=params["bind"])
    return serve_once(params["port"], params["timeout"], bind=params["bind"])


def link_speed(params):
    """(interface, speed in Mbit/s) for the fraction of link; either may be None."""
    interface = params["interface"]
    if not interface:
        address = params["bind"]
        if not address and params["mode"] == "client":
            address = source_address_for(params["peer"], params["port"])
        interface = interface_for_address(address)
    if params["link_speed_mbps"]:
        return interface, params["link_speed_mbps"]
    return interface, read_link_speed(params["sysfs_root"], interface) if interface else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", required=True, choices=["server", "client"]),
            backend=dict(type="str", default="auto", choices=["auto", "iperf3", "python"]),
            iperf3_path=dict(type="str", default="iperf3"),
            port=dict(type="int", default=5201),
            bind=dict(type="str"),
            peer=dict(type="str"),
            duration=dict(type="int", default=10),
            streams=dict(type="int", default=4),
            direction=dict(type="str", default="forward", choices=["forward", "reverse", "bidir"]),
            timeout=dict(type="int", default=60),
            link_speed_mbps=dict(type="int"),
            interface=dict(type="str"),
            sysfs_root=dict(type="path", default="/sys"),
            buffer_size=dict(type="int", default=1048576),
            zerocopy=dict(type="bool", default=True),
        ),
        required_if=[("mode", "client", ["peer"])],
        supports_check_mode=True,
    )
    params = module.params
    check_ranges(module, params)

    backend = params["backend"]
    iperf3 = None
    if backend in ("auto", "iperf3"):
        iperf3 = module.get_bin_path(params["iperf3_path"])
        if iperf3 is None and backend == "iperf3":
            module.fail_json(
                msg="iperf3 not found as %r; install iperf3 (3.7 or later), set iperf3_path, "
                "or use backend=python on both ends" % params["iperf3_path"]
            )
        backend = "iperf3" if iperf3 else "python"

    if params["mode"] == "client":
        where = "client to %s:%d" % (params["peer"], params["port"])
    else:
        where = "server on %s:%d" % (params["bind"] or "*", params["port"])
    try:
        result = run_test(params, backend, iperf3)
    except LinkBandwidthError as exc:
        module.fail_json(msg="link_bandwidth %s (%s) failed: %s" % (where, backend, exc), **exc.details)
    except (IOError, OSError) as exc:
        module.fail_json(msg="link_bandwidth %s (%s) failed: %s" % (where, backend, exc))

    interface, speed = link_speed(params)
    result.update(
        changed=False,
        backend=backend,
        interface=interface,
        link_speed_mbps=speed,
        fraction_of_link=fraction_of_link(result, speed),
    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
