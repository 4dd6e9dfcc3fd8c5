# -*- coding: utf-8 -*-
# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The llama_cpp role's input rules (the _role_problems filter): its variables, and whether a CUDA
build knows the architectures to compile for on this host.

The settings are the role's variables by name, plus ``inventory_hostname``,
``ansible_play_hosts_all`` and ``platform``, what the llama_cpp_platform module read on the host
(nvidia_gpu_count, nvidia_pci_ids, nvidia_smi_error, cuda_architectures)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

CHECKSUM = re.compile(r"^sha256:[0-9a-fA-F]{64}\Z")
WHOLE = re.compile(r"^[0-9]+\Z")
# CMAKE_CUDA_ARCHITECTURES entries (cmake-properties(7), CUDA_ARCHITECTURES): a compute
# capability such as 90, 90a or 120f, optionally -real or -virtual, or one of the keywords.
CUDA_ARCH = re.compile(r"^([0-9]{2,3}[a-z]?(-real|-virtual)?|all|all-major|native)\Z")


def cuda_mode(value):
    """llama_cpp_cuda as the role reads it (Jinja's ``| string | lower``): auto, true or false,
    or None when it is none of them."""
    mode = str(value).lower()
    return mode if mode in ("auto", "true", "false") else None


def cuda_architectures(value):
    """llama_cpp_cuda_architectures as strings; [] unless it is a list."""
    return [str(arch) for arch in value] if isinstance(value, list) else []


def settings_problems(settings):
    problems = _variable_problems(settings)
    platform = settings.get("platform") or {}
    cuda = settings.get("llama_cpp_cuda")
    gpus = platform.get("nvidia_gpu_count") or 0
    archs = cuda_architectures(settings.get("llama_cpp_cuda_architectures")) or platform.get("cuda_architectures")
    if (cuda_mode(cuda) == "true" or (cuda_mode(cuda) == "auto" and gpus > 0)) and not archs:
        ids = platform.get("nvidia_pci_ids") or []
        error = platform.get("nvidia_smi_error")
        problems.append(
            "%s: llama_cpp_cuda=%s needs CUDA architectures, and none are known (%s NVIDIA GPU(s) on the PCI bus%s%s). "
            'Set llama_cpp_cuda_architectures (e.g. ["120"] for RTX 5090 / RTX PRO 6000, ["90"] for H100/H200), '
            "or llama_cpp_cuda: false for a CPU-only build."
            % (
                settings.get("inventory_hostname"),
                cuda,
                gpus,
                " " + ", ".join(str(pci_id) for pci_id in ids) if ids else "",
                "; %s" % error if error else "",
            )
        )
    return problems


def _variable_problems(settings):
    problems = []
    cuda = settings.get("llama_cpp_cuda")
    if cuda_mode(cuda) is None:
        problems.append("llama_cpp_cuda=%s (auto, true or false)" % (cuda,))
    archs = settings.get("llama_cpp_cuda_architectures")
    if not isinstance(archs, list):
        problems.append('llama_cpp_cuda_architectures=%s must be a list, such as ["120"]' % (archs,))
    else:
        problems += [
            "llama_cpp_cuda_architectures[%d]=%r is not a CUDA architecture: use compute capabilities such as "
            '"120" (Blackwell) or "90" (Hopper), with an optional letter ("90a") or -real/-virtual, or all, '
            "all-major or native" % (index, arch)
            for index, arch in enumerate(archs)
            if isinstance(arch, bool) or not CUDA_ARCH.match(str(arch))
        ]
    source = settings.get("llama_cpp_source")
    if not isinstance(source, str) or not source:
        problems.append("llama_cpp_source='%s' (a URL or a controller path)" % (source,))
    checksum = settings.get("llama_cpp_source_checksum")
    if not isinstance(checksum, str) or not CHECKSUM.match(checksum):
        problems.append("llama_cpp_source_checksum='%s' (sha256:<64 hex>)" % (checksum,))
    build_host = settings.get("llama_cpp_build_host")
    if build_host != "" and build_host not in (settings.get("ansible_play_hosts_all") or []):
        problems.append("llama_cpp_build_host='%s' (empty, or a host of this play)" % (build_host,))
    jobs = settings.get("llama_cpp_build_jobs")
    if not WHOLE.match(str(jobs)):
        problems.append("llama_cpp_build_jobs=%s (an integer, 0 for all CPUs)" % (jobs,))
    return problems
