"""Local stand-in for ansible-test's pip bootstrap script (get-pip-<version>.py).

ansible-test downloads get-pip from a host our machines cannot reach and caches it as
~/.ansible/test/cache/get_pip_<version>.py; scripts/run_tests.py writes this file there on every
run. ansible-test runs it inside a fresh virtual environment with pip-install arguments
(``pip==24.2`` plus get-pip's own ``--no-setuptools``/``--no-wheel``). We bring pip in with the
interpreter's bundled ensurepip, then let that pip install the exact version requested from PyPI.
"""

import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel")


def main():
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    subprocess.check_call([sys.executable, "-m", "ensurepip", "--default-pip"])
    pip = [sys.executable, "-m", "pip", "install", "--cert", "/etc/ssl/certs/ca-certificates.crt"]
    subprocess.check_call([*pip, *args])


if __name__ == "__main__":
    main()
