"""Run an ansible-playbook command and fail unless it succeeds with changed=0 on every host.

    assert_idempotent.py ansible-playbook -i INVENTORY PLAYBOOK [ARGS...]

The second converge of a role must change nothing; this is the check `make test` uses outside
molecule (molecule has its own idempotence step).
"""

import re
import subprocess
import sys

RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=\d+\s+changed=(?P<changed>\d+)")


def main(argv):
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"assert_idempotent: the playbook failed (rc={proc.returncode})", file=sys.stderr)
        return proc.returncode
    changed = {m["host"]: int(m["changed"]) for m in map(RECAP.match, proc.stdout.splitlines()) if m}
    if not changed:
        print("assert_idempotent: no PLAY RECAP found; nothing was checked", file=sys.stderr)
        return 1
    offenders = {host: n for host, n in changed.items() if n}
    if offenders:
        print(f"assert_idempotent: not idempotent, changed tasks per host: {offenders}", file=sys.stderr)
        return 1
    print(f"assert_idempotent: idempotent on {len(changed)} host(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
