"""Resuming a run from its last checkpoint, interrupted runs, and how a dead worker is described (no training)."""
import json
import os
import sqlite3
import time

import pytest

from backend.config import ConfigError, build_config
from backend.modes.training import AUTO_SAVE_RATIO
from backend.runs import checkpoints, deaths, jobs, preflight, supervisor
from backend.runs.store import RunStore


@pytest.fixture
def store(tmp_path, monkeypatch):
    # nothing here may start a real supervisor: a queued run is left for no one
    started = []
    monkeypatch.setattr(jobs, "dispatch", lambda s: started.append(s) or [])
    store = RunStore(tmp_path)
    yield store
    for run in store.list_runs(("queued",)):
        store.finish_run(run.id, "stopped")


def _checkpoint(store, run_id, step, complete=True):
    folder = store.run_dir(run_id) / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def _dead_run(store, status="failed", mode_settings=None, steps=6):
    run = store.create_run(build_config({"max_steps": steps, "save_steps": 2, **(mode_settings or {})}))
    for step in range(1, steps):
        store.add_metrics(run.id, step, {"loss": 1.0 / step})
        store.add_samples(run.id, step, [{"prompt": "p", "completion": "c"}])
    store.update_run(run.id, status="running", step=steps - 1)
    store.finish_run(run.id, status, error="the worker was killed by SIGKILL")
    return run


def test_checkpoints_are_on_by_default_every_tenth_of_the_run_keeping_two():
    c = build_config({})
    assert (c.save_steps, c.save_total_limit) == (-1, 2)
    assert 0 < AUTO_SAVE_RATIO < 1  # transformers reads a save_steps under 1 as a ratio of the run


def test_zero_max_steps_is_refused_with_what_to_give_instead():
    with pytest.raises(ConfigError, match="-1 \\(trains by epochs\\)"):
        build_config({"max_steps": 0})


def test_resume_continues_from_the_last_checkpoint_and_drops_the_dead_attempts_later_rows(store):
    run = _dead_run(store)
    _checkpoint(store, run.id, 2)
    _checkpoint(store, run.id, 4)
    _checkpoint(store, run.id, 6, complete=False)  # cut off mid-save: not a checkpoint
    resumed = jobs.resume_run(store, run.id)
    assert (resumed.id, resumed.status, resumed.attempt, resumed.step) == (run.id, "queued", 2, 4)
    assert resumed.error is None and resumed.finished_at is None and resumed.resumed_step == 4
    assert sorted(m["step"] for m in store.metrics_since(run.id)) == [1, 2, 3, 4]
    assert sorted(s["step"] for s in store.samples_since(run.id)) == [1, 2, 3, 4]
    assert checkpoints.resume_checkpoint(store, resumed).endswith("checkpoint-4")


def test_the_pace_of_a_resumed_attempt_counts_only_its_own_steps():
    from app.formatting import eta_seconds, seconds_per_step
    from backend.runs.store import Run

    now = time.time()
    run = Run(id="r", name="r", mode="sft", status="running", config=build_config({}), created_at=now - 60,
              train_started_at=now - 4, step=6, total_steps=8, attempt=2, resumed_step=4)
    assert seconds_per_step(run, now) == pytest.approx(2.0) and eta_seconds(run, now) == pytest.approx(4.0)


def test_a_first_attempt_starts_from_scratch_whatever_is_in_its_folder(store):
    run = store.create_run(build_config({}))
    _checkpoint(store, run.id, 3)
    assert checkpoints.resume_checkpoint(store, run) is None


