"""A TCP connect scan of every port of one address, from a lab host (stdlib only).

    python3 port_scan.py ADDRESS [TIMEOUT]   -> JSON {"open": [...], "scanned": 65535}

A port is open when a connection is accepted; refused and silently dropped (timeout) ports are
closed to this client. Non-blocking sockets in large batches keep a full scan to seconds even
where the firewall drops (the lab network answers an accepted SYN in well under a millisecond).
"""

import errno
import json
import resource
import selectors
import socket
import sys
import time

address = sys.argv[1]
timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
limit = hard if hard != resource.RLIM_INFINITY else 65536
resource.setrlimit(resource.RLIMIT_NOFILE, (min(limit, 65536), hard))
batch = max(256, min(limit, 65536) - 64)
family = socket.AF_INET6 if ":" in address else socket.AF_INET
open_ports = []
for start in range(1, 65536, batch):
    selector = selectors.DefaultSelector()
    for port in range(start, min(start + batch, 65536)):
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        if sock.connect_ex((address, port)) in (0, errno.EINPROGRESS):
            selector.register(sock, selectors.EVENT_WRITE, port)
        else:
            sock.close()
    deadline = time.monotonic() + timeout
    while selector.get_map() and time.monotonic() < deadline:
        for key, _ in selector.select(max(0.0, deadline - time.monotonic())):
            sock = key.fileobj
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                open_ports.append(key.data)
            selector.unregister(sock)
            sock.close()
    for key in list(selector.get_map().values()):
        key.fileobj.close()
    selector.close()
print(json.dumps({"address": address, "open": sorted(open_ports), "scanned": 65535}))
