# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Unit tests for the llama_cpp_source_info module, run against tarballs built in tmp_path."""

import hashlib
import io
import tarfile

import pytest
from ansible_collections.gpufleet.inference.plugins.modules import llama_cpp_source_info

# Excerpts of common/arg.cpp and tools/rpc/CMakeLists.txt: llama.cpp 0c1e570 (as vendored in the
# llama-cpp-python 0.3.36 sdist), and the same declarations in an older tree.
NEW_ARG_CPP = """\
    add_opt(common_arg({ "-fa", "--flash-attn" }, "[on|off|auto]",
                       string_format("set Flash Attention use ('on', 'off', or 'auto', default: '%s')",
    add_opt(common_arg(
        {"-lm", "--load-mode"}, "MODE",
        "model loading mode (default: auto)\\n"
"""
NEW_RPC = "set(TARGET ggml-rpc-server)\nadd_executable(${TARGET} rpc-server.cpp)\n"
OLD_ARG_CPP = """\
    add_opt(common_arg(
        {"-fa", "--flash-attn"},
        string_format("enable Flash Attention (default: %s)", params.flash_attn ? "enabled" : "disabled"),
    add_opt(common_arg(
        {"--no-mmap"},
        "do not memory-map model (slower load but may reduce pageouts if not using mlock)",
"""
OLD_RPC = "set(TARGET rpc-server)\nadd_executable(${TARGET} rpc-server.cpp)\n"
NEW_DIALECT = {
    "rpc_server_binary": "ggml-rpc-server",
    "flash_attn_value": True,
    "load_mode": True,
    "legacy_mmap_flags": False,
}
OLD_DIALECT = {
    "rpc_server_binary": "rpc-server",
    "flash_attn_value": False,
    "load_mode": False,
    "legacy_mmap_flags": True,
}


def tree(prefix, arg_cpp=NEW_ARG_CPP, rpc=NEW_RPC):
    files = {prefix + "/common/arg.cpp": arg_cpp, prefix + "/CMakeLists.txt": "project(llama.cpp)\n"}
    if rpc is not None:
        files[prefix + "/tools/rpc/CMakeLists.txt"] = rpc
    return files


def make_tarball(path, files, mode="w:gz"):
    """Write ``files`` (name -> text) into a tarball, with their directories as real members."""
    with tarfile.open(str(path), mode) as archive:
        dirs = sorted({name.rsplit("/", i)[0] for name in files for i in range(1, name.count("/") + 1)})
        for directory in dirs:
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            archive.addfile(info)
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_sdist_layout(run_module, tmp_path):
    tarball = make_tarball(
        tmp_path / "pkg-1.0.tar.gz", dict(tree("pkg-1.0/vendor/llama.cpp"), **{"pkg-1.0/setup.py": ""})
    )
    result = run_module(llama_cpp_source_info, {"path": str(tarball)})
    assert result["changed"] is False
    assert result.get("failed") is not True
    assert result["tree"] == "pkg-1.0/vendor/llama.cpp"
    assert result["sha256"] == sha256(tarball)
    assert result["dialect"] == NEW_DIALECT


def test_release_layout_with_old_dialect(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "b1234.tar.gz", tree("llama.cpp-b1234", OLD_ARG_CPP, OLD_RPC))
    result = run_module(llama_cpp_source_info, {"path": str(tarball)})
    assert result["tree"] == "llama.cpp-b1234"
    assert result["dialect"] == OLD_DIALECT


@pytest.mark.parametrize("mode, suffix", [("w", "tar"), ("w:bz2", "tar.bz2"), ("w:xz", "tar.xz")])
def test_other_compressions(run_module, tmp_path, mode, suffix):
    tarball = make_tarball(tmp_path / ("src." + suffix), tree("llama.cpp-b1"), mode)
    assert run_module(llama_cpp_source_info, {"path": str(tarball)})["tree"] == "llama.cpp-b1"


def test_shallowest_tree_wins(run_module, tmp_path):
    # A vendored copy deeper in the tarball must not decide the dialect.
    files = dict(tree("llama.cpp-b2/examples/vendor/llama.cpp", OLD_ARG_CPP, OLD_RPC))
    files.update(tree("llama.cpp-b2"))
    tarball = make_tarball(tmp_path / "two.tar.gz", files)
    result = run_module(llama_cpp_source_info, {"path": str(tarball)})
    assert result["tree"] == "llama.cpp-b2"
    assert result["dialect"] == NEW_DIALECT


