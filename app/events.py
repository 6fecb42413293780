"""Event plumbing shared by the tabs."""
from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable

import gradio as gr


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


# the browser reads the inputs and writes them into the hidden box as one JSON list
PACK_JS = "(...values) => JSON.stringify(values)"
PACKED_CLASS = "wb-packed"  # the boxes' class: app.main moves them first in the page's tree


class Packed:
    """Many inputs of a backend event, read in the browser into one hidden box: the event's only input.

    Gradio's page keeps a loading status for every input of every backend event it has run, and looks each one
    up in the whole component tree (~1000 blocks here) at every later event's every status message: the Train
    form's ~190 settings as inputs made each poll during a run cost the browser ~0.3 s, a core beside the run
    (bench/README.md, start latency). A JS-only event keeps no loading status; it copies the values into the box
    and the backend function follows it, getting them preprocessed as Gradio would have. Create it where the box
    may live (the tab of the events' triggers); stateful inputs (gr.State) stay on the server and are passed as
    they are."""

    def __init__(self, inputs):
        self.as_dict = isinstance(inputs, (set, dict))
        self.inputs = list(inputs)
        self.browser = [c for c in self.inputs if not c.stateful]
        self.server = [c for c in self.inputs if c.stateful]
        self.box = gr.Textbox(visible=False, elem_classes=[PACKED_CLASS])

    def on(self, listen: Callable, fn: Callable, outputs, **options):
        """`listen(fn, inputs, outputs, **options)` (`button.click`, `event.then`, `partial(gr.on, triggers)`),
        with the inputs packed; returns the backend event's dependency, for `.then`."""
        mode = {"trigger_mode": options["trigger_mode"]} if options.get("trigger_mode") else {}
        copied = listen(None, self.browser, self.box, js=PACK_JS, show_progress="hidden", queue=False, **mode)
        return copied.then(self.reader(fn), [self.box, *self.server], outputs, **options)

    def reader(self, fn: Callable) -> Callable:
        """`fn` called with the box's values as Gradio would have called it with the inputs themselves (one dict
        for a set of inputs), and `request` when it takes one."""
        takes_request = "request" in inspect.signature(fn).parameters

        def call(text, states, request):
            from gradio.context import LocalContext

            request = request or LocalContext.request.get(None)  # Gradio fills no parameter after *states
            values = dict(zip(self.browser, _preprocessed(self.browser, json.loads(text), request)))
            values.update(zip(self.server, states))
            args = (values,) if self.as_dict else tuple(values[c] for c in self.inputs)
            return fn(*args, **({"request": request} if takes_request else {}))

        if inspect.isgeneratorfunction(fn):  # Gradio streams a generator function's yields (see `bind`)
            def read(text, *states, request=None):
                yield from call(text, states, request)
        else:
            def read(text, *states, request=None):
                return call(text, states, request)

        read.__name__ = read.__qualname__ = getattr(fn, "__name__", "packed")
        read.pack = self
        return read

    def text(self, values: dict) -> str:
        """The box's text for these values ({input: value}), as the browser writes it."""
        return json.dumps([values[c] for c in self.browser])


def _preprocessed(components: list, payloads: list, request) -> list:
    """What Gradio's own preprocessing hands a function for these payloads: through the session's copy of each
    component (a dropdown's choices as this page last set them), its data model, and its `preprocess`."""
    from gradio.context import LocalContext

    blocks = LocalContext.blocks.get(None)
    session = blocks.state_holder[request.session_hash] if blocks and request and request.session_hash else None
    out = []
    for component, payload in zip(components, payloads, strict=True):
        block = session[component._id] if session is not None and component._id in session else component
        if getattr(block, "data_model", None) and payload is not None:
            payload = block.data_model.model_validate(payload, context={"validate_meta": True})
        if session is not None:
            session._update_value_in_config(component._id, payload.model_dump() if hasattr(payload, "model_dump")
                                            else payload)
        out.append(block.preprocess(payload))
    return out
