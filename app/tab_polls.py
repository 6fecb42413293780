"""Live updates that cost nothing while nobody looks: one poll timer per tab, ticking only while its tab is shown.

Gradio's frontend does loading-status bookkeeping for every output of every timer event, whichever tab is
shown: one timer driving every tab's poll (~60 outputs at each tick) kept a whole browser core busy on an idle
page (bench/ui_idle_cpu.py). So each tab that polls gets its own gr.Timer, the Tab's select event switches the
timers, and a tab that is opened runs its polls once at once, so it never shows a stale page for a tick.
Opening a tab from a handler goes through `open`, which switches the timers too (Tab.select fires on clicks only).

A backend event costs the frontend bookkeeping for every component any event has shown progress on (kept small
by `app.main.untracked_progress`), so a tick runs in the browser alone: it fetches the store's change stamp (`STAMP_PATH`, served by app/main.py) and moves a
counter in a hidden box when the stamp changed; the tab's polls run on that box's change, i.e. when a process
wrote to the store something a page may show (a heartbeat only every BEAT_EVERY_S), never while nothing
happens.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import gradio as gr

STAMP_PATH = "/wb/stamp"


def _stamp_js(tab_id: str) -> str:
    """A tick in the browser: fetch the stamp and move the tab's counter (the hidden box) only when the stamp
    changed since the last tick; no stamp (a failed fetch) moves it every tick, as polls ran before."""
    return ("async (n) => { const all = window.__wbStamps = window.__wbStamps || {}; "
            f"const s = all[{tab_id!r}] = all[{tab_id!r}] || {{v: null}}; let v = null; "
            f"try {{ const r = await fetch({STAMP_PATH.lstrip('/')!r}, {{cache: 'no-store'}}); "
            "if (r.ok) v = await r.text(); } catch (e) {} "
            "if (v === null) return String(Number(n) + 1); "
            "const changed = s.v !== null && v !== s.v; s.v = v; return changed ? String(Number(n) + 1) : n; }")


def _rebase_js(tab_id: str) -> str:
    """On opening a tab, which polls it at once: the next tick takes the stamp as it finds it."""
    return f"() => {{ const s = (window.__wbStamps || {{}})[{tab_id!r}]; if (s) s.v = null; }}"


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
    stamps: dict[str, gr.Textbox] = field(init=False)
    _polls: dict[str, list[_Poll]] = field(init=False)

    def __post_init__(self):
        first = self.tab_ids[0]
        self.timers = {t: gr.Timer(self.seconds, active=t == first) for t in self.tab_ids}
        self.stamps = {t: gr.Textbox("0", visible=False) for t in self.tab_ids}
        for t in self.tab_ids:
            self.timers[t].tick(None, self.stamps[t], self.stamps[t], js=_stamp_js(t), show_progress="hidden",
                                queue=False)
        self._polls = {t: [] for t in self.tab_ids}

    def add(self, tab_id: str, fn: Callable, inputs, outputs, **options) -> None:
        """Poll `fn` after each tick that finds the store changed while `tab_id` is shown, and once each time
        it is opened."""
        self.stamps[tab_id].change(fn, inputs, outputs, **options)
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

    def rerun_after(self, event, tab_ids: tuple[str, ...] | None = None) -> None:
        """The polls of `tab_ids` (default: every tab's) once more after `event` (a language switch: what
        handlers wrote, in the new language)."""
        for tab_id in tab_ids or self.tab_ids:
            for p in self._polls[tab_id]:
                event.then(p.fn, p.inputs, p.outputs, **p.options)

    def follow(self, page: gr.Tab, tab_id: str) -> None:
        """A click on `page` switches the timers to it and polls it once."""
        page.select(None, None, None, js=_rebase_js(tab_id), queue=False)
        event = page.select(lambda: self.shown(tab_id), None, list(self.timers.values()), show_progress="hidden")
        for p in self._polls.get(tab_id, []):
            event.then(p.fn, p.inputs, p.outputs, **p.options)
