"""The catalogue of bad input: each case is a command line, the files it needs, and what its message must say.
Every one must exit with code 2, one clear message on stderr, no traceback, and nothing created."""
from __future__ import annotations

import json
import os

from backend.hub import _PROXY_VARS

GRPO = ["--set", "mode=grpo", "--set", "dataset=demo-math"]
PYTHON_REWARD = 'reward_sources=[{"type": "python", "params": {"file": "latin1.py"}}]'


def _files(tmp):
    """The bad files the cases point at, written into `tmp`."""
    (tmp / "dup.csv").write_text("prompt,completion,completion\nhi,there,x\n")
    (tmp / "latin1.jsonl").write_bytes(b'{"prompt": "a", "completion": "b"}\n{"prompt": "caf\xe9", "completion": "b"}\n')
    (tmp / "long.jsonl").write_text(json.dumps({"prompt": "hi", "completion": "x" * 1_100_000}) + "\n")
    (tmp / "dupkey.jsonl").write_text('{"prompt": "a", "completion": "b", "prompt": "c"}\n')
    (tmp / "broken.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": \n')
    (tmp / "notes.txt").write_text("hello\n")
    (tmp / "empty.jsonl").write_text("\n")
    (tmp / "alien.jsonl").write_text('{"question": "a", "reply": "b"}\n')
    (tmp / "blank.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": "c", "completion": ""}\n')
    (tmp / "kto.jsonl").write_text('{"prompt": "a", "completion": "b", "label": "maybe"}\n')
    (tmp / "mixed.jsonl").write_text('{"prompt": "a", "completion": "b"}\n{"prompt": 3, "completion": "b"}\n')
    (tmp / "bad.yaml").write_text("mode: sft\n  max_steps: [1\n")
    (tmp / "list.yaml").write_text("- mode\n- sft\n")
    (tmp / "unknown.yaml").write_text("mode: sft\nmax_stepz: 3\n")
    (tmp / "a-file").write_text("")
    (tmp / "huge").mkdir()  # a model of ~10^14 weights: its checkpoints fit on no disk
    (tmp / "huge" / "config.json").write_text(json.dumps({
        "vocab_size": 50_000, "hidden_size": 100_000, "num_hidden_layers": 1000, "intermediate_size": 400_000,
        "num_attention_heads": 800}))
    (tmp / "latin1.yaml").write_bytes(b"mode: sft\nmax_steps: 3\nname: caf\xe9\n")
    (tmp / "dupmode.yaml").write_text("mode: sft\nmax_steps: 3\nmode: dpo\n")
    (tmp / "othermode.yaml").write_text("mode: sft\nppo:\n  gamma: 0.9\n")
    os.mkfifo(tmp / "fifo.jsonl")  # a read would wait forever for a writer
    os.mkfifo(tmp / "fifo.yaml")
    (tmp / "sweep.yaml").write_text("base: {mode: sft}\nn_trials: 0\n"
                                    "space: [{field: learning_rate, kind: log_float, low: 1.0e-5, high: 1.0e-3}]\n")
    (tmp / "rws").mkdir()  # a workspace holding a reward file (python rewards are only read from one)
    (tmp / "rws" / "latin1.py").write_bytes(b"# caf\xe9\ndef reward(prompts, completions, **columns):\n"
                                            b"    return [0.0] * len(completions)\n")
    (tmp / "locked").mkdir()
    (tmp / "locked").chmod(0o500)  # takes no new files, for any user but root


# Cases that set or unset environment variables (None: unset) for their call.
ENV: dict[str, dict[str, str | None]] = {
    # the Hub's host takes no connection: the reachability check, not HF_HUB_OFFLINE, must say so at once
    "model-hub-unreachable": {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None,
                              "HF_ENDPOINT": "http://127.0.0.1:9", **dict.fromkeys(_PROXY_VARS)},
}
# Cases only a user other than root can meet: root writes into any folder whatever its mode.
NOT_AS_ROOT = {"export-to-locked-folder"}
# Cases with a bound on how long the refusal may take (s): huggingface_hub's retries would take ~25 s.
TIME_LIMIT_S = {"model-hub-unreachable": 15.0}


# (id, argv, expected text in stderr)
CASES: list[tuple[str, list[str], str]] = [
    ("lr-nan", ["train", "--set", "learning_rate=nan"], "--set learning_rate=nan: not a finite number"),
    ("lr-too-big", ["train", "--set", "learning_rate=3"], "learning_rate"),
    ("lr-text", ["train", "--set", "learning_rate=fast"], "learning_rate"),
    ("max-steps-0", ["train", "--set", "max_steps=0"], "-1 (trains by epochs)"),
    ("batch-0", ["train", "--set", "per_device_train_batch_size=0"], "per_device_train_batch_size"),
    ("unknown-setting", ["train", "--set", "max_stepz=3"], "max_stepz"),
    ("set-without-equals", ["train", "--set", "max_steps"], "max_steps"),
    ("bad-mode", ["train", "--set", "mode=ppo2"], "mode"),
    ("bad-finetuning", ["train", "--set", "finetuning=half"], "finetuning"),
    ("target-modules", ["train", "--set", "lora.target_modules=[foo_proj]"], "no module named foo_proj"),
    ("lora-r-0", ["train", "--set", "lora.r=0"], "lora.r"),
    ("num-processes", ["train", "--set", "num_processes=64"], "choose at most"),
    ("eval-split", ["train", "--set", "eval.split=1.5"], "eval.split"),
    ("mix-weights", ["train", "--set", "data.mix_weights=-1,2"], "non-negative"),
    ("columns-missing", ["train", "--set", "data.columns=prompt=question"], "has no column `question`"),
    ("dup-csv-columns", ["train", "--set", "dataset={tmp}/dup.csv"], "`completion` appears more than once"),
    ("not-utf8", ["train", "--set", "dataset={tmp}/latin1.jsonl"], "latin1.jsonl line 2: not UTF-8"),
    ("long-row", ["train", "--set", "dataset={tmp}/long.jsonl"], "row 1 has 1,100,0"),
    ("dup-json-key", ["train", "--set", "dataset={tmp}/dupkey.jsonl"], "`prompt` appears twice"),
    ("broken-json", ["train", "--set", "dataset={tmp}/broken.jsonl"], "broken.jsonl line 2: not valid JSON"),
    ("missing-file", ["train", "--set", "dataset={tmp}/nowhere.jsonl"], "nowhere.jsonl not found"),
    ("file-type", ["train", "--set", "dataset={tmp}/notes.txt"], "unsupported file type"),
    ("no-rows", ["train", "--set", "dataset={tmp}/empty.jsonl"], "no rows"),
    ("no-format", ["train", "--set", "dataset={tmp}/alien.jsonl"], "columns are [question, reply]"),
    ("empty-cell", ["train", "--set", "dataset={tmp}/blank.jsonl"], "row 2: column `completion` is empty"),
    ("kto-label", ["train", "--set", "mode=kto", "--set", "dataset={tmp}/kto.jsonl"], "label"),
    ("mixed-kinds", ["train", "--set", "dataset={tmp}/mixed.jsonl"], "row 2: column `prompt` is a number"),
    ("dpo-on-sft-set", ["train", "--set", "mode=dpo"], "chosen"),
    ("model-folder", ["train", "--set", "model={tmp}/no-model"], "no-model"),
    ("auto-resume-nothing-saved", ["train", "--set", "auto_resume=2", "--set", "save_steps=0"],
     "--set auto_resume=2: the run saves no checkpoint to resume from"),
    ("disk-too-small", ["train", "--set", "model={tmp}/huge", "--set", "finetuning=full"],
     "GiB for 2 checkpoints and the model, the workspace disk has"),
    ("reward-column", ["train", *GRPO, "--set",
                       'reward_sources=[{"type": "exact_match", "params": {"column": "solution"}}]'], "solution"),
    ("reward-type", ["train", *GRPO, "--set", 'reward_sources=[{"type": "telepathy"}]'],
     "--set reward_sources=[{\"type\": \"telepathy\"}]: reward_sources.0.type: Input should be"),
    ("preset-missing", ["train", "{tmp}/none.yaml"], "none.yaml"),
    ("preset-bad-yaml", ["train", "{tmp}/bad.yaml"], "bad.yaml"),
    ("preset-not-mapping", ["train", "{tmp}/list.yaml"], "list.yaml"),
    ("preset-unknown-key", ["train", "{tmp}/unknown.yaml"], "max_stepz"),
    ("resume-with-set", ["train", "--resume", "20260101-000000-abcd", "--set", "max_steps=3"],
     "keeps its own settings"),
    ("resume-unknown", ["resume", "20260101-000000-abcd"], "20260101-000000-abcd"),
    ("show-unknown", ["show", "20260101-000000-abcd"], "20260101-000000-abcd"),
    ("stop-unknown", ["stop", "20260101-000000-abcd"], "20260101-000000-abcd"),
    ("export-unknown", ["export", "20260101-000000-abcd", "--out", "{tmp}/out"], "20260101-000000-abcd"),
    ("compare-unknown", ["compare", "20260101-000000-abcd", "20260101-000000-abce"], "20260101-000000-abcd"),
    ("labels-unknown", ["labels", "export", "nosuch", "--format", "dpo", "--out", "{tmp}/x.jsonl"], "nosuch"),
    ("workspace-file", ["runs", "--workspace", "{tmp}/a-file"], "it is a file, not a folder"),
    ("workspace-sys", ["runs", "--workspace", "/sys/x"], "cannot be used"),
    ("auth-malformed", ["ui", "--auth", "nopassword"], "expected user:password"),
    ("eval-limit-0", ["eval", "--model", "base", "--dataset", "demo-arithmetic-eval", "--scorer",
                      "numeric_match:answer", "--limit", "0"], "limit"),
    ("eval-scorer", ["eval", "--model", "smollm2-135m-instruct", "--dataset", "demo-arithmetic-eval", "--scorer", "telepathy"], "telepathy"),
    ("eval-column", ["eval", "--model", "smollm2-135m-instruct", "--dataset", "demo-arithmetic-eval", "--scorer", "numeric_match:solution"],
     "solution"),
    ("sweep-missing", ["sweep", "start", "{tmp}/nosweep.yaml"], "nosweep.yaml"),
    ("sweep-trials-0", ["sweep", "start", "{tmp}/sweep.yaml"], "n_trials"),
    ("preset-binary", ["train", "/bin/true"], "/bin/true: a binary file, not a YAML config file"),
    ("preset-not-utf8", ["train", "{tmp}/latin1.yaml"], "latin1.yaml line 3: not UTF-8 text (byte 0xe9 at column 10)"),
    ("preset-fifo", ["train", "{tmp}/fifo.yaml"], "fifo.yaml: not a regular file"),
    ("preset-duplicate-key", ["train", "{tmp}/dupmode.yaml"],
     "dupmode.yaml line 3: `mode` is given a second time (first on line 1)"),
    ("export-to-proc", ["export", "20260101-000000-abcd", "--out", "/proc/x"],
     "/proc/x cannot be written: /proc takes no new files"),
    ("export-read-only-folder", ["export", "20260101-000000-abcd", "--out", "/sys/kernel/x"],
     "/sys/kernel/x cannot be written: /sys/kernel takes no new files"),
    ("ui-port-range", ["ui", "--port", "99999"], "--port 99999: not a TCP port; give one from 1 to 65535"),
    ("metrics-port-range", ["metrics", "--port", "0"], "--port 0: not a TCP port"),
    ("max-steps-bool", ["train", "--set", "max_steps=true"],
     "--set max_steps=true: expected a whole number, not true / false"),
    ("lr-bool", ["train", "--set", "learning_rate=yes"],
     "--set learning_rate=yes: expected a number, not true / false"),
    ("workspace-empty", ["runs", "--workspace", ""], "--workspace '': no folder named"),
    ("other-mode-setting", ["train", "--set", "ppo.gamma=0.9"],
     "--set ppo.gamma=0.9: does not apply to sft runs (only to ppo)"),
    ("preset-other-mode-setting", ["train", "{tmp}/othermode.yaml"],
     "othermode.yaml: ppo.gamma: does not apply to sft runs"),
    ("lora-with-full", ["train", "--set", "finetuning=full", "--set", "lora.r=16"],
     "--set lora.r=16: does not apply with finetuning: full"),
    ("model-hub-offline", ["train", "--set", "model=nobody-here/x"],
     "Could not reach the Hugging Face Hub for model 'nobody-here/x'"),
    ("mix-weights-count", ["train", "--set", "dataset=demo-sft-instructions, demo-sft-prompt-completion", "--set",
                           "data.mix=interleave", "--set", "data.mix_weights=1,2,3"], "3 weights for 2 datasets"),
    ("dataset-fifo", ["train", "--set", "dataset={tmp}/fifo.jsonl"], "fifo.jsonl: not a regular file"),
    ("auth-empty-password", ["ui", "--auth", "ann:"], "--auth: the password is empty"),
    ("auth-short-password", ["ui", "--auth", "ann:x"], "--auth: the password is too short"),
    ("auth-no-user", ["metrics", "--auth", ":s3cret"], "--auth: the user name is missing"),
    ("reward-py-not-utf8", ["train", *GRPO, "--set", PYTHON_REWARD, "--dry-run", "--workspace", "{tmp}/rws"],
     "rws/latin1.py is not UTF-8 text (byte 5 is 0xe9): save it as UTF-8"),
    ("export-to-locked-folder", ["export", "20260101-000000-abcd", "--out", "{tmp}/locked/x"],
     "{tmp}/locked/x cannot be written: {tmp}/locked takes no new files"),
    ("model-hub-unreachable", ["train", "--set", "model=nobody-here/x"],
     "Could not reach the Hugging Face Hub for model 'nobody-here/x' (offline or no network: cannot connect to "
     "127.0.0.1: Connection refused)"),
]
