"""The Runs tab's Serve action in the browser: a finished run served over the OpenAI API from the page (URL, curl
and openai snippets, requests counted), answered by the real `openai` client, and stopped from the page."""
from backend.runs.store import RunStore
from backend.serving import list_servers
from tests.browser.test_ui import set_text
from tests.finished_runs import adapter_run
from tests.integration.test_serve import free_port

STATUS = "() => document.querySelector('#serve-status')?.textContent ?? ''"


def test_serve_a_finished_run_from_the_runs_tab_then_stop_it(ui_server, page, tiny_model):
    import openai

    workspace = ui_server["workspace"]
    run = adapter_run(RunStore(workspace), tiny_model)
    port = free_port()
    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Runs").click()
    page.wait_for_function("id => document.querySelector('#runs-select input')?.value.includes(id)", arg=run.id,
                           timeout=30_000)
    page.locator("#serve").get_by_text("Serve (OpenAI API)").click()
    set_text(page, "serve-port", port)
    set_text(page, "serve-key", "page-key-123")
    page.click("#serve-start")
    page.wait_for_function(f"() => ({STATUS})().includes('serving')", timeout=180_000)
    assert f"http://127.0.0.1:{port}/v1" in page.evaluate(STATUS)
    curl = page.locator("#serve-curl").text_content()
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in curl and "page-key-123" not in curl
    page.screenshot(path="/tmp/serve-ui.png", full_page=True)

    [server] = list_servers(workspace)
    reply = openai.OpenAI(base_url=server.url, api_key="page-key-123").chat.completions.create(
        model=server.name, messages=[{"role": "user", "content": "hi"}], max_tokens=3, temperature=0)
    assert reply.usage.completion_tokens == 3
    from backend.serving import get_server
    from tests.waiting import wait_for

    wait_for(lambda: get_server(workspace, server.id).requests == 1, timeout=10, what="the request counted")
    page.click("#serve-refresh")
    page.wait_for_function(f"() => ({STATUS})().includes('1 requests')", timeout=30_000)

    page.click("#serve-stop")
    page.wait_for_function(f"() => ({STATUS})().includes('stopped')", timeout=60_000)
    assert list_servers(workspace)[0].status == "stopped"


def test_serve_model_a_from_the_chat_tab(ui_server, page, tiny_model):
    from tests.browser.test_ui import set_text as fill

    workspace = ui_server["workspace"]
    port = free_port()
    page.goto(ui_server["url"])
    page.get_by_role("tab", name="Chat").click()
    picker = "() => document.querySelector('#chat-model-a input')?.value ?? ''"
    page.wait_for_function(f"() => ({picker})() !== ''", timeout=30_000)  # the page's own choice first
    fill(page, "chat-model-a", tiny_model)
    page.locator("#chat-model-a input").press("Enter")
    page.wait_for_function(f"m => ({picker})() === m", arg=str(tiny_model), timeout=30_000)
    page.locator("#chat-serve").get_by_text("Serve (OpenAI API)").click()
    fill(page, "chat-serve-port", port)
    page.click("#chat-serve-start")
    status = "() => document.querySelector('#chat-serve-status')?.textContent ?? ''"
    page.wait_for_function(f"() => ({status})().includes('serving')", timeout=180_000)
    [server] = list_servers(workspace)
    assert server.model == str(tiny_model) and server.port == port and not server.key
    page.click("#chat-serve-stop")
    page.wait_for_function(f"() => ({status})().includes('stopped')", timeout=60_000)