def test_resume_is_refused_without_a_checkpoint_for_an_active_or_completed_run(store):
    no_interval = _dead_run(store, mode_settings={"save_steps": 0})
    with pytest.raises(ValueError, match=f"run {no_interval.id} has no checkpoint to resume from; its checkpoint "
                                         "interval was 0"):
        jobs.resume_run(store, no_interval.id)
    early = _dead_run(store)
    with pytest.raises(ValueError, match="no checkpoint to resume from; it ended before its first checkpoint"):
        jobs.resume_run(store, early.id)

    running = store.create_run(build_config({}))
    store.update_run(running.id, status="running", pid=None, heartbeat_at=time.time(), started_at=time.time())
    _checkpoint(store, running.id, 2)
    with pytest.raises(ValueError, match="is running: only an ended run can be resumed"):
        jobs.resume_run(store, running.id)
    ending = _dead_run(store)
    _checkpoint(store, ending.id, 4)
    store.update_run(ending.id, pid=os.getpid(), heartbeat_at=time.time())  # its supervisor has not exited yet
    with pytest.raises(ValueError, match="is still shutting down"):
        jobs.resume_run(store, ending.id, wait_s=0.1)
    store.update_run(ending.id, heartbeat_at=time.time() - 3600)  # a pid long since reused by another process
    assert jobs.resume_run(store, ending.id).status == "queued"
    done = _dead_run(store, status="completed")
    _checkpoint(store, done.id, 4)
    with pytest.raises(ValueError, match="has completed"):
        jobs.resume_run(store, done.id)
    assert len(store.metrics_since(no_interval.id)) == 5  # a refusal changes nothing
    store.finish_run(running.id, "stopped")


def test_a_run_whose_processes_all_vanished_is_interrupted_with_the_step_to_resume_from(store):
    stale = time.time() - 3600
    with_checkpoint, without = store.create_run(build_config({})), store.create_run(build_config({}))
    for run in (with_checkpoint, without):
        store.update_run(run.id, status="running", pid=999_999_999, started_at=stale, heartbeat_at=stale)
    _checkpoint(store, with_checkpoint.id, 8)
    assert set(jobs.reconcile(store)) == {with_checkpoint.id, without.id}
    interrupted = store.get_run(with_checkpoint.id)
    assert interrupted.status == "interrupted" and "resume from step 8" in interrupted.error
    assert "no checkpoint" in store.get_run(without.id).error
    assert jobs.resume_run(store, with_checkpoint.id).status == "queued"


