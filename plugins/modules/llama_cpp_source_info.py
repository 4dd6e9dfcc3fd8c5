#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a llama.cpp source tarball: where the tree is, its checksum and its flag dialect."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: llama_cpp_source_info
short_description: Inspect a llama.cpp source tarball without building it
version_added: 0.1.0
description:
  - Finds the llama.cpp tree inside a source tarball (a release tarball, or an sdist such as
    C(llama-cpp-python)'s that vendors the tree), computes the tarball's SHA-256, and reads the
    tree's flag dialect from C(common/arg.cpp) and C(tools/rpc/CMakeLists.txt).
  - The dialect says whether C(-fa) takes V(on|off|auto), whether C(--load-mode) exists, whether
    C(--no-mmap)/C(--mlock) still exist, and the name of the RPC worker binary
    (C(ggml-rpc-server), or C(rpc-server) in older trees).
  - The roles run it on the controller, so the llama_server arguments are checked against the
    version being deployed before any host changes. It never changes anything.
author:
  - gpufleet.inference developers (@gpufleet)
extends_documentation_fragment:
  - gpufleet.inference.read_only
options:
  path:
    description: Path of the source tarball (any compression Python's tarfile reads).
    type: path
    required: true
  checksum:
    description:
      - Expected checksum, V(sha256:<hex>). The module fails when the tarball does not match.
    type: str
"""

EXAMPLES = r"""
- name: Inspect the pinned llama.cpp source on the controller
  gpufleet.inference.llama_cpp_source_info:
    path: /var/cache/gpufleet/llama_cpp_python-0.3.36.tar.gz
    checksum: sha256:832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
  delegate_to: localhost
  run_once: true
  register: __llama_cpp_source
"""

RETURN = r"""
sha256:
  description: SHA-256 of the tarball.
  returned: success
  type: str
tree:
  description: Path of the llama.cpp tree inside the tarball (the directory holding C(common/arg.cpp)).
  returned: success
  type: str
  sample: llama_cpp_python-0.3.36/vendor/llama.cpp
dialect:
  description: The flag dialect of the tree.
  returned: success
  type: dict
  contains:
    rpc_server_binary:
      description: Name of the RPC worker binary.
      type: str
      sample: ggml-rpc-server
    flash_attn_value:
      description: Whether C(-fa) takes V(on|off|auto) (true) or is a bare switch (false).
      type: bool
    load_mode:
      description: Whether C(--load-mode) exists.
      type: bool
    legacy_mmap_flags:
      description: Whether C(--no-mmap) and C(--mlock) still exist.
      type: bool
"""

import hashlib
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.inference.plugins.module_utils._llama_cpp import dialect_from_source

ARG_CPP = "common/arg.cpp"
RPC_CMAKELISTS = "tools/rpc/CMakeLists.txt"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_tree(path):
    """Return (tree, arg.cpp text, rpc CMakeLists text) from the shallowest tree in the tarball."""
    found = {}
    with tarfile.open(path) as archive:
        for member in archive:
            if not member.isfile():
                continue
            for wanted in (ARG_CPP, RPC_CMAKELISTS):
                if member.name == wanted or member.name.endswith("/" + wanted):
                    tree = member.name[: -len(wanted)].rstrip("/")
                    found.setdefault(tree, {})[wanted] = archive.extractfile(member).read().decode("utf-8", "replace")
    trees = sorted((t for t in found if ARG_CPP in found[t]), key=lambda t: (t.count("/"), t))
    if not trees:
        return None, "", ""
    tree = trees[0]
    return tree, found[tree][ARG_CPP], found[tree].get(RPC_CMAKELISTS, "")


def main():
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True}, "checksum": {"type": "str"}},
        supports_check_mode=True,
    )
    path = module.params["path"]
    checksum = module.params["checksum"]
    try:
        digest = sha256_of(path)
    except (IOError, OSError) as exc:
        module.fail_json(msg="cannot read the llama.cpp source %s: %s" % (path, exc))
    if checksum:
        algorithm, _sep, expected = checksum.partition(":")
        if algorithm != "sha256" or not expected:
            module.fail_json(msg="checksum=%r must look like sha256:<hex>" % (checksum,))
        if expected.lower() != digest:
            module.fail_json(
                msg="%s has sha256:%s, not the expected %s; the download is corrupt or the pin is wrong"
                % (path, digest, checksum)
            )
    try:
        tree, arg_cpp, rpc_cmake = read_tree(path)
    except (tarfile.TarError, IOError, OSError, EOFError) as exc:
        module.fail_json(msg="%s is not a readable tarball: %s" % (path, exc))
    if tree is None:
        module.fail_json(msg="%s holds no llama.cpp tree (no %s inside); check llama_cpp_source" % (path, ARG_CPP))
    dialect = dialect_from_source(arg_cpp, rpc_cmake)
    if not dialect["rpc_server_binary"]:
        module.fail_json(msg="%s/%s is missing, so this tree has no RPC server" % (tree or ".", RPC_CMAKELISTS))
    module.exit_json(changed=False, sha256=digest, tree=tree, dialect=dialect)


if __name__ == "__main__":
    main()
