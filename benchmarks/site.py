"""SSH transports for the site composition on the lab: pipelining off, on, and Mitogen.

    make lab LAB_HOSTS=10                                   # or `make bench`, which does it all
    .venv/bin/python benchmarks/site.py ssh [--runs 2] [--mitogen DIR]

The idempotent run of playbooks/site.yml (every check of every layer, nothing to change) with SSH
pipelining off and on, alternating; the ratio is pipelined / not. With --mitogen DIR (pip install
--target DIR mitogen) it also runs under Mitogen's mitogen_linear strategy, or says why it cannot.
The site's deploy and its proofs are the lab stage of `make test` (tests/site/).

Results go to benchmarks/results/ as JSON. Nothing here asserts a time: these machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _results import save

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "inventories" / "lab" / "topology.yml"
PLAYBOOK_BIN = ROOT / ".venv" / "bin" / "ansible-playbook"
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=\d+\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)")
SECOND_RUN = ["--skip-tags", "gpufleet_validation"]


def site(*extra: str, env: dict[str, str] | None = None, echo: bool = True) -> tuple[float, int, dict[str, int], str]:
    """Run the site with ansible-playbook itself (the ssh benchmark compares transports); return
    (wall seconds, rc, changed per host, output)."""
    if not MANIFEST.exists():
        sys.exit("benchmark: no lab manifest; run `make lab LAB_HOSTS=10` first")
    argv = [str(PLAYBOOK_BIN), "-i", str(MANIFEST), str(ROOT / "playbooks" / "site.yml"), *extra]
    run_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    print(f"benchmark: {' '.join(argv)} {' '.join(f'{k}={v}' for k, v in (env or {}).items())}", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if echo:
            sys.stdout.write(line)
    rc = proc.wait()
    wall = round(time.monotonic() - start, 1)
    changed = {m["host"]: int(m["changed"]) for m in map(RECAP.match, lines) if m}
    return wall, rc, changed, "".join(lines)


def mitogen_env(path: str) -> tuple[dict[str, str] | None, str]:
    """The environment that runs the site under Mitogen from PATH (a directory holding
    ansible_mitogen, e.g. `pip install --target PATH mitogen`), or None and the reason."""
    if not path:
        return None, "not measured: no --mitogen PATH given (pip install --target PATH mitogen)"
    package = Path(path, "ansible_mitogen")
    if not package.is_dir():
        return None, f"not measured: {package} does not exist"
    env = {"PYTHONPATH": f"{path}:{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "-c", "import ansible_mitogen.loaders"],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, **env),
    )
    if proc.returncode != 0:
        return None, f"not measured: ansible_mitogen refuses this ansible-core: {proc.stderr.strip().splitlines()[-1]}"
    env.update(ANSIBLE_STRATEGY_PLUGINS=str(package / "plugins" / "strategy"), ANSIBLE_STRATEGY="mitogen_linear")
    return env, "measured"


def ssh(args: argparse.Namespace) -> dict:
    variants = {
        "no_pipelining": {"ANSIBLE_PIPELINING": "False"},
        "pipelining": {"ANSIBLE_PIPELINING": "True"},
    }
    mitogen, mitogen_note = mitogen_env(args.mitogen)
    if mitogen:
        variants["mitogen"] = dict(mitogen, ANSIBLE_PIPELINING="True")
    walls: dict[str, list[float]] = {name: [] for name in variants}
    for _run in range(args.runs):
        for name, env in variants.items():
            wall, rc, changed, out = site(*SECOND_RUN, env=env, echo=False)
            if rc != 0 or any(changed.values()):
                sys.exit(f"benchmark: the {name} run failed (rc={rc}, changed={changed}):\n{out[-3000:]}")
            walls[name].append(wall)
            print(f"benchmark: {name}: {wall} s", flush=True)
    medians = {name: statistics.median(values) for name, values in walls.items()}
    result = {
        "benchmark": "ssh",
        "playbook": "site.yml " + " ".join(SECOND_RUN),
        "runs_s": walls,
        "median_s": medians,
        "ratio_pipelining_over_none": round(medians["pipelining"] / medians["no_pipelining"], 3),
        "mitogen": mitogen_note,
    }
    if "mitogen" in medians:
        result["ratio_mitogen_over_pipelining"] = round(medians["mitogen"] / medians["pipelining"], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=["ssh"])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--mitogen", default="", help="a directory holding ansible_mitogen (ssh only)")
    args = parser.parse_args()
    save(f"site_{args.which}", ssh(args))


if __name__ == "__main__":
    main()
