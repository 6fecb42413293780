"""`launch.py doctor RUN_ID` in words, and the status words the lists show ("completed — no learning signal",
"running — stalled") in `runs` and `show` (`compare` and the Compare panel: test_compare.py). The run store is
seeded directly, as the worker and its supervisor write it: no training."""
import contextlib
import io
import json
import os
import time

import pytest

import launch
from backend.config import build_config
from backend.doctor import NO_SIGNAL_VERDICT
from backend.runs.store import RunStore
from tests.unit.test_doctor import GRPO

FLAT_AND_CUT = {"frac_reward_zero_std": 1.0, "completions/clipped_ratio": 1.0, "reward": 0.0}
FLAT_STEPS = 4


def cli(capsys, store, *args) -> tuple[int, str, str]:
    code = launch.main([*args, "--workspace", str(store.workspace)])
    out, err = capsys.readouterr()
    return code, out, err


def running_run(store, settings: dict, metrics=()):
    """A run whose supervisor is alive (this process, beating now), so the commands' reconcile leaves it running;
    `metrics`: each step's {name: value}, from step 1."""
    run = store.create_run(build_config(settings))
    now = time.time()
    store.update_run(run.id, status="running", started_at=now - 600, pid=os.getpid(), heartbeat_at=now,
                     worker_pid=os.getpid(), worker_beat_at=now, total_steps=settings.get("max_steps", 0))
    for step, values in enumerate(metrics, 1):
        store.add_metrics(run.id, step, values)
    return store.get_run(run.id)


def no_signal_run(store, name="flat"):
    """A completed GRPO run whose every group was flat and every completion cut, ended as its worker ends one:
    the doctor's final diagnoses and verdict stored by its callback."""
    from backend.doctor.live import DoctorCallback

    run = running_run(store, {**GRPO, "name": name, "max_steps": FLAT_STEPS}, [FLAT_AND_CUT] * FLAT_STEPS)
    store.update_run(run.id, step=FLAT_STEPS)
    doctor = DoctorCallback(store, run.id, run.config)
    doctor.on_train_begin(None, None, None)
    with contextlib.redirect_stdout(io.StringIO()):  # its lines go to the run's log, not a command's output
        assert doctor.finish() == NO_SIGNAL_VERDICT
    store.finish_run(run.id, "completed")
    return store.get_run(run.id)


def stalled_run(store, name="stuck"):
    """A running run whose last step is long past (10 steps of 2 s, then 500 s of nothing), judged by its
    supervisor's own beat (backend/runs/stall.py): it marks the run stalled."""
    from backend.runs.supervisor import StallWatch

    run = running_run(store, {"mode": "sft", "name": name, "max_steps": 100},
                      [{"loss": 2.0 - step / 10} for step in range(1, 11)])
    now = time.time()
    store.update_run(run.id, train_started_at=now - 520, step=10, step_at=now - 500)
    with contextlib.redirect_stdout(io.StringIO()):  # the run's log
        StallWatch(store, run.id).beat()  # no worker process of its own: it only marks the run
    run = store.get_run(run.id)
    assert run.stalled.startswith("no training step for 500 s after step 10"), run.stalled
    return run


@pytest.fixture
def store(tmp_path):
    return RunStore(tmp_path)


# ---- doctor ----

# the doctor's own words around the diagnoses, per language
HEAD = {"en": "{status}, step {step}/{total}", "zh": "{status}, 第 {step}/{total} 步"}
STATUS = {"en": {"running": "running", "failed": "failed"}, "zh": {"running": "运行中", "failed": "失败"}}
EVIDENCE = {"en": "evidence: {metric} steps 1-4, values {values}", "zh": "证据：{metric}（第 1-4 步），取值 {values}"}
FIX = {"en": "fix: --set {fix}", "zh": "修复：--set {fix}"}


def head(lang, status, step, total):
    return HEAD[lang].format(status=STATUS[lang][status], step=step, total=total)

