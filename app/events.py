"""Event plumbing shared by the tabs."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable


def bind(fn: Callable, *args) -> Callable:
    """`fn` with its first arguments given (a tab's components, the store), so handlers can be module-level
    functions. Unlike functools.partial, the result is a plain function whose signature and annotations
    Gradio can still read, so it fills parameters typed gr.Request or gr.SelectData; a generator stays one (Gradio
    streams what a generator function yields, and would take a plain function's generator for one output value)."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def call(*rest, **kwargs):
            yield from fn(*args, *rest, **kwargs)
    else:
        @functools.wraps(fn)
        def call(*rest, **kwargs):
            return fn(*args, *rest, **kwargs)

    sig = inspect.signature(fn)
    call.__signature__ = sig.replace(parameters=list(sig.parameters.values())[len(args):])
    return call
