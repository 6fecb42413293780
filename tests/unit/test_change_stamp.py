"""The page's change stamp (GET /wb/stamp): a counter that every write a page shows moves, and a heartbeat only
once per BEAT_EVERY_S, so an idle page with a live run does not redraw on every beat; `?any=1` moves on every
commit."""
from starlette.applications import Starlette
from starlette.testclient import TestClient

from app.routes import stamp_route
from app.tab_polls import STAMP_PATH
from backend.config import build_config
from backend.core.database import BEAT_EVERY_S
from backend.runs.store import RunStore


def test_the_stamp_moves_on_what_a_page_shows_and_a_heartbeat_only_once_per_window(workspace):
    store = RunStore(workspace)
    run = store.create_run(build_config({"model": "smollm2-135m-instruct"}))
    client = TestClient(Starlette(routes=[stamp_route(workspace)]))

    def stamp(**query) -> int:
        answer = client.get(STAMP_PATH, params=query)
        assert answer.status_code == 200 and answer.headers["cache-control"] == "no-store"
        return int(answer.text)

    start, start_any = stamp(), stamp(any=1)
    store.update_run(run.id, heartbeat_at=BEAT_EVERY_S * 100.0)  # the first beat counts
    beaten = stamp()
    assert beaten == start + 1
    for beat_at in (BEAT_EVERY_S * 100.0 + 1, BEAT_EVERY_S * 101.0 - 0.5):  # beats within one window
        store.update_run(run.id, heartbeat_at=beat_at, worker_beat_at=beat_at)
    assert stamp() == beaten + 1  # the worker's first beat alone
    assert stamp(any=1) > start_any  # every commit moves data_version
    store.update_run(run.id, heartbeat_at=BEAT_EVERY_S * 101.0)  # the next window
    assert stamp() == beaten + 2
    store.set_note(run.id, "a note")  # anything a page shows
    assert stamp() == beaten + 3