def test_shallowest_tree_wins_whatever_the_order(run_module, tmp_path):
    files = dict(tree("b/llama.cpp"))
    files.update(tree("a/deeper/llama.cpp", OLD_ARG_CPP, OLD_RPC))
    tarball = make_tarball(tmp_path / "two.tar.gz", files)
    assert run_module(llama_cpp_source_info, {"path": str(tarball)})["tree"] == "b/llama.cpp"


def test_matching_checksum(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "src.tar.gz", tree("llama.cpp-b1"))
    digest = sha256(tarball)
    assert run_module(llama_cpp_source_info, {"path": str(tarball), "checksum": "sha256:" + digest})["sha256"] == digest
    # The hex may be upper case, as some release pages print it.
    assert (
        run_module(llama_cpp_source_info, {"path": str(tarball), "checksum": "sha256:" + digest.upper()})["sha256"]
        == digest
    )


def test_checksum_mismatch_names_both_sums(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "src.tar.gz", tree("llama.cpp-b1"))
    expected = "sha256:" + "0" * 64
    result = run_module(llama_cpp_source_info, {"path": str(tarball), "checksum": expected}, failed=True)
    assert result["failed"] is True
    assert result["msg"] == (
        f"{tarball} has sha256:{sha256(tarball)}, not the expected {expected}; "
        "the download is corrupt or the pin is wrong"
    )


@pytest.mark.parametrize("checksum", ["md5:abc", "sha256:", "0" * 64, "sha1:" + "0" * 40])
def test_bad_checksum_format(run_module, tmp_path, checksum):
    tarball = make_tarball(tmp_path / "src.tar.gz", tree("llama.cpp-b1"))
    result = run_module(llama_cpp_source_info, {"path": str(tarball), "checksum": checksum}, failed=True)
    assert result["msg"] == f"checksum={checksum!r} must look like sha256:<hex>"


def test_no_tree(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "other.tar.gz", {"other-1.0/src/main.c": "int main(){}\n"})
    result = run_module(llama_cpp_source_info, {"path": str(tarball)}, failed=True)
    assert result["msg"] == (f"{tarball} holds no llama.cpp tree (no common/arg.cpp inside); check llama_cpp_source")


def test_rpc_cmakelists_alone_is_no_tree(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "rpc.tar.gz", {"x/tools/rpc/CMakeLists.txt": NEW_RPC})
    result = run_module(llama_cpp_source_info, {"path": str(tarball)}, failed=True)
    assert "holds no llama.cpp tree" in result["msg"]


def test_not_a_tarball(run_module, tmp_path):
    path = tmp_path / "src.tar.gz"
    path.write_bytes(b"<html>404 Not Found</html>\n")
    result = run_module(llama_cpp_source_info, {"path": str(path)}, failed=True)
    assert result["msg"].startswith(f"{path} is not a readable tarball: ")


def test_truncated_tarball(run_module, tmp_path):
    whole = make_tarball(tmp_path / "whole.tar.gz", tree("llama.cpp-b1"))
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(whole.read_bytes()[:200])
    result = run_module(llama_cpp_source_info, {"path": str(path)}, failed=True)
    assert result["msg"].startswith(f"{path} is not a readable tarball: ")


def test_missing_file(run_module, tmp_path):
    path = tmp_path / "absent.tar.gz"
    result = run_module(llama_cpp_source_info, {"path": str(path)}, failed=True)
    assert result["msg"].startswith(f"cannot read the llama.cpp source {path}: ")
    assert "No such file or directory" in result["msg"]


def test_tree_without_rpc_server(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "norpc.tar.gz", tree("llama.cpp-b1", rpc=None))
    result = run_module(llama_cpp_source_info, {"path": str(tarball)}, failed=True)
    assert result["msg"] == ("llama.cpp-b1/tools/rpc/CMakeLists.txt is missing, so this tree has no RPC server")


def test_check_mode_gives_the_same_answer(run_module, tmp_path):
    tarball = make_tarball(tmp_path / "src.tar.gz", tree("llama.cpp-b1"))
    normal = run_module(llama_cpp_source_info, {"path": str(tarball)})
    checked = run_module(llama_cpp_source_info, {"path": str(tarball), "_ansible_check_mode": True})
    assert checked.get("skipped") is not True
    for key in ("changed", "sha256", "tree", "dialect"):
        assert checked[key] == normal[key]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.tar.gz"]
