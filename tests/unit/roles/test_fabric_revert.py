# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for roles/fabric_network/files/gpufleet_fabric_revert.py, the tool that puts a host's
fabric configuration back when the apply failed or the host lost its peers (installed on the hosts
as /usr/local/libexec/gpufleet-fabric-revert).

The tool is imported as a module from its folder and its process boundary is replaced:
``subprocess`` by a host whose links, addresses and routes start as a real lab host's ``ip -j``
output (fixtures/fabric_revert) and change as ``ip`` would change them; ``time.sleep`` by a
recorder; the marker file by a temp path.
"""

import copy
import importlib
import ipaddress
import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from ansible_collections.gpufleet.inference.tests.unit.conftest import fake_binary

FIXTURES = Path(__file__).parent / "fixtures" / "fabric_revert"
# The role's files folder goes on sys.path once, and the tool is an ordinary import from it.
ROLE_FILES = Path(__file__).resolve().parents[3] / "roles" / "fabric_network" / "files"
SCRIPT = ROLE_FILES / "gpufleet_fabric_revert.py"
if str(ROLE_FILES) not in sys.path:
    sys.path.insert(0, str(ROLE_FILES))
revert_tool = importlib.import_module("gpufleet_fabric_revert")
# fab0's static routes in the capture, as the tool writes them for `ip route replace`.
FAB0_ROUTES = [
    "10.20.0.0/16 via 192.168.77.1 metric 50 dev fab0",
    "10.30.0.0/16 scope link src 192.168.77.2 dev fab0",
    "default via 192.168.77.1 table 100 dev fab0",
]
ROUTE_WORDS = {"via": "gateway", "metric": "metric", "table": "table", "scope": "scope", "src": "prefsrc", "dev": "dev"}


def captured(name):
    return json.loads((FIXTURES / name).read_text())


class Host:
    """A host's links, addresses and routes, read and changed through `ip` as the kernel would."""

    def __init__(self):
        self.links = {entry["ifname"]: entry for entry in captured("ip-link-show.json")}
        self.addresses = {entry["ifname"]: entry["addr_info"] for entry in captured("ip-address-show.json")}
        self.routes = captured("ip-route-show-table-all.json")
        self.calls = []
        self.on_reload = None
        self.max_mtu = {}

    # What the tool reads.
    def show(self, args):
        if args == ["link", "show"]:
            return list(self.links.values())
        if args == ["address", "show"]:
            return [dict(self.links[name], addr_info=self.addresses.get(name, [])) for name in self.links]
        if args == ["route", "show", "table", "all"]:
            return self.routes
        raise AssertionError(f"unexpected ip -j {args}")

    # What the tool changes: (rc, stderr) of each command, as `ip` would answer.
    def change(self, argv):
        if argv in (["networkctl", "reload"], ["netplan", "apply"]):
            if self.on_reload:
                self.on_reload()
            return 0, ""
        assert argv[0] == "ip", argv
        words = argv[1:]
        handler = {
            ("link", "delete"): self.ip_link_delete,
            ("link", "set"): self.ip_link_set,
            ("address", "del"): self.ip_address_del,
            ("address", "replace"): self.ip_address_replace,
            ("route", "replace"): self.ip_route_replace,
        }.get(tuple(words[:2]))
        assert handler, f"unexpected command {argv}"
        return handler(*words[2:])

    def ip_link_delete(self, dev, name):
        assert dev == "dev"
        del self.links[name]
        self.addresses.pop(name, None)
        self.routes = [route for route in self.routes if route.get("dev") != name]
        return 0, ""

    def ip_link_set(self, dev, name, *change):
        assert dev == "dev"
        if change == ("up",):
            self.set_up(name, True)
            return 0, ""
        assert change[0] == "mtu", change
        if int(change[1]) > self.max_mtu.get(name, 65535):
            return 2, "Error: mtu greater than device maximum."
        self.links[name]["mtu"] = int(change[1])
        return 0, ""

    def ip_address_del(self, address, dev, name):
        assert dev == "dev"
        self.drop_address(name, address)
        return 0, ""

    def ip_address_replace(self, address, dev, name):
        assert dev == "dev"
        local, prefixlen = address.split("/")
        self.drop_address(name, address)
        self.addresses.setdefault(name, []).append(
            {"family": "inet", "local": local, "prefixlen": int(prefixlen), "scope": "global", "label": name}
        )
        return 0, ""

    def ip_route_replace(self, dst, *pairs):
        route = {"dst": dst}
        for word, value in zip(pairs[::2], pairs[1::2]):
            route[ROUTE_WORDS[word]] = int(value) if word == "metric" else value
        if "gateway" in route and not self.reaches(route["dev"], route["gateway"]):
            return 2, "Error: Nexthop has invalid gateway."

        def key(entry):
            return entry["dst"], entry.get("table"), entry.get("metric")

        self.routes = [old for old in self.routes if key(old) != key(route)]
        self.routes.append(route)
        return 0, ""

    def run(self, argv, check=False, capture_output=False, text=False):
        assert capture_output and text
        self.calls.append(argv)
        if argv[:2] == ["ip", "-j"]:
            return subprocess.CompletedProcess(argv, 0, json.dumps(copy.deepcopy(self.show(argv[2:]))), "")
        rc, stderr = self.change(argv)
        return subprocess.CompletedProcess(argv, rc, "", stderr)

    # Helpers for the tests, standing in for what an apply or the backend does.
    def set_up(self, name, up):
        flags = [flag for flag in self.links[name]["flags"] if flag != "UP"]
        self.links[name]["flags"] = [*flags, "UP"] if up else flags

    def drop_address(self, name, address):
        self.addresses[name] = [
            info for info in self.addresses.get(name, []) if f"{info['local']}/{info['prefixlen']}" != address
        ]

    def drop_route(self, dst, table=None):
        self.routes = [route for route in self.routes if (route["dst"], route.get("table")) != (dst, table)]

    def reaches(self, name, gateway):
        return any(
            ipaddress.ip_address(gateway) in ipaddress.ip_interface(f"{info['local']}/{info['prefixlen']}").network
            for info in self.addresses.get(name, [])
        )

    def global_addresses(self, name):
        return sorted(f"{i['local']}/{i['prefixlen']}" for i in self.addresses.get(name, []) if i["scope"] == "global")

    def static_routes(self, name):
        return sorted(
            route["dst"] for route in self.routes if route.get("dev") == name and route.get("protocol") is None
        )


