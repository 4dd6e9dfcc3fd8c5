# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fetch a model's files onto this host from its peers with rsync, verifying each against the manifest.

The transfer is rsync's (rsync(1)); this only decides what to ask for, from whom, and what to
keep. Each round asks every current source for one of the missing files it serves, with
``--ignore-missing-args``: a peer that is still receiving a file simply does not have it yet,
since a peer only moves a file into its model directory after checking it. So files move down a
chain of hosts one behind the other, each file as soon as the host above has it.

- A received file is kept only when its size and sha256 match the manifest; otherwise it is
  deleted and fetched from the next source in its list ("refetched" in the result).
- A source that fails three rounds in a row (ssh or rsync errors), or delivers nothing for
  stall_s while files wait on it, is given up for those files.
- An interrupted run resumes: files already in place and recorded in the ledger (size,
  mtime, sha256) are kept without reading them again, and rsync continues a half-received
  file from its ``--partial-dir``.
- Progress (files, bytes, rate, bytes per source) is written to a JSON status file while it
  works, atomically, so that a reader never sees half a document.

Private module_utils; Python 3.8+ and the standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import shlex
import subprocess
import tempfile
import time

from ansible_collections.gpufleet.inference.plugins.module_utils import _vllm_model

PARTIAL_DIR = ".rsync-partial"
LEDGER = "verified.json"
ERRORS_BEFORE_GIVING_UP = 3
# While the host before it is still receiving a file, a host asks again after POLL_FIRST_S, then
# half as long again each time, up to POLL_MAX_S: a file reaches the next host at most about a
# second after it is in place, at the cost of one rsync run a second per waiting host.
POLL_FIRST_S = 0.1
POLL_MAX_S = 1.0
# rsync exit codes that leave the round's other files usable: 23 partial transfer, 24 vanished.
SOFT_RSYNC_CODES = (0, 23, 24)
# rsync --stats: the bytes that crossed the wire to this host in one run (a resumed file's reused
# part does not count).
RECEIVED = re.compile(r"^Total bytes received: ([0-9,]+)", re.M)


class FetchError(Exception):
    """The host could not get a file from any of its sources."""


def state_dir_of(dest):
    """Where a fetch into dest keeps its ledger, its incoming files and its status: <dest>.staging."""
    return dest.rstrip("/") + ".staging"


def status_path_of(dest):
    """The status document a fetch into dest rewrites while it works."""
    return os.path.join(state_dir_of(dest), "status.json")


# The argument_spec entries of the modules that fetch from peers over ssh (doc fragment peer_rsync).
PEER_SSH_ARGUMENT_SPEC = dict(
    ssh_key=dict(type="path", default=""),
    known_hosts=dict(type="path", default=""),
    ssh_user=dict(type="str", default="root"),
    ssh_port=dict(type="int", default=22),
)


def ssh_command(ssh, key, known_hosts, user="root", port=22, control_dir=""):
    """The -e argument of rsync: ssh with this job's key and nothing else.

    With control_dir, one ssh connection per peer is kept open and reused by every rsync run
    (ControlMaster), since a run fetches one file."""
    argv = [
        ssh,
        "-i",
        key,
        "-l",
        user,
        "-p",
        str(port),
        "-o",
        "IdentitiesOnly=yes",
        "-o",
        "BatchMode=yes",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=%s" % known_hosts,
        "-o",
        "ConnectTimeout=15",
        "-o",
        "ServerAliveInterval=15",
        "-o",
        "ServerAliveCountMax=4",
        "-o",
        "Compression=no",
    ]
    if control_dir:
        argv += ["-o", "ControlMaster=auto", "-o", "ControlPath=%s/cm-%%C" % control_dir, "-o", "ControlPersist=10"]
    return " ".join(shlex.quote(arg) for arg in argv)


def atomic_write(path, data, mode=0o644):
    directory = os.path.dirname(path) or "."
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _tree_bytes(root):
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


