"""Fixtures the unit tests share."""
import pytest


@pytest.fixture(scope="module")
def form():
    """The Train tab's settings form, built once per test module."""
    import gradio as gr

    from app import forms

    with gr.Blocks():
        components = {}
        sections = forms.build_settings(components)
    return forms.SettingsForm(components, sections)
