"""Write the execution environment's build context: build/ee-context/ (no image is built).

    python3 scripts/ee_build_context.py

Builds the collection artifact (`ansible-galaxy collection build`, with the clean venv of
scripts/installed_collection.py), copies it to build/ee/gpufleet-inference.tar.gz, where
execution-environment.yml's additional_build_files takes it from, and runs
`ansible-builder create` into a fresh build/ee-context/ with ansible-builder from
requirements-ee.txt (its own venv, build/ee-venv/, remade when that file changes).
`podman build build/ee-context` makes the image where a registry is reachable
(docs/execution-environment.md).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from installed_collection import BUILD, CONSTRAINTS, REPO, REQUIREMENTS, VENV, build_artifact, ensure_venv, log

EE_FILE = REPO / "execution-environment.yml"
EE_REQUIREMENTS = REPO / "requirements-ee.txt"
EE_VENV = BUILD / "ee-venv"
# A name without the version, so that execution-environment.yml needs no edit on a release; the
# version is in the tarball's MANIFEST.json, which ansible-galaxy reads.
EE_ARTIFACT = BUILD / "ee" / "gpufleet-inference.tar.gz"
CONTEXT = BUILD / "ee-context"


def say(message: str) -> None:
    log(message, who="ee_build_context")


def create_context() -> None:
    galaxy_bin = ensure_venv(VENV, REQUIREMENTS, CONSTRAINTS)
    artifact = build_artifact(galaxy_bin / "ansible-galaxy", BUILD / "artifact")
    EE_ARTIFACT.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(artifact, EE_ARTIFACT)
    say(f"copied {artifact.name} to {EE_ARTIFACT.relative_to(REPO)}")
    builder_bin = ensure_venv(EE_VENV, EE_REQUIREMENTS)
    if CONTEXT.exists():
        shutil.rmtree(CONTEXT)
    subprocess.run(
        [
            str(builder_bin / "ansible-builder"),
            "create",
            "--file",
            str(EE_FILE),
            "--context",
            str(CONTEXT),
            "--output-filename",
            "Containerfile",
            "--verbosity",
            "1",
        ],
        check=True,
        cwd=REPO,
    )
    say(f"build context in {CONTEXT.relative_to(REPO)} (Containerfile, _build/)")


if __name__ == "__main__":
    create_context()
    sys.exit(0)
