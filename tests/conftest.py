"""Shared fixtures. The environment is set first: huggingface_hub, datasets and gradio read it at import."""
import os

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never reach the Hub
os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
# A server keeps a warm supervisor per workspace: its imports would take CPU from the suite's runs on a 2-core
# machine. tests/integration/test_warm_start.py turns it on where it is tested.
os.environ["WORKBENCH_WARM_WORKER"] = "0"
if os.environ.get("PYTEST_XDIST_WORKER"):  # the unit tests in two processes: one thread each for torch's work
    os.environ.setdefault("OMP_NUM_THREADS", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """A 2-layer, 64-wide SmolLM2 with random weights and the real tokenizer, built once into the model
    cache (the first build converts the embedded model, ~30 s)."""
    from backend.models import build_tiny_model, model_cache_dir

    return build_tiny_model(model_cache_dir() / "tiny-test")


@pytest.fixture
def workspace(tmp_path) -> Path:
    return tmp_path


_FOLDER_MARKS = ("unit", "integration", "browser", "reliability")


def pytest_collection_modifyitems(items):
    """Mark every test by its folder, so `-m unit` (the quick set) or `-m "not browser"` picks by kind."""
    for item in items:
        folder = Path(str(item.fspath)).parent.name
        if folder in _FOLDER_MARKS:
            item.add_marker(getattr(pytest.mark, folder))


def pytest_configure(config):
    """The test process is an entry point like the UI and the CLI: every store it opens has the workspace's
    packages (the processes it starts load them themselves, so a forgotten entry point fails there)."""
    from backend.workspace import load_providers

    load_providers()