@pytest.fixture
def host():
    return Host()


@pytest.fixture
def tool(monkeypatch, tmp_path, host):
    """The tool as a module, with its process boundary on ``host`` and sleeps recorded, not slept."""
    module = revert_tool
    monkeypatch.setattr(module, "slept", [], raising=False)
    monkeypatch.setattr(module, "subprocess", types.SimpleNamespace(run=host.run))
    monkeypatch.setattr(
        module,
        "time",
        types.SimpleNamespace(time=time.time, strftime=time.strftime, gmtime=time.gmtime, sleep=module.slept.append),
    )
    monkeypatch.setattr(module, "MARKER", str(tmp_path / "gpufleet-fabric-network.reverted"))
    return module


@pytest.fixture
def applied(tool, host, tmp_path):
    """Snapshot fab0, fab1 and a bond0 that does not exist yet, with one existing and one new file;
    then change them as an apply does. Returns (state_dir, existing file, new file)."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    etc = tmp_path / "etc"
    etc.mkdir()
    existing, new = etc / "10-fab0.network", etc / "20-bond0.netdev"
    existing.write_text("[Match]\nName=fab0\n[Link]\nMTUBytes=9000\n")
    existing.chmod(0o640)
    argv = ["gpufleet-fabric-revert", "snapshot", str(state_dir), "networkd", "fab0", "fab1", "bond0"]
    assert tool.main([*argv, "--", str(existing), str(new)]) == 0
    (state_dir / "armed").touch()

    existing.write_text("[Match]\nName=fab0\n[Network]\nBond=bond0\n")
    new.write_text("[NetDev]\nName=bond0\nKind=bond\n")
    host.links["bond0"] = dict(host.links["fab1"], ifname="bond0", ifindex=40)
    host.links["fab0"]["mtu"] = 1500
    host.set_up("fab0", False)
    host.drop_address("fab0", "192.168.77.2/24")
    host.addresses["fab0"].append({"family": "inet", "local": "192.168.88.2", "prefixlen": 24, "scope": "global"})
    # The kernel's own link-local address of the link that came up again: not the tool's to remove.
    host.addresses["fab0"].append(
        {"family": "inet6", "local": "fe80::9003:e2ff:fee6:4935", "prefixlen": 64, "scope": "link"}
    )
    host.drop_route("10.20.0.0/16")
    host.drop_route("default", "100")
    # A route that someone else added during the window: the revert is no flush, so it stays.
    host.routes.append({"dst": "10.40.0.0/16", "dev": "fab0", "scope": "link", "flags": []})
    host.calls.clear()
    return state_dir, existing, new


def test_snapshot_records_links_files_and_backend(tool, applied):
    state_dir, existing, new = applied
    record = json.loads((state_dir / "snapshot.json").read_text())
    assert record["backend"] == "networkd"
    assert record["links"] == {
        "fab0": {"mtu": 9000, "up": True, "addresses": ["192.168.77.2/24"], "routes": FAB0_ROUTES},
        "fab1": {"mtu": 1500, "up": True, "addresses": [], "routes": []},
        "bond0": None,
    }
    assert record["files"] == {str(existing): str(state_dir / "backup" / "0"), str(new): None}
    saved = state_dir / "backup" / "0"
    assert saved.read_text() == "[Match]\nName=fab0\n[Link]\nMTUBytes=9000\n"
    assert saved.stat().st_mode & 0o777 == 0o640


def test_a_new_snapshot_drops_the_backups_of_the_last_one(tool, tmp_path):
    state_dir = tmp_path / "state"
    (state_dir / "backup").mkdir(parents=True)
    (state_dir / "backup" / "7").write_text("stale")
    assert tool.main(["x", "snapshot", str(state_dir), "netplan", "fab0", "--"]) == 0
    assert list((state_dir / "backup").iterdir()) == []
    assert json.loads((state_dir / "snapshot.json").read_text())["files"] == {}


def test_revert_puts_back_files_links_addresses_and_routes(tool, host, applied, tmp_path, capsys):
    state_dir, existing, new = applied
    assert tool.main(["x", "revert", str(state_dir)]) == 0

    assert existing.read_text() == "[Match]\nName=fab0\n[Link]\nMTUBytes=9000\n"
    assert not new.exists()
    assert ["networkctl", "reload"] in host.calls
    assert "bond0" not in host.links
    assert host.links["fab0"]["mtu"] == 9000
    assert "UP" in host.links["fab0"]["flags"]
    assert host.global_addresses("fab0") == ["192.168.77.2/24"]
    assert "fe80::9003:e2ff:fee6:4935" in [info["local"] for info in host.addresses["fab0"]]
    assert host.static_routes("fab0") == ["10.20.0.0/16", "10.30.0.0/16", "10.40.0.0/16", "default"]
    assert (tmp_path / "gpufleet-fabric-network.reverted").read_text() == "ok\n"
    assert not (state_dir / "armed").exists()
    assert tool.slept == [2]
    out = capsys.readouterr().out
    assert "ip link delete dev bond0: rc=0" in out
    assert out.rstrip().endswith(": ok")
    assert "reverted the fabric configuration snapshotted at 20" in out


def test_revert_changes_only_what_differs(tool, host, applied):
    state_dir, _existing, _new = applied
    assert tool.revert(str(state_dir)) == 0
    changes = [argv for argv in host.calls if argv[:2] != ["ip", "-j"]]
    assert changes == [
        ["networkctl", "reload"],
        ["ip", "link", "delete", "dev", "bond0"],
        ["ip", "link", "set", "dev", "fab0", "mtu", "9000"],
        ["ip", "link", "set", "dev", "fab0", "up"],
        ["ip", "address", "del", "192.168.88.2/24", "dev", "fab0"],
        ["ip", "address", "replace", "192.168.77.2/24", "dev", "fab0"],
        ["ip", "route", "replace", *FAB0_ROUTES[0].split()],
        ["ip", "route", "replace", *FAB0_ROUTES[2].split()],
    ]


def test_revert_uses_the_snapshots_backend(tool, host, tmp_path):
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    assert tool.main(["x", "snapshot", str(state_dir), "netplan", "fab0", "--"]) == 0
    assert tool.revert(str(state_dir)) == 0
    assert ["netplan", "apply"] in host.calls
    assert ["networkctl", "reload"] not in host.calls


def test_revert_repeats_while_the_backend_lets_go_of_a_link(tool, host, applied, tmp_path):
    """networkd removes the addresses it had set some time after the reload: the tool restores
    again until the state holds."""
    state_dir, _existing, _new = applied
    host.on_reload = lambda: tool.slept.append("reload")

    def sleep(seconds):
        if tool.slept.count(2) == 0:
            host.drop_address("fab0", "192.168.77.2/24")
        tool.slept.append(seconds)

    tool.time.sleep = sleep
    assert tool.revert(str(state_dir)) == 0
    assert tool.slept == ["reload", 2, 2]
    assert host.global_addresses("fab0") == ["192.168.77.2/24"]
    assert (tmp_path / "gpufleet-fabric-network.reverted").read_text() == "ok\n"


def test_a_link_that_cannot_come_back_is_reported_incomplete(tool, host, applied, tmp_path, capsys):
    state_dir, existing, _new = applied
    del host.links["fab1"]  # the veth peer went with the apply and cannot be recreated by ip
    host.max_mtu["fab0"] = 1500  # and fab0 refuses its old MTU
    assert tool.revert(str(state_dir)) == 1
    outcome = "incomplete: fab0 mtu 1500 instead of 9000; fab1 is missing"
    assert (tmp_path / "gpufleet-fabric-network.reverted").read_text() == outcome + "\n"
    assert tool.slept == [2] * 5
    # Everything else was still put back, and the boot unit will not run it again.
    assert existing.read_text() == "[Match]\nName=fab0\n[Link]\nMTUBytes=9000\n"
    assert host.global_addresses("fab0") == ["192.168.77.2/24"]
    assert not (state_dir / "armed").exists()
    out = capsys.readouterr().out
    assert "ip link set dev fab0 mtu 9000: rc=2 Error: mtu greater than device maximum." in out
    assert out.rstrip().endswith(outcome)


def test_a_file_that_cannot_be_put_back_does_not_stop_the_links(tool, host, applied, tmp_path, capsys):
    state_dir, existing, new = applied
    # The backup of the existing file is gone (a full disk, an operator's cleanup): copying it
    # back fails, and the new file, the reload and every link must still be put back.
    (state_dir / "backup" / "0").unlink()
    assert tool.revert(str(state_dir)) == 1
    assert not new.exists()
    assert ["networkctl", "reload"] in host.calls
    assert "bond0" not in host.links
    assert host.links["fab0"]["mtu"] == 9000
    assert host.global_addresses("fab0") == ["192.168.77.2/24"]
    outcome = (tmp_path / "gpufleet-fabric-network.reverted").read_text()
    assert outcome == f"incomplete: {existing} not restored (No such file or directory)\n"
    assert not (state_dir / "armed").exists()
    assert capsys.readouterr().out.rstrip().endswith(outcome.strip())


def test_a_missing_reload_command_is_reported_not_raised(tmp_path, capsys):
    missing = str(tmp_path / "no-such-networkctl")
    assert revert_tool.run([missing, "reload"]) == 127
    assert capsys.readouterr().out.startswith(f"{missing} reload: rc=127 ")


def test_route_argv_of_the_captured_routes(tool):
    argvs = [tool.route_argv(route) for route in captured("ip-route-show-table-all.json")]
    assert [argv for argv in argvs if argv] == [
        "default via 192.168.77.1 table 100 dev fab0",
        "default via 172.17.0.1 dev eth0",
        FAB0_ROUTES[0],
        FAB0_ROUTES[1],
    ]
    assert argvs.count("") == 9  # the kernel's connected routes and the local table


def test_route_argv_leaves_out_the_main_table(tool):
    route = {"dst": "10.0.0.0/8", "gateway": "10.0.0.1", "dev": "fab0", "table": "main"}
    assert tool.route_argv(route) == "10.0.0.0/8 via 10.0.0.1 dev fab0"


@pytest.mark.parametrize("protocol", ["kernel", "dhcp", "ra"])
def test_routes_of_the_kernel_dhcp_and_router_advertisements_are_not_restored(tool, protocol):
    assert tool.route_argv({"dst": "10.0.0.0/8", "dev": "fab0", "gateway": "10.0.0.1", "protocol": protocol}) == ""
    assert tool.route_argv({"dst": "10.0.0.0/8", "dev": "fab0", "protocol": "static"}) == "10.0.0.0/8 dev fab0"


def test_usage(tool, capsys):
    for argv in (["x"], ["x", "revert"], ["x", "snapshot", "/tmp"], ["x", "undo", "/tmp"]):
        assert tool.main(argv) == 2
    assert capsys.readouterr().err.startswith("usage: x snapshot STATE_DIR BACKEND LINK... -- FILE... | revert")


def test_run_reports_a_failing_command(tmp_path, capsys):
    path = fake_binary(tmp_path, "networkctl", rc=1, stderr="Failed to reload network settings\n")
    assert revert_tool.run([path, "reload"]) == 1
    assert capsys.readouterr().out == f"{path} reload: rc=1 Failed to reload network settings\n"


def test_snapshot_from_the_command_line_reads_ip(tmp_path):
    """The tool as the role runs it (python3 FILE snapshot ...), with an `ip` that prints the capture."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ip = bin_dir / "ip"
    ip.write_text(
        "#!/bin/sh\n"
        f'case "$1 $2" in\n'
        f'  "-j link") cat "{FIXTURES}/ip-link-show.json" ;;\n'
        f'  "-j address") cat "{FIXTURES}/ip-address-show.json" ;;\n'
        f'  "-j route") cat "{FIXTURES}/ip-route-show-table-all.json" ;;\n'
        "  *) exit 1 ;;\n"
        "esac\n"
    )
    ip.chmod(0o755)
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "snapshot", str(state_dir), "networkd", "fab0", "eth0", "--"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )
    assert proc.returncode == 0, proc.stderr
    links = json.loads((state_dir / "snapshot.json").read_text())["links"]
    assert links["fab0"] == {"mtu": 9000, "up": True, "addresses": ["192.168.77.2/24"], "routes": FAB0_ROUTES}
    assert links["eth0"] == {
        "mtu": 1500,
        "up": True,
        "addresses": ["172.17.0.3/16"],
        "routes": ["default via 172.17.0.1 dev eth0"],
    }
