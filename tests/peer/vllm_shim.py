"""pytest plugin (-p vllm_shim) for vLLM's OpenAI-server tests run against octet
(scripts/peer_tests.sh). The vendored test files are not edited; this plugin, loaded before
them, puts stand-ins into sys.modules:

- tests.utils: RemoteOpenAIServer with vLLM's interface (url_for, url_root, get_client,
  get_async_client, host, port, context manager), launching tests/peer/launch_octet.py
  (`vllm serve` argv translated to `octet serve`) instead of `vllm serve`; VLLM_PATH (the
  unpacked sdist, for examples/*.jinja); ROCM_EXTRA_ARGS = [].
  Their tests/utils.py imports torch, CUDA helpers and vLLM's engine.
- vllm.tokenizers.get_tokenizer: Hugging Face AutoTokenizer of SmolLM2 ($PEER_HF_TOKENIZER),
  the tokenizer of the model octet serves, whatever name the test passes; likewise
  transformers.AutoTokenizer.from_pretrained for a Hugging Face Hub name.
- vllm.transformers_utils.repo_utils.hf_api().snapshot_download: an empty local directory (no
  network; used for LoRA adapters, which octet has not, and for tool-use models, which become
  SmolLM2).
- vllm.utils.network_utils.get_open_port: a free TCP port.
- vllm.platforms.current_platform: every is_*() is False (not ROCm, not TPU, ...).
- vllm.envs.VLLM_USE_RUST_FRONTEND: False (vLLM's default; read by a skipif at import).
- vllm.version: __version__ 0.34.0 (the vendored tests' version) and _prev_minor_version.
- torch: only torch.long / torch.int64 and torch.iinfo (one seed-range test uses them).
- Everything else under vllm (request classes, SamplingParams, envs, engine) and
  tests.conftest: placeholders. A test that calls, instantiates or reads an attribute of one
  is SKIPPED with "needs vLLM internals (NAME)": it tests vLLM's Python objects in-process,
  not the HTTP server, and cannot run against another server. Placeholders are never passes.
- the local_asset_server fixture (their tests/conftest.py, images for multimodal cases):
  requested by text cases too; using it skips.
"""
import importlib
import importlib.abc
import importlib.machinery
import os
import socket
import subprocess
import sys
import tempfile
import time
import types
from collections import namedtuple
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
VLLM_SRC = Path(os.environ.get("PEER_VLLM_SRC", "."))
HF_TOKENIZER = os.environ.get("PEER_HF_TOKENIZER", "")


_in_test = [False]


def pytest_runtest_setup(item):
    _in_test[0] = True


def pytest_runtest_teardown(item):
    _in_test[0] = False


def _skip(name):
    if name.rsplit(".", 1)[-1].startswith("__"):
        raise AttributeError(name)
    if not _in_test[0]:  # at import or collection: the file is reported as not collected
        raise ImportError("needs vLLM internals (%s) at import" % name)
    pytest.skip("needs vLLM internals (%s): an in-process test of vLLM's Python objects, "
                "not of the HTTP server" % name)


class _StubMeta(type):
    def __call__(cls, *a, **k):
        _skip(cls._peer_name)

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        _skip(cls._peer_name + "." + attr)

    def __getitem__(cls, item):
        return cls


def _stub_class(name):
    # An Exception subclass so that `pytest.raises(Stub)` and `except Stub` are valid syntax;
    # instantiating it or reading an attribute skips the test.
    return _StubMeta(name.rsplit(".", 1)[-1], (Exception,), {"_peer_name": name})


