# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The PEP 517 build backend of gpufleet-agents, in the standard library only.

The roles build the wheel on the controller at every run (`python3 gpufleet_build.py OUT_DIR`, the
agents role); pip uses the same code through pyproject.toml (`pip wheel agents/`). A controller may
have no network and no setuptools, so the backend needs neither.

The wheel is reproducible: its entries are sorted, dated 1980-01-01 and mode 0644, so the same
source gives the same bytes, and a copy to a host changes only when the source did. Files are
read through links: _gpu.py, _vllm_metrics.py and _frontdoor.py are links to the collection's
module_utils in the source tree and ordinary files in the wheel.

Only what the wheel needs is implemented (PEP 517 build_wheel, PEP 427 wheel format, core
metadata 2.1, console scripts); there is no sdist: the collection ships the source tree itself.
"""

import base64
import hashlib
import io
import os
import re
import sys
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: the controller of ansible-core 2.19 has 3.11 or later
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "gpufleet_agents"
SOURCE = os.path.join(ROOT, "src", PACKAGE)
DATE = (1980, 1, 1, 0, 0, 0)
VERSION = re.compile(r'^__version__ = "([0-9][0-9A-Za-z.+-]*)"$', re.M)


def project():
    """The [project] table of pyproject.toml."""
    if tomllib is None:
        raise RuntimeError("building gpufleet-agents needs Python 3.11 or later (tomllib)")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)["project"]


def version():
    """__version__ of the package's __init__.py, the one place it is written."""
    with open(os.path.join(SOURCE, "__init__.py"), encoding="utf-8") as handle:
        found = VERSION.search(handle.read())
    if not found:
        raise RuntimeError(f'{SOURCE}/__init__.py has no __version__ = "X.Y.Z" line')
    return found.group(1)


def sources():
    """(path in the wheel, bytes) of every .py file of the package, sorted, links followed."""
    found = []
    for directory, subdirectories, names in os.walk(SOURCE):
        subdirectories[:] = sorted(name for name in subdirectories if name != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, "rb") as handle:
                    found.append((os.path.relpath(path, os.path.dirname(SOURCE)).replace(os.sep, "/"), handle.read()))
    return sorted(found)


def metadata(table, release):
    """Core metadata 2.1 (packaging.python.org, Core metadata specifications)."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {table['name']}",
        f"Version: {release}",
        f"Summary: {table.get('description', '')}",
        f"License: {table.get('license', '')}",
    ]
    if table.get("requires-python"):
        lines.append(f"Requires-Python: {table['requires-python']}")
    lines += [f"Requires-Dist: {requirement}" for requirement in table.get("dependencies", [])]
    readme = table.get("readme")
    body = ""
    if readme:
        with open(os.path.join(ROOT, readme), encoding="utf-8") as handle:
            body = handle.read()
        lines.append("Description-Content-Type: text/markdown")
    return "\n".join(lines) + "\n\n" + body


def entry_points(table):
    scripts = table.get("scripts", {})
    return "[console_scripts]\n" + "".join(f"{name} = {target}\n" for name, target in sorted(scripts.items()))


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}\n"


def wheel_bytes():
    """(file name, bytes) of the wheel."""
    table, release = project(), version()
    distribution = re.sub(r"[-_.]+", "_", table["name"]).lower()
    dist_info = f"{distribution}-{release}.dist-info"
    entries = [
        *sources(),
        (f"{dist_info}/METADATA", metadata(table, release).encode()),
        (
            f"{dist_info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: gpufleet_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
        (f"{dist_info}/entry_points.txt", entry_points(table).encode()),
    ]
    record = "".join(record_line(path, data) for path, data in entries) + f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in entries:
            info = zipfile.ZipInfo(path, date_time=DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return f"{distribution}-{release}-py3-none-any.whl", buffer.getvalue()


def write_wheel(directory):
    """Write the wheel into directory unless the same bytes are there; return (path, written)."""
    name, data = wheel_bytes()
    path = os.path.join(directory, name)
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return path, False
    except OSError:
        pass
    os.makedirs(directory, exist_ok=True)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, path)  # atomic: two plays building at once never see half a wheel
    return path, True


# PEP 517 hooks -----------------------------------------------------------------------------------


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    path, _written = write_wheel(wheel_directory)
    return os.path.basename(path)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.stderr.write("usage: gpufleet_build.py OUT_DIR (writes the gpufleet-agents wheel, prints its path)\n")
        return 2
    path, written = write_wheel(argv[0])
    sys.stdout.write(f"{path}\n{'written' if written else 'unchanged'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
