"""Install the built collection into a clean virtual environment and run its playbooks by FQCN from there.

    python3 scripts/installed_collection.py                 build, install, syntax-check every playbook by FQCN
    python3 scripts/installed_collection.py env             print the environment that runs the installed copy
                                                            (shell exports alone on stdout: eval "$(... env)")
    python3 scripts/installed_collection.py playbook [--unchanged] NAME [ARGS...]
                                                            run gpufleet.inference.NAME from the installed copy

The checkout resolves gpufleet.inference.* through ansible.cfg and the collections/ link; users
install the artifact instead. This script does what they do: `ansible-galaxy collection build`,
a virtual environment with only requirements.txt (build/installed-venv/, remade when
requirements.txt or constraints.txt change), `ansible-galaxy collection install ARTIFACT` into
build/installed-collections/, then ansible-playbook by FQCN with only that copy on the collection
path: not the checkout (its ansible.cfg is not read, PYTHONPATH is dropped), not the `ansible`
bundle of the test environment. docs/execution-environment.md has the details.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
ARTIFACT_DIR = BUILD / "artifact"
VENV = BUILD / "installed-venv"
COLLECTIONS = BUILD / "installed-collections"
INSTALLED = COLLECTIONS / "ansible_collections" / "gpufleet" / "inference"
# Ansible's own defaults instead of any ansible.cfg: ANSIBLE_CONFIG wins over ./ansible.cfg,
# ~/.ansible.cfg and /etc/ansible/ansible.cfg, so the checkout's settings never leak in.
NEUTRAL_CONFIG = BUILD / "installed-ansible.cfg"
REQUIREMENTS = REPO / "requirements.txt"
CONSTRAINTS = REPO / "constraints.txt"
NAMESPACE_NAME = "gpufleet.inference"
# A playbook is addressable as gpufleet.inference.NAME only when NAME is a Python identifier
# (cluster-80x5090.yml is the legacy hyphenated alias of cluster_80x5090.yml).
FQCN_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")
# Playbooks that need a collection this one does not ship. galaxy.yml declares no dependency:
# the roles and the other playbooks need none, and an execution environment should not pull these.
# A user installs them with `ansible-galaxy collection install`; here, where Galaxy is not
# reachable, they come from the test environment's `ansible` bundle, on a path of their own that
# only these playbooks see (docs/execution-environment.md).
NEEDS = {"controller_apply": ("awx.awx",)}
EXTRA_COLLECTIONS = BUILD / "installed-extra-collections"
# The variables this script sets; a caller's own ANSIBLE_* settings pass through `playbook`.
CONTROLLED = (
    "ANSIBLE_CONFIG",
    "ANSIBLE_COLLECTIONS_PATH",
    "ANSIBLE_COLLECTIONS_SCAN_SYS_PATH",
    "ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED",
)
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=\d+\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.M,
)


def log(message: str, who: str = "installed_collection") -> None:
    print(f"{who}: {message}", flush=True)


def files_digest(*paths: Path) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def ensure_venv(venv: Path, requirements: Path, constraints: Path | None = None) -> Path:
    """A venv with exactly `requirements` (under `constraints`), reused while both files are unchanged.

    Returns its bin directory. The key is written last, so an interrupted install is redone."""
    key_files = [requirements] if constraints is None else [requirements, constraints]
    key = files_digest(*key_files)
    stamp = venv / ".requirements-sha256"
    bindir = venv / "bin"
    if stamp.is_file() and stamp.read_text().strip() == key and (bindir / "python").exists():
        return bindir
    log(f"creating {venv.relative_to(REPO)} from {', '.join(p.name for p in key_files)}")
    if venv.exists():
        shutil.rmtree(venv)
    # venv builds on the base interpreter even when run from a venv: no test-environment package leaks in.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(bindir / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-r", str(requirements)]
    if constraints is not None:
        pip += ["-c", str(constraints)]
    subprocess.run(pip, check=True)
    stamp.write_text(key + "\n")
    return bindir


def clean_env(bindir: Path, keep_ansible: bool = False, extra: bool = False) -> dict[str, str]:
    """The environment that sees only the installed copy: the venv's tools first on PATH, no
    PYTHONPATH (the test environment points it at the checkout's collections/), the collection
    path set to the installed tree alone (extra: and EXTRA_COLLECTIONS, for the playbooks in
    NEEDS) and sys.path scanning off. keep_ansible: the caller's other ANSIBLE_* settings stay."""
    path = [str(bindir)] + [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not p.startswith(str(REPO / ".venv"))
    ]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
        and not (k.startswith("ANSIBLE_") and (not keep_ansible or k in CONTROLLED))
    }
    env.update(
        PATH=os.pathsep.join(path),
        VIRTUAL_ENV=str(bindir.parent),
        ANSIBLE_CONFIG=str(NEUTRAL_CONFIG),
        ANSIBLE_COLLECTIONS_PATH=os.pathsep.join([str(COLLECTIONS), *([str(EXTRA_COLLECTIONS)] if extra else [])]),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="False",
        # An inventory the topology plugin refuses must stop the run, not leave an empty one.
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="True",
    )
    return env


