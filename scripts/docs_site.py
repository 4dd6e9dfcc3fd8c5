"""Build the collection's docs site with antsibull-docs and Sphinx, and read it back in headless Chromium.

    python3 scripts/docs_site.py build     -> build/docs-site/index.html
    python3 scripts/docs_site.py lint      -> antsibull-docs lint-collection-docs --plugin-docs
    python3 scripts/docs_site.py render --json build/docs-site-pages.json

`build` writes the module, plugin and role pages (roles from meta/argument_specs.yml) with
`antsibull-docs collection --use-current --fail-on-error`, then runs sphinx-build with warnings as
errors and every reference checked (nitpicky). The tools live in build/docs-venv, created from
requirements-docs.txt and reused while that file and the Python version are unchanged.

`render` opens every page of build/docs-site in one headless Chromium, driven over the DevTools
pipe (https://chromedevtools.github.io/devtools-protocol/), and writes what each page shows
(title, headings, links) and every request it made. Chromium is Debian's `chromium`; it is
installed with apt when missing and this runs as root. It gets no network: host names resolve to
nothing and every proxied request goes to a closed port, so a page can load only file:// URLs.

Nothing here reaches Galaxy or the ansible docs site: the collection is found under
build/docs-src/collections, a copy of the checkout's collection files without the private plugins
(names that start with "_": role internals, not public API, docs/architecture.md), and the few labels of
docs.ansible.com that the pages link to come from a small local intersphinx inventory (see
ANSIBLE_DOCS_LABELS).
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTION = "gpufleet.inference"
REQUIREMENTS = REPO / "requirements-docs.txt"
VENV = REPO / "build" / "docs-venv"
STAMP = VENV / ".requirements-sha256"
SRC = REPO / "build" / "docs-src"
RST = SRC / "rst"
SITE = REPO / "build" / "docs-site"
ANSIBLE_DOCS = "https://docs.ansible.com/projects/ansible/devel/"
# Labels of the ansible docs that antsibull-docs' pages refer to, with their page and title
# (docs/docsite/rst/reference_appendices/ in the ansible-documentation repository).
ANSIBLE_DOCS_LABELS = {
    "common_return_values": ("reference_appendices/common_return_values.html", "Return Values"),
    "ansible_configuration_settings": ("reference_appendices/config.html", "Ansible Configuration Settings"),
    # The note on a module that has an action plugin (docs/docsite/rst/plugins/action.rst).
    "action_plugins": ("plugins/action.html", "Action plugins"),
}
BUILTIN_REF = re.compile(r"ansible_collections\.ansible\.builtin\.(\w+)_([a-z]+)\b")

CONF_PY = """\
# Written by scripts/docs_site.py: the conf.py of `antsibull-docs sphinx-init` 2.28.0, with the
# intersphinx inventories read from files instead of the network.
project = 'gpufleet.inference'
copyright = 'gpufleet.inference developers'
title = 'gpufleet.inference documentation'
html_short_title = 'gpufleet.inference documentation'
extensions = ['sphinx.ext.intersphinx', 'sphinx_antsibull_ext']
pygments_style = 'ansible'
highlight_language = 'YAML+Jinja'
html_theme = 'sphinx_ansible_theme'
html_show_sphinx = False
display_version = False
# Dashes are typeset as on docs.ansible.com; quotes stay as the docs write them.
smartquotes_action = 'De'
html_use_modindex = False
html_use_index = False
html_copy_source = False
intersphinx_mapping = {{'ansible_devel': ({url!r}, {inventory!r})}}
default_role = 'any'
nitpicky = True
"""

INDEX_RST = """\
.. Written by scripts/docs_site.py.

.. _docsite_root_index:

gpufleet.inference
==================

The modules, plugins and roles of the gpufleet.inference collection.

.. toctree::
   :maxdepth: 2
   :caption: Collections:

   collections/index

.. toctree::
   :maxdepth: 1
   :caption: Plugin indexes:
   :glob:

   collections/index_*

.. toctree::
   :maxdepth: 1
   :caption: Reference indexes:

   collections/environment_variables
