"""The bottom layer: plumbing every backend module may use. It imports no domain module, gradio or torch."""
