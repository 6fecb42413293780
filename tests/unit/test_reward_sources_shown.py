"""The reward-sources editor is shown where the sources do something: RL modes always; SFT, DPO and KTO only while
they generate at evaluation (eval.generate), and sources left hidden there are not part of the run."""
import pytest

from app import forms
from backend.config import build_config

SOURCE = {"type": "length", "name": "", "weight": 1.0, "params": "{target: 5}", "role": "reward"}


@pytest.mark.parametrize("mode, generate, shown", [("grpo", False, True), ("ppo", False, True), ("sft", False, False),
                                                   ("sft", True, True), ("dpo", True, True), ("kto", False, False),
                                                   ("rm", True, False)])
def test_the_editor_shows_for_rl_and_for_modes_generating_at_evaluation(form, mode, generate, shown):
    editor = form.components["reward_sources"].container
    assert form.switches == [form.components["eval.generate"]]
    assert form.mode_updates(mode, [generate])[editor]["visible"] is shown
    section = next(s for s in form.sections if "reward_sources" in s.paths)
    assert form.mode_updates(mode, [generate])[section.container]["visible"]  # its block has other settings too


def test_sources_hidden_in_sft_are_left_out_of_the_run_and_kept_when_generating():
    values = forms.values_from_config(build_config({"mode": "sft"}))
    values[forms.PATHS.index("reward_sources")] = [SOURCE]  # e.g. GRPO's pre-filled source, then SFT chosen
    assert forms.config_from_values(values).reward_sources == []  # not "SFT learns nothing from reward sources"
    values[forms.PATHS.index("eval.generate")] = True
    values[forms.PATHS.index("eval.split")] = 0.1  # generating needs held-out prompts
    config = forms.config_from_values(values)
    assert [s.type for s in config.reward_sources] == ["length"] and config.eval.generate