@pytest.mark.parametrize("lang, words", [
    ("en", ["[cannot learn] 100% of prompt groups got the same reward for every completion",
            "[cannot learn] 100% of completions were cut at rl.max_completion_length=8 before they ended",
            "-> raise rl.max_completion_length to ≥ 32"]),
    ("zh", ["[无法学习] 100% 的提示组中每个回答的奖励都相同",
            "[无法学习] 100% 的回答在 rl.max_completion_length=8 处被截断，没有写完",
            "-> 将 rl.max_completion_length 提高到 ≥ 32"]),
])
def test_doctor_names_flat_groups_and_cut_answers_with_their_evidence_and_fix(store, capsys, lang, words):
    run = running_run(store, {**GRPO, "max_steps": 10, "rl": {**GRPO["rl"], "max_completion_length": 8}},
                      [FLAT_AND_CUT] * FLAT_STEPS)
    store.update_run(run.id, step=FLAT_STEPS)
    code, out, err = cli(capsys, store, "doctor", run.id, "--lang", lang)
    assert code == 0 and err == "", err
    lines = out.splitlines()
    assert lines[0] == f"run {run.id} ({run.name}, grpo): {head(lang, 'running', FLAT_STEPS, 10)}"
    for w in words:
        assert w in out, out
    flat = next(i for i, line in enumerate(lines) if words[0] in line)
    values = "[[1, 1.0], [2, 1.0], [3, 1.0], [4, 1.0]]"
    assert lines[flat + 1].strip() == EVIDENCE[lang].format(metric="frac_reward_zero_std", values=values)
    assert lines[flat + 2].strip() == FIX[lang].format(fix="rl.max_completion_length=32")  # 3 × 8, in 32s
    cut = next(i for i, line in enumerate(lines) if words[1] in line)
    assert lines[cut + 1].strip() == EVIDENCE[lang].format(metric="completions/clipped_ratio", values=values)
    assert lines[cut + 2].strip() == FIX[lang].format(fix="rl.max_completion_length=32")


@pytest.mark.parametrize("lang, what", [("en", "[cannot learn] loss became NaN / infinite at step 3 (2 of 4 logged "
                                                "steps) -> lower learning_rate from 0.01 to 0.0005"),
                                        ("zh", "[无法学习] loss 在第 3 步变为 NaN / 无穷（4 个记录步中有 2 个）"
                                               " -> 将 learning_rate 从 0.01 降到 0.0005")])
def test_doctor_names_a_loss_gone_nan_with_the_steps_and_a_lower_learning_rate(store, capsys, lang, what):
    run = store.create_run(build_config({"mode": "sft", "name": "nan", "learning_rate": 0.01, "max_steps": 4}))
    for step, loss in enumerate([2.0, 1.8, float("nan"), float("inf")], 1):
        store.add_metrics(run.id, step, {"loss": loss})
    store.update_run(run.id, step=4, total_steps=4, started_at=time.time() - 60)
    store.finish_run(run.id, "failed")  # ended without the worker's final diagnoses: read from its metrics now
    code, out, _ = cli(capsys, store, "doctor", run.id, "--lang", lang)
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"run {run.id} (nan, sft): {head(lang, 'failed', 4, 4)}"
    assert lines[1] == f"  {what}", out
    assert lines[2].strip() == EVIDENCE[lang].format(metric="loss", values="[[1, 2.0], [2, 1.8], [3, None], [4, None]]")
    assert lines[3].strip().startswith(FIX[lang].format(fix="learning_rate=0.0005"))


def test_doctor_of_an_unknown_run_is_one_clear_line_and_exit_2(store, capsys):
    code, out, err = cli(capsys, store, "doctor", "20990101-000000-beef")
    assert code == 2 and out == ""
    assert err == "no run with id '20990101-000000-beef' (see `launch.py runs`)\n"


def test_doctor_of_a_stalled_run_says_so_first(store, capsys):
    run = stalled_run(store)
    code, out, _ = cli(capsys, store, "doctor", run.id)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith(f"run {run.id} (stuck, sft): running — stalled, step 10/100")
    assert lines[1].startswith("  [cannot learn] the worker is stalled: no training step for 500 s after step 10")
    data = json.loads(cli(capsys, store, "doctor", run.id, "--json")[1])
    assert data["stalled"] == run.stalled and data["diagnoses"][0]["check"] == "stalled"


