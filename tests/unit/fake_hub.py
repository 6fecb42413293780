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