ROOT_CAUSE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
backend.runs.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-06_17:03:29
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 12820)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_17:03:29
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 12821)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 12821
============================================================"""


@pytest.mark.parametrize("rc, tail, launcher, oom, expected", [
    (-9, "", None, None, "the worker (pid 1234) was killed by SIGKILL"),  # memory only with evidence
    (-9, "", None, "the kernel's OOM killer ended it",
     "the worker (pid 1234) was killed by SIGKILL (out of memory: the kernel's OOM killer ended it)"),
    (1, "step 4/6: loss=1\nsubprocess.CalledProcessError: Command '['python', '-m', 'backend.runs.worker']' "
        "died with <Signals.SIGKILL: 9>.", 77, None, "the worker (pid 1234) was killed by SIGKILL"),
    (1, "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: CUDA error: device-side assert"
        "\nsubprocess.CalledProcessError: Command 'x' returned non-zero exit status 1.", 77, None,
     "the worker (pid 1234) exited with code 1: RuntimeError: CUDA error: device-side assert"),
    (2, "nothing useful", None, None, "the worker (pid 1234) exited with code 2 before finishing"),
    (1, ROOT_CAUSE, 77, None, "rank 1 (pid 12821) was killed by SIGKILL"),  # torchrun's report, not rank 0's error
    (-9, "step 3/9: loss=2", 77, None, "accelerate's launcher (pid 77) was killed by SIGKILL; its ranks were ended"),
])
def test_a_dead_worker_is_described_by_the_first_process_to_die_and_its_signal_or_last_error(rc, tail, launcher,
                                                                                            oom, expected):
    assert deaths.death_message(rc, 1234, tail, launcher_pid=launcher, oom=oom) == expected


def test_a_rank_killed_first_leads_the_error_the_surviving_rank_recorded():
    gloo = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:39637. GLHF!"
    blamed = deaths.blamed_rank(gloo, ROOT_CAUSE)
    assert blamed == f"rank 1 (pid 12821) was killed by SIGKILL; then rank 0 failed: {gloo}"
    assert deaths.blamed_rank(blamed, ROOT_CAUSE) is None  # said once
    assert deaths.blamed_rank(gloo, "no report") is None
    own = ROOT_CAUSE.replace("rank      : 1 (local_rank: 1)", "rank      : 0 (local_rank: 0)").replace("-9 (pid", "1 (pid")
    assert deaths.blamed_rank("ValueError: bad batch", own) is None  # rank 0's own error is the cause


def test_an_older_workspace_gains_the_attempt_column(tmp_path):
    with sqlite3.connect(tmp_path / "workbench.db") as db:
        db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, name TEXT NOT NULL, mode TEXT NOT NULL, status TEXT NOT "
                   "NULL, config TEXT NOT NULL, created_at REAL NOT NULL, started_at REAL, train_started_at REAL, "
                   "finished_at REAL, pid INTEGER, worker_pid INTEGER, heartbeat_at REAL, stop_requested INTEGER NOT "
                   "NULL DEFAULT 0, step INTEGER NOT NULL DEFAULT 0, total_steps INTEGER, error TEXT, "
                   "adapter_path TEXT)")
        db.execute("INSERT INTO runs (id, name, mode, status, config, created_at) VALUES (?,?,?,?,?,?)",
                   ("20250101-000000-abcd", "old", "sft", "failed", build_config({}).model_dump_json(), 1.0))
    assert RunStore(tmp_path).get_run("20250101-000000-abcd").attempt == 1


def test_an_ended_runs_complete_checkpoints_are_models_to_evaluate(store):
    from app.eval_tab import model_options

    run = store.create_run(build_config({"mode": "sft", "name": "cp"}))
    for step, complete in ((5, True), (10, True), (15, False)):
        _checkpoint(store, run.id, step, complete)
    assert [s for s, _ in checkpoints.checkpoints(store, run.id)] == [5, 10]
    assert not [v for _, v in model_options(store) if "@" in v]  # still queued: nothing to evaluate yet
    store.finish_run(run.id, "failed")
    assert [(label, v) for label, v in model_options(store) if "@" in v] == [
        (f"cp · checkpoint at step {s} ({run.id})", f"run:{run.id}@{s}") for s in (5, 10)]


def _ended(store, status="failed", exit_code=None, stop=False, auto_resume=2):
    run = store.create_run(build_config({"max_steps": 6, "save_steps": 2, "auto_resume": auto_resume}))
    store.update_run(run.id, status="running", stop_requested=int(stop))
    store.finish_run(run.id, status, error="the worker (pid 7) was killed by SIGKILL",
                     exit_code=exit_code)
    return store.get_run(run.id)


def test_auto_resume_resumes_a_dead_worker_from_its_checkpoint_up_to_its_limit(store, tmp_path):
    checkpoint = (tmp_path / "checkpoint-4", 4)
    dead = _ended(store)
    assert supervisor.auto_resume_from(dead, 0, checkpoint) == (4, "auto-resume 1/2 from step 4")
    assert supervisor.auto_resume_from(dead, 1, checkpoint) == (4, "auto-resume 2/2 from step 4")
    assert supervisor.auto_resume_from(dead, 2, checkpoint) == (None, "auto-resume: gave up after 2/2")
    assert supervisor.auto_resume_from(dead, 0, None) == (None, "auto-resume: not resumed, no complete checkpoint yet")
    assert supervisor.auto_resume_from(dead, 0, checkpoint, server_alive=False)[0] is None


def test_auto_resume_never_resumes_a_stop_refused_input_a_finished_run_or_when_off(store, tmp_path):
    checkpoint = (tmp_path / "checkpoint-4", 4)
    assert supervisor.auto_resume_from(_ended(store, exit_code=supervisor.EXIT_REPEATS), 0, checkpoint) == (
        None, "auto-resume: not resumed, a resume would fail the same way")
    for ended in (_ended(store, stop=True), _ended(store, status="stopped"), _ended(store, status="completed"),
                  _ended(store, auto_resume=0)):
        assert supervisor.auto_resume_from(ended, 0, checkpoint) == (None, "")


def test_whoever_waits_for_a_run_waits_while_its_live_supervisor_may_resume_it(store):
    deciding = _ended(store)
    store.update_run(deciding.id, pid=os.getpid(), heartbeat_at=time.time())  # its supervisor is alive
    assert supervisor.resuming_itself(store.get_run(deciding.id))
    store.update_run(deciding.id, heartbeat_at=time.time() - 3600)  # it has exited (the pid is another's now)
    assert not supervisor.resuming_itself(store.get_run(deciding.id))
    for settled in (_ended(store, exit_code=supervisor.EXIT_REPEATS), _ended(store, auto_resume=0), _ended(store, stop=True)):
        store.update_run(settled.id, pid=os.getpid(), heartbeat_at=time.time())
        assert not supervisor.resuming_itself(store.get_run(settled.id))


def test_auto_resume_is_refused_where_it_could_never_resume():
    with pytest.raises(ConfigError, match="auto_resume: the run saves no checkpoint to resume from"):
        build_config({"auto_resume": 1, "save_steps": 0})
    with pytest.raises(ConfigError, match="auto_resume: a supervisor restarts only its own machine's processes"):
        build_config({"auto_resume": 1, "distributed": {"num_machines": 2, "main_process_ip": "10.0.0.1"}})
    assert build_config({"auto_resume": 1, "save_steps": 0, "save_minutes": 30}).auto_resume == 1


def test_an_auto_resumed_attempt_runs_on_under_its_supervisor_from_the_checkpoint(store):
    run = _dead_run(store)
    store.update_run(run.id, pid=4321, gpus="0")
    again = store.requeue_for_resume(run.id, 4, in_place=True)
    assert (again.status, again.attempt, again.step, again.pid, again.gpus) == ("running", 2, 4, 4321, "0")
    assert again.error is None and again.exit_code is None and again.worker_pid is None
    assert sorted(m["step"] for m in store.metrics_since(run.id)) == [1, 2, 3, 4]


def test_the_checkpoints_a_run_keeps_at_most():
    def kept(**settings):
        return build_config({"max_steps": 10, **settings}).checkpoints_kept()

    assert kept() == 2  # save_total_limit
    assert kept(save_steps=0) == 0 and kept(save_steps=0, save_minutes=5) == 2
    assert kept(save_steps=5) == 2 and kept(save_steps=10) == 1
    assert kept(save_total_limit=0, save_steps=3) == 4 and kept(save_total_limit=0) == 10  # -1: every 10%


def test_a_run_whose_checkpoints_cannot_fit_on_the_disk_is_refused_with_the_numbers(tiny_model, tmp_path):
    from backend.models.memory import disk_need, read_shape

    full = build_config({"model": str(tiny_model), "finetuning": "full"})
    weights = read_shape(str(tiny_model)).parameters * 4
    small = 64 * 2**10  # the small files of a saved folder
    assert disk_need(full, read_shape(str(tiny_model))) == 2 * (3 * weights + small) + weights + small  # + Adam
    assert preflight.disk_problem(full, tmp_path, free=10 * weights) is None
    tokenizer = (tiny_model / "tokenizer.json").stat().st_size + (tiny_model / "tokenizer_config.json").stat().st_size
    need = 7 * weights + 3 * (small + tokenizer)  # each saved folder has the tokenizer's files too
    assert preflight.disk_problem(full, tmp_path, free=2**20) == (
        f"disk: the run needs about {need / 2**20:.0f} MiB for 2 checkpoints and the model, the workspace "
        "disk has 1 MiB free; free some space, keep fewer checkpoints (save_total_limit) or use a workspace on a "
        "larger disk")
    lora = build_config({"model": str(tiny_model), "save_steps": 0})
    assert "for the adapter, the workspace disk has 0 MiB free" in preflight.disk_problem(lora, tmp_path, free=0)
    assert preflight.disk_problem(build_config({"model": str(tmp_path / "gone")}), tmp_path, free=0) is None


def test_a_full_disk_names_the_disk_and_the_checkpoint_kept(store):
    run = _dead_run(store)
    _checkpoint(store, run.id, 4)
    text = preflight.disk_full_message(store, run.id, "OSError: [Errno 28] No space left on device")
    assert text.startswith(f"the disk holding {store.run_dir(run.id)} is full (")
    assert text.endswith("No space left on device; the last complete checkpoint (step 4) is kept: free some "
                         "space, then resume the run")


def test_a_checkpoint_is_asked_for_once_the_wall_time_since_the_last_has_passed():
    from transformers import TrainerControl

    from backend.modes.training import WallClockSave

    now = [1000.0]
    save, control = WallClockSave(minutes=1, clock=lambda: now[0]), TrainerControl()
    save.on_train_begin(None, None, control)
    now[0] += 59.9
    save.on_step_end(None, None, control)
    assert not control.should_save
    now[0] += 0.1
    save.on_step_end(None, None, control)
    assert control.should_save
    control.should_save = False
    save.on_save(None, None, control)
    save.on_step_end(None, None, control)
    assert not control.should_save


def _wall_clock_rank(rank: int, port: int, results) -> None:
    import torch.distributed as dist
    from transformers import TrainerControl

    from backend.modes.training import WallClockSave

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    save, seen = WallClockSave(minutes=1), []
    for due_on in (1, 0):  # only rank 1's clock says a save is due, then only rank 0's
        save.last, control = time.monotonic() - (120 if rank == due_on else 0), TrainerControl()
        save.on_step_end(None, None, control)
        seen.append(control.should_save)
    results.put((rank, seen))
    dist.destroy_process_group()


def test_ranks_whose_clocks_differ_save_together_when_rank_0_says_so():
    """Saving is collective: one rank saving alone would hang the others' next collective."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("fork")
    results = context.Queue()
    ranks = [context.Process(target=_wall_clock_rank, args=(rank, port, results)) for rank in (0, 1)]
    for process in ranks:
        process.start()
    seen = dict(results.get(timeout=60) for _ in ranks)
    for process in ranks:
        process.join(timeout=30)
    assert seen == {0: [False, True], 1: [False, True]}