class Fetch(object):
    """One host's fetch. files: [{path, size, sha256}]; sources: {path: [{name, host, path}]}."""

    def __init__(
        self,
        dest,
        files,
        sources,
        generated=None,
        rsync="rsync",
        ssh_e="",
        state_dir=None,
        status_path=None,
        stall_s=600.0,
        timeout_s=None,
        rsync_timeout_s=120,
        prune=True,
        rsync_args=None,
        clock=time.monotonic,
        wait=time.sleep,
    ):
        self.dest = dest.rstrip("/")
        self.files = dict((item["path"], item) for item in files)
        self.sources = sources
        self.generated = generated or {}
        self.rsync = rsync
        self.ssh_e = ssh_e
        self.state_dir = state_dir or state_dir_of(self.dest)
        self.incoming = os.path.join(self.state_dir, "incoming")
        self.status_path = status_path or os.path.join(self.state_dir, "status.json")
        self.stall_s = stall_s
        self.timeout_s = timeout_s
        self.rsync_timeout_s = rsync_timeout_s
        self.rsync_args = list(rsync_args or [])
        self.prune = prune
        self.clock = clock
        self.wait = wait
        self.cursor = dict((path, 0) for path in self.files)
        self.errors = {}
        self.last_delivery = {}
        self.tried = dict((path, []) for path in self.files)
        self.result = {
            "files_total": len(self.files),
            "files_done": 0,
            "bytes_total": sum(item["size"] for item in self.files.values()),
            "bytes_done": 0,
            "bytes_fetched": 0,
            "bytes_received": 0,
            "bytes_in_flight": 0,
            "resumed_files": 0,
            "refetched": [],
            "removed": [],
            "generated": [],
            "by_source": {},
            "rounds": 0,
            "elapsed_s": 0.0,
            "rate_bytes_s": 0.0,
            "state": "running",
        }
        self.started = None
        self.ledger = {}

    # -- state on disk -------------------------------------------------------------------

    def _load_ledger(self):
        try:
            with open(os.path.join(self.state_dir, LEDGER)) as handle:
                data = json.load(handle)
            self.ledger = data if isinstance(data, dict) else {}
        except (IOError, OSError, ValueError):
            self.ledger = {}

    def _save_ledger(self):
        atomic_write(os.path.join(self.state_dir, LEDGER), json.dumps(self.ledger, sort_keys=True).encode())

    def write_status(self):
        if self.started is not None:
            elapsed = self.clock() - self.started
            self.result["elapsed_s"] = round(elapsed, 3)
            fetched = self.result["bytes_fetched"]
            self.result["rate_bytes_s"] = round(fetched / elapsed, 1) if elapsed > 0 else 0.0
        atomic_write(self.status_path, json.dumps(self.result, sort_keys=True).encode())

    # -- what is already here ------------------------------------------------------------

    def _verified_in_place(self, item):
        full = os.path.join(self.dest, item["path"])
        try:
            info = os.stat(full)
        except OSError:
            return False
        if info.st_size != item["size"]:
            return False
        known = self.ledger.get(item["path"])
        if known == [info.st_size, info.st_mtime_ns, item["sha256"]]:
            return True
        if _vllm_model.file_sha256(full) == item["sha256"]:
            self.ledger[item["path"]] = [info.st_size, info.st_mtime_ns, item["sha256"]]
            return True
        return False

    def survey(self, hash_unknown=True):
        """Return the paths still to fetch, marking the rest done (resumed); check mode passes hash_unknown=False."""
        self._load_ledger()
        pending = []
        for path, item in sorted(self.files.items()):
            if hash_unknown:
                present = self._verified_in_place(item)
            else:
                full = os.path.join(self.dest, path)
                present = os.path.isfile(full) and os.path.getsize(full) == item["size"]
            if present:
                self._done(item, fetched=False)
            else:
                pending.append(path)
        return pending

    def extra_files(self):
        """Files in dest that neither the manifest nor the generated files name."""
        if not os.path.isdir(self.dest):
            return []
        wanted = set(self.files) | set(self.generated)
        return [rel for rel, _full, _size in _vllm_model.model_files(self.dest) if rel not in wanted]

    def generated_changes(self):
        changes = []
        for path, item in sorted(self.generated.items()):
            full = os.path.join(self.dest, path)
            if not (os.path.isfile(full) and _vllm_model.file_sha256(full) == item["sha256"]):
                changes.append(path)
        return changes

    def _done(self, item, fetched, source=None):
        self.result["files_done"] += 1
        self.result["bytes_done"] += item["size"]
        if fetched:
            self.result["bytes_fetched"] += item["size"]
            by_source = self.result["by_source"]
            by_source[source] = by_source.get(source, 0) + item["size"]
        else:
            self.result["resumed_files"] += 1

    # -- fetching ------------------------------------------------------------------------

    def _source(self, path):
        chain = self.sources.get(path) or []
        index = self.cursor[path]
        if index >= len(chain):
            raise FetchError(
                "%s could not be fetched from any source (%s); check those hosts' copies and the fabric between them"
                % (path, "; ".join(self.tried[path]) or "none was given")
            )
        return chain[index]

    def _give_up(self, path, why):
        source = self._source(path)
        self.tried[path].append("%s: %s" % (source["name"], why))
        self.cursor[path] += 1
        self._source(path)

    def _rsync_argv(self, source, listfile):
        argv = [
            self.rsync,
            "--times",
            "--partial-dir=%s" % PARTIAL_DIR,
            "--ignore-missing-args",
            "--timeout=%d" % self.rsync_timeout_s,
            "--files-from=%s" % listfile,
            "--stats",
            *self.rsync_args,
        ]
        if source.get("host"):
            argv += ["-e", self.ssh_e, "%s:%s/" % (source["host"], source["path"].rstrip("/"))]
        else:
            argv.append(source["path"].rstrip("/") + "/")
        argv.append(self.incoming + "/")
        return argv

    def _run_rsync(self, argv):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        while True:
            try:
                out, err = proc.communicate(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                self.result["bytes_in_flight"] = _tree_bytes(self.incoming)
                self.write_status()
        self.result["bytes_in_flight"] = 0
        match = RECEIVED.search(out.decode("utf-8", "replace"))
        if match:
            self.result["bytes_received"] += int(match.group(1).replace(",", ""))
        return proc.returncode, err.decode("utf-8", "replace").strip()

    def _accept(self, path, source):
        """Check a received file; True when it is in place, False when it is still to come."""
        item = self.files[path]
        received = os.path.join(self.incoming, path)
        if not os.path.isfile(received):
            return False
        size = os.path.getsize(received)
        sha = _vllm_model.file_sha256(received) if size == item["size"] else None
        if sha != item["sha256"]:
            os.unlink(received)
            why = (
                "size %d, not %d" % (size, item["size"]) if sha is None else "sha256 %s, not %s" % (sha, item["sha256"])
            )
            self.result["refetched"].append({"path": path, "source": source["name"], "why": why})
            self._give_up(path, why)
            return False
        target = os.path.join(self.dest, path)
        parent = os.path.dirname(target)
        if not os.path.isdir(parent):
            os.makedirs(parent, 0o755)
        os.chmod(received, 0o644)
        os.replace(received, target)
        info = os.stat(target)
        self.ledger[path] = [info.st_size, info.st_mtime_ns, item["sha256"]]
        self._save_ledger()
        self._done(item, fetched=True, source=source["name"])
        return True

    def _round(self, pending):
        groups = {}
        for path in pending:
            source = self._source(path)
            key = (source["name"], source.get("host") or "", source["path"])
            group = groups.setdefault(key, (source, []))[1]
            # One file per rsync run from each source: a file becomes visible to the next host as
            # soon as it is checked here, so the files flow down the chain one behind the other
            # instead of the whole model waiting at each host.
            if not group:
                group.append(path)
        delivered = []
        now = self.clock()
        for key, (source, paths) in sorted(groups.items()):
            handle, listfile = tempfile.mkstemp(dir=self.state_dir, prefix="files-")
            with os.fdopen(handle, "w") as out:
                out.write("".join(path + "\n" for path in paths))
            try:
                rc, err = self._run_rsync(self._rsync_argv(source, listfile))
            finally:
                os.unlink(listfile)
            got = [path for path in paths if self._accept(path, source)]
            delivered.extend(got)
            now = self.clock()
            if got:
                self.last_delivery[key] = now
            self.last_delivery.setdefault(key, now)
            if rc not in SOFT_RSYNC_CODES:
                self.errors[key] = self.errors.get(key, 0) + 1
                if self.errors[key] >= ERRORS_BEFORE_GIVING_UP:
                    for path in paths:
                        if path not in got and self.cursor[path] < len(self.sources.get(path) or []):
                            self._give_up(path, "rsync exited %d: %s" % (rc, err.splitlines()[-1] if err else ""))
                    self.errors[key] = 0
            else:
                self.errors[key] = 0
                if not got and now - self.last_delivery[key] >= self.stall_s:
                    for path in paths:
                        self._give_up(path, "nothing arrived for %d s" % self.stall_s)
                    self.last_delivery[key] = now
        return delivered

    def run(self, check_mode=False):
        """Fetch what is missing; returns (changed, result). Raises FetchError when a file has no source left."""
        self.started = self.clock()
        extra = self.extra_files()
        stale = self.generated_changes()
        pending = self.survey(hash_unknown=not check_mode)
        self.result["removed"] = extra
        self.result["generated"] = stale
        changed = bool(pending or stale or (extra and self.prune))
        if check_mode:
            self.result["state"] = "check"
            self.result["pending"] = pending
            return changed, self.result
        for directory in (self.dest, self.incoming):
            if not os.path.isdir(directory):
                os.makedirs(directory, 0o755)
        if self.prune:
            for rel in extra:
                os.unlink(os.path.join(self.dest, rel))
                self.ledger.pop(rel, None)
        for path in stale:
            atomic_write(os.path.join(self.dest, path), self.generated[path]["content"].encode("utf-8"))
        pause = POLL_FIRST_S
        try:
            while pending:
                if self.timeout_s is not None and self.clock() - self.started > self.timeout_s:
                    raise FetchError(
                        "%d file(s) were still missing after %d s, e.g. %s" % (len(pending), self.timeout_s, pending[0])
                    )
                self.result["rounds"] += 1
                delivered = self._round(pending)
                pending = [path for path in pending if path not in delivered]
                self.write_status()
                if pending and not delivered:
                    self.wait(pause)
                    pause = min(pause * 1.5, POLL_MAX_S)
                else:
                    pause = POLL_FIRST_S
        except FetchError:
            self.result["state"] = "failed"
            self.write_status()
            raise
        self._save_ledger()
        self.result["state"] = "done"
        self.write_status()
        return changed, self.result


def _mib(value):
    return "%.1f MiB" % (value / 1048576.0)


def progress_text(status):
    """One line of a fan-out's progress from its status document, for the play's output."""
    done = status.get("bytes_done", 0) + status.get("bytes_in_flight", 0)
    total = status.get("bytes_total", 0)
    share = " (%d%%)" % (100 * done // total) if total else ""
    sources = ", ".join("%s %s" % (name, _mib(count)) for name, count in sorted(status.get("by_source", {}).items()))
    text = "%d/%d files, %s of %s%s, %s/s" % (
        status.get("files_done", 0),
        status.get("files_total", 0),
        _mib(done),
        _mib(total),
        share,
        _mib(status.get("rate_bytes_s", 0)),
    )
    if sources:
        text += ", from " + sources
    if status.get("refetched"):
        text += ", %d fetched again" % len(status["refetched"])
    return text
