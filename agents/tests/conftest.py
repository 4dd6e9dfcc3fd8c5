# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The package's tests run against its source tree: src/ goes on sys.path here, whichever folder
pytest starts in (the agents stage, scripts/stress_tests.py), and on PYTHONPATH for the programs
the tests start as processes (`python -m gpufleet_agents.<program>`)."""

import os
import socket
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))


def program(name):
    """The argv that runs gpufleet_agents.<name> as the console script does."""
    return [sys.executable, "-m", f"gpufleet_agents.{name}"]


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(predicate, timeout=60):
    """Whether predicate() came true; the bound only ends a hang, a slow machine never reaches it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
