"""Live updates that cost nothing while nobody looks: one poll timer per tab, ticking only while its tab is shown.

Gradio's frontend does loading-status bookkeeping for every output of every timer event, whichever tab is
shown: one timer driving every tab's poll (~60 outputs every 1.5 s) kept a whole browser core busy on an idle
page (bench/ui_idle_cpu.py). So each tab that polls gets its own gr.Timer, the Tab's select event switches the
timers, and a tab that is opened runs its polls once at once, so it never shows a stale page for a tick.
Opening a tab from a handler goes through `open`, which switches the timers too (Tab.select fires on clicks only).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr


@dataclass
class _Poll:
    fn: Callable
    inputs: object
    outputs: object
    options: dict


@dataclass
class TabPolls:
    """Create it before the gr.Tabs (the timers live outside them: a tab's children mount only when it is
    opened), set `tabs` once the gr.Tabs exists, and `follow` each gr.Tab after its polls are added."""

    seconds: float
    tab_ids: tuple[str, ...]  # the tabs that poll; the first is the one shown when the page opens
    tabs: gr.Tabs | None = None
    timers: dict[str, gr.Timer] = field(init=False)
    _polls: dict[str, list[_Poll]] = field(init=False)

    def __post_init__(self):
        first = self.tab_ids[0]
        self.timers = {t: gr.Timer(self.seconds, active=t == first) for t in self.tab_ids}
        self._polls = {t: [] for t in self.tab_ids}

    def add(self, tab_id: str, fn: Callable, inputs, outputs, **options) -> None:
        """Poll `fn` every tick while `tab_id` is shown, and once each time it is opened."""
        self.timers[tab_id].tick(fn, inputs, outputs, **options)
        self._polls[tab_id].append(_Poll(fn, inputs, outputs, options))

    def shown(self, tab_id: str) -> dict:
        """Timer updates for `tab_id` being shown: its timer on, every other one off."""
        return {timer: gr.Timer(active=t == tab_id) for t, timer in self.timers.items()}

    def open(self, tab_id: str) -> dict:
        """A handler's updates that open `tab_id`: add `outputs` to its outputs."""
        return {self.tabs: gr.Tabs(selected=tab_id), **self.shown(tab_id)}

    @property
    def outputs(self) -> list:
        return [self.tabs, *self.timers.values()]

    def follow(self, page: gr.Tab, tab_id: str) -> None:
        """A click on `page` switches the timers to it and polls it once."""
        event = page.select(lambda: self.shown(tab_id), None, list(self.timers.values()), show_progress="hidden")
        for p in self._polls.get(tab_id, []):
            event.then(p.fn, p.inputs, p.outputs, **p.options)
