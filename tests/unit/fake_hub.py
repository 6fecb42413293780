"""A Hub that never answers, for checking that look-ups give up within their deadline (no real network)."""
import socket

import pytest

from backend import hub


@pytest.fixture
def silent_hub(monkeypatch):
    """Online mode, but the Hub endpoint is a local socket that accepts connections and never replies."""
    import huggingface_hub.constants

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setattr(hub, "HUB_TIMEOUT_S", 1.0)
    yield
    server.close()


@pytest.fixture
def dead_hub(monkeypatch):
    """Online mode, but nothing listens at the Hub endpoint (a machine without network refuses or cannot
    resolve it): connections are refused at once."""
    import huggingface_hub.constants

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    for var in hub._PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hub, "_reached", {})