def build_artifact(galaxy: Path, output_dir: Path) -> Path:
    """`ansible-galaxy collection build` of the checkout into output_dir; returns the tarball."""
    output_dir.mkdir(parents=True, exist_ok=True)
    for old in output_dir.glob("gpufleet-inference-*.tar.gz"):
        old.unlink()
    subprocess.run(
        [str(galaxy), "collection", "build", "--force", "--output-path", str(output_dir), str(REPO)],
        check=True,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
    )
    (artifact,) = output_dir.glob("gpufleet-inference-*.tar.gz")
    return artifact


def install(bindir: Path) -> Path:
    """Build the artifact and install it into COLLECTIONS (replacing what was there); returns the tarball."""
    artifact = build_artifact(bindir / "ansible-galaxy", ARTIFACT_DIR)
    NEUTRAL_CONFIG.write_text("# Empty on purpose: the installed collection runs on Ansible's defaults.\n")
    if COLLECTIONS.exists():
        shutil.rmtree(COLLECTIONS)
    with tempfile.TemporaryDirectory(prefix="gpufleet-installed-") as work:
        subprocess.run(
            [str(bindir / "ansible-galaxy"), "collection", "install", str(artifact), "-p", str(COLLECTIONS), "--force"],
            check=True,
            cwd=work,
            env=clean_env(bindir),
            stdout=subprocess.DEVNULL,
        )
    log(f"installed {artifact.name} into {INSTALLED.relative_to(REPO)}")
    return artifact


def provide_needed_collections() -> None:
    """Copy the collections NEEDS names from the `ansible` bundle on sys.path into EXTRA_COLLECTIONS."""
    if EXTRA_COLLECTIONS.exists():
        shutil.rmtree(EXTRA_COLLECTIONS)
    for fqcn in sorted({c for needed in NEEDS.values() for c in needed}):
        namespace, name = fqcn.split(".")
        sources = [
            Path(entry, "ansible_collections", namespace, name)
            for entry in sys.path
            if entry and not Path(entry).resolve().is_relative_to(REPO / "collections")
        ]
        source = next((s for s in sources if (s / "MANIFEST.json").is_file()), None)
        if source is None:
            raise SystemExit(
                f"installed_collection: {fqcn} is not in this Python's `ansible` bundle; install it with "
                f"ansible-galaxy collection install {fqcn} -p {EXTRA_COLLECTIONS}"
            )
        shutil.copytree(source, EXTRA_COLLECTIONS / "ansible_collections" / namespace / name)


def fqcn_playbooks(root: Path) -> list[str]:
    """The playbooks under root/playbooks that an FQCN can name, sorted."""
    return sorted(p.stem for p in (root / "playbooks").glob("*.yml") if FQCN_NAME.match(p.stem))


def syntax_check(bindir: Path, names: list[str], extra: bool = False) -> tuple[int, str, list[str]]:
    """`ansible-playbook gpufleet.inference.NAME... --syntax-check` in one run, from a directory
    outside the checkout; returns (rc, output, the playbook file each FQCN resolved to)."""
    with tempfile.TemporaryDirectory(prefix="gpufleet-installed-") as work:
        proc = subprocess.run(
            [str(bindir / "ansible-playbook"), *(f"{NAMESPACE_NAME}.{name}" for name in names), "--syntax-check"],
            cwd=work,
            env=clean_env(bindir, extra=extra),
            capture_output=True,
            text=True,
            check=False,
        )
    resolved = [line.split(":", 1)[1].strip() for line in proc.stdout.splitlines() if line.startswith("playbook: ")]
    return proc.returncode, proc.stdout + proc.stderr, resolved


def shell_exports(bindir: Path) -> str:
    env = clean_env(bindir)
    lines = [f"export {k}={shlex.quote(env[k])}" for k in ("PATH", "VIRTUAL_ENV", *CONTROLLED)]
    return "\n".join(["unset PYTHONPATH", *lines])


