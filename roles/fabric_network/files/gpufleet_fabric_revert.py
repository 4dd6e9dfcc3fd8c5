# Managed by gpufleet.inference (fabric_network role).
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Snapshot and revert of the fabric configuration, for gpufleet.inference.fabric_network.

    python3 gpufleet-fabric-revert snapshot STATE_DIR BACKEND LINK... -- FILE...   record links, files
    python3 gpufleet-fabric-revert revert STATE_DIR                                 put them back

The role runs `snapshot` before it writes anything and creates STATE_DIR/armed. A transient
systemd timer runs `revert` after N seconds, and an enabled boot unit runs it at boot while
`armed` exists (a host power-cycled in the window comes back on its old configuration). The role
removes `armed` once every check passed. `revert` runs without Ansible: it restores the saved
files (and removes the new ones), reloads the backend, deletes links the apply created, and puts
back each link's MTU, up state, global addresses and routes as they were. It writes the outcome
into /run/gpufleet-fabric-network.reverted ("ok" or "incomplete: ...").
"""

import json
import os
import shutil
import subprocess
import sys
import time

MARKER = "/run/gpufleet-fabric-network.reverted"
RELOAD = {
    "networkd": [["networkctl", "reload"]],
    "netplan": [["netplan", "apply"]],
}
# Route attributes `ip -j route` prints and `ip route replace` takes back, in that spelling.
ROUTE_KEYS = (("gateway", "via"), ("metric", "metric"), ("table", "table"), ("scope", "scope"), ("prefsrc", "src"))


def ip_json(*args):
    out = subprocess.run(["ip", "-j", *args], check=True, capture_output=True, text=True).stdout
    return json.loads(out or "[]")


def link_state(names):
    """{name: {mtu, up, addresses, routes}} of the links that exist now."""
    links = {entry["ifname"]: entry for entry in ip_json("link", "show")}
    addresses = {entry["ifname"]: entry.get("addr_info", []) for entry in ip_json("address", "show")}
    routes = ip_json("route", "show", "table", "all")
    state = {}
    for name in names:
        if name not in links:
            continue
        state[name] = {
            "mtu": links[name].get("mtu"),
            "up": "UP" in links[name].get("flags", []),
            "addresses": sorted(
                f"{info['local']}/{info['prefixlen']}"
                for info in addresses.get(name, [])
                if info.get("scope") == "global"
            ),
            "routes": sorted(route_argv(route) for route in routes if route.get("dev") == name and route_argv(route)),
        }
    return state


def route_argv(route):
    """The `ip route replace` arguments of a static route, or "" for kernel and dynamic ones."""
    if route.get("protocol") in ("kernel", "dhcp", "ra") or route.get("type", "unicast") != "unicast":
        return ""
    parts = [route.get("dst", "default")]
    for key, word in ROUTE_KEYS:
        if key in route and not (key == "table" and route[key] == "main"):
            parts += [word, str(route[key])]
    return " ".join([*parts, "dev", route["dev"]])


def snapshot(state_dir, backend, links, files):
    now = link_state(links)
    record = {"backend": backend, "time": time.time(), "links": {name: now.get(name) for name in links}, "files": {}}
    backup = os.path.join(state_dir, "backup")
    shutil.rmtree(backup, ignore_errors=True)
    os.makedirs(backup)
    for index, path in enumerate(files):
        if os.path.exists(path):
            saved = os.path.join(backup, str(index))
            shutil.copy2(path, saved)
            record["files"][path] = saved
        else:
            record["files"][path] = None
    with open(os.path.join(state_dir, "snapshot.json"), "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)


def run(argv):
    try:
        result = subprocess.run(argv, check=False, capture_output=True, text=True)
    except OSError as exc:
        # A reload command that is missing must not stop the links from being put back.
        print(f"{' '.join(argv)}: rc=127 {exc}")
        return 127
    detail = (result.stderr or result.stdout).strip()
    print(f"{' '.join(argv)}: rc={result.returncode} {detail}")
    return result.returncode


def restore_links(wanted):
    """Change only what differs from the snapshot: no flush, so untouched routes stay."""
    now = link_state(wanted)
    for name, before in wanted.items():
        have = now.get(name)
        if before is None:
            if have is not None:
                run(["ip", "link", "delete", "dev", name])
            continue
        if have is None:
            continue
        if have["mtu"] != before["mtu"]:
            run(["ip", "link", "set", "dev", name, "mtu", str(before["mtu"])])
        if before["up"] and not have["up"]:
            run(["ip", "link", "set", "dev", name, "up"])
        for address in sorted(set(have["addresses"]) - set(before["addresses"])):
            run(["ip", "address", "del", address, "dev", name])
        for address in sorted(set(before["addresses"]) - set(have["addresses"])):
            run(["ip", "address", "replace", address, "dev", name])
        for route in sorted(set(before["routes"]) - set(have["routes"])):
            run(["ip", "route", "replace", *route.split()])


def differences(wanted):
    now = link_state(wanted)
    found = []
    for name, before in wanted.items():
        have = now.get(name)
        if (before is None) != (have is None):
            found.append(f"{name} {'exists' if have else 'is missing'}")
            continue
        for key in ("mtu", "up", "addresses", "routes") if before else ():
            if key == "routes" and not set(before[key]) <= set(have[key]):
                found.append(f"{name} lacks routes {sorted(set(before[key]) - set(have[key]))}")
            elif key != "routes" and before[key] != have[key]:
                found.append(f"{name} {key} {have[key]} instead of {before[key]}")
    return found


def revert(state_dir):
    with open(os.path.join(state_dir, "snapshot.json")) as handle:
        record = json.load(handle)
    # Each file is put back on its own: one that cannot be (its directory gone, a read-only
    # mount) is reported, and the links are still restored after it.
    unrestored = []
    for path, saved in record["files"].items():
        try:
            if saved is None:
                if os.path.lexists(path):
                    os.remove(path)
            else:
                shutil.copy2(saved, path)
        except OSError as exc:
            unrestored.append(f"{path} not restored ({exc.strerror or exc})")
    for argv in RELOAD[record["backend"]]:
        run(argv)
    # The backend lets go of a link asynchronously after the reload (networkd removes the
    # addresses it had set when it stops managing a link), so the link state is put back until it
    # holds, for up to ten seconds.
    for _attempt in range(5):
        restore_links(record["links"])
        time.sleep(2)
        left = differences(record["links"])
        if not left:
            break
    left = unrestored + left
    outcome = "ok" if not left else "incomplete: " + "; ".join(left)
    with open(MARKER, "w") as handle:
        handle.write(outcome + "\n")
    armed = os.path.join(state_dir, "armed")
    if os.path.exists(armed):
        os.remove(armed)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["time"]))
    print(f"reverted the fabric configuration snapshotted at {when}: {outcome}")
    return 0 if not left else 1


def main(argv):
    if len(argv) >= 4 and argv[1] == "snapshot":
        separator = argv.index("--") if "--" in argv else len(argv)
        snapshot(argv[2], argv[3], argv[4:separator], argv[separator + 1 :])
        return 0
    if len(argv) == 3 and argv[1] == "revert":
        return revert(argv[2])
    sys.stderr.write(f"usage: {argv[0]} snapshot STATE_DIR BACKEND LINK... -- FILE... | revert STATE_DIR\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