class _StubModule(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self.__name__ == "vllm" and attr.islower():  # `from vllm import version, envs`
            return importlib.import_module("vllm." + attr)
        if attr.isupper():  # a setting such as envs.VLLM_MAX_N_SEQUENCES: no placeholder value
            _skip(self.__name__ + "." + attr)
        value = _stub_class(self.__name__ + "." + attr)
        setattr(self, attr, value)
        return value


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves vllm and vllm.* (any depth) as _StubModule packages."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "vllm" or fullname.startswith("vllm."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _StubModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        _fill(module)


# ---- functional stand-ins -------------------------------------------------------------------

_tokenizer = None


def get_tokenizer(*args, **kwargs):
    """SmolLM2's Hugging Face tokenizer (what octet serves), whatever model is named."""
    global _tokenizer
    if _tokenizer is None:
        from transformers import AutoTokenizer
        _tokenizer = AutoTokenizer.from_pretrained(HF_TOKENIZER)
    return _tokenizer


class _HfApi:
    def snapshot_download(self, repo_id=None, *args, **kwargs):
        d = Path(tempfile.gettempdir()) / "peer-snapshots" / str(repo_id).replace("/", "--")
        d.mkdir(parents=True, exist_ok=True)
        return str(d)


def get_open_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Platform:
    def __getattr__(self, attr):
        if attr.startswith("is_"):
            return lambda *a, **k: False
        _skip("vllm.platforms.current_platform." + attr)


def _fill(module):
    name = module.__name__
    if name == "vllm.tokenizers":
        module.get_tokenizer = get_tokenizer
    elif name == "vllm.transformers_utils.repo_utils":
        module.hf_api = lambda *a, **k: _HfApi()
    elif name == "vllm.utils.network_utils":
        module.get_open_port = get_open_port
    elif name == "vllm.platforms":
        module.current_platform = _Platform()
    elif name == "vllm.envs":  # read at import by tool_use/test_chat_completions.py
        module.VLLM_USE_RUST_FRONTEND = False  # vLLM's default (its Python frontend)
    elif name == "vllm.version":  # the vendored tests' version (flag values only)
        module.__version__ = "0.34.0"
        module._prev_minor_version = lambda: "0.33"


# ---- tests.utils --------------------------------------------------------------------------

class RemoteOpenAIServer:
    """vLLM's tests.utils.RemoteOpenAIServer interface over octet (launch_octet.py)."""

    DUMMY_API_KEY = "token-abc123"

    def __init__(self, model, vllm_serve_args, *, env_dict=None, seed=0, auto_port=True,
                 max_wait_seconds=None, override_hf_configs=None):
        args = list(vllm_serve_args)
        if "--uds" in args:
            pytest.skip("--uds: vLLM's Unix-socket serving (not in issue 25's scope)")
        if auto_port:
            if "-p" in args or "--port" in args:
                raise ValueError("You have manually specified the port when `auto_port=True`.")
            args += ["--port", str(get_open_port())]
        if seed is not None:
            args += ["--seed", str(seed)]
        self.host, self.port = "127.0.0.1", None
        for i, a in enumerate(args):
            if a == "--port":
                self.port = int(args[i + 1])
            elif a.startswith("--port="):
                self.port = int(a.split("=", 1)[1])
            elif a == "--host":
                self.host = args[i + 1]
        self.uds = None
        self.show_hidden_metrics = any(a.startswith("--show-hidden-metrics-for-version")
                                       for a in args)
        env = dict(os.environ, **(env_dict or {}))
        cmd = [sys.executable, str(HERE / "launch_octet.py"), "vllm", "serve", model, *args]
        print("Launching octet for vLLM's RemoteOpenAIServer: " + " ".join(cmd))
        self.proc = subprocess.Popen(cmd, env=env, stdout=sys.stdout, stderr=sys.stderr,
                                     start_new_session=True)
        try:
            self._wait_for_server(max_wait_seconds or 480)
        except BaseException:
            self._shutdown()
            raise

    def _wait_for_server(self, timeout):
        import requests
        start = time.time()
        while True:
            try:
                if requests.get(self.url_for("health")).status_code == 200:
                    return
            except Exception:
                if self.proc.poll() is not None:
                    raise RuntimeError("Server exited unexpectedly.") from None
                time.sleep(0.2)
                if time.time() - start > timeout:
                    raise RuntimeError("Server failed to start in time.") from None

    def _shutdown(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._shutdown()

    @property
    def url_root(self):
        return "http://%s:%d" % (self.host, self.port)

    def url_for(self, *parts):
        return self.url_root + "/" + "/".join(p.strip("/") for p in parts if p)

    def get_client(self, **kwargs):
        import openai
        kwargs.setdefault("timeout", 600)
        return openai.OpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY,
                             max_retries=0, **kwargs)

    def get_async_client(self, **kwargs):
        import openai
        kwargs.setdefault("timeout", 600)
        return openai.AsyncOpenAI(base_url=self.url_for("v1"), api_key=self.DUMMY_API_KEY,
                                  max_retries=0, **kwargs)


def _patch_auto_tokenizer():
    """transformers.AutoTokenizer.from_pretrained(HUB_NAME) (test_metrics.py calls it with its
    model's name) loads SmolLM2's tokenizer: no network here, and it is octet's tokenizer."""
    from transformers import AutoTokenizer
    original = AutoTokenizer.from_pretrained.__func__

    def from_pretrained(cls, name, *args, **kwargs):
        if not os.path.isdir(str(name)):
            name = HF_TOKENIZER
        return original(cls, name, *args, **kwargs)

    AutoTokenizer.from_pretrained = classmethod(from_pretrained)


def _install():
    sys.meta_path.insert(0, _StubFinder())
    _patch_auto_tokenizer()

    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    torch.long = torch.int64 = "int64"
    _iinfo = namedtuple("iinfo", "min max bits")
    torch.iinfo = lambda dtype: _iinfo(-2 ** 63, 2 ** 63 - 1, 64)
    torch.__getattr__ = lambda attr: _skip("torch." + attr)
    sys.modules["torch"] = torch

    import tests  # the vendored package (tests/__init__.py), so tests.X resolves beside it

    utils = _StubModule("tests.utils")
    utils.RemoteOpenAIServer = RemoteOpenAIServer
    utils.VLLM_PATH = VLLM_SRC.resolve()
    utils.ROCM_EXTRA_ARGS = []
    sys.modules["tests.utils"] = utils
    tests.utils = utils
    conftest = _StubModule("tests.conftest")
    sys.modules["tests.conftest"] = conftest
    tests.conftest = conftest


# At import (-p loads this plugin before any conftest; tool_use/conftest.py imports tests.utils).
sys.path.insert(0, str(VLLM_SRC.resolve()))
_install()


class _NoAssets:
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        pytest.skip("needs tests/conftest.py's local_asset_server (images for a multimodal "
                    "model; not in issue 25's scope)")


@pytest.fixture(scope="session")
def local_asset_server():
    """Stand-in for their tests/conftest.py fixture (kept out by --confcutdir): the text-model
    cases only request it; using it (multimodal cases) skips."""
    return _NoAssets()
