# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure planning for the nvidia_driver role: which installed packages belong to another branch or
kernel-module flavour (a clean switch removes them first), and whether the host needs a reboot
before the installed driver is the one the kernel runs."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# Every package of a driver release carries the release's version (580.105.08-1). Matching the
# name prefix *and* a three-digit branch as the version's first component keeps out packages
# such as nvidia-container-toolkit (1.17.x) that share the prefix but are not the driver.
DRIVER_NAME = re.compile(
    r"^(nvidia-|libnvidia-|libcuda|libnvcuvid|libnvoptix|cuda-drivers|xserver-xorg-video-nvidia|firmware-nvidia)"
)
PINNING_NAME = re.compile(r"^nvidia-driver-pinning-([0-9]{3})$")
# Kernel-module packages: Debian-style names in NVIDIA's debian12 repository, Ubuntu-style
# branch-named ones (nvidia-dkms-580-open) in the ubuntu22.04/24.04 repositories.
OPEN_MODULES = re.compile(r"^(nvidia-kernel-open-dkms|nvidia-dkms-([0-9]{3}-)?open)$")
PROPRIETARY_MODULES = re.compile(r"^(nvidia-kernel-dkms|nvidia-dkms(-[0-9]{3})?)$")
# What a flavour switch at the same branch removes besides the other flavour's modules.
# (Ubuntu's branch-named driver metapackages, nvidia-driver-580-open / nvidia-driver-580, too.)
FLAVOUR_META = {
    "open": re.compile(r"^(nvidia-open(-[0-9]{3})?|nvidia-driver-[0-9]{3}-open)$"),
    "proprietary": re.compile(r"^(cuda-drivers(-[0-9]{3})?|nvidia-driver-[0-9]{3})$"),
}


def upstream_version(version):
    """580.105.08 from 1:580.105.08-1ubuntu1 (epoch and Debian revision dropped)."""
    version = str(version).split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def branch_of(version):
    head = upstream_version(version).split(".", 1)[0]
    return head if re.match(r"^[0-9]{3}$", head) else None


def _installed(packages):
    """name -> version from ansible_facts.packages (name -> list of {version, ...})."""
    found = {}
    for name, entries in (packages or {}).items():
        if entries:
            found[name] = str(entries[0].get("version", ""))
    return found


def driver_plan(packages, branch, kernel_modules):
    """What the host has, and what a clean switch to ``branch``/``kernel_modules`` removes first.

    Returns installed_branches (sorted), installed_modules ('open', 'proprietary' or None),
    installed_version (upstream version of the kernel-module package, or None), pinning (the
    branches of installed nvidia-driver-pinning-* packages), remove (package names), purge (the
    pinning packages among them: their apt preferences file is a conffile, which a plain remove
    would leave behind, still pinning the old branch) and switch (bool).
    """
    branch = str(branch)
    installed = _installed(packages)
    branches, remove, pinning = set(), set(), []
    modules, module_version = None, None
    for name, version in sorted(installed.items()):
        pin = PINNING_NAME.match(name)
        if pin:
            pinning.append(pin.group(1))
            if pin.group(1) != branch:
                remove.add(name)
            continue
        if not DRIVER_NAME.match(name):
            continue
        package_branch = branch_of(version)
        if package_branch is None:
            continue
        branches.add(package_branch)
        if package_branch != branch:
            remove.add(name)
        if OPEN_MODULES.match(name):
            modules, module_version = "open", upstream_version(version)
        elif PROPRIETARY_MODULES.match(name):
            modules, module_version = "proprietary", upstream_version(version)
    if modules and modules != kernel_modules:
        for name in installed:
            pattern = OPEN_MODULES if modules == "open" else PROPRIETARY_MODULES
            if pattern.match(name) or FLAVOUR_META[modules].match(name):
                remove.add(name)
    return {
        "installed_branches": sorted(branches),
        "installed_modules": modules,
        "installed_version": module_version,
        "pinning": sorted(pinning),
        "remove": sorted(remove),
        "purge": sorted(name for name in remove if PINNING_NAME.match(name)),
        "switch": bool(remove),
    }


def reboot_plan(gpu_count, container, loaded_version, installed_version, nouveau_loaded):
    """Whether the running kernel still has to pick up the installed driver.

    Returns ``{"required": bool, "reason": str, "skipped": str}``; ``skipped`` explains why the
    question does not apply on this host (a container, no GPU), and is empty otherwise.
    """
    if container:
        return {
            "required": False,
            "reason": "",
            "skipped": "running in a container (%s): the kernel and its modules belong to the host, "
            "so the nvidia module is neither built, loaded nor rebooted into here" % container,
        }
    if not gpu_count:
        return {
            "required": False,
            "reason": "",
            "skipped": "no NVIDIA GPU on the PCI bus: the driver is installed, but there is nothing to load it for",
        }
    loaded = upstream_version(loaded_version) if loaded_version else None
    if nouveau_loaded:
        reason = "nouveau is loaded and holds the GPUs; it is blacklisted from the next boot on"
    elif installed_version is None:
        reason = "no NVIDIA kernel-module package is installed"
        return {"required": False, "reason": reason, "skipped": ""}
    elif loaded is None:
        reason = "the nvidia kernel module is not loaded (installed: %s)" % installed_version
    elif loaded != upstream_version(installed_version):
        reason = (
            "the loaded nvidia module is %s but %s is installed; NVML answers 'Driver/library version "
            "mismatch' until the host boots the new module" % (loaded, upstream_version(installed_version))
        )
    else:
        return {"required": False, "reason": "nvidia %s is loaded and installed" % loaded, "skipped": ""}
    return {"required": True, "reason": reason, "skipped": ""}


# The role's input rules (the _role_problems filter). Settings: the role's variables by name.
BRANCH = re.compile(r"^[0-9]{3}\Z")
CUDA_VERSION = re.compile(r"^[0-9]+\.[0-9]+\Z")


def settings_problems(settings):
    """One message per bad variable of the nvidia_driver role, naming its value and the fix."""
    problems = []
    branch = settings.get("nvidia_driver_branch")
    if not BRANCH.match(str(branch)):
        problems.append('nvidia_driver_branch=%s must be a three-digit branch such as "580"' % (branch,))
    modules = settings.get("nvidia_driver_kernel_modules")
    if modules not in ("open", "proprietary"):
        problems.append("nvidia_driver_kernel_modules=%s must be open or proprietary" % (modules,))
    reboot_ok = settings.get("nvidia_driver_reboot_ok")
    if reboot_ok is not None and not isinstance(reboot_ok, bool):
        problems.append("nvidia_driver_reboot_ok=%s must be null, true or false" % (reboot_ok,))
    versions = settings.get("nvidia_driver_cuda_versions")
    if not isinstance(versions, list) or not all(CUDA_VERSION.match(str(version)) for version in versions):
        problems.append(
            'nvidia_driver_cuda_versions=%s must list CUDA toolkit versions as "X.Y" strings, for example ["12.8"], '
            "or be empty" % (versions,)
        )
    return problems
