"""The interface language (English / 中文): one catalogue per language.

A setting's label and help come from the run-config schema in English (each field's title and description) and
from `backend/config/zh.py` in Chinese, keyed by the setting's path; the page's own words (tabs, buttons, section
titles) are in UI below. `tests/unit/test_i18n.py` keeps every key in both languages. Errors keep naming
settings by their path, which is the same in both.

The page is built once, in English; choosing a language (the header's selector, remembered per browser, or
`launch.py ui --lang zh` for browsers that have not chosen) sends each registered component its words.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import gradio as gr

from backend.config.build import field_paths
from backend.config.zh import ZH

LANGUAGES = {"en": "English", "zh": "中文"}
DEFAULT = "en"

# key -> (English, Chinese)
UI: dict[str, tuple[str, str]] = {
    "tab.train": ("Train", "训练"),
    "tab.runs": ("Runs", "运行"),
    "tab.evaluate": ("Evaluate", "评估"),
    "tab.sweeps": ("Sweeps", "超参搜索"),
    "tab.playground": ("Reward playground", "奖励试验场"),
    "tab.chat": ("Chat", "对话"),
    "tab.labeling": ("Labeling", "标注"),
    "train.start": ("Start training", "开始训练"),
    "train.stop": ("Stop", "停止"),
    "train.show_cli": ("Show CLI command", "显示命令行"),
    "train.show_example": ("Show the first example as the trainer sees it", "显示训练器看到的第一个样本"),
    "train.upload": ("Upload a dataset", "上传数据集"),
    "train.preview": ("Dataset preview", "数据集预览"),
    "train.advanced": ("Advanced settings", "高级设置"),
    "train.presets": ("Presets", "预设"),
    "runs.stop": ("Stop run", "停止运行"),
    "runs.resume": ("Resume run", "恢复运行"),
    "runs.evaluate": ("Evaluate", "评估"),
    "runs.delete": ("Delete run", "删除运行"),
    "runs.select": ("Selected run", "所选运行"),
    "section.compute": ("Compute", "计算"),
    "section.constraint": ("Cost constraint", "代价约束"),
    "section.data": ("Data", "数据"),
    "section.distributed": ("Distributed", "分布式"),
    "section.dpo": ("DPO", "DPO"),
    "section.eval": ("Evaluation", "评估"),
    "section.kto": ("KTO", "KTO"),
    "section.lora": ("LoRA", "LoRA"),
    "section.ppo": ("PPO", "PPO"),
    "section.rl": ("Reinforcement learning", "强化学习"),
}


@functools.cache
def _english() -> dict[str, tuple[str, str]]:
    return {path: (info.title or path, info.description or "") for path, info in field_paths()}


def setting_text(path: str, lang: str) -> tuple[str, str]:
    """(label, help) of a setting in `lang`; English where the catalogue has no entry."""
    english = _english()[path]
    return ZH.get(path, english) if lang == "zh" else english


def text(key: str, lang: str) -> str:
    en, zh = UI[key]
    return zh if lang == "zh" else en


def pick(lang) -> str:
    return lang if lang in LANGUAGES else DEFAULT


@dataclass
class Translatable:
    """The page's components with words to change: settings by path, the rest by UI key and property."""

    settings: dict[str, gr.Component] = field(default_factory=dict)
    # (component, UI key, property, in bold): a section title is Markdown, "**Data**"
    words: list[tuple[gr.Component, str, str, bool]] = field(default_factory=list)

    def add(self, component, key: str, prop: str = "label", bold: bool = False):
        self.words.append((component, key, prop, bold))
        return component

    @property
    def components(self) -> list:
        return [*self.settings.values(), *(c for c, *_ in self.words)]

    def updates(self, lang: str) -> dict:
        lang = pick(lang)
        out = {}
        for path, component in self.settings.items():
            label, help_text = setting_text(path, lang)
            out[component] = gr.update(label=label, info=help_text or None)
        for component, key, prop, bold in self.words:
            words = text(key, lang)
            out[component] = gr.update(**{prop: f"**{words}**" if bold else words})
        return out