# ---- runs and show ----

def test_runs_and_show_say_completed_no_learning_signal_and_running_stalled(store, capsys):
    flat, stuck = no_signal_run(store), stalled_run(store)
    code, out, _ = cli(capsys, store, "runs")
    header, *lines = out.splitlines()
    rows = {line.split()[0]: line for line in lines}
    assert code == 0 and "completed — no learning signal" in rows[flat.id] and "running — stalled" in rows[stuck.id]
    ends = {header.index("progress") + len("progress")}  # the columns stay aligned beside the long status words
    ends |= {rows[flat.id].index("4/4") + 3, rows[stuck.id].index("10/100") + 6}
    assert len(ends) == 1, out
    assert store.get_run(stuck.id).status == "running"  # the commands' reconcile left the live run alone

    code, out, _ = cli(capsys, store, "show", flat.id)
    assert code == 0 and "  status: completed — no learning signal\n" in out
    assert f"  diagnoses (`launch.py doctor {flat.id}` for evidence and fixes):\n    [cannot learn] 100% of prompt " \
           "groups got the same reward" in out
    code, out, _ = cli(capsys, store, "show", stuck.id)
    assert code == 0 and "  status: running — stalled\n" in out
    assert f"  stalled: {stuck.stalled}\n" in out


def test_a_dry_run_whose_probe_would_stop_the_run_exits_3_with_the_probes_words(tmp_path, tiny_model, capsys):
    """The tiny model never ends an answer within 8 tokens: every GSM8K-shaped group scores 0 (~5 s)."""
    from tests.integration.test_doctor_runs import gsm8k_file

    config = tmp_path / "grpo.yaml"
    config.write_text(json.dumps({
        "mode": "grpo", "model": str(tiny_model), "dataset": str(gsm8k_file(tmp_path)), "max_steps": 3,
        "per_device_train_batch_size": 2, "lora": {"r": 4}, "rl": {"num_generations": 2, "max_completion_length": 8},
        "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]}))
    code, out, _ = cli(capsys, RunStore(tmp_path / "ws"), "train", str(config), "--dry-run")
    assert code == 3, out
    assert "reward probe: 4 prompt(s) × 2 completion(s)" in out and "8/8 cut at 8 tokens" in out
    assert "[cannot learn] every one of the 4 probe groups has zero reward variance" in out
    assert "raise rl.max_completion_length to ≥ 128  [--set rl.max_completion_length=128]" in out
    assert RunStore(tmp_path / "ws").list_runs() == []


def test_a_probe_before_start_stops_generating_at_its_time_limit_and_judges_only_finished_answers(
        tmp_path, tiny_model, monkeypatch):
    """The tiny model writes on to any limit: with a limit of 0.05 s most answers are still unfinished, and the
    probe says so instead of calling them cut or wrong (and claims nothing proven)."""
    from backend.config import build_config
    from backend.doctor.checks import THRESHOLDS
    from backend.doctor.probe import check_rewards
    from tests.integration.test_doctor_runs import gsm8k_file

    monkeypatch.setitem(THRESHOLDS, "probe_seconds", 0.05)
    config = build_config({"mode": "grpo", "model": str(tiny_model), "dataset": str(gsm8k_file(tmp_path)),
                           "per_device_train_batch_size": 2, "rl": {"num_generations": 2,
                                                                    "max_completion_length": 4000},
                           "reward_sources": [{"type": "numeric_match", "params": {"column": "answer"}}]})
    report = check_rewards(config, tmp_path)
    slow = next(d for d in report.diagnoses if d.check == "probe_slow")
    assert report.unfinished == slow.params["unfinished"] > 0 and slow.params["tokens"] < 4000
    assert not report.no_signal and len(report.lengths) == 8 - report.unfinished
    assert "unfinished when its time ran out" in report.summary()
