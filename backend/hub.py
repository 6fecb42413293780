"""Quick, bounded look-ups on the Hugging Face Hub, for checking a model or dataset id before a run starts, and
the upload of an export (`push_folder`).

huggingface_hub retries a failed request five times with back-off (~23 s when DNS fails), and a network
that drops packets can hang longer, so every look-up here runs in a daemon thread under a deadline, after one
quiet connection to the Hub's host: offline, that fails at once, and the caller says so in one message.
Offline mode is read from the environment at call time: huggingface_hub reads it once, at import.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

HUB_TIMEOUT_S = 5.0
REACH_MEMORY_S = 30.0  # how long one reachability check answers for the look-ups after it
_THREAD = "hub-lookup"
_PROXY_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
_reached: dict[tuple[str, int], tuple[float, str | None]] = {}


class HubError(Exception):
    """A Hub look-up failed. `kind`: unreachable | not_found | gated | no_file | invalid_id;
    str() is a short reason for a user-facing message."""

    def __init__(self, kind: str, reason: str):
        self.kind = kind
        super().__init__(reason)


def hub_offline() -> bool:
    return any(os.environ.get(v, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


class _Quiet(logging.Filter):
    """Drops huggingface_hub's "Retrying in 1s" lines logged from a look-up's thread: the caller's one message
    says what failed, and a thread left behind by its deadline would go on printing them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return threading.current_thread().name != _THREAD


def _quiet_hub_logs() -> None:
    for name in ("huggingface_hub.utils._http", "huggingface_hub.file_download", "huggingface_hub.hf_api"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Quiet) for f in logger.filters):
            logger.addFilter(_Quiet())


def _unreachable() -> str | None:
    """Why the Hub's host takes no connection (a name that does not resolve, no route, refused), or None: one TCP
    connect, remembered REACH_MEMORY_S, so a look-up fails at once offline instead of retrying for ~15 s. Not
    tried behind a proxy, which may reach what this machine cannot."""
    if any(os.environ.get(v) for v in _PROXY_VARS):
        return None
    url = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    if not url.hostname:
        return None
    where = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
    when, why = _reached.get(where, (float("-inf"), None))
    if time.monotonic() - when < REACH_MEMORY_S:
        return why
    try:
        socket.create_connection(where, timeout=HUB_TIMEOUT_S).close()
        why = None
    except OSError as e:
        why = f"cannot connect to {where[0]}: {e.strerror or e}"
    _reached[where] = (time.monotonic(), why)
    return why


def _check_reachable(timeout: float) -> None:
    if why := _with_deadline(_unreachable, timeout):  # name resolution has no timeout of its own
        raise HubError("unreachable", why)


def _with_deadline(fn, timeout: float):
    _quiet_hub_logs()
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True, name=_THREAD)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise HubError("unreachable", f"no answer within {timeout:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def _hub_error(err: BaseException) -> HubError:
    from huggingface_hub.errors import (GatedRepoError, HFValidationError, LocalEntryNotFoundError,
                                        RemoteEntryNotFoundError, RepositoryNotFoundError)

    if isinstance(err, HubError):
        return err
    if isinstance(err, GatedRepoError):
        return HubError("gated", _short(err))
    if isinstance(err, RepositoryNotFoundError):  # also what a private repo looks like without a token
        return HubError("not_found", _short(err))
    if isinstance(err, RemoteEntryNotFoundError):
        return HubError("no_file", _short(err))
    if isinstance(err, HFValidationError):
        return HubError("invalid_id", _short(err))
    if isinstance(err, LocalEntryNotFoundError) and err.__cause__ is not None:
        err = err.__cause__  # hf_hub_download hides the network error behind a cache miss
    return HubError("unreachable", _short(err))


def cached_hub_file(repo_id: str, filename: str, repo_type: str = "model") -> str | None:
    """The file from the local HF cache, or None; never touches the network."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, filename, repo_type=repo_type)
    except Exception:  # an invalid id: reported when the Hub is asked
        return None
    return found if isinstance(found, str) else None


def fetch_hub_file(repo_id: str, filename: str, repo_type: str = "model", timeout: float | None = None) -> str:
    """Local path of `filename`, from the HF cache or else the Hub; raises HubError."""
    found = cached_hub_file(repo_id, filename, repo_type)
    if found:
        return found
    if hub_offline():
        raise HubError("unreachable", "HF_HUB_OFFLINE is set and the file is not in the local cache")
    from huggingface_hub import hf_hub_download

    timeout = HUB_TIMEOUT_S if timeout is None else timeout
    _check_reachable(timeout)
    try:
        return _with_deadline(lambda: hf_hub_download(
            repo_id, filename, repo_type=repo_type, etag_timeout=timeout,
            endpoint=os.environ.get("HF_ENDPOINT") or None), timeout)
    except Exception as e:
        raise _hub_error(e) from None


def probe_hub_repo(repo_id: str, repo_type: str = "dataset", timeout: float | None = None) -> None:
    """Return if the repo exists and is readable; raises HubError."""
    if hub_offline():
        raise HubError("unreachable", "HF_HUB_OFFLINE is set")
    from huggingface_hub import HfApi

    timeout = HUB_TIMEOUT_S if timeout is None else timeout
    _check_reachable(timeout)
    api = HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)
    try:
        _with_deadline(lambda: api.repo_info(repo_id, repo_type=repo_type, timeout=timeout), timeout)
    except Exception as e:
        raise _hub_error(e) from None


def push_folder(folder: Path, repo_id: str, token: str, private: bool, message: str) -> str:
    """Upload `folder` as the model repo `repo_id` (created when missing); its URL. HubError: unreachable, a token
    the Hub refuses, a repo that is someone else's."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError

    if hub_offline():
        raise HubError("unreachable", "HF_HUB_OFFLINE is set")
    _check_reachable(HUB_TIMEOUT_S)
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message=message)
    except HfHubHTTPError as e:
        code = getattr(e.response, "status_code", None)
        raise HubError("denied" if code in (401, 403) else "failed", _short(e)) from None
    return f"https://huggingface.co/{repo_id}"
