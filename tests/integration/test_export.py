"""Exports round-trip: a real sft run and a real reward-model run on the tiny model, exported as an adapter,
merged (through the CLI too), zipped, and loaded back with plain transformers / PEFT."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from backend.export import ExportError, export_run
from backend.runs.jobs import submit_run
from backend.runs.store import RunStore
from tests.integration.test_modes import tiny_config, wait_for

REPO = Path(__file__).resolve().parents[2]
PEFT_FILES = {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "chat_template.jinja", "README.md", "metrics.png"}
TEXTS = ["<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>",
         "<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\nBlue, I think.<|im_end|>"]


@pytest.fixture(scope="module")
def runs(tiny_model, tmp_path_factory):
    """(store, sft run, rm run), both finished with an adapter."""
    store = RunStore(tmp_path_factory.mktemp("export"))
    sft = submit_run(store, tiny_config(tiny_model, "sft", learning_rate=5e-3)).id
    rm = submit_run(store, tiny_config(tiny_model, "rm", dataset="demo-preference")).id
    wait_for(lambda: not any(store.get_run(i).active for i in (sft, rm)), timeout=240, every=1, what="runs")
    for run_id in (sft, rm):
        run = store.get_run(run_id)
        assert run.status == "completed", run.error
    return store, store.get_run(sft), store.get_run(rm)


def _ids(tokenizer):
    return tokenizer(TEXTS, padding=True, return_tensors="pt")


def _causal_logits(model, batch):
    with torch.no_grad():
        return model(**batch).logits


def test_adapter_export_is_a_plain_peft_folder_with_the_runs_logits(runs, tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    store, sft, _ = runs
    result = export_run(store, sft.id, tmp_path / "adapter", make_zip=True)
    assert result.kind == "adapter"
    assert {p.name for p in result.folder.iterdir()} == PEFT_FILES
    with zipfile.ZipFile(result.zip_path) as zf:
        assert set(zf.namelist()) == {f"adapter/{name}" for name in PEFT_FILES}
        assert zf.testzip() is None

    tokenizer = AutoTokenizer.from_pretrained(result.folder)
    batch = _ids(tokenizer)
    exported = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), result.folder).eval()
    trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), sft.adapter_path).eval()
    base = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    assert torch.equal(_causal_logits(exported, batch), _causal_logits(trained, batch))
    assert not torch.allclose(_causal_logits(exported, batch), _causal_logits(base, batch))  # it did learn

    card = (result.folder / "README.md").read_text()
    assert "library_name: peft" in card and "**sft**" in card and "demo-sft-instructions" in card
    assert "PeftModel.from_pretrained" in card and "| loss |" in card and "![metrics](metrics.png)" in card
    assert "max_steps: 2" in card  # the run config
    assert (result.folder / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_merges_into_a_plain_causal_lm_within_1e4_of_the_adapter(runs, tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    store, sft, _ = runs
    out = tmp_path / "merged"
    done = subprocess.run([sys.executable, str(REPO / "launch.py"), "export", sft.id, "--out", str(out), "--merge",
                           "--zip", "--workspace", str(store.workspace)], cwd=REPO, capture_output=True, text=True,
                          timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Merging the adapter" in done.stdout and "Zipping model.safetensors" in done.stdout
    assert f"merged: {out}" in done.stdout and (tmp_path / "merged.zip").is_file()
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    assert not (out / "training_args.bin").exists()

    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = _ids(tokenizer)
    merged = AutoModelForCausalLM.from_pretrained(out).eval()
    adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), sft.adapter_path).eval()
    assert torch.allclose(_causal_logits(merged, batch), _causal_logits(adapter, batch), atol=1e-4)
    assert "AutoModelForCausalLM.from_pretrained(folder)" in (out / "README.md").read_text()

    again = subprocess.run([sys.executable, str(REPO / "launch.py"), "export", sft.id, "--out", str(out),
                            "--workspace", str(store.workspace)], cwd=REPO, capture_output=True, text=True)
    assert again.returncode == 2 and "--overwrite" in again.stderr  # an existing export is not replaced silently


def test_a_merge_in_bf16_halves_the_weights_and_stays_near_the_float32_one(runs, tmp_path):
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    store, sft, _ = runs
    f32 = export_run(store, sft.id, tmp_path / "f32", merge=True).folder  # auto: the tiny base is float32
    bf16 = export_run(store, sft.id, tmp_path / "bf16", merge=True, dtype="bf16").folder
    with safe_open(bf16 / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}
    assert json.loads((bf16 / "config.json").read_text())["dtype"] == "bfloat16"
    size = (bf16 / "model.safetensors").stat().st_size / (f32 / "model.safetensors").stat().st_size
    assert 0.45 < size < 0.55
    batch = _ids(AutoTokenizer.from_pretrained(f32))
    full = _causal_logits(AutoModelForCausalLM.from_pretrained(f32).eval(), batch)
    half = _causal_logits(AutoModelForCausalLM.from_pretrained(bf16, dtype=torch.float32).eval(), batch)
    assert (half - full).abs().max() < 0.05  # bf16 keeps 8 bits of mantissa: the tiny model's logits are ~1
    with pytest.raises(ExportError, match="dtype 'int8': choose one of auto, bf16, f16, f32"):
        export_run(store, sft.id, tmp_path / "int8", merge=True, dtype="int8")


def test_reward_model_merge_keeps_its_scores(runs, tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from backend.models import load_sequence_classifier

    store, _, rm = runs
    result = export_run(store, rm.id, tmp_path / "rm-merged", merge=True)
    assert result.kind == "merged"
    config = json.loads((result.folder / "config.json").read_text())
    assert config["architectures"][0].endswith("ForSequenceClassification")

    tokenizer = AutoTokenizer.from_pretrained(result.folder)
    batch = _ids(tokenizer)
    merged = AutoModelForSequenceClassification.from_pretrained(result.folder, num_labels=1).eval()
    adapter = PeftModel.from_pretrained(load_sequence_classifier(tiny_model, tokenizer), rm.adapter_path).eval()
    with torch.no_grad():
        merged_scores, adapter_scores = merged(**batch).logits[:, 0], adapter(**batch).logits[:, 0]
    assert torch.allclose(merged_scores, adapter_scores, atol=1e-4), (merged_scores, adapter_scores)
    card = (result.folder / "README.md").read_text()
    assert "AutoModelForSequenceClassification" in card and "pipeline_tag: text-classification" in card


def test_runs_without_an_adapter_are_refused_with_exit_code_2(runs, tiny_model, tmp_path):
    store, _, _ = runs
    failed = store.create_run(tiny_config(tiny_model, "sft"))
    store.finish_run(failed.id, "failed", error="RuntimeError: out of memory")
    with pytest.raises(ExportError, match="produced no adapter.*out of memory"):
        export_run(store, failed.id, tmp_path / "x")
    for run_id, expected in ((failed.id, "produced no adapter"), ("20990101-000000-dead", "no run with id")):
        done = subprocess.run([sys.executable, str(REPO / "launch.py"), "export", run_id, "--out", str(tmp_path / "y"),
                               "--workspace", str(store.workspace)], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 2 and expected in done.stderr, done.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_an_adapter_on_the_embedded_model_loads_with_peft_alone_from_its_hub_id(tmp_path):
    """AutoPeftModelForCausalLM in a fresh process, outside the repository, whose Hub cache holds the base under its
    Hub id (the embedded weights: the logits then match the workbench's own load of the export exactly)."""
    from backend.models import EMBEDDED_MODEL, ModelRef, load_model, resolve_model
    from backend.models.specs import EMBEDDED_HUB_ID, TRAINED_ON
    from tests.finished_runs import adapter_run

    base = Path(resolve_model(EMBEDDED_MODEL))
    store = RunStore(tmp_path / "ws")
    run = adapter_run(store, EMBEDDED_MODEL, weights=base)
    out = export_run(store, run.id, tmp_path / "export").folder
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == EMBEDDED_HUB_ID
    assert json.loads((out / TRAINED_ON).read_text()) == {"base": EMBEDDED_MODEL}
    card = (out / "README.md").read_text()
    assert f"base_model: {EMBEDDED_HUB_ID}" in card and "license: apache-2.0" in card
    assert "AutoPeftModelForCausalLM.from_pretrained(folder)" in card

    snapshot = tmp_path / "hf" / "hub" / f"models--{EMBEDDED_HUB_ID.replace('/', '--')}" / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
    for f in base.iterdir():
        if f.is_file():
            (snapshot / f.name).symlink_to(f)
    probe = ("import json, sys, torch\nfrom peft import AutoPeftModelForCausalLM\n"
             "model = AutoPeftModelForCausalLM.from_pretrained(sys.argv[1])\n"
             "assert not [m for m in sys.modules if m.split('.')[0] in ('backend', 'app', 'cli')]\n"
             "print(json.dumps(model(torch.tensor([[1, 2, 3, 4]])).logits[0, -1, :8].tolist()))\n")
    done = subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env={"PATH": "/usr/bin:/bin", "HF_HOME": str(tmp_path / "hf"),
                                             "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = torch.tensor(json.loads(done.stdout.strip().splitlines()[-1]))
    ours = load_model(ModelRef.parse(str(out))).model(torch.tensor([[1, 2, 3, 4]])).logits[0, -1, :8].detach()
    assert torch.allclose(theirs, ours, atol=1e-5), (theirs, ours)


def test_push_writes_the_exact_folder_it_would_upload_and_is_refused_without_token_or_network(runs, tmp_path):
    store, sft, _ = runs
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("HF_TOKEN", "HF_HUB_OFFLINE")}

    def push(*args, **extra):
        return subprocess.run([sys.executable, str(REPO / "launch.py"), "push", sft.id, "--repo", "someone/tiny-sft",
                               *args, "--workspace", str(store.workspace)], cwd=REPO, capture_output=True,
                              text=True, timeout=180, env={**env, "HF_HOME": str(tmp_path / "hf"), **extra})

    dry = push("--dry-run")
    folder = store.workspace / "exports" / f"{sft.id}-push-adapter"
    assert dry.returncode == 0 and f"dry run: {folder} is what `push` would upload" in dry.stdout, dry.stderr
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md"} <= {p.name for p in folder.iterdir()}
    no_token = push()
    assert no_token.returncode == 2 and "no Hugging Face token: set HF_TOKEN" in no_token.stderr
    offline = push(HF_TOKEN="hf_not_a_real_token")  # this machine reaches no Hub
    assert offline.returncode == 2 and "cannot reach the Hugging Face Hub" in offline.stderr, offline.stderr
    assert f"the export is ready in {folder}" in offline.stderr and "hf_not_a_real_token" not in offline.stderr
    assert "Traceback" not in offline.stderr
    bad = push("--repo", "not a repo")
    assert bad.returncode == 2 and "expected a Hub repo id" in bad.stderr


def test_a_run_exported_as_gguf_reads_back_with_transformers_and_has_a_modelfile(runs, tmp_path):
    from transformers import AutoModelForCausalLM

    store, sft, rm = runs
    done = subprocess.run([sys.executable, str(REPO / "launch.py"), "export", sft.id, "--out", str(tmp_path / "g"),
                           "--format", "gguf", "--quant", "f16", "--workspace", str(store.workspace)], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    out = tmp_path / "g"
    [gguf] = out.glob("*.f16.gguf")
    modelfile = (out / "Modelfile").read_text()
    assert f"FROM ./{gguf.name}" in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile
    assert "library_name: gguf" in (out / "README.md").read_text() and "ollama create" in (out / "README.md").read_text()
    merged = export_run(store, sft.id, tmp_path / "m", merge=True, dtype="f32").folder
    batch = _ids(__import__("transformers").AutoTokenizer.from_pretrained(merged))
    reference = _causal_logits(AutoModelForCausalLM.from_pretrained(merged).eval(), batch)
    read = _causal_logits(AutoModelForCausalLM.from_pretrained(out, gguf_file=gguf.name, dtype=torch.float32).eval(),
                          batch)
    assert (read - reference).abs().max() < 2e-2  # f16 weights: the tiny model's logits are ~1
    with pytest.raises(ExportError, match="quant type 'q4_k_m' is not offered: k-quants"):
        export_run(store, sft.id, tmp_path / "k", gguf="q4_k_m")
    with pytest.raises(ExportError, match="is a reward model"):
        export_run(store, rm.id, tmp_path / "r", gguf="f16")


def test_the_card_carries_the_runs_latest_evaluation(runs, tmp_path):
    from backend import evals
    from backend.evals.store import Answer, create_eval, finish_eval, save_answers

    store, sft, _ = runs
    spec = evals.build_spec({"name": "sums", "models": ["base", f"run:{sft.id}"], "dataset": "demo-math",
                             "scorers": [{"type": "exact_match", "name": "ok"}]})
    e = create_eval(store, spec, {"models": ["base", sft.name]}, total=4)
    save_answers(store, e.id, [Answer(m, r, 0, f"p{r}", "ref", "x", {"ok": float(m)}, {}) for m in (0, 1)
                               for r in (0, 1)])
    finish_eval(store, e.id, "completed")
    card = (export_run(store, sft.id, tmp_path / "with-eval").folder / "README.md").read_text()
    section = card.split("## Evaluation", 1)[1].split("##", 1)[0]
    assert "`sums`" in section and "`demo-math`" in section
    assert f"| {sft.name} | 2 | 1.000 [1.000, 1.000] |" in section and "| base | 2 | 0.000 [0.000, 0.000] |" in section
