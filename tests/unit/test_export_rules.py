"""Export rules that need no training: which runs can be exported, full fine-tunes copied, folders never
clobbered, zips and the metrics picture."""
import shutil
import zipfile

import pytest

from backend.config import build_config
from backend.export import (ExportError, default_export_dir, export_run, locate, merged_exports, portable_base,
                            zip_folder)
from backend.metrics_plot import pick_metrics, render_metrics_png
from backend.runs.store import RunStore


def finished_run(store, tiny_model, mode="sft", **settings):
    run = store.create_run(build_config({"mode": mode, "model": str(tiny_model), "max_steps": 2, **settings}))
    store.update_run(run.id, step=2, total_steps=2)
    store.add_metrics(run.id, 1, {"loss": 2.0, "grad_norm": 1.0})
    store.add_metrics(run.id, 2, {"loss": 1.5, "grad_norm": 0.8, "train_runtime": 3.2})
    return run


def test_unknown_active_and_adapterless_runs_are_refused_with_the_reason(workspace, tiny_model):
    store = RunStore(workspace)
    with pytest.raises(ExportError, match="no run with id 'nope'"):
        locate(store, "nope")
    running = finished_run(store, tiny_model)
    store.update_run(running.id, status="running")
    with pytest.raises(ExportError, match="still running"):
        locate(store, running.id)
    stopped = finished_run(store, tiny_model)
    store.finish_run(stopped.id, "stopped")
    with pytest.raises(ExportError, match=r"produced no adapter.*holds no adapter_config.json"):
        export_run(store, stopped.id, workspace / "out")
    assert not (workspace / "out").exists()


def test_a_full_fine_tune_is_copied_as_it_is_and_says_so(workspace, tiny_model):
    store = RunStore(workspace)
    run = finished_run(store, tiny_model, finetuning="full")
    saved = store.run_dir(run.id) / "adapter"
    shutil.copytree(tiny_model, saved)  # what the worker saves for finetuning: full is a whole model
    (saved / "training_args.bin").write_bytes(b"pickle")
    store.update_run(run.id, adapter_path=str(saved))
    store.finish_run(run.id, "completed")

    progress = []
    result = export_run(store, run.id, default_export_dir(store, run.id, merge=True), merge=True, make_zip=True,
                        progress=lambda f, m: progress.append(f))
    assert result.kind == "full" and "nothing to merge" in result.notes[0]
    names = {p.name for p in result.folder.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "README.md", "metrics.png"} <= names
    assert "training_args.bin" not in names and "workbench-model.json" not in names
    assert "A fully fine-tuned model" in (result.folder / "README.md").read_text()
    assert progress == sorted(progress) and progress[-1] == 1.0
    assert merged_exports(store) == [result.folder]  # the chat can pick it


def test_an_export_replaces_only_an_earlier_export(workspace, tiny_model):
    store = RunStore(workspace)
    run = finished_run(store, tiny_model, finetuning="full")
    shutil.copytree(tiny_model, store.run_dir(run.id) / "adapter")
    store.finish_run(run.id, "completed")
    out = workspace / "out"
    export_run(store, run.id, out)
    with pytest.raises(ExportError, match="not empty"):
        export_run(store, run.id, out)
    export_run(store, run.id, out, overwrite=True)  # an earlier export: replaced
    mine = workspace / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ExportError, match="not an earlier export"):
        export_run(store, run.id, mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "keep me"
    assert not list(workspace.glob(".out.tmp-*"))  # no temporary leftovers


def test_a_target_that_takes_no_files_is_refused_before_anything_is_written(workspace, tiny_model):
    store = RunStore(workspace)
    run = finished_run(store, tiny_model, finetuning="full")
    shutil.copytree(tiny_model, store.run_dir(run.id) / "adapter")
    store.finish_run(run.id, "completed")
    for out, above in [("/proc/x", "/proc"), ("/sys/kernel/x", "/sys/kernel")]:  # read-only even for root
        with pytest.raises(ExportError, match=f"^{out} cannot be written: {above} takes no new files"):
            export_run(store, run.id, out)
    (workspace / "a-file").write_text("")
    with pytest.raises(ExportError, match="a-file is a file, not a folder"):
        export_run(store, run.id, workspace / "a-file" / "out")
    with pytest.raises(ExportError, match="^/proc/x cannot be written"):  # the folder is checked first
        export_run(store, "no-such-run", "/proc/x")


def test_zip_holds_the_folder_under_its_name_and_reports_progress_by_bytes(tmp_path):
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "a.json").write_text("{}")
    (folder / "weights.safetensors").write_bytes(b"\0" * (9 << 20))  # more than one 8 MB chunk
    seen = []
    path = zip_folder(folder, tmp_path / "export.zip", lambda f, m: seen.append((f, m)))
    with zipfile.ZipFile(path) as zf:
        assert sorted(zf.namelist()) == ["export/a.json", "export/weights.safetensors"]
        assert zf.getinfo("export/weights.safetensors").compress_type == zipfile.ZIP_STORED
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(seen) >= 3


def test_metrics_picture_puts_loss_first_and_skips_bookkeeping(tmp_path):
    assert pick_metrics(["train_runtime", "grad_norm", "reward", "loss", "epoch", "zeta", "alpha"]) == \
        ["loss", "reward", "grad_norm", "alpha"]
    path = tmp_path / "m.png"
    assert render_metrics_png({"loss": [(1, 2.0), (2, 1.0), (3, 0.5)], "reward": [(1, 0.0)]}, path, title="run")
    from PIL import Image

    with Image.open(path) as img:
        assert img.format == "PNG" and img.size[0] >= 600
    assert not render_metrics_png({"train_runtime": [(1, 3.0)]}, tmp_path / "none.png")


def test_an_exported_adapter_names_the_embedded_bases_hub_id_and_the_workbench_its_exact_base(tmp_path):
    import json

    from backend.models import EMBEDDED_MODEL, ModelRef, model_cache_dir
    from backend.models.specs import EMBEDDED_HUB_ID

    config = tmp_path / "adapter_config.json"
    config.write_text(json.dumps({"base_model_name_or_path": str(model_cache_dir() / EMBEDDED_MODEL), "r": 8,
                                  "task_type": "CAUSAL_LM", "peft_type": "LORA"}))
    portable_base(config, EMBEDDED_MODEL)
    assert json.loads(config.read_text())["base_model_name_or_path"] == EMBEDDED_HUB_ID  # loads anywhere
    assert ModelRef.parse(str(tmp_path)).base == EMBEDDED_MODEL  # the workbench: the base it was trained on
    hub = {"base_model_name_or_path": "org/model", "r": 8}
    config.write_text(json.dumps(hub))
    portable_base(config, "org/model")  # a Hub id (or a folder) is already portable
    assert json.loads(config.read_text()) == hub