def check_playbooks(bindir: Path, names: list[str], extra: bool = False) -> list[str]:
    """Syntax-check names in one run; when it fails, each alone to name every one that fails.
    Logs each result; returns the names that fail."""
    suffix = f" (with {', '.join(sorted({c for n in names for c in NEEDS.get(n, ())}))})" if extra else ""
    rc, output, resolved = syntax_check(bindir, names, extra)
    if rc == 0 and len(resolved) == len(names):
        for name, path in zip(names, resolved):
            log(f"syntax ok: {NAMESPACE_NAME}.{name}{suffix} -> {path}")
        return []
    failed = []
    for name in names:
        rc, output, resolved = syntax_check(bindir, [name], extra)
        if rc == 0:
            log(f"syntax ok: {NAMESPACE_NAME}.{name}{suffix} -> {resolved[0]}")
            continue
        failed.append(name)
        print(output, end="" if output.endswith("\n") else "\n")
        log(f"syntax check FAILED (rc={rc}): {NAMESPACE_NAME}.{name}{suffix}")
    return failed


def check(_args: argparse.Namespace) -> int:
    bindir = ensure_venv(VENV, REQUIREMENTS, CONSTRAINTS)
    install(bindir)
    names = fqcn_playbooks(INSTALLED)
    if not names:
        log(f"no playbook found under {INSTALLED / 'playbooks'}")
        return 1
    stale = sorted(set(NEEDS) - set(names))
    if stale:
        log(f"NEEDS names playbooks the collection does not have: {', '.join(stale)}")
        return 1
    failed = check_playbooks(bindir, [n for n in names if n not in NEEDS])
    needing = [n for n in names if n in NEEDS]
    if needing:
        provide_needed_collections()
        failed += check_playbooks(bindir, needing, extra=True)
    if failed:
        log(f"{len(failed)} of {len(names)} playbooks fail from the installed copy: {', '.join(sorted(failed))}")
        return 1
    log(f"all {len(names)} playbooks pass --syntax-check by FQCN from the installed copy")
    log("to run one from the installed copy: python3 scripts/installed_collection.py playbook NAME [ARGS...]")
    return 0


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 is standard error inside: our log lines and the output of every
    subprocess (venv, pip, ansible-galaxy) are progress, not the result printed after."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_env(_args: argparse.Namespace) -> int:
    # Standard output is for eval: the exports alone, also on the run that makes the venv.
    with stdout_to_stderr():
        bindir = ensure_venv(VENV, REQUIREMENTS, CONSTRAINTS)
        if not (INSTALLED / "MANIFEST.json").is_file():
            install(bindir)
    print(shell_exports(bindir))
    return 0


def recap_problems(output: str) -> list[str]:
    """What makes a run's PLAY RECAP not a clean second run: no host, or a host that changed,
    failed or was unreachable."""
    recap = {m["host"]: m for m in RECAP.finditer(output)}
    if not recap:
        return ["no PLAY RECAP with a host: the run played against no host"]
    return [
        f"{host}: changed={m['changed']} unreachable={m['unreachable']} failed={m['failed']}"
        for host, m in sorted(recap.items())
        if (m["changed"], m["unreachable"], m["failed"]) != ("0", "0", "0")
    ]


def playbook(args: argparse.Namespace) -> int:
    """Run gpufleet.inference.NAME from a fresh install of the current artifact, in the caller's
    directory (paths such as -i are relative to it). The caller's ANSIBLE_* settings pass
    through, except those in CONTROLLED."""
    bindir = ensure_venv(VENV, REQUIREMENTS, CONSTRAINTS)
    install(bindir)
    if args.name in NEEDS:
        provide_needed_collections()
    argv = [str(bindir / "ansible-playbook"), f"{NAMESPACE_NAME}.{args.name}", *args.args]
    log(" ".join(argv))
    env = clean_env(bindir, keep_ansible=True, extra=args.name in NEEDS)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        sys.stdout.write(line)
        lines.append(line)
    rc = proc.wait()
    if rc != 0:
        log(f"{NAMESPACE_NAME}.{args.name} failed from the installed copy (rc={rc})")
        return rc
    if args.unchanged:
        problems = recap_problems("".join(lines))
        if problems:
            log(f"{NAMESPACE_NAME}.{args.name} from the installed copy is not a clean rerun: {'; '.join(problems)}")
            return 1
        log(f"{NAMESPACE_NAME}.{args.name} from the installed copy changed nothing")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.set_defaults(func=check)
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("check", help="build, install, syntax-check every playbook by FQCN (the default)").set_defaults(
        func=check
    )
    sub.add_parser("env", help="print shell exports that run the installed copy").set_defaults(func=print_env)
    run = sub.add_parser("playbook", help="run gpufleet.inference.NAME from the installed copy")
    run.add_argument(
        "--unchanged", action="store_true", help="fail unless every host ran with changed=0, failed=0, unreachable=0"
    )
    run.add_argument("name", help="playbook name, e.g. site")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments for ansible-playbook")
    run.set_defaults(func=playbook)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