"""

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
    "--disable-gpu",
    "--remote-debugging-pipe",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--no-pings",
    "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter,AutofillServerCommunication",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--proxy-server=127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)
PAGE_TIMEOUT = 60.0
# What each page reports: its title, its h1 and h2 headings without Sphinx's permalink glyph,
# and the absolute URL of every link.
PAGE_SCRIPT = """JSON.stringify((() => {
  const text = (el) => { const c = el.cloneNode(true);
    c.querySelectorAll('.headerlink').forEach((a) => a.remove());
    return c.textContent.replace(/\\s+/g, ' ').trim(); };
  return {title: document.title,
          h1: [...document.querySelectorAll('h1')].map(text),
          h2: [...document.querySelectorAll('h2')].map(text),
          links: [...document.querySelectorAll('a[href]')].map((a) => a.href)};
})())"""


def run(argv: list[str], **kwargs) -> None:
    print("+", " ".join(argv), flush=True)
    subprocess.run(argv, check=True, **kwargs)


def venv_key() -> str:
    digest = hashlib.sha256(REQUIREMENTS.read_bytes())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def ensure_venv() -> Path:
    """build/docs-venv from requirements-docs.txt, recreated only when the file or Python changed."""
    key = venv_key()
    if STAMP.is_file() and STAMP.read_text().strip() == key:
        return VENV / "bin"
    shutil.rmtree(VENV, ignore_errors=True)
    run([sys.executable, "-m", "venv", str(VENV)])
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    # Every package is pinned in the file: --no-deps plus `pip check` fails on one that is not.
    run([*pip, "install", "-q", "--no-deps", "-r", str(REQUIREMENTS)])
    run([*pip, "check"])
    STAMP.write_text(key + "\n")
    return VENV / "bin"


def private(path: Path) -> bool:
    """A plugin the roles use internally: its name starts with "_" (docs/architecture.md)."""
    return path.name.startswith("_")


# What antsibull-docs reads of the collection: its metadata, plugins, roles and extra docs.
PUBLISHED = ("galaxy.yml", "meta", "plugins", "roles", "docs", "README.md", "LICENSE")


def public_view(root: Path) -> None:
    """Make root a copy of the collection as its published docs show it: the checkout's files
    without the private plugins, so antsibull-docs writes no page for a role's internals. A copy,
    not links: antsibull-docs names a plugin's page from the plugin's real path. Private
    module_utils and plugin_utils stay: plugins import them, and they have no pages anyway."""
    if root.is_symlink():  # the whole checkout, as an earlier build linked it
        root.unlink()
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    skip = shutil.ignore_patterns("__pycache__")
    for name in PUBLISHED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=skip)
        elif source.exists():
            shutil.copy2(source, root / name)
    for folder in (root / "plugins").iterdir():
        if folder.is_dir() and folder.name not in ("module_utils", "plugin_utils"):
            for path in folder.iterdir():
                if private(path):
                    path.unlink()


def tool_env(bin_dir: Path) -> dict[str, str]:
    collections = SRC / "collections"
    public_view(collections / "ansible_collections" / "gpufleet" / "inference")
    env = dict(os.environ)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        ANSIBLE_COLLECTIONS_PATH=str(collections),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_NOCOLOR="1",
    )
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return env


def ansible_core_dir(bin_dir: Path) -> Path:
    (site_packages,) = (bin_dir.parent / "lib").glob("python*/site-packages")
    return site_packages / "ansible"


def write_ansible_inventory(bin_dir: Path) -> Path:
    """A local objects.inv for the labels of docs.ansible.com that the generated pages refer to.

    A reference to an ansible.builtin plugin gets its label only when ansible-core ships that
    plugin, so a misspelt one still fails the build as an undefined label.
    """
    lines = [f"{label} std:label -1 {page} {title}" for label, (page, title) in ANSIBLE_DOCS_LABELS.items()]
    core = ansible_core_dir(bin_dir)
    found = set()
    for rst in RST.rglob("*.rst"):
        found.update(BUILTIN_REF.findall(rst.read_text()))
    for name, kind in sorted(found):
        sources = [core / "modules" / f"{name}.py"] if kind == "module" else []
        sources += [core / "plugins" / kind / f"{name}.py", core / "plugins" / kind / f"{name}.yml"]
        if any(path.is_file() for path in sources):
            page = f"collections/ansible/builtin/{name}_{kind}.html"
            lines.append(f"ansible_collections.ansible.builtin.{name}_{kind} std:label -1 {page} -")
    header = "# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
    header += "# The remainder of this file is compressed using zlib.\n"
    inventory = SRC / "ansible_devel.inv"
    inventory.write_bytes(header.encode() + zlib.compress(("\n".join(lines) + "\n").encode()))
    return inventory


def build() -> Path:
    bin_dir = ensure_venv()
    env = tool_env(bin_dir)
    # antsibull-docs wants its output directory writable by its owner only.
    RST.mkdir(parents=True, exist_ok=True)
    RST.chmod(0o755)
    antsibull = [str(bin_dir / "antsibull-docs"), "collection", "--use-current", "--fail-on-error"]
    run([*antsibull, "--cleanup", "everything", "--dest-dir", str(RST), COLLECTION], env=env, cwd=SRC)
    (RST / "index.rst").write_text(INDEX_RST)
    inventory = write_ansible_inventory(bin_dir)
    (SRC / "conf.py").write_text(CONF_PY.format(url=ANSIBLE_DOCS, inventory=str(inventory)))
    shutil.rmtree(SITE, ignore_errors=True)
    sphinx = [str(bin_dir / "sphinx-build"), "-b", "html", "-q", "-W", "--keep-going", "-c", str(SRC)]
    run([*sphinx, "-d", str(SRC / "doctrees"), str(RST), str(SITE)], env=env, cwd=SRC)
    index = SITE / "index.html"
    print(f"docs site: {index.as_uri()}")
    return index


def lint() -> None:
    bin_dir = ensure_venv()
    env = tool_env(bin_dir)
    run([str(bin_dir / "antsibull-docs"), "lint-collection-docs", "--plugin-docs", str(REPO)], env=env, cwd=SRC)


def ensure_chromium() -> str:
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SystemExit("chromium is missing: install Debian's package (apt-get install chromium) and rerun")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        run(["apt-get", "update", "-q"], env=env)
        run(install, env=env)
    return shutil.which("chromium") or "chromium"


class DevTools:
    """The Chrome DevTools protocol over --remote-debugging-pipe: JSON messages ended by NUL on fds 3 and 4."""

    def __init__(self, chromium: str, profile: str) -> None:
        to_chromium, self._writer = os.pipe()
        self._reader, from_chromium = os.pipe()
        # Chromium reads fd 3 and writes fd 4. Both ends move above the stdio range first, so that
        # placing them on 3 and 4 in the child cannot overwrite one with the other.
        child_in, child_out = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (to_chromium, from_chromium))
        os.close(to_chromium)
        os.close(from_chromium)
        self.stderr = tempfile.TemporaryFile()
        devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        actions = [(os.POSIX_SPAWN_DUP2, devnull, 0), (os.POSIX_SPAWN_DUP2, devnull, 1)]
        actions += [(os.POSIX_SPAWN_DUP2, self.stderr.fileno(), 2)]
        actions += [(os.POSIX_SPAWN_DUP2, child_in, 3), (os.POSIX_SPAWN_DUP2, child_out, 4)]
        argv = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"]
        # posix_spawn, not subprocess: subprocess cannot put a pipe on a given fd number without a preexec_fn.
        self.pid = os.posix_spawn(chromium, argv, os.environ, file_actions=actions)
        for fd in (devnull, child_in, child_out):
            os.close(fd)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._reader], [], [], left)[0]:
                raise TimeoutError(f"chromium sent nothing for {PAGE_TIMEOUT:.0f} s: {self.chromium_log()}")
            chunk = os.read(self._reader, 1 << 16)
            if not chunk:
                raise EOFError(f"chromium exited: {self.chromium_log()}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._writer, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + PAGE_TIMEOUT
        while True:
            reply = self._receive(deadline)
            if reply.get("id") != self._next_id:
                self.events.append(reply)
            elif "error" in reply:
                raise RuntimeError(f"{method}: {reply['error']}")
            else:
                return reply["result"]

    def wait_for(self, method: str) -> None:
        deadline = time.monotonic() + PAGE_TIMEOUT
        while not any(event.get("method") == method for event in self.events):
            self.events.append(self._receive(deadline))

    def chromium_log(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-4000:]

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (EOFError, TimeoutError, RuntimeError, OSError):
            os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while os.waitpid(self.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                break
            time.sleep(0.1)
        os.close(self._writer)
        os.close(self._reader)
        self.stderr.close()


def render(site: Path) -> dict[str, dict]:
    """Load every page of the site in one Chromium; what each shows and requested, by relative path."""
    chromium = ensure_chromium()
    pages = sorted(site.rglob("*.html"))
    if not pages:
        raise SystemExit(f"no pages under {site}: run `python3 scripts/docs_site.py build` first")
    results = {}
    with tempfile.TemporaryDirectory(prefix="docs-site-chromium-") as profile:
        browser = DevTools(chromium, profile)
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = browser.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            browser.send("Page.enable", session=session)
            browser.send("Network.enable", session=session)
            for page in pages:
                browser.events.clear()
                navigation = browser.send("Page.navigate", {"url": page.as_uri()}, session=session)
                result = {"error": navigation.get("errorText")}
                if not result["error"]:
                    browser.wait_for("Page.loadEventFired")
                    shown = browser.send(
                        "Runtime.evaluate", {"expression": PAGE_SCRIPT, "returnByValue": True}, session=session
                    )
                    result.update(json.loads(shown["result"]["value"]))
                requests = {}
                for event in browser.events:
                    if event.get("method") == "Network.requestWillBeSent":
                        requests[event["params"]["requestId"]] = event["params"]["request"]["url"]
                result["requests"] = sorted(set(requests.values()))
                result["failed"] = sorted(
                    requests.get(event["params"]["requestId"], "?")
                    for event in browser.events
                    if event.get("method") == "Network.loadingFailed"
                )
                results[page.relative_to(site).as_posix()] = result
        finally:
            browser.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("build", help="antsibull-docs and sphinx-build into build/docs-site")
    commands.add_parser("lint", help="antsibull-docs lint-collection-docs --plugin-docs")
    render_parser = commands.add_parser("render", help="load every page in headless Chromium")
    render_parser.add_argument("--site", type=Path, default=SITE)
    render_parser.add_argument("--json", type=Path, required=True, help="where to write what each page shows")
    args = parser.parse_args()
    try:
        if args.command == "build":
            build()
        elif args.command == "lint":
            lint()
        else:
            pages = render(args.site.resolve())
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(pages, indent=1, sort_keys=True) + "\n")
            print(f"{len(pages)} pages rendered: {args.json}")
    except subprocess.CalledProcessError as exc:
        print(f"docs_site.py {args.command}: {exc.cmd[0]} failed with exit status {exc.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
