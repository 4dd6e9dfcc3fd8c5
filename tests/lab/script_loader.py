# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import the checkout's scripts and module_utils for their tests, as modules from their folders
(scripts/ is not a package): the folder goes on sys.path once, and the import is an ordinary one."""

import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_script(relative_path):
    """The module of REPO/relative_path (a .py file), imported by its name from its folder."""
    path = REPO / relative_path
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    return importlib.import_module(path.stem)
