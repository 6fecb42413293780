"""Serving a model over the OpenAI API: `launch.py serve MODEL` and the UI's Serve action.

The server is transformers' own (`transformers serve`: /v1/models, /v1/chat/completions with streaming,
/v1/completions, the model's chat template, sampling parameters); the workbench resolves what to serve (a run, a
checkpoint, an export, a folder, a Hub id, the embedded model) to one folder with any adapter merged in, starts the
server as a detached process of its own, puts an API key, a bound on concurrent requests and a request size limit
in front of it, and lists and stops it (`registry`). Modules: `model` (what to serve), `registry` (the servers of a
workspace), `process` (the server process).
"""
from backend.serving.registry import (SERVE_KEY_ENV, Server, ServeError, get_server, list_servers, start_server,
                                      stop_server, wait_until_ready)

__all__ = ["SERVE_KEY_ENV", "ServeError", "Server", "get_server", "list_servers", "start_server", "stop_server",
           "wait_until_ready"]
