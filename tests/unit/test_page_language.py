"""The whole page in Chinese: after the header's language selector picks 中文, no label, help text, button,
section title or choice on any tab is left in English (names such as LoRA or JSONL stay as they are)."""
import re

import pytest

from backend.config import choices, field_paths

# Names kept as they are in both languages: methods, formats, libraries, hardware and protocols, the Greek letters
# hyperparameters are named by, and RL's "rollout" (Chinese RL texts, LlamaBoard's and ms-swift's included, keep it).
from backend.tools.spec import TOOL_KINDS  # noqa: E402 - the kinds a tools list names, as typed

NAMES = {
    "LoRA", "QLoRA", "DoRA", "rsLoRA", "PEFT", "TRL", "SFT", "DPO", "KTO", "PPO", "GRPO", "RLOO", "REINFORCE", "GAE",
    "SLiC", "TPE", "EOS", "JSONL", "JSON", "YAML", "CSV", "Parquet", "safetensors", "Hugging", "Face", "Hub", "Optuna",
    "TensorBoard", "AdamW", "accelerate", "DeepSpeed", "FSDP", "FlashAttention", "ZeRO", "vLLM", "bitsandbytes",
    "Liger", "Triton", "RMSNorm", "RoPE", "SwiGLU", "GPU", "CPU", "CUDA", "Ampere", "TCP", "HTTP", "token", "Ziegler",
    "nats", "alpha", "beta", "gamma", "lambda", "delta", "rollout", "OpenAI", "API", "Python", "curl", "openai", "MLflow",
    "GGUF", "Ollama", "Studio", "Modelfile", "ORPO", "CPO", "SimPO", "GKD", "JSD", "IPO", "DAPO", "GSPO", "logits",
    "ChatML", "BM25",
}
# Values are typed and picked the same in both languages: the settings' choices and TRL's dataset columns.
VALUES = {str(v) for _, info in field_paths() for v in choices(info) or ()} | {
    "prompt", "completion", "chosen", "rejected", "label", "messages", "text", "true", "false", *TOOL_KINDS}
CODE = re.compile(r"`[^`]*`|<code>.*?</code>|<[^>]+>|https?://\S+")
WORD = re.compile(r"(?<![\w./:@<{$=-])[A-Za-z]{3,}(?![\w./:@>}=-])")


def english_words(text) -> list[str]:
    """The words of `text` a Chinese reader would have to read in English: not code, identifiers or names."""
    plain = CODE.sub(" ", str(text or ""))
    return [w for w in WORD.findall(plain) if w not in NAMES | VALUES]


def test_what_counts_as_english():
    assert english_words("Start training") == ["Start", "training"]
    assert english_words("LoRA 秩（`lora.r`）") == []
    assert english_words("按 max_steps 训练，例如 q_proj,v_proj 或 run:ID@STEP") == []


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    import gradio as gr

    from app.main import build_app

    demo = build_app(tmp_path_factory.mktemp("ws"))
    on_language = next(f.fn for f in demo.fns.values() if f.name == "on_language")
    return demo, on_language("zh"), gr


def shown_texts(component, update: dict, gr) -> dict[str, str]:
    """The texts a component shows once the language update is applied: label, help, a button's or a
    Markdown's words, a Radio's choice labels."""
    def now(prop):
        return update[prop] if prop in update else getattr(component, prop, None)

    texts = {}
    if isinstance(component, (gr.Tab, gr.Accordion)) or getattr(component, "show_label", True):
        texts["label"] = now("label")
    texts["info"] = now("info")
    if isinstance(component, (gr.Button, gr.Markdown)):
        texts["value"] = now("value")
    if isinstance(component, gr.Radio):
        texts["choices"] = " ".join(str(label) for label, _ in now("choices") or [])
    return {k: v for k, v in texts.items() if isinstance(v, str) and v.strip()}


def test_every_word_of_every_tab_switches_to_chinese(page):
    demo, updates, gr = page
    english = []
    for component in demo.blocks.values():
        if getattr(component, "elem_id", None) == "language":
            continue  # each language by its own name
        update = updates.get(component, {})
        if not update and getattr(component, "visible", True) is False:
            continue  # shown later, by a handler that writes its words
        for prop, text in shown_texts(component, update, gr).items():
            if words := english_words(text):
                english.append(f"{getattr(component, 'elem_id', None) or type(component).__name__}.{prop}: "
                               f"{text[:70]!r} ({', '.join(words[:4])})")
    assert english == [], f"{len(english)} texts left in English:\n" + "\n".join(english)


