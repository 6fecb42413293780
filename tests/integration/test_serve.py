"""`launch.py serve` with the real `openai` client: the embedded model answers greedily what the evaluator answers,
streams the same text, takes two requests at once and counts them; a finished run is served with its adapter
merged; a wrong key, a busy port and an unknown model are refused; `serve stop` leaves no process."""
import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backend.core.procs import processes_of
from backend.serving import get_server, list_servers

REPO = Path(__file__).resolve().parents[2]
KEY = "test-key-123"
PROMPTS = ["What is the capital of France?", "Name a colour."]


def launch(workspace, *args, timeout=300):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), *args, "--workspace", str(workspace)],
                          capture_output=True, text=True, timeout=timeout, cwd=REPO)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(workspace):
    """Start `serve MODEL --detach` on a free port; every server of the workspace is stopped afterwards."""
    started = []

    def start(model, *extra):
        port = free_port()
        out = launch(workspace, "serve", model, "--port", str(port), "--detach", *extra)
        assert out.returncode == 0, out.stderr
        [server] = [s for s in list_servers(workspace) if s.port == port]
        started.append(server.id)
        return server, out.stdout

    yield start
    for server_id in started:
        launch(workspace, "serve", "stop", server_id)


def test_the_embedded_model_answers_as_the_evaluator_does_streams_and_takes_two_requests_at_once(served, workspace):
    import openai

    from backend.evals.generate import generate_answers
    from backend.evals.spec import Generation
    from backend.models import load_model
    from backend.models.ref import ModelRef

    server, printed = served("smollm2-135m-instruct", "--api-key", KEY)
    assert server.url in printed and "curl " in printed and "from openai import OpenAI" in printed
    assert KEY not in printed and KEY not in (workspace / "servers" / f"{server.id}.json").read_text()
    client = openai.OpenAI(base_url=server.url, api_key=KEY)
    assert [m.id for m in client.models.list().data] == [server.name]

    def ask(prompt, **kw):
        return client.chat.completions.create(model=server.name, messages=[{"role": "user", "content": prompt}],
                                              max_tokens=12, temperature=0, **kw)

    answers = [ask(p).choices[0].message.content for p in PROMPTS]
    loaded = load_model(ModelRef.parse("smollm2-135m-instruct"))
    expected = {i: a[0] for batch, found in generate_answers(loaded, [[{"role": "user", "content": p}]
                                                                      for p in PROMPTS],
                                                              Generation(max_new_tokens=12, batch_size=1))
                for i, a in zip(batch, found)}
    assert answers == [expected[0], expected[1]]  # "The capital of France is Paris." from both
    streamed = "".join(c.choices[0].delta.content or "" for c in ask(PROMPTS[0], stream=True) if c.choices)
    assert streamed == answers[0]

    both = {}
    threads = [threading.Thread(target=lambda i=i: both.__setitem__(i, ask(PROMPTS[i]).choices[0].message.content))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert both == {0: answers[0], 1: answers[1]}

    with pytest.raises(openai.AuthenticationError, match="missing or wrong API key"):
        openai.OpenAI(base_url=server.url, api_key="wrong-key").models.list()
    listed = launch(workspace, "serve", "list", "--json")
    [row] = json.loads(listed.stdout)
    assert row["id"] == server.id and row["status"] == "serving"
    from tests.waiting import wait_for

    wait_for(lambda: get_server(workspace, server.id).requests >= 5, timeout=10, what="the requests counted")
    assert get_server(workspace, server.id).completion_tokens > 0

    stopped = launch(workspace, "serve", "stop", server.id)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert get_server(workspace, server.id).status == "stopped"
    assert processes_of("backend.serving.process", server.id) == []


def test_a_finished_run_is_served_with_its_adapter_merged_and_bad_requests_are_refused(served, workspace,
                                                                                      tiny_model):
    import openai

    from backend.runs.store import RunStore
    from tests.finished_runs import adapter_run

    run = adapter_run(RunStore(workspace), tiny_model)
    server, _ = served(f"run:{run.id}")
    assert Path(server.name).parent == workspace / "models"  # the merged copy a run trained on from it uses
    reply = openai.OpenAI(base_url=server.url, api_key="none").completions.create(
        model=server.name, prompt="Once upon a time", max_tokens=4, temperature=0)
    assert reply.usage.completion_tokens == 4

    busy = launch(workspace, "serve", str(tiny_model), "--port", str(server.port))
    assert busy.returncode == 2 and f"port {server.port} on 127.0.0.1 is taken" in busy.stderr
    missing = launch(workspace, "serve", str(workspace / "no-such-model"))
    assert missing.returncode == 2 and "no-such-model" in missing.stderr and "Traceback" not in missing.stderr
    for auth in ("u:", "nocolon"):
        bad = launch(workspace, "serve", str(tiny_model), "--auth", auth)
        assert bad.returncode == 2 and "--auth: expected user:password" in bad.stderr
