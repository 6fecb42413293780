"""The UI starts on a busy machine: the check that the server answers its own page waits for a slow answer
instead of giving up after one 3 s try."""
import http.server
import threading
import time

from app.main import _patient_url_ok
from tests.browser.conftest import _free_port


def test_a_page_that_answers_late_is_waited_for_and_a_closed_port_is_not():
    class Slow(http.server.BaseHTTPRequestHandler):
        calls = 0

        def do_HEAD(self):
            Slow.calls += 1
            if Slow.calls == 1:
                time.sleep(1.5)  # longer than one try's timeout
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert _patient_url_ok(f"http://127.0.0.1:{server.server_port}/", wait_s=10, try_s=1)
        assert Slow.calls >= 2
    finally:
        server.shutdown()
    start = time.monotonic()
    assert not _patient_url_ok(f"http://127.0.0.1:{_free_port()}/", wait_s=1)
    assert time.monotonic() - start < 5
