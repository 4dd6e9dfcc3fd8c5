"""The lab a benchmark runs on, read from its manifest through the topology inventory plugin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "inventories" / "lab" / "topology.yml"


def inventory(needs: str) -> tuple[dict[str, list[str]], dict[str, dict]]:
    """The lab's groups ({group: [hosts]}) and host variables, as ansible-inventory --list gives them.

    needs names the make target that brings up the lab the benchmark needs, for the message."""
    if not MANIFEST.exists():
        sys.exit(f"benchmark: no lab manifest; run `{needs}` first")
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible-inventory"), "-i", str(MANIFEST), "--list"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    # ansible-inventory writes values the plugin marks unsafe as {"__ansible_unsafe": value}.
    data = json.loads(
        proc.stdout, object_hook=lambda obj: obj["__ansible_unsafe"] if set(obj) == {"__ansible_unsafe"} else obj
    )
    groups = {name: body.get("hosts", []) for name, body in data.items() if isinstance(body, dict) and name != "_meta"}
    return groups, data["_meta"]["hostvars"]
