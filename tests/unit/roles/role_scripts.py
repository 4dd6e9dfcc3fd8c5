"""Load a role's program (an extensionless Python file under roles/<role>/files/) as a module for its tests.

The roles install these files and run them as `/usr/bin/python3 FILE`; they have no .py suffix,
so a plain import cannot find them.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def role_script(role: str, name: str) -> Path:
    return REPO / "roles" / role / "files" / name


def load_role_script(role: str, name: str):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(role_script(role, name)))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