def test_memory_is_blamed_only_with_evidence_and_for_the_process_that_died(tmp_path, monkeypatch):
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    (cgroup / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n")
    (cgroup / "memory.max").write_text("8000000000\n")
    monkeypatch.setattr(deaths, "_cgroup_dir", lambda: cgroup)
    killed = []
    monkeypatch.setattr(deaths, "_kernel_oom_record", lambda pid: pid in killed)
    assert deaths.oom_kills() == 2 and deaths.memory_limit_gb() == 8.0
    assert deaths.oom_evidence(12821, kills_before=2, rss_gb=1.0) is None  # a SIGKILL alone says nothing
    assert "oom_kill 1 → 2" in deaths.oom_evidence(12821, kills_before=1, rss_gb=1.0)
    assert deaths.oom_evidence(12821, kills_before=2, rss_gb=7.5) == "its memory was 7.5 of 8.0 GB at its last report"
    killed.append(12821)
    assert deaths.oom_evidence(12821, kills_before=2, rss_gb=1.0) == "the kernel's OOM killer ended it"
    (cgroup / "memory.max").write_text("max\n")  # no cgroup limit: the machine's memory
    assert deaths.memory_limit_gb() > 0


def test_the_kernel_record_is_looked_up_for_the_rank_that_died_first(store, monkeypatch):
    from backend.runs.logs import log_path

    run = store.create_run(build_config({}))
    store.update_run(run.id, status="running", worker_pid=1234)
    log_path(store, run.id).write_text(ROOT_CAUSE)
    looked = []
    monkeypatch.setattr(deaths, "oom_evidence", lambda pid, *a: looked.append(pid))
    supervisor._record_death(store, store.get_run(run.id), 1, launcher_pid=77)
    assert looked == [12821] and "rank 1 (pid 12821) was killed by SIGKILL" in store.get_run(run.id).error


def test_a_stop_asked_before_the_worker_starts_stops_the_run_without_starting_it(store, monkeypatch):
    run = store.create_run(build_config({}))
    store.update_run(run.id, status="running")
    store.request_stop(run.id)
    monkeypatch.setattr(supervisor.subprocess, "Popen", lambda *a, **k: pytest.fail("a worker was started"))
    assert supervisor.supervise(run.id, str(store.workspace)) == 0
    ended = store.get_run(run.id)
    assert ended.status == "stopped" and ended.error == "stopped before its worker started"
