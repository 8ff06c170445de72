"""pytest plugin (-p llamacpp_shim) for llama.cpp's server tests run against octet
(scripts/peer_tests.sh). Their utils.py starts $LLAMA_SERVER_BIN_PATH, which the script points
at tests/peer/bin/llama-server (argv translated to `octet serve`, tests/peer/launch_octet.py).

One patch: ServerPreset.load_all (run once per session by their conftest.py) only starts and
stops every preset to download its model from Hugging Face; every preset is SmolLM2 here and
there is nothing to download, so it does nothing (it would cost one octet start per preset).
"""


def pytest_configure(config):
    import utils  # llama.cpp's tests/utils.py (the working directory is their tests/)

    utils.ServerPreset.load_all = staticmethod(lambda: None)
