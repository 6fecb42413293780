"""The interface's two languages: every setting and every word of the page in both, none left over, none stale."""
import shutil

import pytest

from app import i18n
from backend.config.build import field_paths
from backend.core import locales


def _report(problems: dict) -> str:
    return "; ".join(f"{kind}: {', '.join(entries)}" for kind, entries in problems.items() if entries)


def test_every_chinese_entry_translates_the_english_as_it_is_now():
    """A changed English text (en.yaml, a setting's Field, a reward source's description or parameter) makes its
    translation stale; a new key needs its Chinese; a removed one leaves nothing behind."""
    problems = locales.check(i18n.english_sources(), "zh")
    assert not any(problems.values()), (
        _report(problems) + " -- translate them in locales/zh.yaml, then `python -m app.i18n --rehash KEY...`")


def test_every_setting_has_its_label_and_help_in_chinese():
    settings = locales.catalogue("zh")["settings"]
    for path, info in field_paths():
        entry = settings[path]
        assert entry["title"].strip() and (entry["help"].strip() or not info.description), path
        assert i18n.setting_text(path, "en") == (info.title or path, info.description or "")
    assert i18n.setting_text("learning_rate", "zh")[0] == "学习率"
    assert i18n.kind_description("length", "zh").startswith("在目标长度")
    assert i18n.reward_param_text("length", "target", "zh")[0] == "目标长度"
    assert i18n.reward_param_text("length", "target", "en")[0] == "Target length"


def test_the_catalogues_load_once_and_hold_the_english_once():
    en, zh = locales.catalogue("en"), locales.catalogue("zh")
    assert locales.catalogue("en") is en  # read once, cached
    assert en["ui"]["tab.train"] == "Train" and zh["ui"]["tab.train"]["text"] == "训练"
    assert set(zh) == {"ui", "settings", "reward_kinds", "reward_params", "memory", "doctor"}
    # a setting's English is its Field's, never repeated in en.yaml; the schema-derived labels neither
    assert set(en) == {"ui"} and not any(k.startswith("reward.field.") for k in en["ui"])
    from backend.rewards.spec import RewardSourceConfig
    assert i18n.english("reward.field.params") == RewardSourceConfig.model_fields["params"].title + " (YAML)"
    # YAML kept what needs quoting: placeholders, colons, a leading *
    assert i18n.text("runs.confirm_run", "en", name="x") == "Confirm: delete x"
    for key, (en_words, zh_words) in i18n.UI.items():
        assert isinstance(en_words, str) and isinstance(zh_words, str), key


@pytest.fixture
def catalogue_copy(tmp_path):
    locales.catalogue.cache_clear()
    for lang in ("en", "zh"):
        shutil.copy(locales.LOCALES_DIR / f"{lang}.yaml", tmp_path / f"{lang}.yaml")
    yield tmp_path
    locales.catalogue.cache_clear()


def test_a_changed_english_text_is_reported_stale_until_rehashed(catalogue_copy):
    english = i18n.english_sources()
    english["ui"] = {**english["ui"], "tab.train": "Train a model"}  # the English changed after its translation
    english["settings"] = {**english["settings"], "learning_rate": locales.setting_source("Learning rate", "new")}
    english["ui"]["tab.brand_new"] = "Brand new"  # a key with no Chinese yet
    zh = catalogue_copy / "zh.yaml"
    zh.write_text(zh.read_text().replace("  reward.at_most:", "  reward.gone:"))  # a key no longer in English
    problems = locales.check(english, "zh", catalogue_copy)
    assert problems["stale"] == ["ui/tab.train", "settings/learning_rate"]
    assert problems["missing"] == ["ui/reward.at_most", "ui/tab.brand_new"]
    assert problems["extra"] == ["ui/reward.gone"]

    before = zh.read_text()
    assert locales.rehash(english, ["tab.train", "settings/learning_rate"], "zh", catalogue_copy) == [
        "ui/tab.train", "settings/learning_rate"]
    after = locales.check(english, "zh", catalogue_copy)
    assert after["stale"] == [] and after["missing"] == ["ui/reward.at_most", "ui/tab.brand_new"]
    changed = [(a, b) for a, b in zip(before.splitlines(), zh.read_text().splitlines()) if a != b]
    assert [b.strip() for _, b in changed] == [f"source: '{locales.source_hash('Train a model')}'",
                                               f"source: '{locales.source_hash(english['settings']['learning_rate'])}'"]
    with pytest.raises(KeyError, match="no such key"):
        locales.rehash(english, ["tab.nowhere"], "zh", catalogue_copy)
    with pytest.raises(KeyError, match="no entry"):
        locales.rehash(english, ["tab.brand_new"], "zh", catalogue_copy)


def test_the_command_line_lists_problems_and_rehashes(catalogue_copy, monkeypatch, capsys):
    monkeypatch.setattr(locales, "LOCALES_DIR", catalogue_copy)
    english = i18n.english_sources()
    english["ui"] = {**english["ui"], "tab.runs": "All runs"}
    assert locales.main(english, []) == 1 and "stale: ui/tab.runs" in capsys.readouterr().out
    assert locales.main(english, ["--rehash", "tab.runs"]) == 0 and "rehashed ui/tab.runs" in capsys.readouterr().out
    assert locales.main(english, []) == 0


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


def test_what_handlers_draw_is_in_chinese_too():
    """The memory line (the backend's structured parts), the plots' legends and the reward sources' help."""
    import re

    from app.plots import add_rows, figure_from_series
    from app.reward_editor import row_help
    from backend.models.memory import GiB, MemoryEstimate

    estimate = MemoryEstimate("cpu", 2, {"weights": GiB, "activations": 2 * GiB, "teacher model": GiB},
                              {"gradients": GiB}, [64 * GiB], notes=[("note.teacher", {})])
    assert estimate.summary().startswith("Estimated memory per process, 2 processes: 4.00 GiB (weights 1.00 GiB, ")
    zh = estimate.summary(i18n.memory_texts("zh"))
    assert zh.startswith("预计内存（每个进程，2 个进程）：4.00 GiB（权重 1.00 GiB，") and "教师模型" in zh, zh
    assert not re.search(r"[A-Za-z]{3,}", zh.replace("GiB", "")), zh

    series = add_rows({}, [{"step": s, "name": name, "value": v * s} for s in (1, 2, 3)
                           for name, v in (("loss", 1.0), ("reward", 0.1), ("train_loss", 0.5))])
    fig = figure_from_series(series, lang="zh")
    assert {t.name for t in fig.data} >= {"原始值", "平滑（EMA α=0.3）"} and fig.layout.title.text.startswith("最终：")
    assert {t.name for t in figure_from_series(series).data} >= {"raw", "smoothed (EMA α=0.3)"}

    help_zh = row_help("length", "{target: 10}", "zh")
    assert "参数有效" in help_zh and "在目标长度" in help_zh and "目标长度" in help_zh and "默认 words" in help_zh
    assert "parameters valid" in row_help("length", "{target: 10}") and "Parameters:" not in help_zh
