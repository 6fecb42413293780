"""The interface's two languages: every setting and every word of the page in both, none left over."""
from app import i18n
from backend.config.build import field_paths
from backend.config.zh import ZH


def test_every_setting_has_its_label_and_help_in_chinese_and_no_entry_is_stale():
    paths = [p for p, _ in field_paths()]
    assert sorted(set(paths) - set(ZH)) == []  # a new setting needs its Chinese next to it
    assert sorted(set(ZH) - set(paths)) == []  # a renamed or removed one leaves nothing behind
    for path, info in field_paths():
        title, help_text = ZH[path]
        assert title.strip() and (help_text.strip() or not info.description), path
        assert i18n.setting_text(path, "en") == (info.title or path, info.description or "")
    assert i18n.setting_text("learning_rate", "zh")[0] == "学习率"


def test_every_word_of_the_page_is_in_both_languages():
    for key, (en, zh) in i18n.UI.items():
        assert en.strip() and zh.strip(), key
    assert i18n.text("tab.train", "zh") == "训练" and i18n.text("tab.train", "en") == "Train"
    assert i18n.pick("fr") == i18n.DEFAULT and i18n.pick("zh") == "zh"


def test_a_section_title_keeps_its_markdown_and_settings_get_label_and_help():
    import gradio as gr

    words = i18n.Translatable()
    with gr.Blocks():
        title = words.add(gr.Markdown("**Data**"), "section.data", "value", bold=True)
        box = gr.Number(label="Learning rate")
    words.settings["learning_rate"] = box
    updates = words.updates("zh")
    assert updates[title]["value"] == "**数据**"
    assert updates[box]["label"] == "学习率" and updates[box]["info"].startswith("峰值学习率")


def test_one_component_gets_several_words_and_a_radio_keeps_its_values():
    import gradio as gr

    words = i18n.Translatable()
    with gr.Blocks():
        temperature = words.add(gr.Number(), "label.temperature", fmt={"side": "A"})
        box = words.add(gr.Textbox(), "label.annotator", info="label.annotator_help")
        source = words.add(gr.Radio(["dataset", "typed"]), "label.source",
                           choices=[("label.source.dataset", "dataset"), ("label.source.typed", "typed")])
    assert temperature.label == "Temperature (A)" and box.info == "Recorded with each label."  # built in English
    updates = words.updates("zh")
    assert updates[temperature]["label"] == "温度系数（A）"
    assert updates[box]["label"] == "标注者" and updates[box]["info"] == "随每条标注一起记录。"
    assert updates[source]["choices"] == [("数据集中的一列", "dataset"), ("手动输入的提示", "typed")]
    assert words.components == [temperature, box, source]


def test_messages_fill_the_same_values_in_both_languages():
    import string

    def names(words):
        return {name for _, name, _, _ in string.Formatter().parse(words) if name}

    for key, (en, zh) in i18n.UI.items():
        assert names(en) == names(zh), key
    assert i18n.text("runs.confirm_run", "zh", name="grpo-1") == "确认：删除 grpo-1"
    assert i18n.text("status.pace", "en", pace=2.5) == "2.50 s/step"


def test_each_browser_session_keeps_its_language_and_old_sessions_are_forgotten(monkeypatch):
    from types import SimpleNamespace

    monkeypatch.setattr(i18n, "SESSIONS_KEPT", 3)
    monkeypatch.setattr(i18n, "_sessions", type(i18n._sessions)())
    sessions = [SimpleNamespace(session_hash=f"s{i}") for i in range(4)]
    for s in sessions:
        i18n.remember(s, "zh")
    assert [i18n.lang_of(s) for s in sessions] == [i18n.DEFAULT, "zh", "zh", "zh"]  # the oldest fell out
    assert i18n.remember(sessions[1], "fr") == i18n.DEFAULT and i18n.lang_of(sessions[1]) == i18n.DEFAULT
    assert i18n.lang_of(None) == i18n.DEFAULT  # a handler called without a request (tests, scripts)