def test_switching_back_restores_english(page):
    demo, _, gr = page
    on_language = next(f.fn for f in demo.fns.values() if f.name == "on_language")
    english = on_language("en")
    tabs = {c.elem_id: u["label"] for c, u in english.items() if isinstance(c, gr.Tab)}
    assert tabs["tab-train"] == "Train" and tabs["tab-labeling"] == "Labeling"


def test_handlers_write_their_messages_in_the_language_the_session_chose(page):
    from types import SimpleNamespace

    from app.runs_tab import RunView

    demo, _, gr = page
    fns = {(f.fn.__module__, f.name): f.fn for f in demo.fns.values() if f.fn}
    on_language, on_load = fns["app.main", "on_language"], fns["app.train_tab", "on_load"]
    runs_poll = fns["app.runs_tab", "on_poll"]
    chinese, english = SimpleNamespace(session_hash="zh-page"), SimpleNamespace(session_hash="en-page")
    on_language("zh", chinese)  # the header's selector, for one browser session only
    assert list(on_load(None, chinese).values()) == ["请选择要载入的预设。"]
    assert list(on_load(None, english).values()) == ["Choose a preset to load."]
    headers = {lang: [v for c, v in runs_poll(RunView(), request).items() if getattr(c, "elem_id", "") == "runs-table"]
               for lang, request in (("zh", chinese), ("en", english))}
    assert list(headers["zh"][0].columns)[:3] == ["名称", "模式", "状态"]  # the timer sends the table in zh
    assert list(headers["en"][0].columns)[:3] == ["name", "mode", "status"]


def test_every_tab_writes_its_messages_in_the_session_language(page):
    """One real handler per tab, called for a Chinese session and for an English one."""
    from types import SimpleNamespace

    from app.chat_layout import DEFAULT_SOURCES, ChatSession
    from app.label_layout import LabelView
    from app.sweep_render import SweepView

    demo, _, gr = page
    fns = {(f.fn.__module__, f.name): f for f in demo.fns.values() if f.fn}
    chinese, english = SimpleNamespace(session_hash="zh-tabs"), SimpleNamespace(session_hash="en-tabs")
    fns["app.main", "on_language"].fn("zh", chinese)

    def by_id(out: dict) -> dict:
        return {getattr(c, "elem_id", None): v for c, v in out.items()}

    def both(call) -> tuple:
        return call(chinese), call(english)

    # Evaluate: Stop with no evaluation selected
    zh, en = both(lambda r: next(iter(fns["app.eval_tab", "on_stop"].fn(None, r).values())))
    assert (zh, en) == ("请先选择一个评估。", "Select an evaluation first.")
    # Chat: Score before any answer
    zh, en = both(lambda r: fns["app.chat_tab", "on_score"].fn(DEFAULT_SOURCES, "", ChatSession(), r))
    assert zh.startswith("请先发送一个提示") and en.startswith("Send a prompt first")
    # Reward playground: Generate from a dataset that does not exist (the dataset's error itself stays English)
    generate = fns["app.playground_tab", "on_generate"]
    values = {c: ("no-such-dataset" if c.elem_id == "playground-dataset" else c.value) for c in generate.inputs}
    zh, en = both(lambda r: by_id(next(generate.fn(values, r)))["playground-status"])
    assert zh.startswith("**无法生成：**") and en.startswith("**Cannot generate:**")
    # Labeling: Undo with no session
    zh, en = both(lambda r: by_id(fns["app.label_tab", "on_undo"].fn(LabelView(), None, r))["label-status"])
    assert (zh, en) == ("请在上方开始一个标注会话，或选择一个加入。", "Start a labeling session above, or pick one to join.")
    # Sweeps: the poll's status line and table headers
    zh, en = both(lambda r: by_id(fns["app.sweeps_tab", "on_poll"].fn(SweepView(), r)))
    assert "未选择超参搜索" in zh["sweep-status"] and "No sweep selected" in en["sweep-status"]
    assert list(zh["sweeps-table"].columns)[:3] == ["名称", "状态", "试验"]
    assert list(en["sweeps-table"].columns)[:3] == ["name", "status", "trials"]
